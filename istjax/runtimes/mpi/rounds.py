"""What every exchange's round does the same way: check and slice the batches, run this rank's workers (the lane
step), summarise the metrics over the ranks, and the loss split's inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from istjax.core.state import WorkerState, last_steps, recompute_batches, summarize
from istjax.runtimes.base import communicates, map_workers
from istjax.runtimes.mpi.runtime import MPIRuntime, Traffic
from istjax.runtimes.mpi.world import ROOT

__all__ = ["summary", "my_rows", "check_batches", "full_batches", "first_batches", "lane_step", "finish",
           "split_fn", "last_batches", "own_last", "exchanged", "resident_rows"]


def summary(metrics_LxK: dict, comm) -> dict:
    """`istjax.core.state.summarize` of every worker's metrics, allgathered; the same dict on every rank."""
    mine = {k: np.asarray(v) for k, v in metrics_LxK.items()}
    everyone = comm.allgather(mine)
    return {k: np.asarray(v) for k, v in summarize({k: np.concatenate([d[k] for d in everyone]) for k in mine}).items()}


def my_rows(batches, rt):
    """Checks that ``batches`` hold all W workers' rows or this rank's L; returns them unchanged: the train step
    slices this rank's rows inside its jit (`lane_step`), so no eager copy of the batch is made."""
    lanes, w = rt.workers_per_rank, rt.algorithm.num_workers
    lead = {x.shape[0] for x in jax.tree.leaves(batches)}
    if lead in ({w}, {lanes}):
        return batches
    raise ValueError(f"batches have leading sizes {sorted(lead)}; the MPI runtime takes all W={w} workers' batches "
                     f"[W, K, B, ...] (each rank keeps its rows) or this rank's L={lanes} rows [L, K, B, ...].")


def check_batches(batches, rt):
    k = rt.algorithm.local_steps
    for path, x in jax.tree_util.tree_flatten_with_path(batches)[0]:
        if np.ndim(x) < 2 or np.shape(x)[1] != k:
            raise ValueError(f"batches{jax.tree_util.keystr(path)} has shape {np.shape(x)}; a round needs "
                             f"[W, K, B, ...] with K = local_steps = {k}.")


def full_batches(batches, rt):
    """The batches ``collect`` may read (the ``recompute`` policy): all W workers', when this rank was given them."""
    lead = {x.shape[0] for x in jax.tree.leaves(batches)}
    return batches if lead == {rt.algorithm.num_workers} else None


def first_batches(batches, rt):
    """Every worker's first ``recompute_batches`` batches, `[W * n, B, ...]` (``recompute`` statistics,
    `istjax.algorithms.base.recompute_batches`): sliced when this rank was given all W workers' batches, else this
    rank's L workers' all-gathered (data, not model: not counted as exchanged bytes)."""
    first = recompute_batches(batches, rt.algorithm.recompute_batches)
    if full_batches(batches, rt) is not None:
        return first
    every = rt.comm.allgather(jax.tree.map(np.asarray, first))
    return jax.tree.map(lambda *rows: jnp.asarray(np.concatenate(rows)), *every)


def lane_step(alg, lanes: int, first: int, start: Optional[Callable] = None, reduce=None,
               send: Optional[Callable] = None):
    """The device step: this rank's L workers through `map_workers`, as the single-process runtimes run theirs.

    ``step(workers, batches, shared, round_index)``: ``batches`` are all W workers' (this rank's rows, from worker
    ``first``, are sliced inside the jit) or this rank's L. ``start(workers, round_index) -> WorkerState`` turns
    what arrived into the workers' starting states (default: as they are); ``send(trained, started)``, when given,
    what the step returns of the trained workers instead of themselves (what they send back under a rounding wire,
    read against where they started). ``workers`` is donated: every caller passes a buffer the runtime owns (a
    received or freshly cut worker state), and the trained state is written into it.
    """
    run = map_workers(alg.local, lanes, reduce=reduce, communicates=communicates(alg))

    def step(workers, batches, shared, round_index):
        mine = jax.tree.map(lambda x: x if x.shape[0] == lanes else jax.lax.slice_in_dim(x, first, first + lanes),
                            batches)
        if start is not None:
            workers = start(workers, round_index)
        trained, metrics = run(workers, mine, shared)
        return (trained if send is None else send(trained, workers)), metrics

    return jax.jit(step, donate_argnums=0)


