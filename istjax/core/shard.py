"""Owner-side views of a partition: N owners, each holding a slice of the model, deal sub-networks to W workers.

This is the arithmetic of the MPI runtime's sharded mode, as pure functions with no MPI in them: `Layout` says what
owner ``o`` of ``N`` holds, and the four steps of a round are

``owner_distribute(layout, spec, tree, p)``
    on every owner: the pieces of its shard every worker needs (`[N(dest owner), L, ...]` per owned leaf, sent by an
    all-to-all), and the rows this owner's own workers take of the leaves every owner holds whole.
``worker_assemble(layout, spec, received, local)``
    on the workers' owner: the pieces received from every owner joined into the workers' sub-networks (`[L, ...]`),
    exactly what `istjax.core.subnet.extract` gives those workers.
``worker_return(layout, spec, trained)``
    the trained sub-networks cut back into a piece per owner (`[N(owner), L, ...]`, an all-to-all back), the pieces
    of leaves held whole (all-gathered) and the shared leaves (all-reduced, one buffer per worker).
``owner_collect(layout, spec, tree, p, returned, gathered, shared_sums, disjoint)``
    on every owner: the returned pieces merged into its shard, `istjax.core.subnet.merge` done where it is held.

Who holds what. A neuron group is *owned* when the sampler deals it stratified by owner (`istjax.stratified`,
``num_owners=N``; `istjax.core.partition.owner_counts`): owner ``o`` then holds units ``[o * s, (o + 1) * s)``
(``s = size / N``) and every worker gets ``size / (N * W)`` units of each owner's slice. A leaf is

* *owned* when one of its partitioned axes is indexed by an owned group: each owner holds its slice of the first
  such axis (of every tile of it: GraphSAGE's ``[self, neighbour]`` axis holds ``tiles`` copies of a group, and the
  owner keeps its units in each copy). Other partitioned axes stay whole (a `[H1, H2]` kernel: rows `[H1 / N, H2]`).
* *held whole* when its partitioned axes are all indexed by groups dealt some other way (ResIST's single first block
  of a stage, dealt to one worker a round): every owner holds it; workers take their rows locally; the trained
  pieces are all-gathered and merged by every owner, as `merge` does.
* *shared* when no axis is partitioned: every owner holds it; it becomes the mean of the workers' copies.

The exchanged tree is any dict of trees with a spec tree of `istjax.core.spec.LeafSpec` (parameters, model state, a
carried optimizer state: `istjax.algorithms.base.SubnetPieces`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Optional

import jax
import jax.numpy as jnp

from istjax.core.partition import Partition
from istjax.core.spec import GroupAxis, LeafSpec
from istjax.core.state import broadcast_workers
from istjax.core.subnet import extract_leaf, merge_leaf
from istjax.core.tiled_init import block

__all__ = ["Layout", "owner_distribute", "worker_assemble", "worker_return", "owner_collect", "owner_sent", "unshard",
           "OWNED", "HELD_WHOLE", "SHARED"]

PyTree = Any
OWNED, HELD_WHOLE, SHARED = "owned", "held whole", "shared"
_OWN = "@own"  # the synthetic group of an owned axis in an owner's view: its shard-local units


@dataclasses.dataclass(frozen=True)
class Layout:
    """What owner ``owner`` of ``num_owners`` holds, and which ``lanes`` of the ``num_workers`` workers it runs.

    Attributes:
      num_owners, owner: N and this owner's index (an MPI rank).
      num_workers: W; owner ``o`` runs workers ``o * L .. (o + 1) * L - 1`` (``L = W / N``).
      group_sizes: neuron group -> units in the full network.
      owned: the groups dealt stratified by owner (module docstring).
    """

    num_owners: int
    owner: int
    num_workers: int
    group_sizes: Mapping[str, int]
    owned: frozenset

    @property
    def lanes(self) -> int:
        return self.num_workers // self.num_owners

    def axis(self, leaf: LeafSpec) -> Optional[int]:
        """The axis of ``leaf`` an owner holds a slice of (its first owned one), or None."""
        return next((a for a in leaf.partitioned_axes if leaf.axes[a].group in self.owned), None)

    def role(self, leaf: LeafSpec) -> str:
        if leaf.shared:
            return SHARED
        return HELD_WHOLE if self.axis(leaf) is None else OWNED

    def shard(self, leaf: LeafSpec, x: jax.Array, owner: Optional[int] = None) -> jax.Array:
        """Owner ``owner``'s (default: this one's) part of the full leaf ``x``; ``x`` itself when it is not owned.
        Inside `istjax.core.tiled_init.deferred`, a leaf drawn by a `istjax.core.tiled_init.Tiled` initialiser is
        redrawn as the part alone (`istjax.core.tiled_init.block`), so the whole leaf is never made."""
        a = self.axis(leaf)
        if a is None:
            return x
        o = self.owner if owner is None else owner
        t = leaf.axes[a].tiles
        size = x.shape[a] // t
        s = size // self.num_owners
        if t == 1:
            return block(x, a, o * s, s)
        tiles = x.reshape(x.shape[:a] + (t, size) + x.shape[a + 1:])
        part = jax.lax.slice_in_dim(tiles, o * s, (o + 1) * s, axis=a + 1)
        return part.reshape(x.shape[:a] + (t * s,) + x.shape[a + 1:])

    def view(self, leaf: LeafSpec, p: Partition) -> tuple[LeafSpec, Partition, dict]:
        """``leaf``, the round's partition and the group sizes as this owner sees its shard: the owned axis indexes
        the shard's own units (each worker's block from this owner: stratified partitions keep owner blocks in
        order), every other axis the full network's."""
        a = self.axis(leaf)
        g, t = leaf.axes[a].group, leaf.axes[a].tiles
        n, me = self.num_owners, self.owner
        shard, per = self.group_sizes[g] // n, self.group_sizes[g] // (n * self.num_workers)
        local = p.indices[g][:, me * per:(me + 1) * per] - me * shard  # [W, per]
        axes = tuple(GroupAxis(_OWN, t) if i == a else ax for i, ax in enumerate(leaf.axes))
        part = Partition({**p.indices, _OWN: local}, {**p.mask, _OWN: jnp.ones(local.shape, bool)})
        return LeafSpec(axes), part, {**self.group_sizes, _OWN: shard}

    def lanes_of(self, p: Partition) -> Partition:
        """The partition's rows of this owner's workers."""
        first, lanes = self.owner * self.lanes, self.lanes

        def rows(v):
            return jax.lax.slice_in_dim(v, first, first + lanes)

        return Partition({g: rows(v) for g, v in p.indices.items()}, {g: rows(v) for g, v in p.mask.items()})


