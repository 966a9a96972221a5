"""Extract per-worker sub-networks from the global parameters, and merge them back.

``extract(params, partition, spec)`` gathers, for every worker at once, the slices of each partitioned leaf that
touch the worker's units: a leaf of shape ``[D, H]`` whose axis 1 is group ``h`` becomes ``[W, D, n]``; a leaf
partitioned on both axes (a hidden-to-hidden weight) becomes ``[W, n, n]``, ``(1/W)^2`` of it per worker. Shared
leaves are broadcast to ``[W, ...]``.

``merge(params, sub, partition, spec)`` writes the pieces back. For a disjoint partition, partitioned slices are
scattered in place (no averaging: no two workers share them); where a strategy overlaps, each element becomes the
mean of the workers that hold it. Elements no worker holds keep their old value. Shared leaves become the mean over
workers. ``merge(params, extract(params, p, spec), p, spec) == params`` for every partition (a property test).

Both are single XLA gathers/scatters per leaf, vectorised over workers; padding slots (index == group size) are
filled with zeros by extract and dropped by merge.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from istjax.partition import Partition
from istjax.spec import GroupAxis, LeafSpec, SubnetSpec

__all__ = ["extract", "merge", "extract_tree", "merge_tree", "subnet_shapes"]

PyTree = Any


def _axis_indices(partition: Partition, a: GroupAxis, group_sizes) -> jax.Array:
    """`[W, n * tiles]` positions along an axis holding ``tiles`` copies of group ``a.group``; padding -> out of range."""
    idx, mask = partition.indices[a.group], partition.mask[a.group]
    if a.tiles == 1:
        return idx
    size = group_sizes[a.group]
    return jnp.concatenate([jnp.where(mask, idx + t * size, size * a.tiles) for t in range(a.tiles)], axis=1)


def _index_tuple(leaf: LeafSpec, partition: Partition, group_sizes, ndim: int):
    """An advanced-index tuple selecting, for every worker, the outer product of its indices on the partitioned axes.

    Index arrays broadcast to ``[W, n_0, ..., n_{k-1}]``; unpartitioned axes are full slices.
    """
    axes = leaf.partitioned_axes
    k = len(axes)
    ix: list[Any] = [slice(None)] * ndim
    for j, a in enumerate(axes):
        idx = _axis_indices(partition, leaf.axes[a], group_sizes)  # [W, n_j]
        shape = [idx.shape[0]] + [1] * k
        shape[1 + j] = idx.shape[1]
        ix[a] = idx.reshape(shape)
    return tuple(ix), axes


def _contiguous(axes: tuple[int, ...]) -> bool:
    return axes == tuple(range(axes[0], axes[0] + len(axes)))


def _to_sub_layout(g, axes, ndim):
    """numpy advanced indexing puts the broadcast [W, n...] dims at axes[0] (contiguous) or first; move W first."""
    if _contiguous(axes):
        return jnp.moveaxis(g, axes[0], 0)
    return jnp.moveaxis(g, list(range(1, len(axes) + 1)), [1 + a for a in axes])


def _from_sub_layout(s, axes):
    if _contiguous(axes):
        return jnp.moveaxis(s, 0, axes[0])
    return jnp.moveaxis(s, [1 + a for a in axes], list(range(1, len(axes) + 1)))


def extract_leaf(x: jax.Array, leaf: LeafSpec, partition: Partition, group_sizes, num_workers: int) -> jax.Array:
    """`x: [...]` -> `[W, ...]` with each partitioned axis narrowed to the worker's slots."""
    if leaf.shared:
        return jnp.broadcast_to(x, (num_workers,) + jnp.shape(x))
    ix, axes = _index_tuple(leaf, partition, group_sizes, jnp.ndim(x))
    return _to_sub_layout(x.at[ix].get(mode="fill", fill_value=0), axes, jnp.ndim(x))


