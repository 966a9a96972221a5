"""The ``"groups"`` exchange (codistillation, `istjax.algorithms.codistill`): groups of workers that average among
themselves every round and see each other only through copies of their models exchanged every so many rounds.

Each process's workers belong to one group (G must divide the process count N: group ``g``, workers
``g * R .. (g + 1) * R - 1``, spans ranks ``g * N / G .. (g + 1) * N / G - 1``). Every rank holds the whole state
layout: every group's model and the teachers' copies; its own group's model it keeps current, the other groups'
it learns at each exchange. A round: each rank trains its L workers (`istjax.runtimes.mpi.rounds.lane_step`) from
its group's model against the teachers it holds; the group's replicas are summed by an allreduce over the group's
ranks (one buffer per worker; none for a group of one replica) and averaged; on an exchange round each group's
first rank broadcasts its group's model to the ranks of the other groups (one communicator per group: its first
rank and every rank outside it), so every rank holds every group's new model and retakes the teachers.

Bytes: each round reports, per worker, the buffers its rank handed to MPI divided among its L workers: its replica
and the group's sum (a model each way, when R > 1), and on an exchange round the G - 1 models its rank received
(a rank receives each teacher once for all its workers, where the single-process count has every worker receive its
own: the two agree at one worker a rank) and, on a group's first rank, the one it broadcast. `MPIRuntime.gather`
brings each group's model from its first rank to rank 0 (collective; for checkpoints and evaluation).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import istjax.runtimes.mpi.buffers as buffers
import istjax.runtimes.mpi.rounds as rounds
from istjax.core.errors import ArgError
from istjax.runtimes.mpi.runtime import MPIRuntime, Traffic
from istjax.runtimes.mpi.world import ROOT

__all__ = ["WHOLE_STATE", "install", "check"]

#: Every rank holds the whole state's layout (every group's model, the teachers).
WHOLE_STATE = True


def check(algorithm, n: int) -> None:
    """Refuses a process count the groups do not divide (a process whose workers would span two groups)."""
    num_groups = algorithm.groups.count
    if n % num_groups:
        fits = [k for k in range(num_groups, 4 * num_groups + 1, num_groups)]
        raise ArgError("groups", num_groups, f"groups={num_groups} under MPI needs each process's workers in one "
                       f"group, so the group count must divide the process count {n};",
                       f"launch a multiple of {num_groups} processes ({', '.join(map(str, fits))}) or choose groups "
                       f"among the divisors of {n}.")


def _communicators(comm, pieces, n: int) -> list:
    """For each group its broadcast communicator (its first rank, as rank 0 of it, and every rank outside the group;
    None on the group's other ranks), made collectively once."""
    from mpi4py import MPI

    per_group, me = n // pieces.count, comm.Get_rank()
    out = []
    for g in range(pieces.count):
        first, inside = g * per_group, me // per_group == g
        sub = comm.Split(0 if me == first or not inside else MPI.UNDEFINED, 0 if me == first else 1 + me)
        out.append(None if sub == MPI.COMM_NULL else sub)
    return out


def install(rt: MPIRuntime) -> None:
    """Fills in ``rt``'s ``init``, ``round`` and ``gather`` for the groups' round (module docstring)."""
    alg, comm, pieces = rt.algorithm, rt.comm, rt.algorithm.groups
    n, lanes, me = rt.size, rt.workers_per_rank, rt.rank
    per_group, first = n // pieces.count, me * lanes
    mine = me // per_group  # this rank's group
    made = {}

    def communicators():  # made at the first round, collectively (building the runtime is not collective)
        if not made:
            within = comm.Split(mine, me)  # the group's ranks
            made.update(broadcast=_communicators(comm, pieces, n),
                        x=buffers.TreeCollectives(within) if pieces.replicas > 1 else None)
        return made["x"], made["broadcast"]

    train = rounds.lane_step(alg, lanes, first)

    @jax.jit
    def start(state):
        workers, _ = alg.distribute(state)
        return jax.tree.map(lambda v: jax.lax.dynamic_slice_in_dim(v, first, lanes), workers)

    @jax.jit
    def group_model(state, sums):  # this group's mean of its replicas, in its row of every group's model
        model = jax.tree.map(lambda s: (jnp.sum(s.astype(jnp.float32), axis=0) / pieces.replicas).astype(s.dtype),
                             sums)
        return jax.tree.map(lambda all_, m: all_.at[mine].set(m), pieces.models(state), model)

    def exchange(model_G, traffic):
        """Every group's model from its first rank to the other groups' ranks; the rows it fills in."""
        rows = [np.array(v) for v in jax.tree.leaves(model_G)]  # writable copies
        for g, sub in enumerate(communicators()[1]):
            if sub is None:
                continue
            for v in rows:
                piece = np.ascontiguousarray(v[g])
                sub.Bcast(piece.reshape(-1).view(np.uint8), root=0)  # as bytes: any dtype, bfloat16 included
                v[g] = piece
                traffic.add(**{"sent" if g == mine else "received": piece})
        return jax.tree.unflatten(jax.tree.structure(model_G), [jnp.asarray(v) for v in rows])

    def round_fn(state, batches, shared=None, *, split=True):  # split: codistillation draws no loss split
        rounds.check_batches(batches, rt)
        batches, traffic = rounds.my_rows(batches, rt), Traffic()
        trained, metrics = train(start(state), batches, shared, state.round)
        replicas = (trained.params, trained.model_state)
        x = communicators()[0]
        if x is not None:
            sums = x.allreduce(replicas)  # one buffer per worker
            traffic.add(sent=replicas, received=sums)
        else:
            sums = replicas
        model_G = group_model(state, sums)
        if pieces.exchanging(int(state.round) + 1):
            model_G = exchange(model_G, traffic)
        new = pieces.settle(state, model_G)
        out = rounds.finish(rt, traffic, metrics, comm)
        out["teachers_exchanged"] = np.asarray(alg.round_metrics(state, new)["teachers_exchanged"])
        return new, out

    def gather(state):
        own = jax.tree.map(lambda v: np.asarray(v[mine]), pieces.models(state))
        every = comm.gather(own, root=ROOT)
        if me != ROOT:
            return None
        leaders = [every[g * per_group] for g in range(pieces.count)]
        return pieces.whole(state, jax.tree.map(lambda *rows: jnp.asarray(np.stack(rows)), *leaders))

    rt.init, rt.round, rt.gather = jax.jit(alg.init), round_fn, gather
