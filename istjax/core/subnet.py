"""Extract per-worker sub-networks from the global parameters, and merge them back.

``extract(params, partition, spec)`` gathers, for every worker at once, the slices of each partitioned leaf that
touch the worker's units: a leaf of shape ``[D, H]`` whose axis 1 is group ``h`` becomes ``[W, D, n]``; a leaf
partitioned on both axes (a hidden-to-hidden weight) becomes ``[W, n, n]``, ``(1/W)^2`` of it per worker. Shared
leaves are broadcast to ``[W, ...]``.

``merge(params, sub, partition, spec)`` writes the pieces back. For a disjoint partition, partitioned slices are
scattered in place (no averaging: no two workers share them); where a strategy overlaps, each element becomes the
mean of the workers that hold it. Elements no worker holds keep their old value. Shared leaves become the mean over
workers. ``merge(params, extract(params, p, spec), p, spec) == params`` for every partition (a property test).
With per-worker ``weights`` (federated clients' example counts) both means are weighted: an element becomes
``sum(w * value) / sum(w)`` over the workers that hold it (the plain mean for equal weights, to float rounding). A
worker of weight 0 (a federated pad slot) returns nothing: an element only such workers hold keeps its old value,
as one no worker holds does, whether its group is dealt disjointly or with overlap.

Both are single XLA gathers per leaf, vectorised over workers (merge of an overlapping partition is a scatter-add);
padding slots (index == group size) are filled with zeros by extract and dropped by merge.

Layout and speed (measured by ``experiments/benchmarks``, study 2; see ``docs/benchmarks.md``): each gather is
written so that its natural output order is the layout the function returns, with full broadcast index arrays that
XLA fuses into one loop, and no transpose or layout copy after it. ``merge`` of a disjoint partition is a *gather*
from the sub-networks through the inverse of the partition (which worker, which slot holds every unit), not a
scatter: every output element is written once, in order. ``extract`` of a leaf cut on one axis with more than one
element after it (a kernel's rows, a transformer's heads) gathers whole slices along that axis, one ``take`` for all
workers then a reshape (`_extract_slices`), instead of an index per element; a leaf cut on several axes or on its
last one (the columns of a ``[D, H]`` kernel) is gathered element by element, and there, when W is large, one row of
``x`` is read for all workers at once, so ``x`` is swept once instead of W times.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Optional, Union

import jax
import jax.numpy as jnp

from istjax.core.partition import Partition
from istjax.core.spec import GroupAxis, LeafSpec, SubnetSpec, tile_positions
from istjax.core.state import broadcast_workers, worker_mean

__all__ = ["extract", "merge", "extract_tree", "merge_tree", "subnet_shapes", "extract_leaf", "merge_leaf"]

PyTree = Any


def _axis_indices(partition: Partition, a: GroupAxis, group_sizes) -> jax.Array:
    """`[W, n * tiles]` positions along an axis holding ``tiles`` copies of group ``a.group``; padding -> out of range."""
    idx, mask = partition.indices[a.group], partition.mask[a.group]
    if a.tiles == 1:
        return idx
    size = group_sizes[a.group]
    return tile_positions(jnp.where(mask, idx, size * a.tiles), size, a.tiles)


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


def _from_sub_layout(s, axes):
    if _contiguous(axes):
        return jnp.moveaxis(s, 0, axes[0])
    return jnp.moveaxis(s, [1 + a for a in axes], list(range(1, len(axes) + 1)))


# Up to this many workers, extract gathers straight into `[W, ...]` order (reading x once per worker is cheaper than a
# transpose); beyond it, it gathers with the worker axis next to the first partitioned axis (one sweep over x) and
# moves the worker axis to the front. Measured on the 2-layer speech MLP (benchmarks study 2).
_DIRECT_GATHER_MAX_WORKERS = 4


def extract_leaf(x: jax.Array, leaf: LeafSpec, partition: Partition, group_sizes, num_workers: int) -> jax.Array:
    """`x: [...]` -> `[W, ...]` with each partitioned axis narrowed to the worker's slots (padding slots -> 0)."""
    if leaf.shared:
        return broadcast_workers(x, num_workers)
    axis = _slice_axis(leaf, jnp.shape(x))
    if axis is not None:
        return _extract_slices(x, axis, _axis_indices(partition, leaf.axes[axis], group_sizes))
    return _extract_elements(x, leaf, partition, group_sizes, num_workers)