def finish(rt: MPIRuntime, traffic: Traffic, metrics, comm) -> dict:
    rt.last_traffic = traffic
    out = summary(metrics, comm)
    out["measured_bytes_sent"] = traffic.sent // rt.workers_per_rank
    out["measured_bytes_received"] = traffic.received // rt.workers_per_rank
    return out


def split_fn(rt: MPIRuntime, as_workers: Callable) -> Optional[Callable]:
    """The jitted loss split ``(state, workers, last_batches, shared) -> metrics`` of this runtime's algorithm
    (``algorithm.split``, the workers first made a `WorkerState` by ``as_workers``); None when it is off."""
    alg = rt.algorithm
    if not rt.loss_split or alg.split is None:
        return None
    return jax.jit(lambda state, workers, last, shared: alg.split(state, as_workers(workers), last, shared))


def combine_splits(mine: dict, comm) -> dict:
    """Every rank's loss split (`istjax.algorithms.base.loss_split`, of its own workers) as one, collective: the mean
    over the ranks, or, where the splits count their workers (``split_workers``: pad slots count none), the mean
    weighted by those counts, which is the mean over every counted worker."""
    keys = sorted(mine)
    count = float(mine.get("split_workers", 1.0))
    total = comm.allreduce(np.array([float(mine[k]) * (1.0 if k == "split_workers" else count) for k in keys]
                                    + [count]))
    out = {k: np.asarray(v if k == "split_workers" else v / max(total[-1], 1.0)) for k, v in zip(keys, total[:-1])}
    return out


def last_batches(full, mine, rt):
    """Every worker's last batch of the round, `[W, 1, B, ...]` (`istjax.core.state.last_steps`): sliced from
    ``full`` when this rank was given all W workers' batches, else this rank's rows all-gathered (collective;
    data, not model: not counted as exchanged bytes)."""
    if full is not None:
        return last_steps(full)
    every = rt.comm.allgather(jax.tree.map(np.asarray, last_steps(mine)))
    return jax.tree.map(lambda *rows: jnp.asarray(np.concatenate(rows)), *every)


def own_last(batches, rt):
    """This rank's L workers' last batch of the round, `[L, 1, B, ...]`, from all W workers' batches or its own."""
    lanes = rt.workers_per_rank
    if {x.shape[0] for x in jax.tree.leaves(batches)} != {lanes}:
        batches = jax.tree.map(lambda b: b[rt.rank * lanes:(rt.rank + 1) * lanes], batches)
    return last_steps(batches)


def exchanged(alg) -> tuple[Callable, Optional[Callable]]:
    """``(held, start)``: what crosses MPI of the workers' states and how a worker starts from it, the algorithm's
    own pieces (`istjax.Algorithm.subnet`: IST's held tree, without a reset optimizer state, which ``start``
    builds on the worker), the same ``start`` the sharded mode uses. An algorithm stated without them moves its
    workers' states whole."""
    if alg.subnet is not None:
        return alg.subnet.held, alg.subnet.start
    return (lambda workers: workers._asdict()), (lambda tree, round_index: WorkerState(**tree))


def resident_rows(rt: MPIRuntime, rows: Callable, with_rows: Callable,
                  whole: Callable = lambda state: state) -> tuple[Callable, Callable]:
    """``(own, gather)`` for a state of which each rank holds only its own workers' rows (``rows(state)``, leaves
    `[L, ...]`; ADMM's duals, dynamic averaging's models): ``own(state)``, the state with only this rank's rows (a
    whole state's W rows sliced to its L, a rank's own passed through); ``gather(state)``, the whole state on rank 0
    (None elsewhere), every rank's rows gathered to it in rank order and ``whole`` of it (the global fields computed
    from every row; collective; for checkpoints and evaluation, not counted as exchanged bytes)."""
    lanes, first = rt.workers_per_rank, rt.rank * rt.workers_per_rank

    def own(state):
        held = rows(state)
        if jax.tree.leaves(held)[0].shape[0] == lanes:
            return state
        return with_rows(state, jax.tree.map(lambda v: v[first:first + lanes], held))

    def gather(state):
        every = rt.comm.gather(jax.tree.map(np.asarray, rows(state)), root=ROOT)
        if rt.rank != ROOT:
            return None
        return whole(with_rows(state, jax.tree.map(lambda *held: jnp.asarray(np.concatenate(held)), *every)))

    return own, gather
