"""The ``"subnetworks"`` exchange with ``mode="sharded"``: no rank ever holds the whole model in a round. The
algorithm's owner side (`istjax.Algorithm.owner_side`, `istjax.core.shard`) runs between collectives: each owner
cuts every worker's pieces of its slice, one all-to-all out and one back, an all-gather of leaves held whole and an
allreduce of shared ones (`istjax.runtimes.mpi`).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from istjax.core import contract
from istjax.core import memory as memory_lib
from istjax.core import precision
from istjax.core import shard as shard_lib
from istjax.core import tiled_init
from istjax.core.errors import ArgError, Code
from istjax.core.partition import owner_counts
from istjax.core.state import ModelStatePolicy, TrainState
import istjax.runtimes.mpi.buffers as buffers
import istjax.runtimes.mpi.rounds as rounds
from istjax.runtimes.mpi.runtime import MPIRuntime, Traffic
from istjax.runtimes.mpi.world import ROOT

__all__ = ["WHOLE_STATE", "install", "sharded_layout"]

#: Every rank holds its shard of the model, never the whole.
WHOLE_STATE = False


def sharded_layout(alg, n: int, me: int) -> shard_lib.Layout:
    """Which groups this job holds in shards; a ValueError naming the fix when the algorithm cannot run sharded."""
    side = alg.owner_side
    if side is None:
        raise ArgError("mode", "sharded",
                       f"algorithm {alg.name!r} exchanges subnetworks but gives no owner side (Algorithm.owner_side), "
                       f"so it cannot run with the model split over ranks.", use={"mode": "parameter_server"})
    sizes = dict(alg.task.spec.group_sizes)
    sampler = alg.subnet.sampler
    owners = owner_counts(sampler, sizes)
    owned = frozenset(g for g, o in owners.items() if o == n)
    if not owned:
        raise _not_stratified(alg, sampler, owners, n)
    from_slices = alg.task.owner is not None and alg.task.owner.recompute_state is not None
    if alg.model_state_policy == ModelStatePolicy.RECOMPUTE and alg.task.has_state and not from_slices:
        raise ArgError("model_state", "recompute",
                       f"mode='sharded' with model_state='recompute': recomputing the statistics is a forward pass of "
                       f"the whole merged model, which no rank holds, and {type(alg.task.module).__name__} gives no "
                       f"owner_statistics method to run it from each rank's part (istjax.core.contract; the "
                       f"channel-partitioned CNN, ResNet and VGG do).",
                       use=[{"model_state": "carry"}, {"mode": "parameter_server"}])
    return shard_lib.Layout(n, me, alg.num_workers, sizes, owned)


def _not_stratified(alg, sampler, owners: dict, n: int) -> ArgError:
    """The sharded mode's refusal of a sampler that deals no group stratified by ``n`` owners, with each interface's
    fix: ResIST stratifies its own blocks (``num_owners``), IST reads its sampler."""
    served = sorted({o for o in owners.values() if o is not None})
    has = f"{sampler.name!r}" + (f", stratified with num_owners={'/'.join(map(str, served))}" if served else "")
    problem = (f"mode='sharded' with {n} processes needs a partition sampler that deals the neuron groups stratified "
               f"by {n} owners (so each round's exchange is a fixed-size all-to-all); each process owns 1/{n} of "
               f"them. The algorithm samples with {has}, which deals none that way.")
    blocks = contract.block_groups(alg.task.module)
    if blocks is not None:  # a depth-split model: ResIST deals its own blocks, n * W equal shares of each stage's
        share = n * alg.num_workers
        if all(b % share == 0 for b in blocks.values()):
            return ArgError("num_owners", None, problem, (
                Code(f"Build it with istjax.resist(..., num_owners={n}), or use", ("Add", {"num_owners": n}, ", or")),
                {"mode": "parameter_server"}, "."))
        return ArgError("num_owners", None, f"{problem} Stratified by {n} owners, ResIST would need every stage's "
                                            f"partitioned blocks {blocks} in multiples of {n} owners x "
                                            f"{alg.num_workers} workers = {share}.",
                        ("Use", {"mode": "parameter_server"}, f", or deepen the stages (model.stage_sizes) to a "
                         f"multiple of {share} partitioned blocks and",
                         Code(f"build it with istjax.resist(..., num_owners={n})", ("add", {"num_owners": n})), "."))
    return ArgError("sampler", sampler.name, problem, (
        Code(f"Build it with istjax.ist(..., sampler=istjax.stratified(num_owners={n})), or use",
             ("Add", {"sampler": "stratified", "num_owners": n}, ", or")), {"mode": "parameter_server"}, "."))


def _as_state(tree: dict, like: TrainState) -> TrainState:
    """A `TrainState` of the held ``tree`` (`istjax.Algorithm.subnet`), with the key and round of ``like``."""
    return TrainState(**{"opt_state": (), **tree, "key": like.key, "round": like.round})


def _sharded_init(alg, layout) -> Callable:
    """``key -> TrainState`` holding this rank's part, in one jit whose outputs are only this rank's slices. XLA does
    not narrow an initialiser to a slice of its output (`istjax.core.tiled_init`), so a leaf drawn by a
    `istjax.core.tiled_init.Tiled` initialiser (`istjax.models.SparseMLP`'s) is redrawn as this rank's block alone
    and the whole leaf is never made; any other leaf is generated whole inside the program, then sliced."""
    subnet = alg.subnet

    def owned(k):
        with tiled_init.deferred():
            full = alg.init(k)
            return _as_state(jax.tree.map(layout.shard, subnet.spec.leaves, subnet.held(full)), full)

    return jax.jit(owned)


def _sharded_gather(alg, layout, x: buffers.TreeCollectives) -> Callable:
    """``state -> TrainState`` of the whole model on the root (None elsewhere): owned leaves gathered and joined,
    the others the root's own copy (owners agree on them)."""
    subnet = alg.subnet

    def gather(state):
        def one(leaf, v):
            if layout.role(leaf) != shard_lib.OWNED:
                return v if layout.owner == ROOT else None
            got = x.gather(v)  # root: [N, ...]
            return shard_lib.unshard(layout, leaf, got) if layout.owner == ROOT else None

        full = jax.tree.map(one, subnet.spec.leaves, subnet.held(state))
        return _as_state(full, state) if layout.owner == ROOT else None

    return gather


def _sharded_steps(alg, layout: shard_lib.Layout, x: buffers.TreeCollectives) -> tuple:
    """The sharded round's steps, jitted: ``outbound(state) -> (plan, pieces, local)``, ``assemble(received,
    local)``, the lane step ``train``, ``give_back(trained) -> (back, whole, sums)``, ``collect(state, plan,
    returned, gathered, totals, first, shared)`` and ``gather_each(tree)`` (an all-gather per leaf). Under a
    rounding wire (``alg.wire``) the pieces cross as the 16 bits of their rounded values, workers give back what
    they send (`istjax.core.precision.Wire.up`), and ``collect`` adds the all-gathered shared sums in float32."""
    subnet, side, wire, leaves = alg.subnet, alg.owner_side, alg.wire, alg.subnet.spec.leaves

    def pack(tree):
        return tree if wire.exact else precision.pack(tree, wire.dtype)

    def unpack(tree):
        return tree if wire.exact else jax.tree.map(lambda v: buffers.unpacked(v, wire), tree)

    @jax.jit
    def outbound(state):
        round_plan = subnet.plan(state)
        pieces, local = side.distribute(layout, subnet.held(state), round_plan)
        return round_plan, pack(pieces), local

    send = None if wire.exact else (lambda trained, started: wire.up(subnet.held(trained), subnet.held(started)))
    train = rounds.lane_step(alg, layout.lanes, layout.owner * layout.lanes, start=subnet.start, send=send)
    assemble = jax.jit(lambda received, local: shard_lib.worker_assemble(layout, leaves, unpack(received), local))
    give_back = jax.jit(lambda trained: pack(shard_lib.worker_return(
        layout, leaves, subnet.held(trained) if send is None else trained)))

    @jax.jit
    def collect(state, round_plan, returned, gathered, totals, first, shared):
        if not wire.exact:  # [N, L, ...] of every rank's shared pieces: their sum over the ranks, in float32
            totals = jax.tree.map(lambda v: jnp.sum(buffers.unpacked(v, wire), axis=0), totals)
        return side.collect(layout, state, round_plan, unpack(returned), unpack(gathered), totals, first, shared,
                            reduce=x.allreduce_traced)

    def gather_each(tree):  # one call per leaf under a rounding wire: the same order on every rank
        return x.allgather(tree) if wire.exact else jax.tree.map(x.allgather, tree)

    return outbound, assemble, train, give_back, collect, gather_each


def install(rt: MPIRuntime) -> None:
    """The sharded mode: every rank holds its part of the model (`istjax.core.shard`); a round is the algorithm's
    owner-side distribute, an all-to-all out, the local steps, an all-to-all back (plus an all-gather of leaves held
    whole and an allreduce of shared ones) and its owner-side collect."""
    alg = rt.algorithm
    layout = sharded_layout(alg, rt.size, rt.rank)
    side = alg.owner_side
    x = buffers.TreeCollectives(rt.comm)
    outbound, assemble, train, give_back, collect, gather_each = _sharded_steps(alg, layout, x)
    spares = buffers.Spares()  # the collectives' results, reused round after round
    owner = alg.task.owner
    recompute = (alg.model_state_policy == ModelStatePolicy.RECOMPUTE and owner is not None
                 and owner.recompute_state is not None)

    def round_fn(state, batches, shared=None, *, split=True):
        rounds.check_batches(batches, rt)
        batches = rounds.my_rows(batches, rt)
        traffic = Traffic()
        round_plan, pieces, local = outbound(state)
        received = x.alltoall_into(spares.take("received", pieces), pieces)
        traffic.add(received=received, leaf_paths=True)
        sub = assemble(received, local)
        trained, metrics = train(sub, batches, shared, state.round)
        back, whole, sums = give_back(trained)
        returned = x.alltoall_into(spares.take("returned", back), back)
        gathered = gather_each(whole)
        if alg.wire.exact:  # allreduce: in and out, one buffer per worker
            totals = x.allreduce_into(spares.take("sums", sums), sums)
            traffic.add(sent=sums, received=sums, leaf_paths=True)
        else:  # 16-bit pieces all-gathered (every rank's), added in float32 by collect
            totals = gather_each(sums)
            traffic.add(sent=sums, received=totals, leaf_paths=True)
        traffic.add(sent=back, leaf_paths=True)
        traffic.add(sent=whole, received=gathered, leaf_paths=True)  # all-gather: a worker's piece out, all W in
        rt._track(state, pieces, received, sub, trained, back, returned, gathered)
        first = rounds.first_batches(batches, rt) if recompute else None
        state = collect(state, round_plan, returned, gathered, totals, first, shared)
        spares.keep(received=received, returned=returned, sums=totals)
        return state, rounds.finish(rt, traffic, metrics, rt.comm)

    def round_memory(state, batches, shared=None) -> int:
        """What ``round_fn`` allocates beyond ``state`` (shapes): the largest of its local phase (the compiled lane
        step's outputs and temporaries beside what arrived) and its end (every buffer ``round_fn`` still holds when
        ``collect`` writes the new state); the batches and the received/returned/summed buffers counted as new, as
        in the first round."""
        round_plan, pieces, local = jax.eval_shape(outbound, state)
        sub = jax.eval_shape(assemble, pieces, local)
        trained, metrics = jax.eval_shape(train, sub, batches, shared, state.round)
        back, whole, sums = jax.eval_shape(give_back, trained)
        compiled = train.lower(sub, batches, shared, state.round).compile()
        arrived = memory_lib.tree_bytes((batches, pieces, local, pieces, sub))  # sent, kept, received, assembled
        after = memory_lib.tree_bytes((metrics, back, back, whole, sums, sums, state)) + \
            rt.size * memory_lib.tree_bytes(whole)  # returned = back, totals = sums, gathered, the new state
        return arrived + max(memory_lib.step_bytes(compiled.memory_analysis()), after)

    rt.init, rt.round, rt.gather = _sharded_init(alg, layout), round_fn, _sharded_gather(alg, layout, x)
    rt.round_memory = round_memory
    if side.evaluate is not None:
        rt.evaluate = side.evaluate(layout, buffers.mpi_collectives(rt.comm, rt.rank))
