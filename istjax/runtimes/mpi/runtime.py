"""`MPIRuntime`, an algorithm bound to the processes of ``mpiexec``, and `Traffic`, the bytes a rank handed to MPI.

Each exchange's module (`istjax.runtimes.mpi.parameter_server`, ``replicas``, ``sharded``, ``tensor``) fills in a
runtime's ``init``, ``round`` and ``gather`` and declares whether a rank holds the whole state; the table in
`istjax.runtimes.mpi` picks the module.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Optional

import jax

from istjax.core.spec import path_str
from istjax.runtimes.base import RuntimeHandle

__all__ = ["MODES", "GRADIENT_BUFFERS", "Traffic", "MPIRuntime"]

PyTree = Any
#: The MPI runtime's modes (``runtime.mode``): rank 0 holds the model, or every rank holds a shard of it.
MODES = ("parameter_server", "sharded")
#: How data parallel's gradients are all-reduced (`MPIRuntime.gradient_buffers`).
GRADIENT_BUFFERS = ("leaves", "one")


@dataclasses.dataclass
class Traffic:
    """Bytes of the buffers this rank handed to MPI in one round, on its workers' side (all L of them)."""

    sent: int = 0
    received: int = 0
    by_leaf: dict = dataclasses.field(default_factory=dict)  # path -> [received, sent], sharded/PS IST only

    def add(self, *, sent: PyTree = None, received: PyTree = None, leaf_paths: bool = False):
        for tree, slot in ((received, 0), (sent, 1)):
            if tree is None:
                continue
            flat = jax.tree_util.tree_flatten_with_path(tree)[0]
            total = 0
            for path, x in flat:
                nbytes = int(x.size) * x.dtype.itemsize
                total += nbytes
                if leaf_paths:
                    self.by_leaf.setdefault(path_str(path), [0, 0])[slot] += nbytes
            if slot == 0:
                self.received += total
            else:
                self.sent += total


@dataclasses.dataclass
class MPIRuntime:
    """An algorithm running on MPI processes.

    Attributes:
      init: ``key -> state``; what the state holds depends on the mode (module docstring); `TrainState` always.
      round: ``(state, batches, shared=None) -> (state, metrics)``; batches `[W, K, B, ...]` (or this rank's
        `[L, K, B, ...]`). Metrics: ``train_loss``, ``train_accuracy`` (over all W workers), ``worker_loss`` `[W]`,
        ``measured_bytes_sent`` and ``measured_bytes_received`` (per worker, this round).
      gather: ``state -> TrainState`` the whole state on rank 0, ``None`` elsewhere; call it on every rank.
      algorithm, mode: what it runs.
      rank, size: this process and the process count; ``workers_per_rank``: L.
      last_traffic: the previous round's `Traffic` (per-leaf bytes for IST).
      largest_array_bytes: the largest array (state, exchange buffer, worker state) this rank has held in a round.
      gradient_buffers: data parallel's per-step all-reduce: ``"leaves"`` (one per parameter leaf, each posted as
        soon as its gradient is computed) or ``"one"`` (the gradients concatenated into one buffer after the whole
        backward pass); `GRADIENT_BUFFERS`.
      evaluate: sharded mode: the task's evaluation from this rank's part (`istjax.algorithms.exchange.owner_evaluate`:
        a model whose tensor split cuts its labels (SparseMLP) by label blocks, any other model with
        ``owner_logits`` by reduced partial sums;
        no rank gathers the model); None when the model cannot be evaluated from its parts (`RuntimeHandle.evaluate`).
      phases: set to a dict to profile the parameter-server round: seconds per phase (``batches``, ``distribute``,
        ``scatter``, ``local``, ``gather``, ``collect``, ``metrics``) are added to it, each phase waited for
        (`jax.block_until_ready`) so it is timed alone; None (the default) adds no waits.
      loss_split: whether the round adds the loss split to its metrics (`mpi_runtime`).
      whole_state: whether the state a rank's ``round`` returns is the whole model (rank 0 of a parameter server,
        every replica) or a shard of it (sharded, tensor parallel): declared by the exchange's module
        (its ``WHOLE_STATE``).
    """

    algorithm: Any
    mode: str
    rank: int
    size: int
    workers_per_rank: int
    comm: Any = None
    init: Optional[Callable] = None
    round: Optional[Callable] = None
    gather: Optional[Callable] = None
    gradient_buffers: str = "leaves"
    last_traffic: Traffic = dataclasses.field(default_factory=Traffic)
    largest_array_bytes: int = 0
    phases: Optional[dict] = None
    evaluate: Optional[Callable] = None
    round_memory: Optional[Callable] = None
    loss_split: bool = True
    whole_state: bool = True

    def _phase(self, name: str, t0: float, *outs) -> float:
        """Adds the time since ``t0`` to phase ``name`` (after waiting for ``outs``) when profiling; the new t0."""
        if self.phases is None:
            return t0
        jax.block_until_ready(outs)
        now = time.perf_counter()
        self.phases[name] = self.phases.get(name, 0.0) + now - t0
        return now

    def gather_params(self, state) -> Optional[PyTree]:
        """The full parameters on rank 0 (``None`` elsewhere); every rank must call it."""
        full = self.gather(state)
        return None if full is None else full.params

    def agree(self, value: int) -> int:
        """The largest ``value`` any rank passes (every rank must call it)."""
        from mpi4py import MPI

        return int(self.comm.allreduce(int(value), op=MPI.MAX))

    def handle(self) -> RuntimeHandle:
        return RuntimeHandle(name="mpi", fusable=False, gather=self.gather,
                             agree=self.agree, whole_state=self.whole_state, rank=self.rank, size=self.size,
                             allgather=self.comm.allgather, evaluate=self.evaluate, round_memory=self.round_memory)

    def as_algorithm(self):
        """The algorithm with this runtime's ``init``, ``round`` and handle: a drop-in for code that takes one."""
        return dataclasses.replace(self.algorithm, init=self.init, round=self.round, runtime=self.handle())

    def _track(self, *trees):
        for x in jax.tree.leaves(trees):
            self.largest_array_bytes = max(self.largest_array_bytes, int(x.size) * x.dtype.itemsize)
