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
    train_x: np.ndarray, test_x: np.ndarray, eps: float = 1e-8, *, copy: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Standardise features with train statistics.

    Args:
      train_x: `[N, ...]` any real dtype.
      test_x: `[M, ...]`, same trailing shape as `train_x`.
      eps: features whose train std is `<= eps` are only centred (std taken as 1).
      copy: if False, writable `float32` inputs are standardised in place.

    Returns:
      `(train_x, test_x)` as `float32` arrays (new unless `copy=False`), train
      having zero mean and unit variance per non-constant feature.
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
        out = np.array(x, dtype=np.float32, copy=True if copy else None)
        if not out.flags.writeable:
            out = out.copy()
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
    *,
    owned: bool = False,
) -> Dataset:
    """Standardise, cast to `float32`/`int32`, freeze and wrap in a Dataset.

    `owned=True` lets freshly generated float32 features be standardised in place.
    """
    train_x, test_x = standardize(train_x, test_x, copy=not owned)
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


# `mnist1d.data.get_dataset_args()` minus the download `url`, copied here so a
# disk-cache hit does not pay the ~1-2 s import of mnist1d (matplotlib, requests).
# Generation passes the full dict explicitly, so the package's own defaults never
# matter; its version is part of the cache key.
_MNIST1D_DEFAULTS: dict[str, Any] = {
    "num_samples": 5000,
    "train_split": 0.8,
    "template_len": 12,
    "padding": [36, 60],
    "scale_coeff": 0.4,
    "max_translation": 48,
    "corr_noise_scale": 0.25,
    "iid_noise_scale": 2e-2,
    "shear_scale": 0.75,
    "shuffle_seq": False,
    "final_seq_length": 40,
    "seed": 42,
}


def _mnist1d_default_args() -> dict[str, Any]:
    return {k: list(v) if isinstance(v, list) else v for k, v in _MNIST1D_DEFAULTS.items()}


