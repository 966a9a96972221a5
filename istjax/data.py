"""Datasets and on-device batching for Independent Subnetwork Training.

Contract
--------
Every loader returns a :class:`Dataset` whose features are ``float32`` and
standardised per feature with *train* statistics (zero mean, unit variance;
features that are constant on the training set are centred and left at 0),
and whose labels are ``int32`` in ``[0, num_classes)``.  Loaders never touch
the network: ``digits`` ships with scikit-learn, ``mnist1d`` is generated
locally with the ``mnist1d`` package, and ``synthetic_speech`` is generated
with numpy from a seed.  Loaded arrays are cached in memory and returned
read-only, so callers must copy before mutating.

Batching is a pure function of ``(seed, round_index, worker)``:
:func:`make_batch_fn` returns ``batches(round_index)`` which gathers, on
device, a ``{"x": [W, K, B, ...] float32, "y": [W, K, B] int32}`` batch for
``W`` workers, ``K`` local steps and ``B`` examples per step.  Worker ``w``
reads the stream of pool positions ``p = round_index * K * B + arange(K * B)``
and maps them to examples with an epoch-wise permutation of its pool, so a run
resumed at round ``r`` sees exactly the data it would have seen had it never
stopped, and over one epoch of rounds every example of a worker's pool is
seen exactly once.  The key schedule is documented in :func:`make_index_fn`.

Evaluation uses :func:`eval_batches`, plain numpy chunks covering a split
exactly once.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import math
import operator
import os
import pathlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "DATASETS",
    "Batch",
    "BatchFn",
    "Dataset",
    "eval_batches",
    "load_dataset",
    "load_digits",
    "load_mnist1d",
    "load_synthetic_speech",
    "make_batch_fn",
    "make_index_fn",
    "standardize",
]

Batch = dict[str, jax.Array]
"""``{"x": [W, K, B, ...] float32, "y": [W, K, B] int32}``."""

SHARDINGS = ("disjoint", "shared")

# Tags folded into PRNGKey(seed) so the shard split and the sample streams
# draw from independent key trees (worker ids are small, tags are not).
_SHARD_TAG = 0x5348_4152  # "SHAR"
_STREAM_TAG = 0x5354_524D  # "STRM"


# --------------------------------------------------------------------------
# Dataset container and standardisation
# --------------------------------------------------------------------------


class Dataset(NamedTuple):
    """A classification dataset with standardised features.

    Fields:
      name: dataset name, one of :data:`DATASETS`.
      train_x: `[N, ...] float32`, standardised with train statistics.
      train_y: `[N] int32` in `[0, num_classes)`.
      test_x: `[M, ...] float32`, standardised with *train* statistics.
      test_y: `[M] int32`.
      num_classes: number of classes.
    """

    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one example, `train_x.shape[1:]`."""
        return tuple(self.train_x.shape[1:])

    @property
    def num_features(self) -> int:
        """Number of scalar features per example, `prod(input_shape)`."""
        return int(np.prod(self.input_shape, dtype=np.int64))

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, train_x={self.train_x.shape}, "
            f"test_x={self.test_x.shape}, num_classes={self.num_classes})"
        )


