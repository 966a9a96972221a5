"""The ``mpi`` runtime: an algorithm's W workers spread over the N processes of ``mpiexec -n N`` (one per host).

``istjax.ist(..., backend="mpi", mode="parameter_server" | "sharded")`` (any factory; the CLI's
``--config.runtime.name=mpi``) binds an algorithm to it; `mpi_runtime(algorithm, mode=...)` gives the `MPIRuntime` itself
(byte and memory counters, ``gather_params``). Process ``r`` runs workers ``r * L .. (r + 1) * L - 1`` (``L = W / N``)
through the same `istjax.runtimes.base.map_workers` as the single-process runtimes (one worker per process runs
unmapped). Every process passes the same full ``batches`` (leaves `[W, K, B, ...]`, e.g. from
`istjax.data.make_batch_fn`) and keeps its own rows; a `[L, K, B, ...]` slice is accepted too. The shared input is
passed to every process and read locally: it never crosses MPI.

The runtime never asks which algorithm it runs; it applies the exchange the algorithm declares
(`istjax.Algorithm.exchange`) to the algorithm's own ``distribute`` / ``local`` / ``collect``:

``"subnetworks"`` (IST), ``mode="parameter_server"``
    rank 0 holds the global `TrainState` and runs ``distribute``; what the W workers hold of it (the algorithm's
    ``held`` tree, `istjax.Algorithm.subnet`: no reset optimizer state) is scattered `[N, L, ...]`
    (`mpi4jax.scatter`); every rank starts its L workers from their pieces with the algorithm's ``start`` (as the
    sharded mode does), runs ``local`` on them and rank 0 gathers them back (`mpi4jax.gather`) and runs
    ``collect``. Other ranks hold no parameters (``state.params == ()``).
``"subnetworks"``, ``mode="sharded"``
    no rank ever holds the whole model in a round. The algorithm gives its round as owners run it
    (`istjax.Algorithm.owner_side`, derived from its pieces, `istjax.Algorithm.subnet`: IST and ResIST, any model, a
    carried optimizer state included), and the runtime puts collectives between its pieces; what each rank holds
    is `istjax.core.shard.Layout`. Rank ``o`` owns slice ``o`` of every neuron group its sampler deals stratified
    by N owners (``istjax.stratified(num_owners=N)``; ResIST: ``num_owners=N``), and of every leaf indexed by such a
    group that slice along the first such axis (a hidden-to-hidden `[H1, H2]` weight: rows `[H1 / N, H2]`; a tiled
    `[self, neighbour]` axis: its units in each tile). Each round every rank computes the same plan; each owner
    cuts every worker's pieces of its slice (one fixed-size `mpi4jax.alltoall` out and one back); leaves indexed
    only by groups dealt some other way (ResIST's strided first blocks) are held whole by every rank, their trained
    pieces all-gathered and merged by every rank; shared leaves are replicated and averaged with an allreduce. The
    ``recompute`` model-state policy runs from each rank's slice for a model that gives ``owner_statistics``
    (`istjax.core.contract`) and is refused for one that does not (it is a forward pass of the whole merged model).
``"replicas"`` (local SGD), ``mode="parameter_server"`` (``"sharded"`` is refused: every rank holds the model)
    every rank holds the global state and runs ``distribute`` for its own workers; after ``local`` the L workers'
    states are summed across ranks (one allreduce buffer per worker) and ``collect`` averages them.
``"gradients"`` (data parallel), ``mode="parameter_server"``
    as replicas, but ``local`` receives a ``reduce`` that averages each step's gradients across every worker of
    every rank (an allreduce inside the compiled local phase); the model state is averaged at the end of the round.
``"activations"`` (tensor parallel), either mode (the model is always in shards)
    one shard per rank (W = N); every rank holds its shard of every layer and runs the algorithm's shard round
    (`istjax.Algorithm.tensor`) with mpi4jax collectives inside the compiled step (an all-gather of the hidden
    units, its adjoint all-to-all, the loss's max and sums); evaluated in place from the shards, checkpointed shard by
    shard. Its bytes are read from the compiled program: every mpi4jax call's buffers, times the scan's K.

mpi4jax cannot run inside a multi-device computation, so every step runs on the process's first local device.
Each round reports the bytes of the buffers handed to MPI, on the workers' side (what a worker receives: its slice
of a scatter or all-to-all, the result of an allreduce; what it sends: its slice of a gather or all-to-all, its
allreduce input), per worker: ``metrics["measured_bytes_received"]`` and ``metrics["measured_bytes_sent"]``.
Exchanges between device steps are counted from the arrays passed; the gradient allreduce inside the compiled local
phase is counted from the traced buffers it hands to MPI, times the K calls the local scan makes. A rank moves one
buffer per worker (no pre-reduction of its own workers), so these equal the analytic ``algorithm.comm``. Metrics
(losses) travel by a small host allgather that is not counted.

Evaluation: `MPIRuntime.gather` assembles the whole `TrainState` on rank 0 (``None`` on the others). In sharded mode a
model that gives ``owner_logits`` (`istjax.core.contract`: every model istjax ships) is evaluated in place instead
(`MPIRuntime.evaluate`): every rank runs its slice of the forward pass and the partial sums of each layer are
all-reduced (a depth-split ResNet's blocks run owner after owner), so no rank holds the whole model in a round, an
evaluation or a checkpoint; a model without it is gathered to rank 0 for evaluation, the one moment a rank holds
all of it.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, Optional

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np

from istjax.core.errors import ArgError
from istjax.core import contract
from istjax.core import memory as memory_lib
from istjax.core.collectives import Collectives
from istjax.core import shard as shard_lib
from istjax.core import precision
from istjax.core import tiled_init
from istjax.core.partition import owner_counts
from istjax.core.process import is_primary as is_primary  # the one answer (`istjax.core.process`), kept here by name
from istjax.core.comm import tree_bytes
from istjax.core.spec import path_str
from istjax.core.subnet import extract
from istjax.core.state import TrainState, WorkerState, recompute_batches, round_keys, summarize
from istjax.runtimes.base import Runtime, RuntimeHandle, communicates, map_workers

__all__ = ["MODES", "GRADIENT_BUFFERS", "RUNTIME", "MPIRuntime", "mpi_runtime", "build", "check_fit", "rank", "size",
           "sharded_layout",
           "is_primary", "abort_on_error"]

PyTree = Any
#: The MPI runtime's modes (``runtime.mode``): rank 0 holds the model, or every rank holds a shard of it.
MODES = ("parameter_server", "sharded")
GRADIENT_BUFFERS = ("leaves", "one")
ROOT = 0
_ABORT_GRACE_S = 1.0  # seconds a failing rank waits, after printing why, before MPI_Abort


def _world():
    from mpi4py import MPI  # late: importing mpi4py initialises MPI

    return MPI.COMM_WORLD


def rank() -> int:
    """This process's MPI rank (0 when not launched by mpiexec)."""
    return _world().Get_rank()


