"""The ``"replicas"`` (local SGD, DiLoCo) and ``"gradients"`` (data parallel) exchanges: every rank holds the global
state and runs ``distribute`` for its own workers; after ``local`` the L workers' states (or, for gradients, every
step's gradients inside the compiled local phase) are summed across ranks and ``collect`` averages them
(`istjax.runtimes.mpi`). ``mode="sharded"`` is refused for them: every rank holds the model.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.flatten_util
import jax.numpy as jnp

from istjax.core import memory as memory_lib
from istjax.core import precision
from istjax.core.comm import Exchange, tree_bytes
from istjax.core.state import WorkerState, weighted_replicas
import istjax.runtimes.mpi.buffers as buffers
import istjax.runtimes.mpi.rounds as rounds
from istjax.runtimes.mpi.runtime import MPIRuntime, Traffic
from istjax.runtimes.mpi.world import ROOT

__all__ = ["WHOLE_STATE", "install", "start_fn"]

PyTree = Any
#: Every rank holds the whole state.
WHOLE_STATE = True


def replica_ends(alg, n: int, first: int = 0) -> tuple[Callable, Callable]:
    """``(summed, finish)`` of the replicas' round end on ``n`` ranks, jitted: ``summed(state, trained, plan)`` is
    what the workers add across ranks (`[L, ...]`, this rank's workers from ``first`` on): the model state
    (gradients), or the replicas (a reset optimizer state is not summed: collect does not read it), each worker's
    weighted by the plan's server weights where it has them (federated clients,
    `istjax.core.state.weighted_replicas`: the sum is then the weighted one); under a rounding wire, what
    each sends of it (`istjax.core.precision.Wire.up` against the rounded state it started from), packed.
    ``finish(state, workers, sums, plan, batches, shared)``: the sums (under a rounding wire, `[N, L, ...]` of every
    rank's 16 bits, added in float32) over ``n``, through the algorithm's ``collect`` (with a plan whose weights
    the sums hold already). An algorithm whose workers keep state (`istjax.algorithms.base.Resident`: ADMM's duals)
    sums what its workers send (``outgoing``), and its ``merge`` of their mean and its ``keep`` of this rank's own
    workers are the collect."""
    gradients, carry, wire = alg.exchange == Exchange.GRADIENTS, alg.carries_optimizer_state, alg.wire
    resident = alg.resident

    @jax.jit
    def summed(state, trained, plan):
        if gradients:  # params and optimizer states agree already: the model state is summed
            out, exact = trained.model_state, state.model_state
        elif resident is not None:  # what each worker sends of its state (ADMM: x_i + u_i)
            out, exact = resident.outgoing(trained), WorkerState(state.params, state.model_state, ())
        else:
            out = trained if carry else trained._replace(opt_state=())
            exact = WorkerState(state.params, state.model_state, state.opt_state if carry else ())
        if plan.weights is not None:
            lanes = jax.tree.leaves(out)[0].shape[0]
            mine = jax.lax.dynamic_slice_in_dim(plan.weights, first, lanes)
            out = weighted_replicas(out, exact, mine, alg.num_workers)
        if wire.exact:
            return out
        exact_L = jax.tree.map(lambda t, e: jnp.broadcast_to(e, t.shape), out, exact)
        return precision.pack(wire.up(out, wire.round(exact_L)), wire.dtype)

    @jax.jit
    def finish(state, workers, sums, plan, batches, shared):
        if not wire.exact:
            sums = jax.tree.map(lambda v: jnp.sum(buffers.unpacked(v, wire), axis=0), sums)
        if gradients:  # params and optimizer states agree already; average the model state
            workers = workers._replace(model_state=jax.tree.map(lambda s: s / n, sums))
        else:  # collect averages its workers: these L sums over ranks, / N, average to the mean over all W
            mean = jax.tree.map(lambda s: s / n, sums)
        sent = {} if wire.exact else {"sent": True}
        if resident is not None:  # the global state from the mean; this rank's rows from its own workers
            new = resident.merge(state, mean, plan._replace(weights=None), batches, shared, **sent)
            return resident.with_rows(new, resident.keep(new, resident.outgoing(workers)))
        return alg.collect(state, workers if gradients else mean, plan._replace(weights=None), batches, shared,
                           **sent)

    return summed, finish


def _gradient_mean(rt: MPIRuntime, x: buffers.TreeCollectives, counted: list) -> Callable:
    """``reduce(grads, axis_name)``: data parallel's gradient mean over all W workers, over this rank's lanes (the
    axis ``axis_name``) and then across ranks, each buffer it hands to MPI recorded in ``counted`` as it is traced."""
    n, wire = rt.size, rt.algorithm.wire

    def sum_over_ranks(v):  # traced; a rounding wire moves the 16 bits (an all-gather) and adds them in float32
        if wire.exact:
            return x.allreduce_traced(v)
        return jnp.sum(buffers.unpacked(x.allgather_traced(precision.pack(v, wire.dtype)), wire), axis=0)

    def reduce(grads, axis_name):  # the mean over all W workers: over this rank's lanes, then across ranks
        counted.append(grads)
        if rt.gradient_buffers == "one":  # one buffer: no MPI call until the whole backward pass is done
            flat, unravel = jax.flatten_util.ravel_pytree(grads)
            total = unravel(sum_over_ranks(flat))
        else:  # a buffer per leaf: each can go as soon as its gradient exists
            total = jax.tree.map(sum_over_ranks, grads)  # [per worker]: one buffer per worker
        return jax.tree.map(lambda g: jax.lax.pmean(g, axis_name) / n, total) if axis_name else \
            jax.tree.map(lambda g: g / n, total)

    return reduce


def start_fn(alg, first: int, lanes: int) -> Callable:
    """``start(state, into) -> (workers, plan)``, jitted: this rank's ``lanes`` workers from worker ``first`` on.
    Every rank computes the same W workers and keeps its own; an algorithm whose workers keep state
    (`istjax.algorithms.base.Resident`) starts one per row this rank holds, its own already. ``into`` (a spare
    buffer of the workers' shapes) is donated."""

    @functools.partial(jax.jit, donate_argnums=1, keep_unused=True)
    def start(state, into):
        workers, plan = alg.distribute(state)
        if alg.resident is not None:
            return workers, plan
        return jax.tree.map(lambda v: jax.lax.dynamic_slice_in_dim(v, first, lanes), workers), plan

    return start


def _rows(rt: MPIRuntime) -> tuple[Callable, Callable]:
    """`istjax.runtimes.mpi.rounds.resident_rows` of what the algorithm's workers keep between rounds
    (`istjax.algorithms.base.Resident`: ADMM's duals); for any other algorithm every rank's state is whole: ``own``
    passes it through and rank 0's is the whole state."""
    resident = rt.algorithm.resident
    if resident is None:
        return (lambda state: state), (lambda state: state if rt.rank == ROOT else None)
    return rounds.resident_rows(rt, resident.rows, resident.with_rows)


def install(rt: MPIRuntime) -> None:
    """Fills in ``rt``'s ``init``, ``round`` and ``gather`` for the replicas' (or the gradients') round."""
    alg, comm, wire = rt.algorithm, rt.comm, rt.algorithm.wire
    x = buffers.TreeCollectives(comm)
    n, lanes, me = rt.size, rt.workers_per_rank, rt.rank
    gradients = alg.exchange == Exchange.GRADIENTS
    counted: list[PyTree] = []  # buffers the compiled local phase hands to MPI, recorded when it is traced
    in_step = {"sent": 0, "received": 0}  # per worker per round, from the recorded buffers

    reduce = _gradient_mean(rt, x, counted)

    train = rounds.lane_step(alg, lanes, me * lanes, reduce=reduce if gradients else None)
    abstract_state = jax.eval_shape(alg.init, jax.random.key(0))
    lane_shapes = buffers.lane_shapes(jax.eval_shape(alg.distribute, abstract_state)[0], lanes)

    spares = buffers.Spares()  # "lanes": this rank's workers (cut, trained in place); "sums": the all-reduce's result

    start = start_fn(alg, me * lanes, lanes)
    summed, finish = replica_ends(alg, n, me * lanes)
    split_fn = rounds.split_fn(rt, lambda workers: workers)
    own, gather = _rows(rt)
    init = jax.jit(alg.init) if alg.resident is None else (lambda key: own(jax.jit(alg.init)(key)))

    def note_step_exchanges() -> None:
        """Where the local phase was traced just now (its first call, or `round_memory`'s compilation): the per-worker
        bytes of its K exchanges, from the buffers it handed to MPI."""
        if counted:
            sent = alg.local_steps * tree_bytes(wire.shapes(counted))
            in_step.update(sent=sent, received=sent if wire.exact else n * sent)  # an all-gather brings N pieces

    def round_memory(state, batches, shared=None) -> int:
        """What ``round_fn`` allocates beyond ``state`` (shapes): this rank's workers cut from the state and the
        batches, then the largest of the compiled local phase (its outputs and temporaries, the gradients' exchange
        buffers among them) and the round's end (the trained workers, what is summed and its sum, the metrics and
        the new state ``finish`` writes), as in the first round."""
        workers, plan = jax.eval_shape(start, state, lane_shapes)
        counted.clear()
        compiled = train.lower(workers, batches, shared, state.round).compile()
        note_step_exchanges()
        trained, metrics = jax.eval_shape(train, workers, batches, shared, state.round)
        out = jax.eval_shape(summed, state, trained, plan)
        sums = out if wire.exact else jax.tree.map(lambda v: jax.ShapeDtypeStruct((n, *v.shape), v.dtype), out)
        arrived = memory_lib.tree_bytes((batches, workers))
        after = memory_lib.tree_bytes((trained, metrics, out, sums, state))
        return arrived + max(memory_lib.step_bytes(compiled.memory_analysis()), after)

    def round_fn(state, batches, shared=None, *, split=True):
        rounds.check_batches(batches, rt)
        state = own(state)  # a restored whole state: this rank's rows of what its workers keep
        full, batches = rounds.full_batches(batches, rt), rounds.my_rows(batches, rt)
        traffic = Traffic()
        workers, plan = start(state, spares.take("lanes", lane_shapes))
        counted.clear()
        trained, metrics = train(workers, batches, shared, state.round)
        note_step_exchanges()
        out = summed(state, trained, plan)
        if wire.exact:
            sums = x.allreduce_into(spares.take("sums", out), out)  # [L, ...] summed over ranks; a buffer per worker
            traffic.add(sent=out, received=out)
        else:
            # [N, L, ...]: every rank's 16 bits, added in float32 by finish; one call per leaf, in the same order on
            # every rank (the calls of one program may run in any order)
            sums = jax.tree.map(x.allgather, out)
            traffic.add(sent=out, received=sums)
        traffic.sent += in_step["sent"] * lanes
        traffic.received += in_step["received"] * lanes
        rt._track(state, trained, sums)
        state = finish(state, trained, sums, plan, full, shared)
        out = rounds.finish(rt, traffic, metrics, comm)
        if split_fn is not None and split:  # this rank's workers on their own batches, averaged over the ranks
            mine = split_fn(state, trained, rounds.own_last(batches, rt), shared)
            out.update(rounds.combine_splits(mine, comm))
        spares.keep(lanes=trained, sums=sums)
        return state, out

    rt.init, rt.round, rt.round_memory, rt.gather = init, round_fn, round_memory, gather
