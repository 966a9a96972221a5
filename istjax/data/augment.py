"""Standard image augmentation on device: random crop with zero padding and random horizontal flip.

Pure functions of a PRNG key, jitted, shape- and dtype-preserving:

* :func:`augment` ``(key, images [B, H, W, C]) -> [B, H, W, C]``: pads every image with ``pad`` zeros on each
  side, cuts a random ``H x W`` window per image (``lax.dynamic_slice`` under ``vmap``) and mirrors each image
  left-right with probability 1/2.  ``pad=0, flip=False`` is the identity.
* :func:`augment_params` ``(key, B) -> (offsets [B, 2], flips [B])``: the draws :func:`augment` makes with that
  key (image ``b`` is ``padded[b, dy:dy + H, dx:dx + W]`` with ``(dy, dx) = offsets[b]``, mirrored if
  ``flips[b]``), for inspection and tests.
* :func:`augment_batches` ``(seed, round_index, batches)``: augments a round's ``batches["x"]: [W, K, B, H, W, C]``
  (as :func:`istjax.data.make_batch_fn` returns them) with the key
  ``fold_in(fold_in(fold_in(fold_in(PRNGKey(seed), _AUGMENT_TAG), round_index), worker), step)`` for every
  ``(round, worker, step)``, so the augmentation, like the sampling, is a pure function of
  ``(seed, round, worker, step)`` and a resumed run sees exactly what it would have seen.  ``round_index`` is a
  traced argument: one compilation serves every round.

The zero padding is applied to the features as they are: on standardised data (every istjax loader) a padded
pixel is 0, the training mean of the pixel, not black.  :func:`augmented` wraps a batch function so that every
round's batches come augmented (the driver does this for a config's ``data.augment=True``); or call
:func:`augment_batches` on a round's batch yourself (inside or outside your own ``jax.jit``).
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from istjax.core.errors import ArgError, Code
from istjax.core.streams import as_round as _as_round
from istjax.core.streams import check_positive
from istjax.core.streams import check_seed
from istjax.data.batching import BatchFn

__all__ = [
    "AugmentedBatchFn",
    "augment",
    "augment_batches",
    "augment_params",
    "augmented",
]

# Folded into PRNGKey(seed) so augmentation keys are independent of the sampling streams of the same seed
# (istjax.data.batching folds _SHARD_TAG and _STREAM_TAG).
_AUGMENT_TAG = 0x4155_474D  # "AUGM"


def _check_options(pad: Any, flip: Any) -> tuple[int, bool]:
    try:
        p = operator.index(pad)
    except TypeError:
        raise ArgError("pad", pad, f"pad={pad!r} must be an integer >= 0",
                       "(pixels of zero padding per side).") from None
    if p < 0:
        raise ArgError("pad", pad, f"pad={p} must be >= 0", "(0 turns the random crop off).")
    if not isinstance(flip, (bool, np.bool_)):
        raise ArgError("flip", flip, f"flip={flip!r} must be True or False.", "")
    return p, bool(flip)


def _check_images(images: Any, what: str, ndim: int, arg: str = "images") -> None:
    shape = getattr(images, "shape", None)
    if shape is None or len(shape) != ndim:
        layout = "[B, H, W, C]" if ndim == 4 else "[W, K, B, H, W, C]"
        raise ArgError(arg, shape, f"{what} must be images {layout}, got shape {shape};",
                       f"load image datasets unflattened (e.g. load_fashion_mnist(flatten=False)) or reshape to "
                       f"{layout}.")


def _draw(key: jax.Array, batch_size: int, pad: int, flip: bool) -> tuple[jax.Array, jax.Array]:
    """`(offsets [B, 2] int32 in [0, 2 * pad], flips [B] bool)`; the key split does not depend on the options."""
    k_crop, k_flip = jax.random.split(key)
    if pad > 0:
        offsets = jax.random.randint(k_crop, (batch_size, 2), 0, 2 * pad + 1, dtype=jnp.int32)
    else:
        offsets = jnp.zeros((batch_size, 2), jnp.int32)
    flips = jax.random.bernoulli(k_flip, 0.5, (batch_size,)) if flip else jnp.zeros((batch_size,), bool)
    return offsets, flips


def _augment(key: jax.Array, images: jax.Array, pad: int, flip: bool) -> jax.Array:
    b, h, w, c = images.shape
    offsets, flips = _draw(key, b, pad, flip)
    out = images
    if pad > 0:
        padded = jnp.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
        zero = jnp.zeros((), jnp.int32)
        out = jax.vmap(lambda im, o: lax.dynamic_slice(im, (o[0], o[1], zero), (h, w, c)))(padded, offsets)
    if flip:
        out = jnp.where(flips[:, None, None, None], out[:, :, ::-1, :], out)
    return out


_augment_jit = jax.jit(_augment, static_argnums=(2, 3))
_draw_jit = jax.jit(_draw, static_argnums=(1, 2, 3))


def augment(key: jax.Array, images: jax.Array, *, pad: int = 4, flip: bool = True) -> jax.Array:
    """Random crop with zero padding and random horizontal flip, per image, on device.

    Args:
      key: a PRNG key (``jax.random.PRNGKey`` or ``jax.random.key``); the same key gives the same result.
      images: ``[B, H, W, C]``, any dtype.
      pad: zero pixels added on each side of height and width before a random ``H x W`` window is cut (offsets
        uniform in ``[0, 2 * pad]`` per axis); 0 turns the crop off.
      flip: mirror each image left-right with probability 1/2.

    Returns:
      ``[B, H, W, C]`` of the dtype of ``images``.  Jitted (compiled once per shape, dtype and options);
      traceable inside your own ``jax.jit``/``vmap``.
    """
    pad, flip = _check_options(pad, flip)
    _check_images(images, "images", 4)
    return _augment_jit(key, images, pad, flip)


def augment_params(key: jax.Array, batch_size: int, *, pad: int = 4, flip: bool = True) -> tuple[jax.Array, jax.Array]:
    """The random draws :func:`augment` makes with ``key`` for a batch of ``batch_size`` images.

    Returns:
      ``(offsets [B, 2] int32, flips [B] bool)``: image ``b`` of ``augment(key, images, pad=pad, flip=flip)``
      is ``padded[b, dy:dy + H, dx:dx + W]`` with ``(dy, dx) = offsets[b]`` and ``padded`` the images with
      ``pad`` zeros on each side, mirrored along the width if ``flips[b]``.
    """
    pad, flip = _check_options(pad, flip)
    return _draw_jit(key, check_positive("batch_size", batch_size), pad, flip)


def _round_keys(seed: jax.Array, round_index: jax.Array, num_workers: int, local_steps: int,
                tag: int = _AUGMENT_TAG) -> jax.Array:
    """`[W, K]` keys, `fold_in(fold_in(fold_in(fold_in(PRNGKey(seed), tag), round), w), k)`."""
    kr = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), tag), round_index)

    def worker(w: jax.Array) -> jax.Array:
        kw = jax.random.fold_in(kr, w)
        return jax.vmap(lambda k: jax.random.fold_in(kw, k))(jnp.arange(local_steps, dtype=jnp.int32))

    return jax.vmap(worker)(jnp.arange(num_workers, dtype=jnp.int32))


def _augment_round(seed: jax.Array, round_index: jax.Array, x: jax.Array, pad: int, flip: bool) -> jax.Array:
    keys = _round_keys(seed, round_index, x.shape[0], x.shape[1])
    step = functools.partial(_augment, pad=pad, flip=flip)
    return jax.vmap(jax.vmap(step))(keys, x)


_augment_round_jit = jax.jit(_augment_round, static_argnums=(3, 4))


def _as_seed(seed: Any) -> jax.Array:
    if isinstance(seed, jax.core.Tracer) or (isinstance(seed, jax.Array) and seed.shape == ()):
        return jnp.asarray(seed).astype(jnp.uint32)
    return jnp.asarray(check_seed(seed), jnp.uint32)


def augment_batches(seed: Any, round_index: Any, batches: dict, *, pad: int = 4, flip: bool = True) -> dict:
    """Augment one round's batches: every ``(worker, step)`` with its own key derived from ``(seed, round)``.

    Args:
      seed: an int in ``[0, 2**32)`` (or a scalar integer array); use the run's seed.
      round_index: the round, an int or scalar integer array (may be traced: no recompilation across rounds).
      batches: ``{"x": [W, K, B, H, W, C], ...}`` as :func:`istjax.data.make_batch_fn` returns them.
      pad, flip: as in :func:`augment`.

    Returns:
      A new dict, ``batches`` with ``"x"`` replaced by its augmentation (same shape and dtype), other entries
      (``"y"``) as they were.  Step ``k`` of worker ``w`` equals
      ``augment(fold_in(fold_in(fold_in(fold_in(PRNGKey(seed), _AUGMENT_TAG), round_index), w), k), x[w, k])``.
    """
    pad, flip = _check_options(pad, flip)
    if not isinstance(batches, dict) or "x" not in batches:
        raise ArgError("batches", type(batches).__name__,
                       f"batches must be a dict with an 'x' entry [W, K, B, H, W, C], got {type(batches).__name__}.", "")
    _check_images(batches["x"], 'batches["x"]', 6, "batches")
    s, r = _as_seed(seed), _as_round(round_index)
    if isinstance(s, jax.core.Tracer) or isinstance(r, jax.core.Tracer):
        x = _augment_round(s, r, batches["x"], pad, flip)
    else:
        x = _augment_round_jit(s, r, batches["x"], pad, flip)
    return {**batches, "x": x}


class AugmentedBatchFn(BatchFn):
    """A `istjax.data.BatchFn` whose batches are augmented (`augment_batches` with the batch function's seed): the
    same pure function of ``(seed, round)``, so a resumed run sees the same crops and flips, and the same
    ``apply(data, round)`` form a driver fuses into its jitted round."""

    def __init__(self, inner: BatchFn, *, pad: int = 4, flip: bool = True):
        super().__init__(inner._plan, inner.seed, inner.data)
        self.pad, self.flip = _check_options(pad, flip)
        shape = tuple(inner.data["x"].shape)
        if len(shape) != 4:
            raise ArgError("batch_fn", shape[1:],
                           f"augmentation crops and flips images [N, H, W, C], but the training examples are "
                           f"{shape[1:]}-shaped.", Code(
                               "Augment an image dataset (load it unflattened, e.g. "
                               "load_fashion_mnist(flatten=False)), or do not augment.",
                               ("Use an image dataset (e.g. fashion_mnist) or", {"augment": False}, ".")))

    def apply(self, data: dict, round_index: Any) -> dict:
        return augment_batches(self.seed, round_index, super().apply(data, round_index), pad=self.pad,
                               flip=self.flip)

    def __call__(self, round_index: Any) -> dict:
        return augment_batches(self.seed, round_index, super().__call__(round_index), pad=self.pad, flip=self.flip)


def augmented(batch_fn: BatchFn, *, pad: int = 4, flip: bool = True) -> AugmentedBatchFn:
    """``batch_fn`` with random crops (``pad`` pixels) and horizontal flips on every batch; images only."""
    return AugmentedBatchFn(batch_fn, pad=pad, flip=flip)


_DROPOUT_TAG = 0x4452_4F50  # "DROP"


class KeyedBatchFn:
    """A batch function whose batches also carry ``"rng": [W, K, 2] uint32``, one raw PRNG key per worker and step,
    ``fold_in(fold_in(fold_in(fold_in(PRNGKey(seed), _DROPOUT_TAG), round), w), k)``: what a model's dropout draws
    from (`istjax.classifier` passes it as the ``"dropout"`` rng in training). A pure function of (seed, round,
    worker, step), so a resumed run drops the same units; wraps any batch function with ``data``, ``apply`` and
    ``__call__`` (`istjax.data.BatchFn`, augmented or graph-cluster ones)."""

    def __init__(self, inner: Any, seed: int):
        self.inner = inner
        self.seed = check_seed(seed)
        self.data = inner.data

    def _keyed(self, batches: dict, round_index: Any) -> dict:
        w, k = batches["y"].shape[:2]
        keys = _round_keys(jnp.asarray(self.seed, jnp.uint32), _as_round(round_index), w, k, _DROPOUT_TAG)
        return {**batches, "rng": keys}

    def apply(self, data: dict, round_index: Any) -> dict:
        return self._keyed(self.inner.apply(data, round_index), round_index)

    def __call__(self, round_index: Any) -> dict:
        return self._keyed(self.inner(round_index), round_index)


def with_step_keys(batch_fn: Any, seed: int) -> KeyedBatchFn:
    """``batch_fn`` whose batches carry a dropout key per worker and step (see `KeyedBatchFn`)."""
    return KeyedBatchFn(batch_fn, seed)