def _mnist1d_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("mnist1d")
    except metadata.PackageNotFoundError:
        return "unknown"


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
    blob = json.dumps({"args": args, "mnist1d": _mnist1d_version()}, sort_keys=True, default=str)
    key = hashlib.sha1(blob.encode()).hexdigest()[:16]
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
    small = [d for d in range(1, math.isqrt(num_features) + 1) if num_features % d == 0]
    divisors = small + [num_features // d for d in small]
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
    num_classes, num_mels, _ = protos.shape
    y = rng.permutation(np.arange(n) % num_classes).astype(np.int32)
    x = np.empty((n, num_mels * num_frames), np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(protos, num_frames, axis=2)  # [C, M, 2S+1, T]
    smooth = np.empty((min(chunk, n), num_mels * num_frames), np.float32)
    iid = np.empty_like(smooth)
    scale = np.float32(noise_scale)
    for start in range(0, n, chunk):
        yc = y[start : start + chunk]
        m = yc.shape[0]
        shift = rng.integers(0, 2 * max_shift + 1, m)
        gain = rng.lognormal(0.0, 0.35, m).astype(np.float32)[:, None, None]
        level = rng.normal(0.0, 0.5, m).astype(np.float32)[:, None, None]
        coef = rng.standard_normal((m, noise_bases.shape[0]), dtype=np.float32)
        out = x[start : start + m]  # view, filled in place to avoid temporaries
        out3 = out.reshape(m, num_mels, num_frames)
        np.multiply(gain, windows[yc, :, shift, :], out=out3)  # shifted prototype
        out3 += background
        out3 += level
        buf, buf_iid = smooth[:m], iid[:m]
        np.matmul(coef, noise_bases, out=buf)  # smooth low-rank noise
        rng.standard_normal(dtype=np.float32, out=buf_iid)  # iid noise
        buf += buf_iid
        buf *= scale
        out += buf
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
    class_sep: float = 0.25,
    noise_scale: float = 1.2,
) -> Dataset:
    """Generated stand-in for Google Speech Commands log-mel features.

    Each example is a `[M mels, T frames]` log-mel-like image flattened to
    `num_features = M * T` (defaults: 128 x 32 = 4096, 35 classes).  Class `c`
    has a smooth rank-3 spectro-temporal prototype `shared + class_sep * own_c`
    (so classes overlap); an example is
    `background + gain * window_t(prototype_y) + level + noise`: prototypes
    live on `T + 2 * max_shift` frames and each example cuts a `T`-frame
    window at a random offset (a time shift of up to `max_shift` frames), with
    log-normal `gain`, a per-example loudness offset `level`, and smooth
    low-rank plus iid noise, both scaled by `noise_scale`.  Train and test use
    independent streams of the same seed, so `num_test` does not change the
    training set.  With the defaults a 4096-4096-35 ReLU MLP trained with
    plain SGD (lr 0.05, batch 128) reaches ~33% test accuracy after 100 steps
    and ~72% after 300 (chance 2.9%); generation takes ~4 s and ~400 MB.

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
    if max_shift is None:
        max_shift = max(1, num_frames // 8)
    max_shift = _check_positive("max_shift", max_shift, minimum=0)
    if not (class_sep > 0):
        raise ValueError(f"class_sep={class_sep} must be > 0; try the default 0.25.")
    if not (noise_scale >= 0):
        raise ValueError(f"noise_scale={noise_scale} must be >= 0; try the default 1.2.")

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
    return _finalise("synthetic_speech", tx, ty, vx, vy, num_classes, owned=True)


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
    if name.startswith("tfds:"):
        # Real datasets a user has prepared with tensorflow-datasets (see istjax.tfds_data).
        from istjax.data.tfds import load_tfds

        accepted = sorted(p for p in inspect.signature(load_tfds).parameters if p != "name")
        unknown = sorted(set(kwargs) - set(accepted))
        if unknown:
            raise ValueError(f"dataset {name!r} got unknown argument(s) {unknown}; accepted: {accepted}.")
        return load_tfds(name[len("tfds:"):], **kwargs)
    if name not in _LOADERS:
        raise ValueError(
            f"name={name!r} is not a known dataset; choose one of {list(DATASETS)}, or "
            f"'tfds:<name>' for a dataset prepared with tensorflow-datasets."
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


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Static (hashable) shape of a sampling scheme; the seed is not part of it.

    Equal plans share compiled code, so re-creating a batch function (e.g. on
    resume, or with another seed) does not recompile.
    """

    num_workers: int
    local_steps: int
    batch_size: int
    sharding: str
    pool_size: int
    num_epochs: int  # permutations built per worker per round

    def shard_table(self, num_examples: int, seed: int) -> np.ndarray | None:
        """`[W, P] int32` example ids of each worker's shard, or None if shared."""
        if self.sharding == "shared":
            return None
        key = jax.random.fold_in(jax.random.PRNGKey(seed), _SHARD_TAG)
        order = np.asarray(jax.random.permutation(key, num_examples), np.int32)
        return order[: self.num_workers * self.pool_size].reshape(self.num_workers, self.pool_size)

    def indices(self, stream_key: jax.Array, table: jax.Array | None, round_index: Any) -> jax.Array:
        """`[W, K, B] int32` example ids of `round_index` (traceable).

        `stream_key = fold_in(PRNGKey(seed), _STREAM_TAG)`; `table` from
        :meth:`shard_table` (None for shared sampling).
        """
        r = _as_round(round_index)
        w_, k_, b_, pool = self.num_workers, self.local_steps, self.batch_size, self.pool_size
        kb = k_ * b_
        # start = r*kb = q*pool*kb + rem*kb, computed without overflowing r*kb.
        q, rem = jnp.divmod(r, pool)
        start = rem * kb
        epoch0 = q * kb + start // pool
        local = start % pool + jnp.arange(kb, dtype=jnp.int32)
        ep_rel, pos = local // pool, local % pool

        def worker_perms(w: jax.Array) -> jax.Array:
            kw = jax.random.fold_in(stream_key, w)
            epochs = epoch0 + jnp.arange(self.num_epochs, dtype=jnp.int32)
            return jax.vmap(
                lambda e: jax.random.permutation(jax.random.fold_in(kw, e), pool)
            )(epochs)  # [E, P]

        perms = jax.vmap(worker_perms)(jnp.arange(w_, dtype=jnp.int32))  # [W, E, P]
        idx = perms[:, ep_rel, pos].astype(jnp.int32)  # [W, K*B] pool positions
        if table is not None:
            idx = jnp.take_along_axis(table, idx, axis=1)
        return idx.reshape(w_, k_, b_)


def _stream_key(seed: int) -> jax.Array:
    return jax.random.fold_in(jax.random.PRNGKey(seed), _STREAM_TAG)


def _gather(idx: jax.Array, x: jax.Array, y: jax.Array) -> Batch:
    """`{"x": x[idx], "y": y[idx]}` for `idx: [W, K, B]`."""
    return {"x": jnp.take(x, idx, axis=0, mode="clip"), "y": jnp.take(y, idx, axis=0, mode="clip")}


_jit_indices = jax.jit(_Plan.indices, static_argnums=0)
_jit_gather = jax.jit(_gather)


def _make_plan(
    num_examples: Any,
    num_workers: Any,
    local_steps: Any,
    batch_size: Any,
    seed: Any,
    sharding: Any,
) -> tuple[_Plan, int]:
    """Validate batching arguments (before any tracing); return `(plan, seed)`."""
    w = _check_positive("num_workers", num_workers)
    k = _check_positive("local_steps", local_steps)
    b = _check_positive("batch_size", batch_size)
    try:
        s = operator.index(seed)
    except TypeError:
        raise ValueError(f"seed={seed!r} must be an integer; pass an int.") from None
    if not 0 <= s < 2**32:  # PRNGKey would silently wrap larger seeds (x64 off)
        raise ValueError(f"seed={s} must be in [0, 2**32); pass a smaller seed.")
    if sharding not in SHARDINGS:
        raise ValueError(
            f"sharding={sharding!r} is not supported; pass one of {list(SHARDINGS)}."
        )
    n = _check_positive("num_examples", num_examples)
    pool = n // w if sharding == "disjoint" else n
    if pool < b:
        if sharding == "disjoint":
            raise ValueError(
                f"sharding='disjoint' splits {n} training examples into "
                f"num_workers={w} shards of {pool}, fewer than batch_size={b}; "
                f"reduce num_workers or batch_size, or use sharding='shared'."
            )
        raise ValueError(
            f"the training set has {n} examples, fewer than batch_size={b}; "
            f"reduce batch_size."
        )
    kb = k * b
    if pool * (kb + 1) >= 2**31:
        raise ValueError(
            f"pool size {pool} x local_steps*batch_size={kb} overflows int32 "
            f"position arithmetic; reduce local_steps or batch_size."
        )
    # Offsets into an epoch are multiples of gcd(kb, pool), at most pool - gcd.
    num_epochs = (pool - math.gcd(kb, pool) + kb - 1) // pool + 1
    return _Plan(w, k, b, sharding, pool, num_epochs), s


def _as_round(round_index: Any) -> jax.Array:
    """`round_index` (int or scalar integer array) as a scalar `int32` array."""
    if isinstance(round_index, bool) or not (
        isinstance(round_index, (int, np.integer, np.ndarray, jax.Array))
    ):
        raise ValueError(
            f"round_index={round_index!r} must be an int or a scalar integer array."
        )
    if isinstance(round_index, (int, np.integer)):
        if not 0 <= round_index < 2**31:
            raise ValueError(f"round_index={round_index} must be in [0, 2**31).")
        return jnp.asarray(round_index, jnp.int32)
    if round_index.shape != () or not jnp.issubdtype(round_index.dtype, jnp.integer):
        raise ValueError(
            f"round_index must be a scalar integer, got shape {round_index.shape} "
            f"dtype {round_index.dtype}; pass an int or jnp.int32 scalar."
        )
    return jnp.asarray(round_index).astype(jnp.int32)


def _is_traced(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def make_index_fn(
    num_examples: int,
    *,
    num_workers: int,
    local_steps: int,
    batch_size: int,
    seed: int,
    sharding: str = "disjoint",
) -> Callable[[Any], jax.Array]:
    """Example ids of one round: `indices(round_index) -> [W, K, B] int32`.

    This is the sampling contract behind :func:`make_batch_fn` (which gathers
    `train_x[indices(round_index)]`):

    * shards (`"disjoint"`): `order = permutation(fold_in(PRNGKey(seed),
      _SHARD_TAG), N)`; worker `w` owns `pool_w = order[w * P:(w + 1) * P]`,
      `P = N // W` (the last `N % W` examples of `order` are dropped).
      `"shared"`: every `pool_w = arange(N)`, `P = N`.
    * stream: worker `w` reads pool positions
      `p = round_index * K * B + arange(K * B)`, epoch `e = p // P`, and takes
      `pool_w[perm_{w,e}[p % P]]`, `perm_{w,e} = permutation(fold_in(fold_in(
      fold_in(PRNGKey(seed), _STREAM_TAG), w), e), P)`.

    A round touches at most `(P - gcd(K*B, P) + K*B - 1) // P + 1` epochs
    (<= `ceil(K*B / P) + 1`); that many permutations of `P` are built per
    worker per call.  Jit-compatible in `round_index`.
    """
    plan, seed = _make_plan(num_examples, num_workers, local_steps, batch_size, seed, sharding)
    table = plan.shard_table(num_examples, seed)
    table_dev = None if table is None else jnp.asarray(table)
    key = _stream_key(seed)

    def indices(round_index: Any) -> jax.Array:
        r = _as_round(round_index)
        if _is_traced(r):
            return plan.indices(key, table_dev, r)
        return _jit_indices(plan, key, table_dev, r)

    return indices


class BatchFn:
    """`batches(round_index) -> {"x": [W, K, B, ...] float32, "y": [W, K, B] int32}`.

    Built by :func:`make_batch_fn`.  `data` is a dict of device arrays:
    `x: [N, ...] float32`, `y: [N] int32`, `key` (the stream key) and, for
    disjoint sharding, `table: [W, P] int32`.  Calling the object outside a
    trace runs jitted code with `data` as arguments (compiled once per
    shape, shared across seeds and instances).  Calling it *inside* your own
    `jax.jit` works too, but then `data` is closed over and JAX embeds it in
    the compiled program as constants (slow compile, a second copy in memory
    for big sets); there, pass `data` as an argument and use
    `batch_fn.apply(data, round_index)`.
    """

    def __init__(self, plan: _Plan, seed: int, data: dict[str, jax.Array]):
        self._plan = plan
        self.seed = seed
        self.data = data

    num_workers = property(lambda self: self._plan.num_workers)
    local_steps = property(lambda self: self._plan.local_steps)
    batch_size = property(lambda self: self._plan.batch_size)
    sharding = property(lambda self: self._plan.sharding)
    pool_size = property(lambda self: self._plan.pool_size, doc="Examples per worker pool `P`.")

    def apply(self, data: dict[str, jax.Array], round_index: Any) -> Batch:
        """Pure, traceable form: the batch of `round_index` gathered from `data`."""
        idx = self._plan.indices(data["key"], data.get("table"), round_index)
        return _gather(idx, data["x"], data["y"])

    def indices(self, round_index: Any) -> jax.Array:
        """Training-set example ids of the round, `[W, K, B] int32`."""
        r = _as_round(round_index)
        d = self.data
        if _is_traced(r):
            return self._plan.indices(d["key"], d.get("table"), r)
        return _jit_indices(self._plan, d["key"], d.get("table"), r)

    def __call__(self, round_index: Any) -> Batch:
        r = _as_round(round_index)
        if _is_traced(r):
            return self.apply(self.data, r)
        return _jit_gather(self.indices(r), self.data["x"], self.data["y"])

    def __repr__(self) -> str:
        p = self._plan
        return (
            f"BatchFn(x={tuple(self.data['x'].shape)}, num_workers={p.num_workers}, "
            f"local_steps={p.local_steps}, batch_size={p.batch_size}, seed={self.seed}, "
            f"sharding={p.sharding!r}, pool_size={p.pool_size})"
        )


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
        device once (as float32 / int32) and closed over.
      num_workers: `W >= 1`.
      local_steps: `K >= 1` steps per worker per round.
      batch_size: `B >= 1` examples per step.
      seed: seeds both the shard split and the sample streams.
      sharding: `"disjoint"` (worker `w` only sees shard `w`; `N % W` examples
        are dropped) or `"shared"` (every worker samples the whole training
        set with its own permutations).

    Returns:
      `batches(round_index) -> {"x": [W, K, B, ...] float32, "y": [W, K, B]
      int32}`, a :class:`BatchFn`, deterministic in `(seed, round_index,
      worker)` and jit-compatible (`jax.jit(batches)(jnp.int32(5))`).  See
      :func:`make_index_fn` for the exact sampling contract.
    """
    train_x, train_y = dataset.train_x, dataset.train_y
    if len(train_x) != len(train_y):
        raise ValueError(
            f"dataset.train_x has {len(train_x)} examples but train_y has "
            f"{len(train_y)}; they must match."
        )
    plan, seed = _make_plan(len(train_x), num_workers, local_steps, batch_size, seed, sharding)
    data = {
        "x": jnp.asarray(train_x, jnp.float32),
        "y": jnp.asarray(train_y, jnp.int32),
        "key": _stream_key(seed),
    }
    table = plan.shard_table(len(train_x), seed)
    if table is not None:
        data["table"] = jnp.asarray(table)
    return BatchFn(plan, seed, data)


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