def _slice_axis(leaf: LeafSpec, shape: tuple[int, ...]) -> Optional[int]:
    """The leaf's one partitioned axis where a cut along it moves contiguous slices (more than one element after
    it: a kernel's rows, a head's ``[head_dim]`` or ``[head_dim, D]``); None for a leaf cut on several axes or on its
    last one (a kernel's columns), which `_extract_elements` gathers element by element."""
    axes = leaf.partitioned_axes
    if len(axes) != 1 or math.prod(shape[axes[0] + 1:]) <= 1:
        return None
    return axes[0]


def _extract_slices(x: jax.Array, axis: int, idx: jax.Array) -> jax.Array:
    """`extract_leaf` along one axis as one gather of whole slices: the W workers' positions `idx: [W, n]` read in
    one pass (``take`` along ``axis``, every slice contiguous), then cut per worker by a reshape; padding slots -> 0.
    Equal bit for bit to `_extract_elements` (the same values, moved whole). Measured on the transformer's leaves
    (``experiments/benchmarks/transformer.py``): about a copy's speed for rows and heads, where the gather with an
    index per element ran 2-4x slower."""
    num_workers, n = idx.shape
    flat, length = idx.reshape(-1), x.shape[axis]
    rows = jnp.take(x, jnp.minimum(flat, length - 1), axis=axis, mode="clip")  # clamped: padding zeroed below
    inside = (flat < length).reshape([-1 if k == axis else 1 for k in range(x.ndim)])
    vals = jnp.where(inside, rows, jnp.zeros((), x.dtype))
    return jnp.moveaxis(vals.reshape(x.shape[:axis] + (num_workers, n) + x.shape[axis + 1:]), axis, 0)


def _extract_elements(x: jax.Array, leaf: LeafSpec, partition: Partition, group_sizes,
                      num_workers: int) -> jax.Array:
    """`extract_leaf` as one gather with an index per element (every partitioned axis, in the output's order)."""
    r = jnp.ndim(x)
    first = leaf.partitioned_axes[0]
    w_at = 0 if num_workers <= _DIRECT_GATHER_MAX_WORKERS else first  # where the worker axis sits in the gather

    def at(k):  # position of x's axis k in the gather's output
        return k + 1 if (w_at == 0 or k >= first) else k

    ix, keep = [], None
    for k in range(r):
        shape = [1] * (r + 1)
        if leaf.axes[k] is None:
            shape[at(k)] = x.shape[k]
            ix.append(jnp.arange(x.shape[k], dtype=jnp.int32).reshape(shape))
        else:
            idx = _axis_indices(partition, leaf.axes[k], group_sizes)  # [W, n_k]; padding -> out of range
            shape[w_at], shape[at(k)] = idx.shape
            inside = (idx < x.shape[k]).reshape(shape)
            keep = inside if keep is None else keep & inside
            ix.append(jnp.minimum(idx, x.shape[k] - 1).reshape(shape))
    # Clamped indices are in bounds, so the gather needs no per-element checks; padding is zeroed by the select.
    vals = jnp.where(keep, x.at[tuple(ix)].get(mode="promise_in_bounds"), jnp.zeros((), x.dtype))
    return jnp.moveaxis(vals, w_at, 0)


def _owners(partition: Partition, a: GroupAxis, group_sizes) -> tuple[jax.Array, jax.Array]:
    """The inverse of a disjoint partition along one axis holding ``a.tiles`` copies of group ``a.group``.

    Returns `owner: [L]` and `slot: [L]` int32 (``L = size * tiles``): position ``i`` of the full axis sits at
    position ``slot[i]`` of worker ``owner[i]``'s narrowed axis; ``owner[i] == W`` where no worker holds it.
    """
    idx, mask = partition.indices[a.group], partition.mask[a.group]
    num_workers, n = idx.shape
    size = group_sizes[a.group]
    length = size * a.tiles
    at = tile_positions(jnp.where(mask, idx, length), size, a.tiles).reshape(-1)  # padding -> out of range: dropped
    shape = (num_workers, n * a.tiles)
    worker = jnp.broadcast_to(jnp.arange(num_workers, dtype=jnp.int32)[:, None], shape).reshape(-1)
    slot = jnp.broadcast_to(jnp.arange(n * a.tiles, dtype=jnp.int32)[None, :], shape).reshape(-1)
    owner = jnp.full((length,), num_workers, jnp.int32).at[at].set(worker, mode="drop")
    return owner, jnp.zeros((length,), jnp.int32).at[at].set(slot, mode="drop")


