"""The ``"subnetworks"`` exchange (IST, ResIST) with ``mode="parameter_server"``: rank 0 holds the global
`TrainState` and runs ``distribute``; what the W workers hold of it is scattered `[N, L, ...]`, every rank trains its
L workers and rank 0 gathers them back and runs ``collect`` (`istjax.runtimes.mpi`). Other ranks hold no parameters.
"""

from __future__ import annotations

import functools
import time

import jax
import numpy as np

from istjax.core.state import TrainState, WorkerState, round_keys
from istjax.core.subnet import extract
import istjax.runtimes.mpi.buffers as buffers
import istjax.runtimes.mpi.rounds as rounds
from istjax.runtimes.mpi.runtime import MPIRuntime, Traffic
from istjax.runtimes.mpi.world import ROOT

__all__ = ["WHOLE_STATE", "install"]

#: Rank 0 holds the whole state (the others hold none).
WHOLE_STATE = True


def install(rt: MPIRuntime) -> None:
    """Fills in ``rt``'s ``init``, ``round`` and ``gather`` for the parameter server's round. The buffers a rank
    owns between rounds: "lanes" `[L, ...]` (the received workers, trained in place, then sent back) and "all" (root:
    `[W, ...]`, the cut workers, scattered, then the gathered ones; elsewhere `[L, ...]`, gather's unread result)."""
    alg, comm = rt.algorithm, rt.comm
    x = buffers.TreeCollectives(comm)
    lanes, root = rt.workers_per_rank, rt.rank == ROOT
    held, start = rounds.exchanged(alg)
    abstract_state = jax.eval_shape(alg.init, jax.random.key(0))
    abstract_workers, _ = jax.eval_shape(alg.distribute, abstract_state)
    wire, trees = alg.wire, held(abstract_workers)  # [W, ...] as workers hold them
    packed = buffers.packing(wire, trees)  # (pack, unpack): what crosses is the rounded values' 16 bits
    all_shapes = jax.eval_shape(packed[0], trees)  # [W, ...] as they cross
    lane_shapes = buffers.lane_shapes(all_shapes, lanes)
    template = None if root else buffers.zeros_like(lane_shapes)  # a non-root rank's (unread) scatter input
    send_up = None if wire.exact else (lambda trained, started: packed[0](wire.up(held(trained), held(started))))
    train = rounds.lane_step(alg, lanes, rt.rank * lanes, start=lambda tree, r: start(packed[1](tree), r), send=send_up)
    spares = buffers.Spares()

    @functools.partial(jax.jit, donate_argnums=1, keep_unused=True)
    def distribute(state, into):
        workers, plan = alg.distribute(state)
        return packed[0](held(workers)), plan

    def as_workers(tree):
        return WorkerState(**{"opt_state": (), **tree})

    sent = {} if wire.exact else {"sent": True}  # workers send wire.up of their trees
    collect = jax.jit(lambda state, tree, plan, batches, shared: alg.collect(
        state, as_workers(packed[1](tree)), plan, batches, shared, **sent))
    split_fn = rounds.split_fn(rt, as_workers)
    # The loss split's workers: their trees, or under a rounding wire what they sent read against where they started.
    trained_trees = jax.jit(lambda state, tree, plan: wire.back(
        packed[1](tree), wire.round(extract(alg.subnet.held(state), plan.partition, alg.subnet.spec))))

    def init(key):
        state = jax.jit(alg.init)(key)
        return state if root else TrainState((), (), (), state.key, state.round)

    def round_fn(state, batches, shared=None, *, split=True):
        t = time.perf_counter()
        rounds.check_batches(batches, rt)
        full, batches = rounds.full_batches(batches, rt), rounds.my_rows(batches, rt)
        t = rt._phase("batches", t, batches)
        traffic = Traffic()
        if root:
            send, plan = distribute(state, spares.take("all", all_shapes))
            rt._track(state, send)
        else:
            send = template
        t = rt._phase("distribute", t, send)
        got = x.scatter_rows_into(spares.take("lanes", lane_shapes), send)  # [L, ...]: this rank's workers
        t = rt._phase("scatter", t, got)
        traffic.add(received=got["params"], leaf_paths=True)
        traffic.add(received={k: v for k, v in got.items() if k != "params"})
        rt._track(got)
        trained, metrics = train(got, batches, shared, state.round)  # got is donated: trained in place
        t = rt._phase("local", t, trained, metrics)
        back = held(trained) if send_up is None else trained  # else what the workers send, packed already
        traffic.add(sent=back["params"], leaf_paths=True)
        traffic.add(sent={k: v for k, v in back.items() if k != "params"})
        gathered = x.gather_rows_into(send if root else spares.take("all", lane_shapes), back)  # root: [W, ...]
        t = rt._phase("gather", t, gathered)
        rt._track(trained)
        spares.keep(lanes=back, all=gathered)
        split = split and split_fn is not None  # every rank asks alike (the driver's evaluation rounds)
        last = rounds.last_batches(full, batches, rt) if split else None  # collective
        if root:
            workers_back = gathered if wire.exact or not split else trained_trees(state, gathered, plan)
            state = collect(state, gathered, plan, full, shared)
        else:
            state = TrainState((), (), (), round_keys(state.key)[0], state.round + 1)
        t = rt._phase("collect", t, state)
        out = rounds.finish(rt, traffic, metrics, comm)
        if root and split:
            out.update({k: np.asarray(v) for k, v in split_fn(state, workers_back, last, shared).items()})
        rt._phase("metrics", t)
        return state, out

    rt.init, rt.round, rt.gather = init, round_fn, (lambda state: state if root else None)
