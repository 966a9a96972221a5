"""The compressed ``"replicas"`` exchange (local SGD and DiLoCo with a ``compression``, `istjax.core.compress`):
every rank holds the global model and its own workers' rows of the compressor state (their residuals, PowerSGD's
factors); after ``local`` its workers' changes cross compressed, inside one compiled end of round: PowerSGD's two
all-reduces of the factors, top-k's all-gather of values and indices (mpi4jax calls, `istjax.core.compress.Across`),
then the algorithm's ``collect`` on this rank's rows (the model state's mean an all-reduce too). What crosses is the
compressed size: every buffer handed to MPI is recorded as the exchange is traced and counted each round.
Checkpoints and evaluation gather every rank's rows to rank 0 (`istjax.runtimes.mpi.rounds.resident_rows`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from istjax.core.comm import tree_bytes
from istjax.core.compress import Across
import istjax.runtimes.mpi.buffers as buffers
import istjax.runtimes.mpi.rounds as rounds
from istjax.runtimes.mpi.replicas import start_fn
from istjax.runtimes.mpi.runtime import MPIRuntime, Traffic

__all__ = ["WHOLE_STATE", "install"]

PyTree = Any
#: Every rank holds the whole model; the compressor's rows are each rank's own (gathered for checkpoints).
WHOLE_STATE = True


def _across(x: buffers.TreeCollectives, num_workers: int, counted: dict, whole: bool) -> Across:
    """`Across` of mpi4jax calls for use inside the compiled end of round: each call's buffers recorded in
    ``counted`` (``sent``, ``received``: this rank's, all its workers') as it is traced. The mean all-reduces the
    rows unsummed (one buffer per worker, as the uncompressed exchange does) and adds them after. ``whole``: the
    exchange is one the compressor makes uncompressed (decided on the host, `Across.whole`)."""
    def mean(v):  # [L, ...] -> [...]
        counted["sent"].append(v)
        counted["received"].append(v)
        return jnp.sum(x.allreduce_traced(v), axis=0) / num_workers

    def gather(v):  # [L, ...] -> [N, L, ...] -> [W, ...]
        got = x.allgather_traced(v)
        counted["sent"].append(v)
        counted["received"].append(got)
        return got.reshape((got.shape[0] * got.shape[1],) + got.shape[2:])

    return Across(mean=mean, gather=gather, whole=whole)


def _state_rows(rt: MPIRuntime):
    """``(own, gather)`` of the compressor's rows (``opt_state.rows``, `istjax.algorithms.replicated.Compressed`)."""
    return rounds.resident_rows(rt, lambda state: state.opt_state.rows,
                                lambda state, rows: state._replace(opt_state=state.opt_state._replace(rows=rows)))


def install(rt: MPIRuntime) -> None:
    """Fills in ``rt``'s ``init``, ``round`` and ``gather`` for the compressed replicas' round."""
    alg, comm = rt.algorithm, rt.comm
    x = buffers.TreeCollectives(comm)
    lanes, me = rt.workers_per_rank, rt.rank
    counted: dict = {"sent": [], "received": []}
    start_exchanges = int(alg.compressor.options.get("start_exchanges", 0))
    per_round: dict = {}  # uncompressed or not -> this rank's bytes a round, from the buffers its exchange records

    train = rounds.lane_step(alg, lanes, me * lanes)
    abstract_state = jax.eval_shape(alg.init, jax.random.key(0))
    lane_shapes = buffers.lane_shapes(jax.eval_shape(alg.distribute, abstract_state)[0], lanes)
    spares = buffers.Spares()
    start = start_fn(alg, me * lanes, lanes)
    own, gather = _state_rows(rt)
    split_fn = rounds.split_fn(rt, lambda workers: workers)

    def finish_as(whole: bool):
        across = _across(x, alg.num_workers, counted, whole)
        return jax.jit(lambda state, trained, plan, batches, shared: alg.collect(state, trained, plan, batches,
                                                                                 shared, across=across))

    finishes = {False: finish_as(False), True: finish_as(True)}

    def uncompressed(state) -> bool:
        """Whether this round's exchange is one of PowerSGD's first ``start_exchanges`` (a host read of the count)."""
        return bool(start_exchanges) and int(np.asarray(state.opt_state.rows.exchanges)[0]) < start_exchanges

    def note_exchange(whole: bool) -> None:
        """Where the end of round was traced just now: the bytes of the buffers it hands to MPI."""
        if counted["sent"]:
            per_round[whole] = Traffic(sent=tree_bytes(counted["sent"]), received=tree_bytes(counted["received"]))
            counted["sent"].clear()
            counted["received"].clear()

    def round_fn(state, batches, shared=None, *, split=True):
        rounds.check_batches(batches, rt)
        state = own(state)  # a restored whole state: this rank's rows of the compressor state
        full, batches = rounds.full_batches(batches, rt), rounds.my_rows(batches, rt)
        workers, plan = start(state, spares.take("lanes", lane_shapes))
        trained, metrics = train(workers, batches, shared, state.round)
        whole = uncompressed(state)
        # Done before any mpi4py call below: the program's own MPI calls must not interleave with them.
        new = jax.block_until_ready(finishes[whole](state, trained, plan, full, shared))
        note_exchange(whole)
        traffic = Traffic(sent=per_round[whole].sent, received=per_round[whole].received)
        rt._track(state, trained)
        out = rounds.finish(rt, traffic, metrics, comm)
        if split_fn is not None and split:  # this rank's workers on their own batches, averaged over the ranks
            out.update(rounds.combine_splits(split_fn(new, trained, rounds.own_last(batches, rt), shared), comm))
        spares.keep(lanes=trained)
        return new, out

    rt.init = lambda key: own(jax.jit(alg.init)(key))
    rt.round, rt.gather = round_fn, gather