def _merge_disjoint(x: jax.Array, sub: jax.Array, leaf: LeafSpec, partition: Partition, group_sizes,
                    weights: Optional[jax.Array] = None) -> jax.Array:
    """`merge_leaf` for a disjoint partition, as a gather: ``x[i...] = sub[owner, slot...]`` where a worker holds it
    (and, with ``weights``, weighs more than 0): of whole slices along a leaf's one cut axis where more than one
    element follows it (`_merge_slices`), else an index per element."""
    axis = _slice_axis(leaf, jnp.shape(x))
    if axis is not None:
        return _merge_slices(x, sub, axis, _owners(partition, leaf.axes[axis], group_sizes), weights)
    return _merge_elements(x, sub, leaf, partition, group_sizes, weights)


def _merge_slices(x: jax.Array, sub: jax.Array, axis: int, owners: tuple[jax.Array, jax.Array],
                  weights: Optional[jax.Array] = None) -> jax.Array:
    """`_merge_disjoint` along one axis: the W workers' pieces laid side by side along it (``[..., W * n, ...]``),
    then one ``take`` of whole slices through the inverse of the partition (``owner * n + slot``); positions no
    worker holds (or only workers of weight 0) keep ``x``. Equal bit for bit to `_merge_elements`."""
    owner, slot = owners
    num_workers, n = sub.shape[0], sub.shape[1 + axis]
    side_by_side = jnp.moveaxis(sub.astype(x.dtype), 0, axis)  # [..., W, n, ...]
    side_by_side = side_by_side.reshape(x.shape[:axis] + (num_workers * n,) + x.shape[axis + 1:])
    held = owner < num_workers
    worker = jnp.minimum(owner, num_workers - 1)
    if weights is not None:  # a worker of weight 0 returns nothing: its units keep their value
        held = held & (jnp.asarray(weights)[worker] > 0)
    vals = jnp.take(side_by_side, worker * n + slot, axis=axis, mode="clip")
    return jnp.where(held.reshape([-1 if k == axis else 1 for k in range(x.ndim)]), vals, x)


def _merge_elements(x: jax.Array, sub: jax.Array, leaf: LeafSpec, partition: Partition, group_sizes,
                    weights: Optional[jax.Array] = None) -> jax.Array:
    """`_merge_disjoint` as one gather with an index per element (every partitioned axis)."""
    num_workers = sub.shape[0]
    r = jnp.ndim(x)

    def along(v, k):  # `[n]` -> broadcastable along axis k of x
        return v.reshape([x.shape[k] if j == k else 1 for j in range(r)])

    worker, held, ix = None, None, []
    for k in range(r):
        if leaf.axes[k] is None:
            ix.append(along(jnp.arange(x.shape[k], dtype=jnp.int32), k))
            continue
        owner, slot = _owners(partition, leaf.axes[k], group_sizes)
        owner, slot = along(owner, k), along(slot, k)
        # An element is held iff every partitioned axis assigns it to the same worker.
        worker, held = (owner, owner < num_workers) if worker is None else (worker, held & (owner == worker))
        ix.append(slot)
    worker = jnp.minimum(worker, num_workers - 1)
    if weights is not None:  # a worker of weight 0 returns nothing: its units keep their value
        held = held & (jnp.asarray(weights)[worker] > 0)
    vals = sub.astype(x.dtype).at[(worker,) + tuple(ix)].get(mode="promise_in_bounds")
    return jnp.where(held, vals, x)


def leaf_disjoint(leaf: LeafSpec, disjoint: Union[bool, Mapping[str, bool]]) -> bool:
    """Whether every group indexing ``leaf`` is dealt without overlap (``disjoint``: one flag, or one per group)."""
    if isinstance(disjoint, Mapping):
        return all(disjoint[leaf.axes[a].group] for a in leaf.partitioned_axes)
    return bool(disjoint)