def _train_moments(x: np.ndarray, chunk: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and std of `x: [N, ...]`, float64, without a full temp.

    Merges per-chunk moments (Chan et al.) so a `[20000, 4096]` float32 array
    never needs a float64 copy.  Returns `(mean, std)` each of shape `x.shape[1:]`.
    """
    n_total = 0
    mean = np.zeros(x.shape[1:], np.float64)
    m2 = np.zeros(x.shape[1:], np.float64)
    for start in range(0, x.shape[0], chunk):
        c = np.asarray(x[start : start + chunk], np.float64)
        n_c = c.shape[0]
        mean_c = c.mean(0)
        m2_c = ((c - mean_c) ** 2).sum(0)
        n_new = n_total + n_c
        delta = mean_c - mean
        mean = mean + delta * (n_c / n_new)
        m2 = m2 + m2_c + delta**2 * (n_total * n_c / n_new)
        n_total = n_new
    return mean, np.sqrt(m2 / max(n_total, 1))


def standardize(
    train_x: np.ndarray, test_x: np.ndarray, eps: float = 1e-8
) -> tuple[np.ndarray, np.ndarray]:
    """Standardise features with train statistics.

    Args:
      train_x: `[N, ...]` any real dtype.
      test_x: `[M, ...]`, same trailing shape as `train_x`.
      eps: features whose train std is `<= eps` are only centred (std taken as 1).

    Returns:
      `(train_x, test_x)` as new `float32` arrays, train having zero mean and
      unit variance per non-constant feature.
    """
    if train_x.shape[1:] != test_x.shape[1:]:
        raise ValueError(
            f"test_x has example shape {test_x.shape[1:]} but train_x has "
            f"{train_x.shape[1:]}; both splits must have the same feature shape."
        )
    if train_x.shape[0] < 1:
        raise ValueError("train_x has 0 examples; need at least 1 to compute statistics.")
    mean, std = _train_moments(train_x)
    std = np.where(std > eps, std, 1.0)
    mean32, inv32 = mean.astype(np.float32), (1.0 / std).astype(np.float32)

    def apply(x: np.ndarray) -> np.ndarray:
        out = np.array(x, dtype=np.float32, copy=True)
        out -= mean32
        out *= inv32
        return out

    return apply(train_x), apply(test_x)


def _finalise(
    name: str,
    train_x: np.ndarray,
    train_y: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    num_classes: int,
) -> Dataset:
    """Standardise, cast to `float32`/`int32`, freeze and wrap in a Dataset."""
    train_x, test_x = standardize(train_x, test_x)
    arrays = [train_x, np.asarray(train_y, np.int32), test_x, np.asarray(test_y, np.int32)]
    for a in arrays:
        a.flags.writeable = False
    return Dataset(name, *arrays, num_classes=int(num_classes))


def _check_positive(field: str, value: Any, minimum: int = 1) -> int:
    """Return `value` as an int, raising a ValueError naming `field` if < minimum."""
    try:
        v = operator.index(value)
    except TypeError:
        raise ValueError(
            f"{field}={value!r} must be an integer >= {minimum}; pass an int."
        ) from None
    if v < minimum:
        raise ValueError(f"{field}={v} must be >= {minimum}; pass {field}>={minimum}.")
    return v


# --------------------------------------------------------------------------
# digits
# --------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def load_digits(*, test_size: int = 360, seed: int = 0) -> Dataset:
    """scikit-learn's 8x8 digits, flattened, stratified split.

    Args:
      test_size: number of test examples (of 1797); default gives 1437/360.
      seed: `random_state` of the stratified split.

    Returns:
      Dataset with `train_x: [1797 - test_size, 64] float32`, 10 classes.
    """
    from sklearn.datasets import load_digits as _sk_load_digits
    from sklearn.model_selection import train_test_split

    test_size = _check_positive("test_size", test_size)
    if test_size > 1797 - 10:
        raise ValueError(
            f"test_size={test_size} leaves fewer than 10 training examples of the "
            f"1797 digits; pass test_size <= 1787 (default 360)."
        )
    x, y = _sk_load_digits(return_X_y=True)
    tx, vx, ty, vy = train_test_split(
        x, y, test_size=test_size, stratify=y, random_state=operator.index(seed)
    )
    return _finalise("digits", tx, ty, vx, vy, 10)


# --------------------------------------------------------------------------
# mnist1d
# --------------------------------------------------------------------------


def _cache_dir() -> pathlib.Path:
    """On-disk cache root: `$ISTJAX_CACHE_DIR` or `~/.cache/istjax`."""
    return pathlib.Path(
        os.environ.get("ISTJAX_CACHE_DIR", pathlib.Path.home() / ".cache" / "istjax")
    )


def _mnist1d_default_args() -> dict[str, Any]:
    from mnist1d.data import get_dataset_args

    args = get_dataset_args(as_dict=True)
    args.pop("url", None)  # only used by the downloading path, never here
    return args


def _generate_mnist1d(args: dict[str, Any]) -> dict[str, np.ndarray]:
    """Run `mnist1d.data.make_dataset` offline without leaking global RNG state.

    `make_dataset` calls `np.random.seed` / `random.seed`; we restore both.
    Returns the raw `x, y, x_test, y_test` arrays.
    """
    import random

    from mnist1d.data import make_dataset
    from mnist1d.utils import ObjectView

    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        d = make_dataset(ObjectView(dict(args)))
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    return {k: np.asarray(d[k]) for k in ("x", "y", "x_test", "y_test")}


@functools.lru_cache(maxsize=4)
def _mnist1d_raw(args_items: tuple[tuple[str, Any], ...], use_disk_cache: bool) -> dict[str, np.ndarray]:
    args = {k: list(v) if isinstance(v, tuple) else v for k, v in args_items}
    key = hashlib.sha1(json.dumps(args, sort_keys=True).encode()).hexdigest()[:16]
    path = _cache_dir() / f"mnist1d-{key}.npz"
    if use_disk_cache and path.exists():
        try:
            with np.load(path) as f:
                return {k: f[k] for k in ("x", "y", "x_test", "y_test")}
        except Exception:  # corrupt or partial file: regenerate below
            pass
    raw = _generate_mnist1d(args)
    if use_disk_cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
            np.savez(tmp, **raw)
            os.replace(tmp, path)
        except OSError:
            pass  # read-only home etc.: the in-memory cache still applies
    return raw


def load_mnist1d(*, disk_cache: bool = True, **dataset_args: Any) -> Dataset:
    """MNIST-1D generated offline (4000 train / 1000 test x 40, 10 classes).

    Uses `mnist1d.data.make_dataset(get_dataset_args())`; never downloads.
    Generation takes ~1 s; results are cached in memory and, if `disk_cache`,
    as an `.npz` under `$ISTJAX_CACHE_DIR` (default `~/.cache/istjax/`) keyed
    by the generation arguments.

    Args:
      disk_cache: read/write the on-disk cache.
      **dataset_args: overrides of `mnist1d.data.get_dataset_args()`, e.g.
        `num_samples=5000`, `train_split=0.8`, `seed=42`.

    Returns:
      Dataset with `train_x: [num_samples * train_split, 40] float32`.
    """
    args = _mnist1d_default_args()
    unknown = sorted(set(dataset_args) - set(args))
    if unknown:
        raise ValueError(
            f"load_mnist1d got unknown argument(s) {unknown}; accepted: "
            f"{sorted(args) + ['disk_cache']}."
        )
    args.update(dataset_args)
    items = tuple(
        sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in args.items())
    )
    return _mnist1d_standardised(items, bool(disk_cache))


@functools.lru_cache(maxsize=4)
def _mnist1d_standardised(items: tuple[tuple[str, Any], ...], disk_cache: bool) -> Dataset:
    raw = _mnist1d_raw(items, disk_cache)
    return _finalise("mnist1d", raw["x"], raw["y"], raw["x_test"], raw["y_test"], 10)


# --------------------------------------------------------------------------
# synthetic_speech
# --------------------------------------------------------------------------


def _speech_num_frames(num_features: int) -> int:
    """Divisor of `num_features` closest to `sqrt(num_features / 4)` (4096 -> 32)."""
    target = math.sqrt(num_features / 4)
    divisors = [d for d in range(1, num_features + 1) if num_features % d == 0]
    return min(divisors, key=lambda d: (abs(d - target), d))


def _smooth_curves(rng: np.random.Generator, shape: tuple[int, ...], length: int, num_freqs: int) -> np.ndarray:
    """Random smooth curves `[*shape, length]`: low-frequency cosine series, unit RMS."""
    u = np.linspace(0.0, 1.0, length)
    freqs = np.arange(num_freqs)
    coef = rng.standard_normal((*shape, num_freqs)) / (1.0 + freqs)
    phase = rng.uniform(0, 2 * np.pi, (*shape, num_freqs))
    curves = np.cos(np.pi * freqs[:, None] * u[None, :] + phase[..., None])  # [..., F, L]
    out = np.einsum("...f,...fl->...l", coef, curves)
    out -= out.mean(-1, keepdims=True) * 0.5
    return out / (np.sqrt((out**2).mean(-1, keepdims=True)) + 1e-8)


def _speech_split(
    rng: np.random.Generator,
    n: int,
    protos: np.ndarray,
    background: np.ndarray,
    noise_bases: np.ndarray,
    *,
    num_frames: int,
    max_shift: int,
    noise_scale: float,
    chunk: int = 2048,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw `n` examples: `x: [n, M * T] float32`, `y: [n] int32` (balanced)."""
    num_classes, num_mels, ext = protos.shape
    y = rng.permutation(np.arange(n) % num_classes).astype(np.int32)
    x = np.empty((n, num_mels * num_frames), np.float32)
    mel_ix = np.arange(num_mels)[None, :, None]
    frame_ix = np.arange(num_frames)[None, None, :]
    for start in range(0, n, chunk):
        yc = y[start : start + chunk]
        m = yc.shape[0]
        shift = rng.integers(0, 2 * max_shift + 1, m)[:, None, None]
        gain = rng.lognormal(0.0, 0.35, m).astype(np.float32)[:, None, None]
        level = rng.normal(0.0, 0.5, m).astype(np.float32)[:, None, None]
        pattern = protos[yc[:, None, None], mel_ix, frame_ix + shift]  # [m, M, T]
        xc = gain * pattern + level + background[None]
        coef = rng.standard_normal((m, noise_bases.shape[0]), dtype=np.float32)
        xc = xc.reshape(m, -1)
        xc += (coef @ noise_bases) * np.float32(noise_scale)
        xc += rng.standard_normal(xc.shape, dtype=np.float32) * np.float32(noise_scale)
        x[start : start + m] = xc
    return x, y


@functools.lru_cache(maxsize=2)
def load_synthetic_speech(
    *,
    num_train: int = 20000,
    num_test: int = 4000,
    num_features: int = 4096,
    num_classes: int = 35,
    seed: int = 0,
    num_frames: int | None = None,
    max_shift: int | None = None,
    class_sep: float = 0.6,
    noise_scale: float = 1.0,
) -> Dataset:
    """Generated stand-in for Google Speech Commands log-mel features.

    Each example is a `[M mels, T frames]` log-mel-like image flattened to
    `num_features = M * T` (defaults: 128 x 32 = 4096, 35 classes).  Class `c`
    has a smooth rank-3 spectro-temporal prototype `shared + class_sep * own_c`
    (so classes overlap); an example is
    `background + gain * shift_t(prototype_y) + level + noise` with a random
    circular-free time shift of up to `max_shift` frames, log-normal `gain`,
    a per-example loudness offset `level`, smooth low-rank noise and iid noise,
    both scaled by `noise_scale`.  Train and test use independent streams of
    the same seed, so `num_test` does not change the training set.

    Args:
      num_train: training examples (>= 1).
      num_test: test examples (>= 1).
      num_features: features per example; factored as `M * T` with `T` the
        divisor closest to `sqrt(num_features / 4)` unless `num_frames` given.
      num_classes: classes (>= 2); labels are balanced.
      seed: generation seed.
      num_frames: time frames `T` (must divide `num_features`).
      max_shift: largest time shift in frames; default `max(1, T // 8)`.
      class_sep: weight of the class-specific part of each prototype; larger
        is easier.
      noise_scale: multiplier of both noise terms; larger is harder.

    Returns:
      Dataset with `train_x: [num_train, num_features] float32`.
    """
    num_train = _check_positive("num_train", num_train)
    num_test = _check_positive("num_test", num_test)
    num_features = _check_positive("num_features", num_features)
    num_classes = _check_positive("num_classes", num_classes, minimum=2)
    seed = operator.index(seed)
    if num_frames is None:
        num_frames = _speech_num_frames(num_features)
    num_frames = _check_positive("num_frames", num_frames)
    if num_features % num_frames:
        raise ValueError(
            f"num_frames={num_frames} does not divide num_features={num_features}; "
            f"pass a divisor of num_features or num_frames=None to pick one."
        )
    num_mels = num_features // num_frames
    max_shift = max(1, num_frames // 8) if max_shift is None else int(max_shift)
    if max_shift < 0:
        raise ValueError(f"max_shift={max_shift} must be >= 0; pass max_shift>=0 or None.")
    if not (class_sep > 0):
        raise ValueError(f"class_sep={class_sep} must be > 0; try the default 0.6.")
    if not (noise_scale >= 0):
        raise ValueError(f"noise_scale={noise_scale} must be >= 0; try the default 1.0.")

    rng = np.random.default_rng([seed, 0])
    ext = num_frames + 2 * max_shift
    rank = 3
    mel_f = max(2, min(8, num_mels))
    frame_f = max(2, min(6, ext))

    def low_rank(shape: tuple[int, ...]) -> np.ndarray:
        a = _smooth_curves(rng, (*shape, rank), num_mels, mel_f)  # [..., R, M]
        b = _smooth_curves(rng, (*shape, rank), ext, frame_f)  # [..., R, T+2S]
        return np.einsum("...rm,...rt->...mt", a, b) / math.sqrt(rank)

    shared = low_rank(())
    own = low_rank((num_classes,))
    protos = (shared[None] + class_sep * own).astype(np.float32)  # [C, M, T+2S]
    tilt = -np.linspace(0.0, 2.0, num_mels)[:, None]  # darker high mels
    background = (tilt + 0.5 * low_rank(())[:, max_shift : max_shift + num_frames]).astype(np.float32)
    q = 16
    noise_bases = low_rank((q,))[..., max_shift : max_shift + num_frames]
    noise_bases = (noise_bases.reshape(q, -1) / math.sqrt(q)).astype(np.float32)

    kw = dict(num_frames=num_frames, max_shift=max_shift, noise_scale=noise_scale)
    tx, ty = _speech_split(np.random.default_rng([seed, 1]), num_train, protos, background, noise_bases, **kw)
    vx, vy = _speech_split(np.random.default_rng([seed, 2]), num_test, protos, background, noise_bases, **kw)
    return _finalise("synthetic_speech", tx, ty, vx, vy, num_classes)


# --------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------

_LOADERS: dict[str, Callable[..., Dataset]] = {
    "digits": load_digits,
    "mnist1d": load_mnist1d,
    "synthetic_speech": load_synthetic_speech,
}
DATASETS: tuple[str, ...] = tuple(_LOADERS)


def _accepted_kwargs(name: str) -> list[str]:
    if name == "mnist1d":
        return sorted([*_mnist1d_default_args(), "disk_cache"])
    fn = inspect.unwrap(_LOADERS[name])
    return sorted(inspect.signature(fn).parameters)


def load_dataset(name: str, **kwargs: Any) -> Dataset:
    """Load dataset `name` (one of :data:`DATASETS`) with loader kwargs.

    Raises:
      ValueError: unknown `name` (lists known names) or unknown kwargs (lists
        accepted ones).
    """
    if name not in _LOADERS:
        raise ValueError(
            f"name={name!r} is not a known dataset; choose one of {list(DATASETS)}."
        )
    unknown = sorted(set(kwargs) - set(_accepted_kwargs(name)))
    if unknown:
        raise ValueError(
            f"dataset {name!r} got unknown argument(s) {unknown}; accepted: "
            f"{_accepted_kwargs(name)}."
        )
    return _LOADERS[name](**kwargs)


# --------------------------------------------------------------------------
# On-device batching
# --------------------------------------------------------------------------


def _validate_batch_args(
    num_workers: Any, local_steps: Any, batch_size: Any, seed: Any, sharding: Any
) -> tuple[int, int, int, int]:
    w = _check_positive("num_workers", num_workers)
    k = _check_positive("local_steps", local_steps)
    b = _check_positive("batch_size", batch_size)
    try:
        s = operator.index(seed)
    except TypeError:
        raise ValueError(f"seed={seed!r} must be an integer; pass an int.") from None
    if sharding not in SHARDINGS:
        raise ValueError(
            f"sharding={sharding!r} is not supported; pass one of {list(SHARDINGS)}."
        )
    return w, k, b, s


def _pool_size(num_examples: int, num_workers: int, batch_size: int, sharding: str) -> int:
    pool = num_examples // num_workers if sharding == "disjoint" else num_examples
    if pool < batch_size:
        if sharding == "disjoint":
            raise ValueError(
                f"sharding='disjoint' splits {num_examples} training examples into "
                f"num_workers={num_workers} shards of {pool}, fewer than "
                f"batch_size={batch_size}; reduce num_workers or batch_size, or use "
                f"sharding='shared'."
            )
        raise ValueError(
            f"the training set has {num_examples} examples, fewer than "
            f"batch_size={batch_size}; reduce batch_size."
        )
    return pool


def _as_round(round_index: Any) -> jax.Array:
    """`round_index` (int or scalar integer array) as a scalar `int32` array."""
    if isinstance(round_index, (int, np.integer)) and not isinstance(round_index, bool):
        if round_index < 0:
            raise ValueError(f"round_index={round_index} must be >= 0.")
        if round_index >= 2**31:
            raise ValueError(f"round_index={round_index} must be < 2**31.")
        return jnp.asarray(round_index, jnp.int32)
    r = jnp.asarray(round_index)
    if r.shape != () or not jnp.issubdtype(r.dtype, jnp.integer):
        raise ValueError(
            f"round_index must be a scalar integer, got shape {r.shape} dtype {r.dtype}; "
            f"pass an int or jnp.int32 scalar."
        )
    return r.astype(jnp.int32)


def make_index_fn(
    num_examples: int,
    *,
    num_workers: int,
    local_steps: int,
    batch_size: int,
    seed: int,
    sharding: str = "disjoint",
) -> Callable[[Any], jax.Array]:
    """Example indices of one round: `indices(round_index) -> [W, K, B] int32`.

    Key schedule (the contract that makes runs resumable):

    * shards (`"disjoint"`): `order = permutation(fold_in(PRNGKey(seed),
      _SHARD_TAG), N)`; worker `w` owns `order[w * P:(w + 1) * P]`, `P = N // W`
      (the last `N % W` examples are dropped).  `"shared"`: every pool is
      `arange(N)`, `P = N`.
    * stream: worker `w` reads pool positions
      `p = round_index * K * B + arange(K * B)`, epoch `e = p // P`, and takes
      `pool_w[perm_{w,e}[p % P]]` with `perm_{w,e} = permutation(fold_in(
      fold_in(fold_in(PRNGKey(seed), _STREAM_TAG), w), e), P)`.

    A round touches at most `(P - gcd(K*B, P) + K*B - 1) // P + 1` epochs
    (<= `ceil(K*B / P) + 1`); that many permutations are built per worker.
    Jit-compatible in `round_index`.
    """
    w_, k_, b_, seed = _validate_batch_args(num_workers, local_steps, batch_size, seed, sharding)
    n = _check_positive("num_examples", num_examples)
    pool = _pool_size(n, w_, b_, sharding)
    kb = k_ * b_
    if pool * kb >= 2**31:
        raise ValueError(
            f"pool size {pool} x local_steps*batch_size {kb} overflows int32 "
            f"position arithmetic; reduce local_steps or batch_size."
        )
    n_epochs = (pool - math.gcd(kb, pool) + kb - 1) // pool + 1
    base = jax.random.PRNGKey(seed)
    if sharding == "disjoint":
        order = jax.random.permutation(jax.random.fold_in(base, _SHARD_TAG), n)
        table = np.asarray(order[: w_ * pool], np.int32).reshape(w_, pool)
    else:
        table = None
    stream_key = jax.random.fold_in(base, _STREAM_TAG)

    def indices(round_index: Any, table: jax.Array | None = None) -> jax.Array:
        r = _as_round(round_index)
        # start = r*kb = q*pool*kb + rem*kb, computed without overflowing r*kb.
        q, rem = jnp.divmod(r, pool)
        start = rem * kb
        epoch0 = q * kb + start // pool
        local = start % pool + jnp.arange(kb, dtype=jnp.int32)
        ep_rel, pos = local // pool, local % pool

        def worker_perms(w: jax.Array) -> jax.Array:
            kw = jax.random.fold_in(stream_key, w)
            epochs = epoch0 + jnp.arange(n_epochs, dtype=jnp.int32)
            return jax.vmap(
                lambda e: jax.random.permutation(jax.random.fold_in(kw, e), pool)
            )(epochs)  # [n_epochs, P]

        perms = jax.vmap(worker_perms)(jnp.arange(w_, dtype=jnp.int32))  # [W, E, P]
        idx = perms[:, ep_rel, pos].astype(jnp.int32)  # [W, K*B], pool positions
        if table is not None:
            idx = jnp.take_along_axis(table, idx, axis=1)
        return idx.reshape(w_, k_, b_)

    table_dev = None if table is None else jnp.asarray(table)

    def index_fn(round_index: Any) -> jax.Array:
        return indices(round_index, table_dev)

    index_fn.pool_size = pool  # type: ignore[attr-defined]
    index_fn.shard_table = table  # type: ignore[attr-defined]
    index_fn.indices = indices  # type: ignore[attr-defined]
    return index_fn


@dataclasses.dataclass(frozen=True, eq=False)
class BatchFn:
    """`batches(round_index) -> {"x": [W, K, B, ...] float32, "y": [W, K, B] int32}`.

    Built by :func:`make_batch_fn`.  `data` holds the device arrays
    (`x: [N, ...]`, `y: [N]`, and `table: [W, P] int32` for disjoint
    sharding).  Calling the object closes over `data`; to use it *inside* a
    larger jitted function without baking the training set into the compiled
    program as a constant, pass `data` as an argument and call
    `batch_fn.apply(data, round_index)` instead.
    """

    data: dict[str, jax.Array]
    num_workers: int
    local_steps: int
    batch_size: int
    seed: int
    sharding: str
    pool_size: int
    _indices: Callable[..., jax.Array] = dataclasses.field(repr=False)
    _gather: Callable[..., Batch] = dataclasses.field(repr=False)

    def apply(self, data: dict[str, jax.Array], round_index: Any) -> Batch:
        """Pure form: batch of `round_index` from explicitly passed `data`."""
        idx = self._indices(round_index, data.get("table"))
        return {
            "x": jnp.take(data["x"], idx, axis=0, mode="clip"),
            "y": jnp.take(data["y"], idx, axis=0, mode="clip"),
        }

    def indices(self, round_index: Any) -> jax.Array:
        """Training-set example indices of the round, `[W, K, B] int32`."""
        return self._indices(round_index, self.data.get("table"))

    def __call__(self, round_index: Any) -> Batch:
        r = _as_round(round_index)
        if isinstance(r, jax.core.Tracer):  # inside someone else's trace
            return self.apply(self.data, r)
        return self._gather(self.data, r)  # data as jit arguments, not constants


def make_batch_fn(
    dataset: Dataset,
    *,
    num_workers: int,
    local_steps: int,
    batch_size: int,
    seed: int,
    sharding: str = "disjoint",
) -> BatchFn:
    """On-device batch function for `num_workers` workers.

    Args:
      dataset: its `train_x: [N, ...]` and `train_y: [N]` are put on the default
        device once (cast to float32 / int32).
      num_workers: `W >= 1`.
      local_steps: `K >= 1` steps per worker per round.
      batch_size: `B >= 1` examples per step.
      seed: seeds both the shard split and the sample streams.
      sharding: `"disjoint"` (worker `w` only sees shard `w`) or `"shared"`
        (every worker samples the whole training set independently).

    Returns:
      `batches(round_index) -> {"x": [W, K, B, ...] float32, "y": [W, K, B]
      int32}`, deterministic in `(seed, round_index, worker)` and
      jit-compatible (`jax.jit(batches)(jnp.int32(5))`).  See
      :func:`make_index_fn` for the exact sampling contract.
    """
    w, k, b, s = _validate_batch_args(num_workers, local_steps, batch_size, seed, sharding)
    train_x, train_y = dataset.train_x, dataset.train_y
    if len(train_x) != len(train_y):
        raise ValueError(
            f"dataset.train_x has {len(train_x)} examples but train_y has "
            f"{len(train_y)}; they must match."
        )
    index_fn = make_index_fn(
        len(train_x), num_workers=w, local_steps=k, batch_size=b, seed=s, sharding=sharding
    )
    data = {"x": jnp.asarray(train_x, jnp.float32), "y": jnp.asarray(train_y, jnp.int32)}
    if index_fn.shard_table is not None:
        data["table"] = jnp.asarray(index_fn.shard_table)
    indices = index_fn.indices

    def gather(data: dict[str, jax.Array], r: jax.Array) -> Batch:
        idx = indices(r, data.get("table"))
        return {
            "x": jnp.take(data["x"], idx, axis=0, mode="clip"),
            "y": jnp.take(data["y"], idx, axis=0, mode="clip"),
        }

    return BatchFn(
        data=data,
        num_workers=w,
        local_steps=k,
        batch_size=b,
        seed=s,
        sharding=sharding,
        pool_size=index_fn.pool_size,
        _indices=indices,
        _gather=jax.jit(gather),
    )


def eval_batches(
    x: np.ndarray, y: np.ndarray, batch_size: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield `(x[i:i+B], y[i:i+B])` numpy chunks covering the set exactly once.

    Args:
      x: `[N, ...]`.
      y: `[N]`.
      batch_size: `B >= 1`; the last chunk has `N % B` rows if nonzero.
    """
    batch_size = _check_positive("batch_size", batch_size)
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} rows but y has {len(y)}; they must match.")
    for start in range(0, len(x), batch_size):
        yield x[start : start + batch_size], y[start : start + batch_size]
