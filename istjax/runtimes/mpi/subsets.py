"""The ``"subsets"`` exchange (dynamic averaging, `istjax.algorithms.dynamic`): every rank holds its own L workers'
models, model states and optimizer states (the algorithm's `istjax.algorithms.base.Subsets` rows) and the replicated
rest of the state (the reference model, the counters); nothing of a worker leaves its rank unless the coordinator,
rank 0, asks for it.

A round: each rank trains its L workers (`istjax.runtimes.mpi.rounds.lane_step`), computes their flags and sends
them to rank 0 (one small ``Gather``, ``FLAG_BYTES`` a worker). Rank 0 decides from all W flags (``decide``); with no
violator the round ends there. Otherwise it asks, doubling level by level, for the models of the subset ``B`` it
grows: a broadcast names the workers to send (control, a few bytes, not counted as exchanged), and each named
worker's rank sends that worker's model (parameters and model state, one buffer) to rank 0 point to point, once a
round. Rank 0 checks the subset (``close``) and settles or asks for more; at half the workers or more it asks for all.
Then rank 0 sends the subset's average (``mean``) to each of its workers, one buffer a worker, and every rank
``settle``s its rows (and, after a full synchronisation, which every worker took part in, the reference model).
Models move only for the workers in ``B``: there is no collective over the workers that were not asked.

Each round reports, per worker `[W]`, the bytes of the buffers handed to MPI for it (``measured_bytes_sent``: its
flag, and its model if it was asked; ``measured_bytes_received``: the average if it took it), beside the
algorithm's own round metrics (``model_transfers``, ``violations``, ...), which every rank computes alike from the
replicated counters. A rank's ``params`` and ``model_state`` are the mean of its own workers' models only;
`MPIRuntime.gather` brings every worker's rows to rank 0 and computes the global fields from all W (``whole``), for
checkpoints and evaluation. The loss split is not computed (no rank holds the merged model during a round).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import istjax.runtimes.mpi.rounds as rounds
from istjax.runtimes.mpi.runtime import MPIRuntime
from istjax.runtimes.mpi.world import ROOT

__all__ = ["WHOLE_STATE", "install"]

#: Every rank holds the whole model (its workers' own copies of it).
WHOLE_STATE = True


class _Packing:
    """One worker's model ``(params, model_state)`` as one contiguous byte buffer, and back (leaves in tree order,
    each leaf's own bytes: no dtype is widened)."""

    def __init__(self, model: Any):
        leaves, self.treedef = jax.tree.flatten(model)
        self.shapes = [(tuple(x.shape), np.dtype(x.dtype)) for x in leaves]
        self.sizes = [math.prod(shape) * dtype.itemsize for shape, dtype in self.shapes]
        self.nbytes = int(sum(self.sizes))

    def pack(self, model: Any) -> np.ndarray:
        return np.concatenate([np.ascontiguousarray(np.asarray(x)).reshape(-1).view(np.uint8)
                               for x in jax.tree.leaves(model)] or [np.zeros(0, np.uint8)])

    def unpack(self, buffer: np.ndarray) -> list:
        out, offset = [], 0
        for (shape, dtype), size in zip(self.shapes, self.sizes):
            out.append(buffer[offset:offset + size].view(dtype).reshape(shape))
            offset += size
        return out


class _Coordinator:
    """Rank 0's side of one round's balancing: the decision from every flag, then a message at a time
    ``(ask, final)``: ``ask`` `[W]` bool, the workers whose models must come up now; ``final`` None while it grows
    ``B``, then ``(violators, synced, full)``. Between messages the asked models arrive in ``slots``
    (`[W, ...]` per leaf; a row not asked stays zero and weighs zero in every mean)."""

    def __init__(self, pieces, close: Callable, state, flags_W: np.ndarray, packing: _Packing):
        violators, position = pieces.decide(state, jnp.asarray(flags_W))
        self.violators, self.position = np.asarray(violators), np.asarray(position)
        self.w = flags_W.shape[0]
        self.pieces, self.state, self.close, self.packing = pieces, state, close, packing
        self.slots = [np.zeros((self.w, *shape), dtype) for shape, dtype in packing.shapes]
        self.have = np.zeros(self.w, bool)

    def messages(self):
        none, count = np.zeros(self.w, bool), int(self.violators.sum())
        if count == 0:
            yield none, (self.violators, none, False)
            return
        for level in range(self.w.bit_length() + 1):
            members, half = (np.asarray(v) for v in self.pieces.grow(self.position, count, level, self.w))
            if half:
                yield ~self.have, (self.violators, np.ones(self.w, bool), True)
                return
            yield members & ~self.have, None
            if bool(self.close(self.state, self.model_W()[0], jnp.asarray(members))):
                yield none, (self.violators, members, False)
                return
        raise AssertionError("the subset holds every worker by the last level")

    def receive(self, worker: int, buffer: np.ndarray) -> None:
        for slot, piece in zip(self.slots, self.packing.unpack(buffer)):
            slot[worker] = piece
        self.have[worker] = True

    def model_W(self) -> Any:
        return jax.tree.unflatten(self.packing.treedef, [jnp.asarray(s) for s in self.slots])


