"""Initialisers any block of whose leaf can be drawn alone, the same numbers as the whole leaf's.

A rank that holds a slice of a leaf (the MPI runtime's sharded mode, tensor parallelism) should draw only that slice.
Flax's initialisers draw a leaf in one call, and XLA does not narrow that call to a slice of its output (measured in
``experiments/extreme/memory.py``: a ``[F, H]`` kernel sliced to half its columns needs about 4x the whole leaf of
temporary memory), so at Amazon-670k's shape every rank would briefly hold the whole model. `Tiled` draws a leaf tile
by tile, each ``tile x ... x tile`` tile from its own key (the leaf's key folded with the tile's coordinates), so a
contiguous block along any axis is drawn from the tiles it touches alone (`Tiled.block`), equal to the same slice of
the whole draw.

A runtime uses it through `deferred` and `block`: inside ``with deferred():`` a `Tiled` draw records its key and shape
beside the array it returns, and ``block(x, axis, start, size)`` then draws only that block of a recorded leaf ``x``
(the whole draw, unused, is removed by XLA), or slices ``x`` when it was not drawn by a `Tiled`::

    with tiled_init.deferred():
        params = task.init(key)
        mine = jax.tree.map(lambda x: tiled_init.block(x, axis=1, start=o * s, size=s), params)
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Tiled", "normal", "lecun_normal", "deferred", "block"]

_TRUNCATED_STD = 0.87962566103423978  # the std of a standard normal truncated to [-2, 2] (as jax's variance_scaling)


@dataclasses.dataclass(frozen=True)
class Tiled:
    """A flax initialiser ``(key, shape, dtype) -> array``: zero-mean normal entries drawn tile by tile (module
    docstring).

    Attributes:
      stddev: the entries' standard deviation, or None for ``sqrt(scale / fan_in)`` (LeCun's, ``fan_in`` the product of
        every axis but the last, as jax's ``variance_scaling``).
      scale: the variance's numerator when ``stddev`` is None.
      truncated: draw from a normal truncated to two standard deviations (rescaled to keep the std), as
        ``jax.nn.initializers.lecun_normal`` does.
      tile: a tile's side along every axis (an axis shorter than it is one tile).
    """

    stddev: Optional[float] = None
    scale: float = 1.0
    truncated: bool = False
    tile: int = 128

    def __call__(self, key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32) -> jax.Array:
        shape = tuple(int(n) for n in shape)
        if not shape:
            raise ValueError("Tiled: a scalar leaf has no tiles; give it another initialiser (e.g. zeros).")
        out = self.block(key, shape, dtype, axis=0, start=0, size=shape[0])
        recorded = _RECORD.get()
        if recorded is not None:
            recorded[id(out)] = (out, self, key, shape, dtype)  # `out` kept alive: its id is not reused meanwhile
        return out

    def std(self, shape: Sequence[int]) -> float:
        """The entries' standard deviation in a leaf of ``shape``."""
        if self.stddev is not None:
            return float(self.stddev)
        return math.sqrt(self.scale / max(1, math.prod(shape[:-1])))

    def block(self, key: jax.Array, shape: Sequence[int], dtype: Any, axis: int, start: Union[int, jax.Array],
              size: int) -> jax.Array:
        """Entries ``[start, start + size)`` along ``axis`` of the leaf ``self(key, shape, dtype)`` (the other axes
        whole), drawing only the tiles they lie in (one tile more along ``axis`` when ``start`` is traced)."""
        shape = tuple(int(n) for n in shape)
        axis = axis % len(shape)
        if not 0 < size <= shape[axis]:
            raise ValueError(f"Tiled.block: size={size} along axis {axis} of a leaf of shape {shape}; give "
                             f"0 < size <= {shape[axis]}.")
        sides = tuple(min(self.tile, n) for n in shape)
        grid = tuple(-(-n // t) for n, t in zip(shape, sides))
        t = sides[axis]
        if isinstance(start, (int, np.integer)):
            first = int(start) // t
            count = -(-(int(start) + size) // t) - first
        else:  # traced: one tile more than an aligned block needs, the first one clamped into the grid
            count = min(grid[axis], -(-size // t) + 1)
            first = jnp.clip(start // t, 0, grid[axis] - count)
        ranges = [(0, g) for g in grid]
        ranges[axis] = (first, count)
        tiles = self._tiles(key, sides, ranges, dtype)  # [count_0 * side_0, ...], unit variance
        out = jax.lax.dynamic_slice_in_dim(tiles, start - first * t, size, axis=axis)
        out = out[tuple(slice(None) if a == axis else slice(0, n) for a, n in enumerate(shape))]
        return (out * jnp.asarray(self.std(shape), dtype)).astype(dtype)

    def _tiles(self, key, sides, ranges, dtype) -> jax.Array:
        """Tiles ``first_a .. first_a + count_a - 1`` of every axis ``a``, laid out as one array. Drawn a band at a
        time along the axis with the most tiles (``lax.map``), so the temporary memory is about one band, not a
        multiple of the whole block."""
        n, counts = len(sides), tuple(count for _, count in ranges)
        m = max(range(n), key=lambda a: counts[a])
        others = [a for a in range(n) if a != m]
        grid = jnp.meshgrid(*[ranges[a][0] + jnp.arange(counts[a]) for a in others], indexing="ij")
        rest = jnp.stack([g.reshape(-1) for g in grid], axis=-1) if others else jnp.zeros((1, 0), jnp.int32)

        def tile(c_m, c_rest):
            k = key
            for a in range(n):
                k = jax.random.fold_in(k, c_m if a == m else c_rest[others.index(a)])
            if self.truncated:
                return jax.random.truncated_normal(k, -2.0, 2.0, sides, dtype) / jnp.asarray(_TRUNCATED_STD, dtype)
            return jax.random.normal(k, sides, dtype)

        def band(c_m):  # every tile with coordinate c_m on axis m: [side_m, (count_a * side_a for the others)...]
            values = jax.vmap(lambda c: tile(c_m, c))(rest).reshape(tuple(counts[a] for a in others) + sides)
            order = [n - 1 + m] + [i for j, a in enumerate(others) for i in (j, n - 1 + a)]
            values = values.transpose(order)
            return values.reshape((sides[m],) + tuple(counts[a] * sides[a] for a in others))

        bands = jax.lax.map(band, ranges[m][0] + jnp.arange(counts[m]), batch_size=min(counts[m], 16))
        whole = bands.reshape((counts[m] * sides[m],) + bands.shape[2:])  # axis m first
        return jnp.moveaxis(whole, 0, m)


def normal(stddev: float = 1.0, tile: int = 128) -> Tiled:
    """`Tiled` ``N(0, stddev^2)`` entries (as ``flax.linen.initializers.normal``)."""
    return Tiled(stddev=stddev, tile=tile)


def lecun_normal(tile: int = 128) -> Tiled:
    """`Tiled` LeCun normal entries (as ``flax.linen.initializers.lecun_normal``: truncated, variance 1 / fan_in)."""
    return Tiled(truncated=True, tile=tile)


_RECORD: contextvars.ContextVar[Optional[dict]] = contextvars.ContextVar("istjax_tiled_record", default=None)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within it, every `Tiled` draw is recorded, so that `block` can redraw a slice of it alone (module docstring).
    Use it inside one traced function: the record holds that trace's arrays."""
    token = _RECORD.set({})
    try:
        yield
    finally:
        _RECORD.reset(token)


def block(x: jax.Array, axis: int, start: Union[int, jax.Array], size: int) -> jax.Array:
    """Entries ``[start, start + size)`` along ``axis`` of ``x``: redrawn alone when ``x`` was drawn by a `Tiled` in
    the current `deferred` block (the whole draw is then unused), else sliced from ``x``."""
    found = (_RECORD.get() or {}).get(id(x))
    if found is not None and found[0] is x:
        _, init, key, shape, dtype = found
        return init.block(key, shape, dtype, axis, start, size)
    return jax.lax.dynamic_slice_in_dim(x, start, size, axis=axis)