def _split(x: jax.Array, n: int) -> jax.Array:
    """`[W, ...]` -> `[N, L, ...]` (worker ``w`` runs on owner ``w // L``)."""
    return x.reshape((n, x.shape[0] // n) + x.shape[1:])


def _join(x: jax.Array) -> jax.Array:
    return x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])


def owner_distribute(layout: Layout, spec: PyTree, tree: PyTree, p: Partition) -> tuple[PyTree, PyTree]:
    """``(outbound, local)``: owned leaves' pieces for every worker, `[N(dest), L, ...]` (None elsewhere), and this
    owner's workers' rows of the other leaves, `[L, ...]` (None for owned leaves)."""
    mine = layout.lanes_of(p)

    def out(leaf, x):
        if layout.role(leaf) != OWNED:
            return None
        s, part, sizes = layout.view(leaf, p)
        return _split(extract_leaf(x, s, part, sizes, layout.num_workers), layout.num_owners)

    def local(leaf, x):
        role = layout.role(leaf)
        if role == OWNED:
            return None
        if role == SHARED:
            return broadcast_workers(x, layout.lanes)
        return extract_leaf(x, leaf, mine, layout.group_sizes, layout.lanes)

    return jax.tree.map(out, spec, tree), jax.tree.map(local, spec, tree)


def worker_assemble(layout: Layout, spec: PyTree, received: PyTree, local: PyTree) -> PyTree:
    """`[N(owner), L, ..., tiles * per @ a, ...]` pieces -> `[L, ..., tiles * N * per @ a, ...]` sub-network leaves:
    a worker's units of a group are each owner's block in owner order, in every tile."""

    def one(leaf, got, mine):
        if layout.role(leaf) != OWNED:
            return mine
        a, t = layout.axis(leaf), leaf.axes[layout.axis(leaf)].tiles
        per = got.shape[2 + a] // t
        x = got.reshape(got.shape[:2 + a] + (t, per) + got.shape[3 + a:])  # [N, L, ..., t, per, ...]
        x = jnp.moveaxis(x, 0, a + 2)  # [L, ..., t, N, per, ...]
        return x.reshape(x.shape[:1 + a] + (t * layout.num_owners * per,) + x.shape[4 + a:])

    return jax.tree.map(one, spec, received, local)