class _Moves:
    """One rank's side of the round's messages (module docstring), each buffer it hands to MPI counted for the
    worker it carries in ``sent`` and ``received`` (`[L]`, reset each round)."""

    def __init__(self, rt: MPIRuntime, flags: Callable, close: Callable, mean: Callable, packing: _Packing):
        from mpi4py import MPI

        self.MPI, self.comm, self.pieces, self.packing = MPI, rt.comm, rt.algorithm.subsets, packing
        self.w, self.lanes, self.me = rt.algorithm.num_workers, rt.workers_per_rank, rt.rank
        self.first = self.me * self.lanes
        self.flags, self.close, self.mean = flags, close, mean
        self.sent, self.received = np.zeros(self.lanes, np.int64), np.zeros(self.lanes, np.int64)

    def balance(self, state, trained) -> tuple:
        """The coordinator's loop over the ranks: ``(violators, synced, full, model)`` (`[W]`, `[W]`, bool, the
        average this rank's synchronised workers took; one of its own models where none did)."""
        self.sent[:], self.received[:] = 0, 0
        flags_W = self._flags_up(state, trained)
        root = self.me == ROOT
        coordinator = _Coordinator(self.pieces, self.close, state, flags_W, self.packing) if root else None
        steps = coordinator.messages() if root else None
        while True:
            ask, final = self.comm.bcast(next(steps) if root else None, root=ROOT)  # control: which workers send
            if ask.any():
                self._models_up(ask, trained, coordinator)
            if final is not None:
                violators, synced, full = final
                return violators, synced, full, self._average_down(synced, coordinator, trained)

    def _flags_up(self, state, trained):
        mine = np.ascontiguousarray(np.asarray(self.flags(state, trained.params), np.float32))
        every = np.empty(self.w, np.float32) if self.me == ROOT else None
        self.comm.Gather(mine, every, root=ROOT)
        self.sent += mine.itemsize
        return every

    def _models_up(self, ask, trained, coordinator):
        """Each asked worker of this rank sends its model to rank 0, which receives every asked one."""
        requests, buffers = [], []
        for lane in range(self.lanes):
            if ask[self.first + lane]:
                buffers.append(self.packing.pack(jax.tree.map(lambda v: v[lane],
                                                              (trained.params, trained.model_state))))
                requests.append(self.comm.Isend([buffers[-1], self.MPI.BYTE], dest=ROOT, tag=self.first + lane))
                self.sent[lane] += self.packing.nbytes
        if self.me == ROOT:
            into = np.empty(self.packing.nbytes, np.uint8)
            for worker in np.flatnonzero(ask):
                self.comm.Recv([into, self.MPI.BYTE], source=int(worker) // self.lanes, tag=int(worker))
                coordinator.receive(int(worker), into)
        self.MPI.Request.Waitall(requests)

    def _average_down(self, synced, coordinator, trained):
        """Rank 0 sends the subset's average to each synchronised worker; this rank's take it (the model)."""
        requests, average = [], None
        if self.me == ROOT and synced.any():
            average = self.packing.pack(self.mean(coordinator.model_W(), jnp.asarray(synced)))
            requests = [self.comm.Isend([average, self.MPI.BYTE], dest=int(worker) // self.lanes,
                                        tag=self.w + int(worker)) for worker in np.flatnonzero(synced)]
        model = jax.tree.map(lambda v: v[0], (trained.params, trained.model_state))  # unread unless one synced
        for lane in range(self.lanes):
            if synced[self.first + lane]:
                into = np.empty(self.packing.nbytes, np.uint8)
                self.comm.Recv([into, self.MPI.BYTE], source=ROOT, tag=self.w + self.first + lane)
                self.received[lane] += self.packing.nbytes
                model = jax.tree.unflatten(self.packing.treedef, [jnp.asarray(x) for x in self.packing.unpack(into)])
        self.MPI.Request.Waitall(requests)
        return model


def install(rt: MPIRuntime) -> None:
    """Fills in ``rt``'s ``init``, ``round`` and ``gather`` for the subsets' round (module docstring)."""
    alg, comm, pieces = rt.algorithm, rt.comm, rt.algorithm.subsets
    lanes, first = rt.workers_per_rank, rt.rank * rt.workers_per_rank
    train = rounds.lane_step(alg, lanes, first)
    start, settle = jax.jit(alg.distribute), jax.jit(pieces.settle)
    own, gather = rounds.resident_rows(rt, pieces.rows, pieces.with_rows, jax.jit(pieces.whole))
    abstract = jax.eval_shape(alg.init, jax.random.key(0))
    moves = _Moves(rt, jax.jit(pieces.flags), jax.jit(pieces.close), jax.jit(pieces.mean),
                   _Packing((abstract.params, abstract.model_state)))

    def round_fn(state, batches, shared=None, *, split=True):
        rounds.check_batches(batches, rt)
        state = own(state)  # a restored whole state: this rank's workers' rows
        batches = rounds.my_rows(batches, rt)
        workers, _ = start(state)
        trained, metrics = train(workers, batches, shared, state.round)
        violators, synced, full, model = moves.balance(state, trained)
        rt._track(state, trained)
        new = settle(state, trained, jnp.asarray(synced[first:first + lanes]), jnp.asarray(synced),
                     jnp.asarray(violators), jnp.asarray(full), model)
        out = rounds.summary(metrics, comm)
        out.update({k: np.asarray(v) for k, v in alg.round_metrics(state, new).items()})
        out["measured_bytes_sent"] = np.concatenate(comm.allgather(moves.sent)).astype(np.float32)
        out["measured_bytes_received"] = np.concatenate(comm.allgather(moves.received)).astype(np.float32)
        return new, out

    rt.init, rt.round, rt.gather = (lambda key: own(jax.jit(alg.init)(key))), round_fn, gather