def merge_leaf(x: jax.Array, sub: jax.Array, leaf: LeafSpec, partition: Partition, group_sizes,
               disjoint: bool) -> jax.Array:
    """Writes `sub: [W, ...narrow]` back into `x: [...]` (see the module docstring)."""
    if leaf.shared:
        return jnp.mean(sub, axis=0).astype(x.dtype)
    ix, axes = _index_tuple(leaf, partition, group_sizes, jnp.ndim(x))
    upd = _from_sub_layout(sub.astype(x.dtype), axes)
    if disjoint:
        return x.at[ix].set(upd, mode="drop")
    sums = jnp.zeros_like(x).at[ix].add(upd, mode="drop")
    # How many workers hold each element: scatter ones over the partitioned axes only, then broadcast.
    part_ix = tuple(ix[a] for a in axes)
    counts = jnp.zeros(tuple(x.shape[a] for a in axes), x.dtype).at[part_ix].add(1, mode="drop")
    counts = counts.reshape([x.shape[i] if i in axes else 1 for i in range(x.ndim)])  # axes are ascending
    return jnp.where(counts > 0, sums / jnp.maximum(counts, 1), x)


def extract(params: PyTree, partition: Partition, spec: SubnetSpec) -> PyTree:
    """Every worker's sub-network, stacked: each leaf gains a leading `[W]` axis and narrowed partitioned axes."""
    num_workers = _num_workers(partition)
    return jax.tree.map(lambda s, x: extract_leaf(x, s, partition, spec.group_sizes, num_workers),
                        spec.leaves, params)


def merge(params: PyTree, sub: PyTree, partition: Partition, spec: SubnetSpec, *, disjoint: bool = True) -> PyTree:
    """Writes trained sub-networks back into the global parameters.

    Args:
      params: the global parameters before the round.
      sub: `[W, ...]` sub-networks, as `extract` returns them.
      partition: the round's partition.
      spec: the parameters' spec.
      disjoint: the sampler's `disjoint` flag. False averages units held by several workers.
    """
    return jax.tree.map(lambda s, x, y: merge_leaf(x, y, s, partition, spec.group_sizes, disjoint),
                        spec.leaves, params, sub)


def _params_like(tree: PyTree, params_treedef) -> bool:
    return jax.tree.structure(tree) == params_treedef


def extract_tree(tree: PyTree, params_treedef, partition: Partition, spec: SubnetSpec) -> PyTree:
    """`extract` applied to every params-shaped subtree of `tree` (e.g. Adam's mu and nu); other leaves broadcast.

    This is how an optimizer state travels with the parameters through a repartition.
    """
    num_workers = _num_workers(partition)

    def go(t):
        if _params_like(t, params_treedef):
            return extract(t, partition, spec)
        return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_workers,) + jnp.shape(x)), t)

    return jax.tree.map(go, tree, is_leaf=lambda t: _params_like(t, params_treedef))


def merge_tree(tree: PyTree, sub: PyTree, params_treedef, partition: Partition, spec: SubnetSpec, *,
               disjoint: bool = True) -> PyTree:
    """`merge` for every params-shaped subtree of `tree`; other leaves become the mean over workers."""

    def go(t, s):
        if _params_like(t, params_treedef):
            return merge(t, s, partition, spec, disjoint=disjoint)
        return jax.tree.map(lambda x, y: _mean_like(x, y), t, s)

    return jax.tree.map(go, tree, sub, is_leaf=lambda t: _params_like(t, params_treedef))


def _mean_like(x, y):
    m = jnp.mean(y, axis=0)
    return jnp.round(m).astype(x.dtype) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.integer) else m.astype(x.dtype)


def subnet_shapes(params: PyTree, spec: SubnetSpec, slots: dict[str, int]) -> PyTree:
    """Shape of one worker's sub-network leaves (no worker axis), from the static slot counts; for accounting."""

    def shape(s: LeafSpec, x):
        return tuple(dim if a is None else slots[a.group] * a.tiles for dim, a in zip(jnp.shape(x), s.axes))

    return jax.tree.map(shape, spec.leaves, params)


def _num_workers(partition: Partition) -> int:
    return next(iter(partition.indices.values())).shape[0]