def worker_return(layout: Layout, spec: PyTree, trained: PyTree) -> tuple[PyTree, PyTree, PyTree]:
    """``(back, pieces, sums)``: owned leaves cut per owner `[N(owner), L, ...]`; the `[L, ...]` pieces of leaves held
    whole (to all-gather); the `[L, ...]` shared leaves (to all-reduce: one buffer per worker). None elsewhere."""

    def back(leaf, v):
        if layout.role(leaf) != OWNED:
            return None
        a, t, n = layout.axis(leaf), leaf.axes[layout.axis(leaf)].tiles, layout.num_owners
        per = v.shape[1 + a] // (t * n)
        x = v.reshape(v.shape[:1 + a] + (t, n, per) + v.shape[2 + a:])  # [L, ..., t, N, per, ...]
        x = jnp.moveaxis(x, a + 2, 0)  # [N, L, ..., t, per, ...]
        return x.reshape(x.shape[:2 + a] + (t * per,) + x.shape[4 + a:])

    def pieces(leaf, v):
        return v if layout.role(leaf) == HELD_WHOLE else None

    def sums(leaf, v):
        return v if layout.role(leaf) == SHARED else None

    return (jax.tree.map(back, spec, trained), jax.tree.map(pieces, spec, trained),
            jax.tree.map(sums, spec, trained))


def owner_collect(layout: Layout, spec: PyTree, tree: PyTree, p: Partition, returned: PyTree, gathered: PyTree,
                  shared_sums: PyTree, disjoint: Mapping[str, bool]) -> PyTree:
    """This owner's part of the merged tree: ``returned`` (`[N(worker's owner), L, ...]` pieces of its shard) merged
    into its shard; ``gathered`` (`[N, L, ...]`, every worker's piece of a leaf held whole) merged as `merge` does;
    shared leaves the mean over the W workers of ``shared_sums`` (`[L, ...]`, lane ``l`` summed over the owners)."""
    w = layout.num_workers

    def one(leaf, x, got, every, total):
        role = layout.role(leaf)
        if role == SHARED:
            mean = jnp.sum(total, axis=0) / w
            return jnp.round(mean).astype(x.dtype) if jnp.issubdtype(x.dtype, jnp.integer) else mean.astype(x.dtype)
        if role == HELD_WHOLE:
            return merge_leaf(x, _join(every), leaf, p, layout.group_sizes, disjoint)
        s, part, sizes = layout.view(leaf, p)
        return merge_leaf(x, _join(got), s, part, sizes, {**disjoint, _OWN: True})

    return jax.tree.map(one, spec, tree, returned, gathered, shared_sums)


def owner_sent(layout: Layout, spec: PyTree, tree: PyTree, p: Partition, returned: PyTree, gathered: PyTree,
               shared_sums: PyTree) -> tuple[PyTree, PyTree, PyTree]:
    """What the workers sent as changes (``returned``, ``gathered``, ``shared_sums`` laid out as `owner_collect`
    reads them) read against this owner's exact ``tree``: each piece plus the exact piece it changes (the pieces
    `owner_distribute` cuts for every worker), each lane's sum over the owners plus N times the shared leaf (so the
    mean over the W workers is the leaf plus their mean change)."""
    n = layout.num_owners
    exact_out, _ = owner_distribute(layout, spec, tree, p)

    def piece(leaf, x, got, exact):
        return got + exact if layout.role(leaf) == OWNED else got

    def whole(leaf, x, every):
        if layout.role(leaf) != HELD_WHOLE:
            return every
        return every + _split(extract_leaf(x, leaf, p, layout.group_sizes, layout.num_workers), n)

    def total(leaf, x, sums):
        return sums + n * x[None] if layout.role(leaf) == SHARED else sums

    return (jax.tree.map(piece, spec, tree, returned, exact_out), jax.tree.map(whole, spec, tree, gathered),
            jax.tree.map(total, spec, tree, shared_sums))


def unshard(layout: Layout, leaf: LeafSpec, shards: jax.Array) -> jax.Array:
    """`[N, ...]` every owner's part of a leaf (owner order) -> the full leaf (owner 0's copy when not owned)."""
    a = layout.axis(leaf)
    if a is None:
        return shards[0]
    t = leaf.axes[a].tiles
    s = shards.shape[1 + a] // t
    x = shards.reshape(shards.shape[:1 + a] + (t, s) + shards.shape[2 + a:])  # [N, ..., t, s, ...]
    x = jnp.moveaxis(x, 0, a + 1)  # [..., t, N, s, ...]
    return x.reshape(x.shape[:a] + (t * layout.num_owners * s,) + x.shape[a + 3:])
