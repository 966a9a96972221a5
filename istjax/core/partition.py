"""Partitions of neuron groups among workers, and the strategies that sample them.

A `Partition` says which units of every neuron group each worker holds this round. Strategies are pure functions of
``(key, group_sizes, num_workers)``; each comes as a `Sampler` that also knows, before anything is traced, how many
slots a worker gets per group (a static shape, so one compiled round serves every round) and whether units can be
held by several workers (then `istjax.merge` averages them by count).

Strategies:

* `uniform`: shuffle each group and deal it out in W equal blocks (IST, arXiv 1910.02120). Uneven sizes are
  rejected, or padded and masked with ``pad=True``.
* `stratified`: each of ``num_owners`` owners holds a contiguous shard of every group; every worker gets the same
  number of units from every shard (the fixed-size all-to-all a sharded parameter server needs).
* `overlapping`: ResIST-style (arXiv 2107.00961): every worker gets at least ``min_units`` units; windows overlap.
* `uneven`: worker w gets a share proportional to ``weights[w]`` (heterogeneous workers); padded and masked.
* `nested`: worker w gets the first ``fractions[w]`` of one shared random order (HeteroFL-style nested subnets).

`per_group` combines them, one strategy per neuron group (as ``optax.multi_transform`` assigns one transformation
per parameter label): channels dealt uniformly while a small group of residual blocks is dealt with overlap, say.
A group smaller than W is served by the strategies that can give a unit to several workers (`overlapping`,
`nested`); the others refuse it before anything is traced, naming the group and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from istjax.core.errors import ArgError, Code
from istjax.core.registry import Registry

__all__ = ["Partition", "Sampler", "SamplerEntry", "SAMPLERS", "uniform", "stratified", "overlapping", "uneven",
           "nested", "per_group",
           "disjoint_groups", "owner_counts", "check_partition", "GroupSizeError", "PAD"]


class Partition(NamedTuple):
    """Which units of each neuron group every worker holds in one round.

    Attributes:
      indices: group name -> `[W, n]` int32. ``indices[g][w, j]`` is the unit of group ``g`` (an index into the full
        network's axis, ``0 <= i < size_g``) that sits at position ``j`` of worker ``w``'s sub-network. Rows are
        sorted. A padding slot holds ``size_g`` (one past the last unit): extract fills it with zeros and merge
        drops it.
      mask: group name -> `[W, n]` bool. ``mask[g][w, j]`` is False exactly at padding slots.
    """

    indices: dict[str, jax.Array]
    mask: dict[str, jax.Array]


class Sampler(NamedTuple):
    """A partition strategy.

    Attributes:
      sample: ``(key, group_sizes, num_workers) -> Partition``; pure and jit-compatible.
      slots: ``(group_sizes, num_workers) -> {group: n}``, the static per-worker slot count of each group. Raises a
        ValueError naming the group, its size and the fix when the strategy cannot split it; call it before tracing.
      disjoint: True when no unit of any group is held by two workers (merge may overwrite instead of averaging).
      name: for messages and metrics.
      group_disjoint: ``group -> bool``, the ``disjoint`` flag of each group where they differ between groups
        (`per_group`); None when ``disjoint`` holds for every group. Read it through `disjoint_groups`.
      owners: how many owners of contiguous shards the partition serves with a fixed-size exchange (every worker
        gets the same number of units from each owner's shard of every group): `stratified` declares its
        ``num_owners``; None for a strategy that makes no such promise. The sharded MPI mode with P processes
        holds a group in shards when it is dealt by a strategy with ``owners == P`` (`owner_counts`).
      group_owners: ``group -> owners`` where it differs between groups (`per_group`); None when ``owners`` holds
        for every group. Read it through `owner_counts`.
    """

    sample: Callable[[jax.Array, Mapping[str, int], int], Partition]
    slots: Callable[[Mapping[str, int], int], dict[str, int]]
    disjoint: bool
    name: str
    group_disjoint: Optional[Callable[[str], bool]] = None
    owners: Optional[int] = None
    group_owners: Optional[Callable[[str], Optional[int]]] = None


def disjoint_groups(sampler: Sampler, group_sizes: Mapping[str, int]) -> dict[str, bool]:
    """``{group: disjoint}`` for every group: what `istjax.merge` needs to overwrite or average each leaf."""
    if sampler.group_disjoint is None:
        return {g: sampler.disjoint for g in group_sizes}
    return {g: bool(sampler.group_disjoint(g)) for g in group_sizes}


def owner_counts(sampler: Sampler, group_sizes: Mapping[str, int]) -> dict[str, Optional[int]]:
    """``{group: owners}``: how many owners' shards each group is dealt from with a fixed-size exchange (None: not
    stratified by owner). The sharded MPI mode on P processes holds the groups with ``owners == P`` in shards."""
    if sampler.group_owners is None:
        return {g: sampler.owners for g in group_sizes}
    return {g: sampler.group_owners(g) for g in group_sizes}


# The arguments a sampler refuses together when it cannot deal a model's groups among W workers.
GROUPS_WORKERS_SAMPLER = ("group_sizes", "num_workers", "sampler")
# The fix "pad and mask the short workers": the padded uniform sampler, in a fix (`istjax.core.errors`).
PAD = Code("istjax.uniform(pad=True)", {"sampler": "uniform_pad"})


class GroupSizeError(ArgError):
    """A neuron group whose ``size`` the sampler cannot deal evenly among ``num_workers`` (`uniform`). The fix it
    names, a multiple of W, holds for a width any number fits; a model whose fields constrain a group's size (the
    transformer's heads must divide its width) gives its own (`istjax.core.contract.group_size_refusal`)."""

    def __init__(self, group: str, size: int, num_workers: int, problem: str, fix):
        super().__init__(GROUPS_WORKERS_SAMPLER, num_workers, problem, fix)
        self.group, self.size, self.num_workers = group, size, num_workers


def _close(name: str, known: list[str]) -> str:
    """`` (did you mean 'a'?)`` or an empty string."""
    import difflib

    hits = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    return f" (did you mean {', '.join(repr(h) for h in hits)}?)" if hits else ""


def _check_workers(group_sizes: Mapping[str, int], num_workers: int, *, allow_more_workers: bool = False):
    if not isinstance(num_workers, int) or num_workers < 1:
        raise ArgError("num_workers", num_workers, f"num_workers={num_workers!r}: need a positive integer number of "
                       f"workers.", "")
    if not allow_more_workers:
        for g, n in group_sizes.items():
            if num_workers > n:
                problem = (f"num_workers={num_workers} is larger than neuron group {g!r} ({n} units): this sampler "
                           f"would leave some worker without a unit.")
                raise ArgError(
                    GROUPS_WORKERS_SAMPLER, num_workers, problem,
                    (f"Use at most {n} workers, widen the layer, or deal this group with a sampler that lets workers "
                     f"share units:", Code(f"istjax.per_group({{{g!r}: istjax.overlapping(1)}}, default=...)",
                                           {f"samplers.{g}": "overlapping"}), "."))


def _group_keys(key: jax.Array, group_sizes: Mapping[str, int]) -> dict[str, jax.Array]:
    names = sorted(group_sizes)
    return dict(zip(names, jax.random.split(key, len(names))))


def _finish(idx_Wn: jax.Array, size: int) -> tuple[jax.Array, jax.Array]:
    idx_Wn = jnp.sort(idx_Wn.astype(jnp.int32), axis=1)  # padding (== size) sorts last
    return idx_Wn, idx_Wn < size


def _deal(perm: jax.Array, size: int, num_workers: int) -> jax.Array:
    """Deals a permutation round-robin: worker w gets perm[w], perm[w + W], ...; short rows padded with `size`."""
    n = -(-size // num_workers)
    padded = jnp.concatenate([perm, jnp.full((n * num_workers - size,), size, perm.dtype)])
    return padded.reshape(n, num_workers).T


def uniform(pad: bool = False, idle: bool = False) -> Sampler:
    """IST's partition: each group shuffled and cut into W blocks of equal size.

    Args:
      pad: allow group sizes not divisible by W: workers then get ``ceil(size / W)`` slots, the last of which may be
        padding (masked). Without it such sizes are rejected.
      idle: (with ``pad``) allow groups smaller than W: each unit goes to one worker drawn at random, and the other
        workers hold only padding for that group, i.e. they train without it (ResIST's dealt first blocks).
    """
    if idle and not pad:
        raise ArgError(("idle", "pad"), idle, "uniform(idle=True) needs pad=True:",
                       "the idle workers hold padding slots.")

    def slots(group_sizes, num_workers):
        _check_workers(group_sizes, num_workers, allow_more_workers=idle)
        for g, n in group_sizes.items():
            if n % num_workers and not pad:
                near = f"Use a width that is a multiple of {num_workers} (e.g. {n - n % num_workers} or " \
                       f"{n + num_workers - n % num_workers}),"
                raise GroupSizeError(
                    g, n, num_workers, f"neuron group {g!r} has {n} units, not divisible by num_workers={num_workers}.",
                    (near, "or sample with", PAD, "to pad and mask the short workers."))
        return {g: -(-n // num_workers) for g, n in group_sizes.items()}

    def sample(key, group_sizes, num_workers):
        keys = _group_keys(key, group_sizes)
        indices, mask = {}, {}
        for g, n in group_sizes.items():
            if n < num_workers:  # only with idle: a random worker for each unit, padding for the rest
                units = jnp.concatenate([jnp.arange(n), jnp.full((num_workers - n,), n)])
                idx = jax.random.permutation(keys[g], units).reshape(num_workers, 1)
            else:
                idx = _deal(jax.random.permutation(keys[g], n), n, num_workers)
            indices[g], mask[g] = _finish(idx, n)
        return Partition(indices, mask)

    name = "uniform_idle" if idle else "uniform_pad" if pad else "uniform"
    return Sampler(sample, slots, disjoint=True, name=name)


def stratified(num_owners: int) -> Sampler:
    """Every worker gets ``size / (num_owners * W)`` units from each owner's contiguous shard of every group.

    Owner ``o`` holds units ``[o * size / num_owners, (o + 1) * size / num_owners)``. Each shard is shuffled and
    dealt out independently, so the units a worker gets from each owner always number the same: the exchange between
    owners and workers is a fixed-size all-to-all.
    """
    if not isinstance(num_owners, int) or num_owners < 1:
        raise ArgError("num_owners", num_owners, f"num_owners={num_owners!r}: need a positive integer.", "")

    def slots(group_sizes, num_workers):
        _check_workers(group_sizes, num_workers)
        for g, n in group_sizes.items():
            if n % (num_owners * num_workers):
                raise ArgError(
                    GROUPS_WORKERS_SAMPLER, num_workers,
                    f"neuron group {g!r} has {n} units, not divisible by num_owners * num_workers = "
                    f"{num_owners} * {num_workers}; a stratified partition needs equal shards.",
                    f"Use a width that is a multiple of {num_owners * num_workers}.")
        return {g: n // num_workers for g, n in group_sizes.items()}

    def sample(key, group_sizes, num_workers):
        keys = _group_keys(key, group_sizes)
        indices, mask = {}, {}
        for g, n in group_sizes.items():
            shard = n // num_owners
            perms = jax.vmap(lambda k: jax.random.permutation(k, shard))(jax.random.split(keys[g], num_owners))
            perms = perms + (jnp.arange(num_owners) * shard)[:, None]  # [O, shard], global unit ids
            per = shard // num_workers
            dealt = perms.reshape(num_owners, num_workers, per).transpose(1, 0, 2)  # [W, O, per]
            idx = jnp.sort(dealt, axis=2).reshape(num_workers, num_owners * per)  # owner blocks stay contiguous
            indices[g], mask[g] = idx.astype(jnp.int32), jnp.ones(idx.shape, bool)
        return Partition(indices, mask)

    return Sampler(sample, slots, disjoint=True, name=f"stratified{num_owners}", owners=num_owners)


def overlapping(min_units: int | Mapping[str, int]) -> Sampler:
    """ResIST's partition with a minimum sub-network size: units may be held by several workers.

    The group is shuffled into a ring; worker w takes the ``max(ceil(size / W), min_units)`` consecutive units that
    start at ring position ``floor(w * size / W)``. Every unit is held by at least one worker; overlaps are averaged
    by merge. A group smaller than W is served too: several workers then share each unit (a stage of 2 residual
    blocks on 4 workers gives every block to 2 workers). ``min_units`` may be a per-group mapping (groups it does not name get no minimum).
    """

    def _min(g):
        return min_units.get(g, 0) if isinstance(min_units, Mapping) else int(min_units)

    def slots(group_sizes, num_workers):
        _check_workers(group_sizes, num_workers, allow_more_workers=True)  # W > size: workers share units
        out = {}
        for g, n in group_sizes.items():
            m = _min(g)
            if m > n:
                raise ArgError(("group_sizes", "min_units"), m, f"min_units={m} for group {g!r} exceeds its size "
                               f"{n};", f"use at most {n}.")
            out[g] = max(-(-n // num_workers), m)
        return out

    def sample(key, group_sizes, num_workers):
        keys = _group_keys(key, group_sizes)
        n_slots = slots(group_sizes, num_workers)
        indices, mask = {}, {}
        for g, n in group_sizes.items():
            perm = jax.random.permutation(keys[g], n)
            starts = jnp.asarray([w * n // num_workers for w in range(num_workers)])
            pos = (starts[:, None] + jnp.arange(n_slots[g])[None, :]) % n
            indices[g], mask[g] = _finish(perm[pos], n)
        return Partition(indices, mask)

    return Sampler(sample, slots, disjoint=False, name="overlapping")


def _shares(n: int, weights: Sequence[float]) -> list[int]:
    """Largest-remainder split of n units in proportion to weights; every share at least 1."""
    total = float(sum(weights))
    raw = [n * w / total for w in weights]
    shares = [max(1, math.floor(r)) for r in raw]
    order = sorted(range(len(weights)), key=lambda i: raw[i] - math.floor(raw[i]), reverse=True)
    i = 0
    while sum(shares) < n:
        shares[order[i % len(order)]] += 1
        i += 1
    while sum(shares) > n:
        j = max(range(len(shares)), key=lambda k: shares[k])
        shares[j] -= 1
    return shares


def uneven(weights: Sequence[float]) -> Sampler:
    """Worker w gets a disjoint share of every group proportional to ``weights[w]`` (heterogeneous workers).

    Slots are padded to the largest share and masked, so the compiled round is the same every round.
    """
    weights = tuple(float(w) for w in weights)
    if not weights or any(w <= 0 for w in weights):
        raise ArgError("weights", weights, f"weights={weights!r}:", "need one positive weight per worker.")

    def slots(group_sizes, num_workers):
        _check_workers(group_sizes, num_workers)
        if len(weights) != num_workers:
            raise ArgError(("weights", "num_workers"), weights,
                           f"uneven(weights) has {len(weights)} weights but num_workers={num_workers};",
                           "give one weight per worker.")
        return {g: max(_shares(n, weights)) for g, n in group_sizes.items()}

    def sample(key, group_sizes, num_workers):
        keys = _group_keys(key, group_sizes)
        n_slots = slots(group_sizes, num_workers)
        indices, mask = {}, {}
        for g, n in group_sizes.items():
            shares = _shares(n, weights)
            perm = jax.random.permutation(keys[g], n)
            rows, start = [], 0
            for s in shares:
                row = jnp.concatenate([perm[start:start + s], jnp.full((n_slots[g] - s,), n, perm.dtype)])
                rows.append(row)
                start += s
            indices[g], mask[g] = _finish(jnp.stack(rows), n)
        return Partition(indices, mask)

    return Sampler(sample, slots, disjoint=True, name="uneven")


def nested(fractions: Sequence[float], shuffle: bool = True) -> Sampler:
    """HeteroFL-style nested sub-networks: worker w gets the first ``ceil(fractions[w] * size)`` units of one order.

    With ``shuffle`` the order is a fresh random permutation each round; without it, the natural order (worker w
    always trains the leading units). Units held by several workers are averaged by merge.
    """
    fractions = tuple(float(f) for f in fractions)
    if not fractions or any(not 0 < f <= 1 for f in fractions):
        raise ArgError("fractions", fractions, f"fractions={fractions!r}:", "need one fraction in (0, 1] per worker.")

    def slots(group_sizes, num_workers):
        _check_workers(group_sizes, num_workers, allow_more_workers=True)
        if len(fractions) != num_workers:
            raise ArgError(("fractions", "num_workers"), fractions,
                           f"nested(fractions) has {len(fractions)} fractions but num_workers={num_workers}.", "")
        return {g: max(math.ceil(f * n) for f in fractions) for g, n in group_sizes.items()}

    def sample(key, group_sizes, num_workers):
        keys = _group_keys(key, group_sizes)
        n_slots = slots(group_sizes, num_workers)
        indices, mask = {}, {}
        for g, n in group_sizes.items():
            order = jax.random.permutation(keys[g], n) if shuffle else jnp.arange(n)
            counts = jnp.asarray([math.ceil(f * n) for f in fractions])
            pos = jnp.arange(n_slots[g])
            idx = jnp.where(pos[None, :] < counts[:, None], order[jnp.minimum(pos, n - 1)][None, :], n)
            indices[g], mask[g] = _finish(idx, n)
        return Partition(indices, mask)

    return Sampler(sample, slots, disjoint=False, name="nested")


def per_group(samplers: Mapping[str, Sampler], default: Optional[Sampler] = None) -> Sampler:
    """One strategy per neuron group: ``samplers[g]`` deals group ``g``; ``default`` deals every other group.

    Example: ``per_group({"blocks": overlapping(min_units=1)}, default=uniform())`` deals channels uniformly and
    residual blocks with overlap, so a group of 2 blocks can serve 4 workers.

    Every named group must exist in the model and every group must have a strategy; both are checked by ``slots``
    (before tracing), naming the group. Each strategy draws from its own key (``fold_in`` of the round key with
    the strategy's position in sorted group order), so adding a group leaves the others' draws unchanged only when
    the order is kept.
    """
    samplers = dict(samplers)
    for g, s in samplers.items():
        if not isinstance(s, Sampler):
            raise ArgError(f"samplers.{g}", s, f"per_group: samplers[{g!r}] = {s!r} is not an istjax.Sampler;",
                           "use istjax.uniform(), istjax.overlapping(...), ...")

    def assign(group_sizes) -> dict[str, Sampler]:
        unknown = sorted(set(samplers) - set(group_sizes))
        if unknown:
            g = unknown[0]
            raise ArgError(f"samplers.{g}", samplers[g],
                           f"the model has no neuron group {g!r}{_close(g, sorted(group_sizes))}; its groups are "
                           f"{sorted(group_sizes)}.", "Fix the group name.")
        missing = sorted(g for g in group_sizes if g not in samplers and default is None)
        if missing:
            raise ArgError(("samplers", "default"), samplers,
                           f"per_group has no sampler for neuron group(s) {missing};", "name them or pass default=.")
        return {g: samplers.get(g, default) for g in sorted(group_sizes)}

    def split(group_sizes) -> list[tuple[Sampler, dict[str, int]]]:
        """Groups collected by strategy, in sorted group order (a strategy's groups are sampled together)."""
        out: list[tuple[Sampler, dict[str, int]]] = []
        for g, s in assign(group_sizes).items():
            for t, groups in out:
                if t is s:
                    groups[g] = group_sizes[g]
                    break
            else:
                out.append((s, {g: group_sizes[g]}))
        return out

    def slots(group_sizes, num_workers):
        out = {}
        for s, groups in split(group_sizes):
            out.update(s.slots(groups, num_workers))
        return out

    def sample(key, group_sizes, num_workers):
        indices, mask = {}, {}
        for i, (s, groups) in enumerate(split(group_sizes)):
            p = s.sample(jax.random.fold_in(key, i), groups, num_workers)
            indices.update(p.indices)
            mask.update(p.mask)
        return Partition(indices, mask)

    name = ",".join([f"{g}={s.name}" for g, s in sorted(samplers.items())]
                    + ([f"*={default.name}"] if default is not None else []))
    all_disjoint = all(s.disjoint for s in samplers.values()) and (default is None or default.disjoint)

    def group_disjoint(g: str) -> bool:  # groups the default serves are known only from the model
        return samplers[g].disjoint if g in samplers else default.disjoint

    def group_owners(g: str) -> Optional[int]:
        return owner_counts(samplers[g] if g in samplers else default, {g: 0})[g]

    return Sampler(sample, slots, disjoint=all_disjoint, name=f"per_group({name})", group_disjoint=group_disjoint,
                   group_owners=group_owners)


def check_partition(partition: Partition, group_sizes: Mapping[str, int]) -> None:
    """Host-side sanity check (for tests and debugging): shapes, ranges, mask consistency."""
    for g, n in group_sizes.items():
        idx, m = partition.indices[g], partition.mask[g]
        if idx.shape != m.shape or idx.ndim != 2:
            raise AssertionError(f"group {g!r}: indices {idx.shape} and mask {m.shape} must both be [W, n]")
        if bool(jnp.any((idx < 0) | (idx > n))) or bool(jnp.any(m != (idx < n))):
            raise AssertionError(f"group {g!r}: indices out of range or mask not equal to indices < size")


# --------------------------------------------------------------------------
# The registry: a config's ``sampler`` / ``group_samplers`` names
# --------------------------------------------------------------------------


def _flag(options: Mapping[str, object], name: str, default: bool) -> bool:
    """A sampler's yes/no option: absent means ``default``; anything but a bool is refused naming the field."""
    value = options.get(name, default)
    if not isinstance(value, bool):
        raise ArgError(name, value, f"{name}={value!r}:", "must be True or False.")
    return value


class SamplerEntry(NamedTuple):
    """A registered strategy: ``build(options) -> Sampler`` from the options it reads (a config's
    ``sampler_args``), and the names of those options, for messages."""

    build: Callable[[Mapping[str, object]], Sampler]
    options: tuple[str, ...] = ()
    description: str = ""


#: The partition samplers by config name (``sampler.name``), each with the options it takes.
SAMPLERS: Registry[SamplerEntry] = Registry("sampler", field="sampler", entries={
    "uniform": SamplerEntry(lambda o: uniform(pad=False), (), "equal disjoint blocks; uneven sizes refused"),
    "uniform_pad": SamplerEntry(lambda o: uniform(pad=True), (), "equal disjoint blocks, uneven sizes padded"),
    "overlapping": SamplerEntry(lambda o: overlapping(int(o["min_units"])), ("min_units",),
                                "at least min_units units per worker, overlaps averaged"),
    "stratified": SamplerEntry(lambda o: stratified(int(o["num_owners"])), ("num_owners",),
                               "equal units from each of num_owners shards (the sharded MPI mode)"),
    "uneven": SamplerEntry(lambda o: uneven(tuple(o["weights"])), ("weights",), "shares proportional to weights"),
    "nested": SamplerEntry(lambda o: nested(tuple(o["fractions"]), _flag(o, "shuffle", True)),
                           ("fractions", "shuffle"),
                           "worker w the first fractions[w] of one order (shuffle=False: the same units every round)"),
}, hint="Add one with istjax.core.partition.SAMPLERS.register(name, SamplerEntry(build, options)).")