def merge_leaf(x: jax.Array, sub: jax.Array, leaf: LeafSpec, partition: Partition, group_sizes,
               disjoint: Union[bool, Mapping[str, bool]], weights: Optional[jax.Array] = None) -> jax.Array:
    """Writes `sub: [W, ...narrow]` back into `x: [...]` (see the module docstring). With ``weights`` (`[W]`, >= 0:
    federated clients' example counts, `istjax.core.state.RoundPlan.weights`) an element several workers hold
    becomes ``sum(w * sub) / sum(w)`` over its holders instead of their plain mean; one held by a single worker
    still takes that worker's value; one whose holders all weigh 0 (pad slots) keeps its value in ``x``."""
    if leaf.shared:
        return worker_mean(sub, like=x) if weights is None else _weighted_workers(sub, weights, x)
    if leaf_disjoint(leaf, disjoint):
        return _merge_disjoint(x, sub, leaf, partition, group_sizes, weights)
    ix, axes = _index_tuple(leaf, partition, group_sizes, jnp.ndim(x))
    dtype = x.dtype if weights is None or jnp.issubdtype(x.dtype, jnp.floating) else jnp.float32
    sub = sub.astype(dtype)
    # What each worker adds to an element it holds, and to that element's count: 1 and its value, or w and w * value.
    held = 1 if weights is None else jnp.asarray(weights, dtype).reshape((-1,) + (1,) * len(axes))
    if weights is not None:
        sub = sub * held.reshape((-1,) + (1,) * (sub.ndim - 1))
    sums = jnp.zeros(x.shape, dtype).at[ix].add(_from_sub_layout(sub, axes), mode="drop")
    # How many workers hold each element (or their weight): scatter over the partitioned axes only, then broadcast.
    part_ix = tuple(ix[a] for a in axes)
    counts = jnp.zeros(tuple(x.shape[a] for a in axes), dtype).at[part_ix].add(held, mode="drop")
    counts = counts.reshape([x.shape[i] if i in axes else 1 for i in range(x.ndim)])  # axes are ascending
    if weights is None:
        return jnp.where(counts > 0, sums / jnp.maximum(counts, 1), x)
    return jnp.where(counts > 0, _as(sums / jnp.where(counts > 0, counts, 1), x.dtype), x)


def _as(v: jax.Array, dtype) -> jax.Array:
    """``v`` in ``dtype``, rounded to the nearest integer for an integer one (a count)."""
    return jnp.round(v).astype(dtype) if jnp.issubdtype(dtype, jnp.integer) else v.astype(dtype)


def _weighted_workers(sub: jax.Array, weights: jax.Array, like: jax.Array) -> jax.Array:
    """``sum_w weights[w] * sub[w] / sum(weights)`` over the leading `[W]` axis, in ``like``'s dtype."""
    w = jnp.asarray(weights, jnp.float32).reshape((-1,) + (1,) * (sub.ndim - 1))
    return _as(jnp.sum(w * sub.astype(jnp.float32), axis=0) / jnp.sum(w), like.dtype)


def extract(params: PyTree, partition: Partition, spec: SubnetSpec) -> PyTree:
    """Every worker's sub-network, stacked: each leaf gains a leading `[W]` axis and narrowed partitioned axes."""
    num_workers = _num_workers(partition)
    return jax.tree.map(lambda s, x: extract_leaf(x, s, partition, spec.group_sizes, num_workers),
                        spec.leaves, params)


def merge(params: PyTree, sub: PyTree, partition: Partition, spec: SubnetSpec, *,
          disjoint: Union[bool, Mapping[str, bool]] = True, weights: Optional[jax.Array] = None) -> PyTree:
    """Writes trained sub-networks back into the global parameters.

    Args:
      params: the global parameters before the round.
      sub: `[W, ...]` sub-networks, as `extract` returns them.
      partition: the round's partition.
      spec: the parameters' spec.
      disjoint: the sampler's `istjax.Sampler.disjoint_groups` (or one flag for every group). Where a leaf's
        groups are not all disjoint, units held by several workers are averaged.
      weights: `[W]` (>= 0), how much each worker counts where several hold an element (shared leaves, overlapping
        groups): federated clients' example counts (`merge_leaf`); a worker of weight 0 (a pad slot) returns
        nothing. None: every worker alike.
    """
    return jax.tree.map(lambda s, x, y: merge_leaf(x, y, s, partition, spec.group_sizes, disjoint, weights),
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
        return broadcast_workers(t, num_workers)

    return jax.tree.map(go, tree, is_leaf=lambda t: _params_like(t, params_treedef))


def merge_tree(tree: PyTree, sub: PyTree, params_treedef, partition: Partition, spec: SubnetSpec, *,
               disjoint: Union[bool, Mapping[str, bool]] = True) -> PyTree:
    """`merge` for every params-shaped subtree of `tree`; other leaves become the mean over workers."""

    def go(t, s):
        if _params_like(t, params_treedef):
            return merge(t, s, partition, spec, disjoint=disjoint)
        return worker_mean(s, like=t)

    return jax.tree.map(go, tree, sub, is_leaf=lambda t: _params_like(t, params_treedef))


def subnet_shapes(params: PyTree, spec: SubnetSpec, slots: dict[str, int]) -> PyTree:
    """Shape of one worker's sub-network leaves (no worker axis), from the static slot counts; for accounting."""

    def shape(s: LeafSpec, x):
        return tuple(dim if a is None else slots[a.group] * a.tiles for dim, a in zip(jnp.shape(x), s.axes))

    return jax.tree.map(shape, spec.leaves, params)


def _num_workers(partition: Partition) -> int:
    return next(iter(partition.indices.values())).shape[0]
