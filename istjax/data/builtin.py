"""The loaders that ship with the install: ``digits``, ``mnist1d`` and ``synthetic_speech``.

None of them touches the network: ``digits`` ships with scikit-learn,
``mnist1d`` is generated locally with the ``mnist1d`` package, and
``synthetic_speech`` is generated with numpy from a seed.  Each returns a
standardised, read-only :class:`~istjax.data.dataset.Dataset` and caches it in
memory; :func:`istjax.data.registry.load_dataset` picks one by name.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import operator
import os
from typing import Any

import numpy as np

from istjax.core.errors import ArgError
from istjax.core.streams import check_positive
from istjax.data.dataset import Dataset, finalise
from istjax.data.files import cache_dir

__all__ = [
    "load_digits",
    "load_mnist1d",
    "load_synthetic_speech",
]


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
      A `Dataset` whose ``train_x`` is ``[1797 - test_size, 64] float32``, 10 classes.
    """
    from sklearn.datasets import load_digits as _sk_load_digits
    from sklearn.model_selection import train_test_split

    test_size = check_positive("test_size", test_size)
    if test_size > 1797 - 10:
        raise ArgError("test_size", test_size, f"test_size={test_size} leaves fewer than 10 training examples of the "
                                               f"1797 digits;", "pass test_size <= 1787 (default 360).")
    x, y = _sk_load_digits(return_X_y=True)
    tx, vx, ty, vy = train_test_split(
        x, y, test_size=test_size, stratify=y, random_state=operator.index(seed)
    )
    return finalise("digits", tx, ty, vx, vy, 10)


# --------------------------------------------------------------------------
# mnist1d
# --------------------------------------------------------------------------


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
    path = cache_dir() / f"mnist1d-{key}.npz"
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
      A `Dataset` whose ``train_x`` is ``[num_samples * train_split, 40] float32``.
    """
    args = _mnist1d_default_args()
    unknown = sorted(set(dataset_args) - set(args))
    if unknown:
        raise ArgError(unknown[0] if len(unknown) == 1 else tuple(unknown), dataset_args[unknown[0]],
                       f"load_mnist1d got unknown argument(s) {unknown};", f"accepted: {sorted(args) + ['disk_cache']}.")
    args.update(dataset_args)
    _check_mnist1d_sizes(args)
    items = tuple(
        sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in args.items())
    )
    return _mnist1d_standardised(items, bool(disk_cache))


def _check_mnist1d_sizes(args: dict[str, Any]) -> None:
    """``num_samples`` and ``train_split`` that leave examples in both splits (mnist1d makes ``num_samples // 10``
    per class and would fail deep inside with fewer than 10)."""
    n = check_positive("num_samples", args["num_samples"], 10)
    total, split = n // 10 * 10, args["train_split"]
    if isinstance(split, bool) or not isinstance(split, (int, float)) or not 1 <= int(total * split) < total:
        raise ArgError("train_split", split, f"train_split={split!r}: a fraction in (0, 1) that leaves at least one "
                                             f"training and one test example of the num_samples={n} generated,",
                       "e.g. 0.8.")


@functools.lru_cache(maxsize=4)
def _mnist1d_standardised(items: tuple[tuple[str, Any], ...], disk_cache: bool) -> Dataset:
    raw = _mnist1d_raw(items, disk_cache)
    return finalise("mnist1d", raw["x"], raw["y"], raw["x_test"], raw["y_test"], 10)


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


def _speech_shape(num_features: int, num_frames: int | None, max_shift: int | None) -> tuple[int, int, int]:
    """``(M mels, T frames, max_shift)`` of `load_synthetic_speech`'s examples, checked."""
    num_features = check_positive("num_features", num_features)
    if num_frames is None:
        num_frames = _speech_num_frames(num_features)
    num_frames = check_positive("num_frames", num_frames)
    if num_features % num_frames:
        raise ArgError(("num_frames", "num_features"), num_frames,
                       f"num_frames={num_frames} does not divide num_features={num_features};",
                       "pass a divisor of num_features or num_frames=None to pick one.")
    if max_shift is None:
        max_shift = max(1, num_frames // 8)
    return num_features // num_frames, num_frames, check_positive("max_shift", max_shift, minimum=0)


def _speech_prototypes(rng: np.random.Generator, num_classes: int, num_mels: int, num_frames: int, max_shift: int,
                       class_sep: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The class prototypes `[C, M, T + 2S]`, the background `[M, T]` and the low-rank noise bases `[16, M * T]` of
    `load_synthetic_speech`, drawn from ``rng`` in this order."""
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
    return protos, background, noise_bases


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
      A `Dataset` whose ``train_x`` is ``[num_train, num_features] float32``.
    """
    num_train = check_positive("num_train", num_train)
    num_test = check_positive("num_test", num_test)
    num_classes = check_positive("num_classes", num_classes, minimum=2)
    seed = operator.index(seed)
    num_mels, num_frames, max_shift = _speech_shape(num_features, num_frames, max_shift)
    if not (class_sep > 0):
        raise ArgError("class_sep", class_sep, f"class_sep={class_sep} must be > 0;", "try the default 0.25.")
    if not (noise_scale >= 0):
        raise ArgError("noise_scale", noise_scale, f"noise_scale={noise_scale} must be >= 0;",
                       "try the default 1.2.")
    protos, background, noise_bases = _speech_prototypes(np.random.default_rng([seed, 0]), num_classes, num_mels,
                                                         num_frames, max_shift, class_sep)
    kw = dict(num_frames=num_frames, max_shift=max_shift, noise_scale=noise_scale)
    tx, ty = _speech_split(np.random.default_rng([seed, 1]), num_train, protos, background, noise_bases, **kw)
    vx, vy = _speech_split(np.random.default_rng([seed, 2]), num_test, protos, background, noise_bases, **kw)
    return finalise("synthetic_speech", tx, ty, vx, vy, num_classes, owned=True)