def size() -> int:
    """The number of MPI processes (1 when not launched by mpiexec)."""
    return _world().Get_size()


def abort_on_error() -> None:
    """Makes an uncaught exception on any rank end the whole job: print ``rank r of N failed`` and the traceback
    to stderr, then ``MPI_Abort``, so the other ranks cannot wait forever in a collective. Idempotent.

    A rank that dies without an exception (killed, ``os._exit``) is caught by ``mpiexec`` itself, which ends the
    job with a non-zero status naming the process that exited.
    """
    if getattr(sys.excepthook, "_istjax_abort", False):
        return
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        comm = _world()
        r, n = comm.Get_rank(), comm.Get_size()
        sys.stderr.write(f"istjax: rank {r} of {n} failed with {exc_type.__name__}: {exc}; aborting all ranks.\n")
        traceback.print_exception(exc_type, exc, tb, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        if n > 1:
            # mpiexec forwards a rank's output through its proxy, which MPI_Abort kills: give it a moment to pass on
            # the message (without it the job sometimes ended with empty output, seen in CI).
            time.sleep(_ABORT_GRACE_S)
            comm.Abort(1)
        previous(exc_type, exc, tb)

    hook._istjax_abort = True
    sys.excepthook = hook


def check_fit(num_workers: int, num_processes: Optional[int] = None, *, fix: str = "num_workers=") -> int:
    """Returns ``L = W / N``, the workers per process; raises a ValueError naming the fix when W does not fit.

    Call it (every rank does, inside `mpi_runtime`) before anything is compiled, so every rank refuses the same config.
    ``fix`` is how the caller sets W: the factories' ``num_workers=`` (default), the CLI's ``--config.num_workers=``.
    """
    n = size() if num_processes is None else num_processes
    if num_workers % n:
        lower, upper = (num_workers // n) * n, (num_workers // n + 1) * n
        fits = f"{lower} or {upper}" if lower else f"{upper}"
        launch = f", or launch with mpiexec -n N for an N that divides {num_workers}."
        raise ArgError("num_workers", num_workers,
                       f"num_workers={num_workers} does not fit {n} MPI processes: each process runs num_workers / "
                       f"{n} workers, so num_workers must be a multiple of {n}.", f"Use {fix}{fits}{launch}",
                       f"Use --config.num_workers={fits}{launch}")
    return num_workers // n


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
        a one-hidden-layer SparseMLP by label blocks, any other model with ``owner_logits`` by reduced partial sums;
        no rank gathers the model); None when the model cannot be evaluated from its parts (`RuntimeHandle.evaluate`).
      phases: set to a dict to profile the parameter-server round: seconds per phase (``batches``, ``distribute``,
        ``scatter``, ``local``, ``gather``, ``collect``, ``metrics``) are added to it, each phase waited for
        (`jax.block_until_ready`) so it is timed alone; None (the default) adds no waits.
      loss_split: whether the round adds the loss split to its metrics (`mpi_runtime`).
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
        sharded = (self.mode == "sharded" and self.algorithm.exchange == "subnetworks"
                   or self.algorithm.exchange == "activations")  # tensor parallel: always in shards
        return RuntimeHandle(name="mpi", fusable=False, gather=self.gather,
                             agree=self.agree, whole_state=not sharded, rank=self.rank, size=self.size,
                             allgather=self.comm.allgather, evaluate=self.evaluate, round_memory=self.round_memory)

    def as_algorithm(self):
        """The algorithm with this runtime's ``init``, ``round`` and handle: a drop-in for code that takes one."""
        return dataclasses.replace(self.algorithm, init=self.init, round=self.round, runtime=self.handle())

    def _track(self, *trees):
        for x in jax.tree.leaves(trees):
            self.largest_array_bytes = max(self.largest_array_bytes, int(x.size) * x.dtype.itemsize)


def build(algorithm, mode: str = "parameter_server", comm=None, loss_split: bool = True):
    """``algorithm`` bound to the MPI processes of this job (the `Runtime` entry point)."""
    return mpi_runtime(algorithm, mode=mode, comm=comm, loss_split=loss_split).as_algorithm()


def check_launch(num_workers: int, *, mode: str = "parameter_server", comm=None,
                 gradient_buffers: str = "leaves", loss_split: bool = True) -> int:
    """What the MPI runtime refuses before any algorithm is built: an unknown mode or gradient buffering, a job of
    one process, and W not a multiple of the process count (`check_fit`). Returns ``L = W / N``, the workers per
    process. `mpi_runtime` calls it first; a config's build calls it before building the algorithm."""
    if mode not in MODES:
        raise ArgError("mode", mode, f"mode={mode!r}: unknown;", f"choose one of {MODES}.")
    if gradient_buffers not in GRADIENT_BUFFERS:
        raise ArgError("gradient_buffers", gradient_buffers, f"gradient_buffers={gradient_buffers!r}: unknown;",
                       f"choose one of {GRADIENT_BUFFERS}.")
    comm = _world() if comm is None else comm
    n = comm.Get_size()
    if n < 2:
        raise ArgError("backend", "mpi",
                       "runs the workers on several processes, but this is one process (not launched by mpiexec, or "
                       "mpiexec -n 1): it would run every worker here, slower than simulate.",
                       "Launch the script as `mpiexec -n 2 python ...` (mpiexec is in .venv/bin), or use "
                       "backend='simulate'.",
                       "Launch it as `mpiexec -n 2 istjax train --config.runtime.name=mpi ...` (mpiexec is in "
                       ".venv/bin), or use --config.runtime.name=simulate.")
    return check_fit(num_workers, n)


def mpi_runtime(algorithm, *, mode: str = "parameter_server", comm=None,
                gradient_buffers: str = "leaves", loss_split: bool = True) -> MPIRuntime:
    """Runs ``algorithm`` (any runtime's; its pieces are what is used) on the MPI processes of this job.

    Validates everything on every rank before compiling: the mode, that W is a multiple of the process count, and
    what the exchange needs (sharded IST: the sampler and the spec). Installs `abort_on_error`.

    Args:
      algorithm: from `istjax.ist`, `istjax.data_parallel`, `istjax.local_sgd` or any factory declaring an exchange.
      mode: ``"parameter_server"`` or ``"sharded"``.
      comm: an mpi4py communicator (default ``COMM_WORLD``).
      gradient_buffers: ``"leaves"`` or ``"one"``: how data parallel's gradients are all-reduced (`MPIRuntime`).
      loss_split: add the round's loss split (``algorithm.split``) to its metrics: in the parameter-server mode
        rank 0 computes it after ``collect`` from the gathered workers and every worker's last batch; with replicas
        each rank from its own workers, averaged across ranks. The sharded mode does not compute it (no rank holds
        the merged model).
    """
    lanes = check_launch(algorithm.num_workers, mode=mode, comm=comm, gradient_buffers=gradient_buffers)
    builders = {("subnetworks", "parameter_server"): _server, ("subnetworks", "sharded"): _sharded,
                ("replicas", "parameter_server"): _replicas, ("gradients", "parameter_server"): _replicas,
                ("activations", "parameter_server"): _tensor, ("activations", "sharded"): _tensor}
    if mode == "sharded" and algorithm.exchange in ("replicas", "gradients"):
        raise ArgError("mode", mode,
                       f"mode='sharded' splits the model among the processes for an algorithm that exchanges "
                       f"sub-networks (ist, resist), but {algorithm.name!r} exchanges {algorithm.exchange}: every "
                       f"process holds the whole model, so the mode would change nothing.",
                       "Use mode='parameter_server'.", "Use --config.runtime.mode=parameter_server.")
    if (algorithm.exchange, mode) not in builders:
        raise ValueError(f"algorithm {algorithm.name!r} declares exchange={algorithm.exchange!r}, which the MPI "
                         f"runtime does not know; exchanges: subnetworks, replicas, gradients, activations.")
    comm = _world() if comm is None else comm
    n, r = comm.Get_size(), comm.Get_rank()
    abort_on_error()
    rt = MPIRuntime(algorithm=algorithm, mode=mode, rank=r, size=n, workers_per_rank=lanes, comm=comm,
                    gradient_buffers=gradient_buffers, loss_split=loss_split)
    builders[algorithm.exchange, mode](rt)
    return rt


# ----------------------------------------------------------------------------------------------------------------
# Exchange steps: single-device jitted functions around mpi4jax collectives.


def _batchable_allgather() -> None:
    """Gives mpi4jax's all-gather (0.9.1 has none) the batching rule its all-reduce has, so that it runs inside the
    lanes' ``vmap`` (data parallel's bfloat16 gradients): the all-gather of a batch is the all-gather of the whole
    array, ``[N, B, ...]``, the batch on axis 1."""
    from jax.interpreters import batching
    from mpi4jax._src.collective_ops.allgather import mpi_allgather_p  # late: needs MPI

    if mpi_allgather_p in batching.fancy_primitive_batchers:
        return

    def rule(args, dims, **params):
        (x,), (d,) = args, dims
        return mpi_allgather_p.bind(jnp.moveaxis(x, d, 0), **params), 1

    batching.primitive_batchers[mpi_allgather_p] = rule


class _Exchange:
    """Jitted pytree collectives.

    The ``*_into(buf, t)`` ones take first a buffer of the result's shapes and donate it: XLA writes the result into
    it, so an exchange repeated every round reuses the last round's memory (`_Spares`) instead of allocating (and
    page-faulting) a fresh one (a 34 MB scatter: 44 -> 9 ms). ``scatter_rows_into`` and ``gather_rows_into`` move
    blocks of rows: root's leaves are `[W, ...]`, rank ``r`` sends or receives rows ``r * L .. (r + 1) * L - 1``
    (`[L, ...]`); the split and join of root's rows happen inside the jit, so they are free reshapes, not copies.
    """

    def __init__(self, comm):
        import mpi4jax  # late: needs MPI
        from mpi4py import MPI

        self.comm = comm
        c, n, root = comm, comm.Get_size(), comm.Get_rank() == ROOT

        def tree_op(op):
            return lambda t: jax.tree.map(op, t)

        def into(fn):  # result written into the donated first argument
            return jax.jit(lambda buf, t: fn(t), donate_argnums=0, keep_unused=True)

        def scatter_rows(x):  # root: [W, ...] -> [N, L, ...] -> each rank's [L, ...]
            return mpi4jax.scatter(x.reshape((n, x.shape[0] // n) + x.shape[1:]) if root else x, ROOT, comm=c)

        def gather_rows(x):  # each rank's [L, ...] -> root: [N, L, ...] -> [W, ...]
            got = mpi4jax.gather(x, ROOT, comm=c)
            return got.reshape((got.shape[0] * got.shape[1],) + got.shape[2:]) if root else got

        self.scatter_rows_into = into(tree_op(scatter_rows))
        self.gather_rows_into = into(tree_op(gather_rows))
        self.alltoall_into = into(tree_op(lambda x: mpi4jax.alltoall(x, comm=c)))
        self.allreduce_into = into(tree_op(lambda x: mpi4jax.allreduce(x, op=MPI.SUM, comm=c)))
        self.gather = jax.jit(tree_op(lambda x: mpi4jax.gather(x, ROOT, comm=c)))
        self.allreduce = jax.jit(tree_op(lambda x: mpi4jax.allreduce(x, op=MPI.SUM, comm=c)))
        self.allgather = jax.jit(tree_op(lambda x: mpi4jax.allgather(x, comm=c)))

        def allreduce_sum(x):  # for use inside a traced function
            return mpi4jax.allreduce(x, op=MPI.SUM, comm=c)

        self.allreduce_traced = allreduce_sum
        _batchable_allgather()
        self.allgather_traced = lambda x: mpi4jax.allgather(x, comm=c)


def _packing(wire: precision.Wire, like: PyTree) -> tuple[Callable, Callable]:
    """``(pack, unpack)`` of trees shaped like ``like`` over ``wire``: float32 leaves as the 16 bits of their rounded
    values (`istjax.core.precision.pack`: mpi4jax has no bfloat16), for use inside a jit; identities for float32."""
    if wire.exact:
        return (lambda t: t), (lambda t: t)
    return (lambda t: precision.pack(t, wire.dtype)), (lambda t: precision.unpack(t, like, wire.dtype))


def _unpacked(v: jax.Array, wire: precision.Wire) -> jax.Array:
    """A leaf as it crossed a rounding ``wire`` back in float32: 16 bits (`_packing`) unpacked, others as they are."""
    return precision.unpack(v, jax.ShapeDtypeStruct((), jnp.float32), wire.dtype) if v.dtype == jnp.uint16 else v


def _zeros_like(shapes: PyTree) -> PyTree:
    """A fresh buffer per leaf of ``shapes`` (`jax.ShapeDtypeStruct` leaves), e.g. the first round's spare."""
    return jax.jit(lambda: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes))()


def _lane_shapes(workers: PyTree, lanes: int) -> PyTree:
    """The shapes of ``workers`` (leaves `[W, ...]`, arrays or `jax.ShapeDtypeStruct`) for this rank's L lanes."""
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct((lanes,) + s.shape[1:], s.dtype), workers)


class _Spares:
    """Buffers a rank keeps between rounds by name, each donated to the next call that writes a result of its shapes
    (an ``_Exchange.*_into``, a step with a donated output buffer). Only buffers the runtime owns are kept: results
    read within the round (received workers, sums) and never returned to the caller."""

    def __init__(self):
        self._bufs: dict = {}

    def take(self, name: str, like: PyTree) -> PyTree:
        """The buffer kept as ``name``, or zeros shaped like ``like`` (arrays or `jax.ShapeDtypeStruct`) at first."""
        buf = self._bufs.pop(name, None)
        return _zeros_like(jax.eval_shape(lambda t: t, like)) if buf is None else buf

    def keep(self, **bufs: PyTree) -> None:
        self._bufs.update(bufs)


def _summary(metrics_LxK: dict, comm) -> dict:
    """`istjax.core.state.summarize` of every worker's metrics, allgathered; the same dict on every rank."""
    mine = {k: np.asarray(v) for k, v in metrics_LxK.items()}
    everyone = comm.allgather(mine)
    return {k: np.asarray(v) for k, v in summarize({k: np.concatenate([d[k] for d in everyone]) for k in mine}).items()}


def _my_rows(batches, rt):
    """Checks that ``batches`` hold all W workers' rows or this rank's L; returns them unchanged: the train step
    slices this rank's rows inside its jit (`_lane_step`), so no eager copy of the batch is made."""
    lanes, w = rt.workers_per_rank, rt.algorithm.num_workers
    lead = {x.shape[0] for x in jax.tree.leaves(batches)}
    if lead in ({w}, {lanes}):
        return batches
    raise ValueError(f"batches have leading sizes {sorted(lead)}; the MPI runtime takes all W={w} workers' batches "
                     f"[W, K, B, ...] (each rank keeps its rows) or this rank's L={lanes} rows [L, K, B, ...].")


def _check_batches(batches, rt):
    k = rt.algorithm.local_steps
    for path, x in jax.tree_util.tree_flatten_with_path(batches)[0]:
        if np.ndim(x) < 2 or np.shape(x)[1] != k:
            raise ValueError(f"batches{jax.tree_util.keystr(path)} has shape {np.shape(x)}; a round needs "
                             f"[W, K, B, ...] with K = local_steps = {k}.")


def _full_batches(batches, rt):
    """The batches ``collect`` may read (the ``recompute`` policy): all W workers', when this rank was given them."""
    lead = {x.shape[0] for x in jax.tree.leaves(batches)}
    return batches if lead == {rt.algorithm.num_workers} else None


def _first_batches(batches, rt):
    """Every worker's first ``recompute_batches`` batches, `[W * n, B, ...]` (``recompute`` statistics,
    `istjax.algorithms.base.recompute_batches`): sliced when this rank was given all W workers' batches, else this
    rank's L workers' all-gathered (data, not model: not counted as exchanged bytes)."""
    first = recompute_batches(batches, rt.algorithm.recompute_batches)
    if _full_batches(batches, rt) is not None:
        return first
    every = rt.comm.allgather(jax.tree.map(np.asarray, first))
    return jax.tree.map(lambda *rows: jnp.asarray(np.concatenate(rows)), *every)


def _lane_step(alg, lanes: int, first: int, start: Optional[Callable] = None, reduce=None,
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


def _finish(rt: MPIRuntime, traffic: Traffic, metrics, comm) -> dict:
    rt.last_traffic = traffic
    out = _summary(metrics, comm)
    out["measured_bytes_sent"] = traffic.sent // rt.workers_per_rank
    out["measured_bytes_received"] = traffic.received // rt.workers_per_rank
    return out


def _split_fn(rt: MPIRuntime, as_workers: Callable) -> Optional[Callable]:
    """The jitted loss split ``(state, workers, last_batches, shared) -> metrics`` of this runtime's algorithm
    (``algorithm.split``, the workers first made a `WorkerState` by ``as_workers``); None when it is off."""
    alg = rt.algorithm
    if not rt.loss_split or alg.split is None:
        return None
    return jax.jit(lambda state, workers, last, shared: alg.split(state, as_workers(workers), last, shared))


def _last_batches(full, mine, rt):
    """Every worker's last batch of the round, `[W, 1, B, ...]`: sliced from ``full`` when this rank was given all
    W workers' batches, else this rank's rows all-gathered (collective; data, not model: not counted as exchanged
    bytes)."""
    if full is not None:
        return jax.tree.map(lambda b: b[:, -1:], full)
    every = rt.comm.allgather(jax.tree.map(lambda b: np.asarray(b[:, -1:]), mine))
    return jax.tree.map(lambda *rows: jnp.asarray(np.concatenate(rows)), *every)


def _own_last(batches, rt):
    """This rank's L workers' last batch of the round, `[L, 1, B, ...]`, from all W workers' batches or its own."""
    lanes = rt.workers_per_rank
    if {x.shape[0] for x in jax.tree.leaves(batches)} != {lanes}:
        batches = jax.tree.map(lambda b: b[rt.rank * lanes:(rt.rank + 1) * lanes], batches)
    return jax.tree.map(lambda b: b[:, -1:], batches)


def _exchanged(alg) -> tuple[Callable, Optional[Callable]]:
    """``(held, start)``: what crosses MPI of the workers' states and how a worker starts from it, the algorithm's
    own pieces (`istjax.Algorithm.subnet`: IST's held tree, without a reset optimizer state, which ``start``
    builds on the worker), the same ``start`` the sharded mode uses. An algorithm stated without them moves its
    workers' states whole."""
    if alg.subnet is not None:
        return alg.subnet.held, alg.subnet.start
    return (lambda workers: workers._asdict()), (lambda tree, round_index: WorkerState(**tree))


# ----------------------------------------------------------------------------------------------------------------
# "subnetworks", parameter server.


def _server(rt: MPIRuntime):
    alg, comm = rt.algorithm, rt.comm
    x = _Exchange(comm)
    lanes, root = rt.workers_per_rank, rt.rank == ROOT
    held, start = _exchanged(alg)
    abstract_state = jax.eval_shape(alg.init, jax.random.key(0))
    abstract_workers, _ = jax.eval_shape(alg.distribute, abstract_state)
    wire, trees = alg.wire, held(abstract_workers)  # [W, ...] as workers hold them
    packed = _packing(wire, trees)  # (pack, unpack): what crosses is the rounded values' 16 bits
    all_shapes = jax.eval_shape(packed[0], trees)  # [W, ...] as they cross
    lane_shapes = _lane_shapes(all_shapes, lanes)
    template = None if root else _zeros_like(lane_shapes)  # a non-root rank's (unread) scatter input
    send_up = None if wire.exact else (lambda trained, started: packed[0](wire.up(held(trained), held(started))))
    train = _lane_step(alg, lanes, rt.rank * lanes, start=lambda tree, r: start(packed[1](tree), r), send=send_up)
    # Buffers this rank owns between rounds: "lanes" [L, ...] (the received workers, trained in place, then sent
    # back) and "all" (root: [W, ...], the cut workers, scattered, then the gathered ones; elsewhere [L, ...],
    # gather's unread result).
    spares = _Spares()

    @functools.partial(jax.jit, donate_argnums=1, keep_unused=True)
    def distribute(state, into):
        workers, plan = alg.distribute(state)
        return packed[0](held(workers)), plan

    def as_workers(tree):
        return WorkerState(**{"opt_state": (), **tree})

    sent = {} if wire.exact else {"sent": True}  # workers send wire.up of their trees
    collect = jax.jit(lambda state, tree, plan, batches, shared: alg.collect(
        state, as_workers(packed[1](tree)), plan, batches, shared, **sent))
    split = _split_fn(rt, as_workers)
    # What each worker trained, as the root reads it (the loss split's workers): the workers' trees, or under a
    # rounding wire what they sent read against the rounded pieces they started from.
    trained_trees = jax.jit(lambda state, tree, plan: wire.back(
        packed[1](tree), wire.round(extract(alg.subnet.held(state), plan.partition, alg.subnet.spec))))

    def init(key):
        state = jax.jit(alg.init)(key)
        return state if root else TrainState((), (), (), state.key, state.round)

    def round_fn(state, batches, shared=None):
        t = time.perf_counter()
        _check_batches(batches, rt)
        full, batches = _full_batches(batches, rt), _my_rows(batches, rt)
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
        last = _last_batches(full, batches, rt) if split is not None else None  # collective
        if root:
            workers_back = gathered if wire.exact or split is None else trained_trees(state, gathered, plan)
            state = collect(state, gathered, plan, full, shared)
        else:
            state = TrainState((), (), (), round_keys(state.key)[0], state.round + 1)
        t = rt._phase("collect", t, state)
        out = _finish(rt, traffic, metrics, comm)
        if root and split is not None:
            out.update({k: np.asarray(v) for k, v in split(state, workers_back, last, shared).items()})
        rt._phase("metrics", t)
        return state, out

    rt.init, rt.round, rt.gather = init, round_fn, (lambda state: state if root else None)


# ----------------------------------------------------------------------------------------------------------------
# "replicas" and "gradients": every rank holds the global state; the workers' results are summed across ranks.


def _replica_ends(alg, n: int) -> tuple[Callable, Callable]:
    """``(summed, finish)`` of the replicas' round end on ``n`` ranks, jitted: ``summed(state, trained)`` is what
    the workers add across ranks (`[L, ...]`): the model state (gradients), or the replicas (a reset optimizer state
    is not summed: collect does not read it); under a rounding wire, what each sends of it
    (`istjax.core.precision.Wire.up` against the rounded state it started from), packed. ``finish(state, workers,
    sums, plan, batches, shared)``: the sums (under a rounding wire, `[N, L, ...]` of every rank's 16 bits, added in
    float32) over ``n``, through the algorithm's ``collect``."""
    gradients, carry, wire = alg.exchange == "gradients", alg.carries_optimizer_state, alg.wire

    @jax.jit
    def summed(state, trained):
        if gradients:  # params and optimizer states agree already: the model state is summed
            out, exact = trained.model_state, state.model_state
        else:
            out = trained if carry else trained._replace(opt_state=())
            exact = WorkerState(state.params, state.model_state, state.opt_state if carry else ())
        if wire.exact:
            return out
        exact_L = jax.tree.map(lambda t, e: jnp.broadcast_to(e, t.shape), out, exact)
        return precision.pack(wire.up(out, wire.round(exact_L)), wire.dtype)

    @jax.jit
    def finish(state, workers, sums, plan, batches, shared):
        if not wire.exact:
            sums = jax.tree.map(lambda v: jnp.sum(_unpacked(v, wire), axis=0), sums)
        if gradients:  # params and optimizer states agree already; average the model state
            workers = workers._replace(model_state=jax.tree.map(lambda s: s / n, sums))
        else:  # collect averages its workers: these L sums over ranks, / N, average to the mean over all W
            workers = jax.tree.map(lambda s: s / n, sums)
        return alg.collect(state, workers, plan, batches, shared, **({} if wire.exact else {"sent": True}))

    return summed, finish


def _replicas(rt: MPIRuntime):
    alg, comm = rt.algorithm, rt.comm
    x = _Exchange(comm)
    n, lanes, me = rt.size, rt.workers_per_rank, rt.rank
    carry = alg.carries_optimizer_state
    gradients = alg.exchange == "gradients"
    wire = alg.wire
    counted: list[PyTree] = []  # buffers the compiled local phase hands to MPI, recorded when it is traced
    in_step = {"sent": 0, "received": 0}  # per worker per round, from the recorded buffers

    def sum_over_ranks(v):  # traced; a rounding wire moves the 16 bits (an all-gather) and adds them in float32
        if wire.exact:
            return x.allreduce_traced(v)
        return jnp.sum(_unpacked(x.allgather_traced(precision.pack(v, wire.dtype)), wire), axis=0)

    def reduce(grads, axis_name):  # the mean over all W workers: over this rank's lanes, then across ranks
        counted.append(grads)
        if rt.gradient_buffers == "one":  # one buffer: no MPI call until the whole backward pass is done
            flat, unravel = jax.flatten_util.ravel_pytree(grads)
            total = unravel(sum_over_ranks(flat))
        else:  # a buffer per leaf: each can go as soon as its gradient exists
            total = jax.tree.map(sum_over_ranks, grads)  # [per worker]: one buffer per worker
        return jax.tree.map(lambda g: jax.lax.pmean(g, axis_name) / n, total) if axis_name else \
            jax.tree.map(lambda g: g / n, total)

    train = _lane_step(alg, lanes, me * lanes, reduce=reduce if gradients else None)
    lane_shapes = _lane_shapes(jax.eval_shape(alg.distribute, jax.eval_shape(alg.init, jax.random.key(0)))[0], lanes)

    spares = _Spares()  # "lanes": this rank's workers (cut, trained in place); "sums": the all-reduce's result

    @functools.partial(jax.jit, donate_argnums=1, keep_unused=True)
    def start(state, into):
        workers, plan = alg.distribute(state)  # every rank computes the same workers; keep this rank's
        return jax.tree.map(lambda v: jax.lax.dynamic_slice_in_dim(v, me * lanes, lanes), workers), plan

    summed, finish = _replica_ends(alg, n)
    split = _split_fn(rt, lambda workers: workers)

    def init(key):
        return jax.jit(alg.init)(key)

    def round_fn(state, batches, shared=None):
        _check_batches(batches, rt)
        full, batches = _full_batches(batches, rt), _my_rows(batches, rt)
        traffic = Traffic()
        workers, plan = start(state, spares.take("lanes", lane_shapes))
        counted.clear()
        trained, metrics = train(workers, batches, shared, state.round)
        if counted:  # traced in this call (the first): the per-worker bytes of one local phase's K exchanges
            sent = alg.local_steps * tree_bytes(wire.shapes(counted))
            in_step.update(sent=sent, received=sent if wire.exact else n * sent)  # an all-gather brings N pieces
        out = summed(state, trained)
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
        out = _finish(rt, traffic, metrics, comm)
        if split is not None:  # this rank's workers on their own batches, averaged over the ranks
            mine = split(state, trained, _own_last(batches, rt), shared)
            keys = sorted(mine)
            total = comm.allreduce(np.array([float(mine[k]) for k in keys]))
            out.update({k: np.asarray(v / n) for k, v in zip(keys, total)})
        spares.keep(lanes=trained, sums=sums)
        return state, out

    rt.init, rt.round = init, round_fn
    rt.gather = lambda state: state if rt.rank == ROOT else None


# ----------------------------------------------------------------------------------------------------------------
# "subnetworks", sharded: the algorithm's owner side (`Algorithm.owner_side`, `istjax.core.shard`) between collectives.


def sharded_layout(alg, n: int, me: int) -> shard_lib.Layout:
    """Which groups this job holds in shards; a ValueError naming the fix when the algorithm cannot run sharded."""
    side = alg.owner_side
    if side is None:
        raise ArgError("mode", "sharded",
                       f"algorithm {alg.name!r} exchanges subnetworks but gives no owner side (Algorithm.owner_side), "
                       f"so it cannot run with the model split over ranks.", "Use mode='parameter_server'.",
                       "Use --config.runtime.mode=parameter_server.")
    sizes = dict(alg.task.spec.group_sizes)
    sampler = alg.subnet.sampler
    owners = owner_counts(sampler, sizes)
    owned = frozenset(g for g, o in owners.items() if o == n)
    if not owned:
        raise _not_stratified(alg, sampler, owners, n)
    from_slices = alg.task.owner is not None and alg.task.owner.recompute_state is not None
    if alg.model_state_policy == "recompute" and alg.task.has_state and not from_slices:
        raise ArgError("model_state", "recompute",
                       f"mode='sharded' with model_state='recompute': recomputing the statistics is a forward pass of "
                       f"the whole merged model, which no rank holds, and {type(alg.task.module).__name__} gives no "
                       f"owner_statistics method to run it from each rank's part (istjax.core.contract; the "
                       f"channel-partitioned CNN, ResNet and VGG do).", "Use model_state='carry' or "
                       f"mode='parameter_server'.", "Use --config.algorithm.model_state=carry or "
                       "--config.runtime.mode=parameter_server.")
    return shard_lib.Layout(n, me, alg.num_workers, sizes, owned)


def _not_stratified(alg, sampler, owners: dict, n: int) -> ArgError:
    """The sharded mode's refusal of a sampler that deals no group stratified by ``n`` owners, with each interface's
    fix: ResIST stratifies its own blocks (``num_owners``), IST reads its sampler."""
    served = sorted({o for o in owners.values() if o is not None})
    has = f"{sampler.name!r}" + (f", stratified with num_owners={'/'.join(map(str, served))}" if served else "")
    problem = (f"mode='sharded' with {n} processes needs a partition sampler that deals the neuron groups stratified "
               f"by {n} owners (so each round's exchange is a fixed-size all-to-all); each process owns 1/{n} of "
               f"them. The algorithm samples with {has}, which deals none that way.")
    if contract.block_groups(alg.task.module) is not None:  # a depth-split model: ResIST deals its own blocks
        return ArgError("num_owners", None, problem, f"Build it with istjax.resist(..., num_owners={n}), or use "
                        f"mode='parameter_server'.", f"Add --config.sampler.num_owners={n}, or "
                        f"--config.runtime.mode=parameter_server.")
    return ArgError("sampler", sampler.name, problem, f"Build it with istjax.ist(..., "
                    f"sampler=istjax.stratified(num_owners={n})), or use mode='parameter_server'.",
                    f"Add --config.sampler.name=stratified --config.sampler.num_owners={n}, or "
                    f"--config.runtime.mode=parameter_server.")


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


def _sharded_gather(alg, layout, x: "_Exchange") -> Callable:
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


def _sharded_steps(alg, layout: shard_lib.Layout, x: "_Exchange") -> tuple:
    """The sharded round's steps, jitted: ``outbound(state) -> (plan, pieces, local)``, ``assemble(received,
    local)``, the lane step ``train``, ``give_back(trained) -> (back, whole, sums)``, ``collect(state, plan,
    returned, gathered, totals, first, shared)`` and ``gather_each(tree)`` (an all-gather per leaf). Under a
    rounding wire (``alg.wire``) the pieces cross as the 16 bits of their rounded values, workers give back what
    they send (`istjax.core.precision.Wire.up`), and ``collect`` adds the all-gathered shared sums in float32."""
    subnet, side, wire, leaves = alg.subnet, alg.owner_side, alg.wire, alg.subnet.spec.leaves

    def pack(tree):
        return tree if wire.exact else precision.pack(tree, wire.dtype)

    def unpack(tree):
        return tree if wire.exact else jax.tree.map(lambda v: _unpacked(v, wire), tree)

    @jax.jit
    def outbound(state):
        round_plan = subnet.plan(state)
        pieces, local = side.distribute(layout, subnet.held(state), round_plan)
        return round_plan, pack(pieces), local

    send = None if wire.exact else (lambda trained, started: wire.up(subnet.held(trained), subnet.held(started)))
    train = _lane_step(alg, layout.lanes, layout.owner * layout.lanes, start=subnet.start, send=send)
    assemble = jax.jit(lambda received, local: shard_lib.worker_assemble(layout, leaves, unpack(received), local))
    give_back = jax.jit(lambda trained: pack(shard_lib.worker_return(
        layout, leaves, subnet.held(trained) if send is None else trained)))

    @jax.jit
    def collect(state, round_plan, returned, gathered, totals, first, shared):
        if not wire.exact:  # [N, L, ...] of every rank's shared pieces: their sum over the ranks, in float32
            totals = jax.tree.map(lambda v: jnp.sum(_unpacked(v, wire), axis=0), totals)
        return side.collect(layout, state, round_plan, unpack(returned), unpack(gathered), totals, first, shared,
                            reduce=x.allreduce_traced)

    def gather_each(tree):  # one call per leaf under a rounding wire: the same order on every rank
        return x.allgather(tree) if wire.exact else jax.tree.map(x.allgather, tree)

    return outbound, assemble, train, give_back, collect, gather_each


def _sharded(rt: MPIRuntime):
    """The sharded mode: every rank holds its part of the model (`istjax.core.shard`); a round is the algorithm's
    owner-side distribute, an all-to-all out, the local steps, an all-to-all back (plus an all-gather of leaves held
    whole and an allreduce of shared ones) and its owner-side collect."""
    alg = rt.algorithm
    layout = sharded_layout(alg, rt.size, rt.rank)
    subnet, side = alg.subnet, alg.owner_side
    x = _Exchange(rt.comm)
    outbound, assemble, train, give_back, collect, gather_each = _sharded_steps(alg, layout, x)
    spares = _Spares()  # the collectives' results, reused round after round
    owner = alg.task.owner
    recompute = alg.model_state_policy == "recompute" and owner is not None and owner.recompute_state is not None

    def round_fn(state, batches, shared=None):
        _check_batches(batches, rt)
        batches = _my_rows(batches, rt)
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
        first = _first_batches(batches, rt) if recompute else None
        state = collect(state, round_plan, returned, gathered, totals, first, shared)
        spares.keep(received=received, returned=returned, sums=totals)
        return state, _finish(rt, traffic, metrics, rt.comm)

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
        rt.evaluate = side.evaluate(layout, _mpi_collectives(rt.comm, rt.rank))


# ----------------------------------------------------------------------------------------------------------------
# "activations": tensor parallel, the algorithm's shard round (`Algorithm.tensor`) on mpi4jax collectives.


def _mpi_collectives(comm, me: int):
    """`istjax.algorithms.tensor.Collectives` of mpi4jax calls, for use inside a traced function."""
    import mpi4jax
    from mpi4py import MPI

    return Collectives(index=lambda: jnp.int32(me), size=comm.Get_size(),
                       all_gather=lambda x: mpi4jax.allgather(x, comm=comm),
                       all_sum=lambda x: mpi4jax.allreduce(x, op=MPI.SUM, comm=comm),
                       all_max=lambda x: mpi4jax.allreduce(x, op=MPI.MAX, comm=comm),
                       all_to_all=lambda x: mpi4jax.alltoall(x, comm=comm))


def mpi_bytes(jaxpr, times: int = 1) -> tuple[int, int]:
    """``(received, sent)``: bytes of the buffers the mpi4jax calls in ``jaxpr`` (and the jaxprs nested in it) are
    handed and return (inputs sent, outputs received), a scan's body counted its ``length`` times."""
    received = sent = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name.endswith("_mpi"):
            sent += times * sum(int(np.prod(v.aval.shape)) * v.aval.dtype.itemsize for v in eqn.invars
                                if hasattr(v.aval, "shape"))
            received += times * sum(int(np.prod(v.aval.shape)) * v.aval.dtype.itemsize for v in eqn.outvars
                                    if hasattr(v.aval, "shape"))
        inner_times = times * int(eqn.params.get("length", 1)) if eqn.primitive.name == "scan" else times
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    r, s_ = mpi_bytes(inner, inner_times)
                    received, sent = received + r, sent + s_
    return received, sent


def _tensor(rt: MPIRuntime):
    """Tensor parallel: rank r holds shard r of every layer; a round is the shard's K steps in one jit."""
    alg = rt.algorithm
    pieces = alg.tensor
    if rt.size != pieces.num_shards:
        raise ArgError("num_workers", alg.num_workers,
                       f"tensor_parallel runs one shard per process: num_workers={alg.num_workers} shards on "
                       f"{rt.size} processes.", f"Use num_workers={rt.size}, or mpiexec -n {alg.num_workers}.",
                       f"Use --config.num_workers={rt.size}, or mpiexec -n {alg.num_workers}.")
    coll = _mpi_collectives(rt.comm, rt.rank)
    x = _Exchange(rt.comm)
    train = jax.jit(functools.partial(pieces.train, coll))
    measured: dict = {}

    def round_fn(state, batches, shared=None):
        _check_batches(batches, rt)
        lead = {v.shape[0] for v in jax.tree.leaves(batches)}
        if lead != {alg.num_workers}:  # a rank's own rows would train each shard on other examples: refused
            raise ValueError(f"batches have leading sizes {sorted(lead)}; tensor parallel reads all W="
                             f"{alg.num_workers} workers' rows [W, K, B, ...] on every rank (every shard computes "
                             f"the same examples), not a rank's own rows.")
        if "bytes" not in measured:  # read once from the program the round runs
            measured["bytes"] = mpi_bytes(jax.make_jaxpr(train)(state, batches).jaxpr)
        state, metrics_K = train(state, batches)
        rt._track(state)
        traffic = Traffic(received=measured["bytes"][0], sent=measured["bytes"][1])
        metrics_WxK = jax.tree.map(lambda m: jnp.broadcast_to(m, (alg.num_workers,) + m.shape), metrics_K)
        rt.last_traffic = traffic  # every shard computes the same loss: no metric exchange
        return state, {**{k: np.asarray(v) for k, v in summarize(metrics_WxK).items()},
                       "measured_bytes_sent": traffic.sent, "measured_bytes_received": traffic.received}

    def gather(state):
        got = x.gather((state.params, state.opt_state))
        if rt.rank != ROOT:
            return None
        return pieces.join(TrainState(got[0], state.model_state, got[1], state.key, state.round))

    def round_memory(state, batches, shared=None) -> int:  # one compiled program: its outputs and temporaries
        return memory_lib.step_bytes(train.lower(state, batches).compile().memory_analysis())

    rt.init = jax.jit(lambda key: pieces.init(key, rt.rank))  # the shard's state only (`TensorPieces.init`)
    rt.round, rt.gather, rt.round_memory = round_fn, gather, round_memory
    rt.evaluate = functools.partial(pieces.evaluate, coll)


RUNTIME = Runtime("mpi", build, "workers split across the processes of mpiexec (parameter server or sharded); "
                                "options: mode='parameter_server' | 'sharded'",
                  config_options=("mode", "loss_split"), multi_process=True, check_launch=check_launch)
