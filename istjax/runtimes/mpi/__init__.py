"""The ``mpi`` runtime: an algorithm's W workers spread over the N processes of ``mpiexec -n N`` (one per host).

``istjax.ist(..., backend="mpi", mode="parameter_server" | "sharded")`` (any factory; a config's field
runtime.name=mpi) binds an algorithm to it; `mpi_runtime(algorithm, mode=...)` gives the `MPIRuntime` itself
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
    states are summed across ranks (one allreduce buffer per worker) and ``collect`` averages them. What workers
    keep between rounds (`istjax.Algorithm.resident`: consensus ADMM's duals) stays on their rank: each rank holds
    its L workers' rows of it, sums what they send, and keeps their new rows; ``gather`` brings every rank's rows to
    rank 0 for checkpoints and evaluation.
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

from types import ModuleType

from istjax.core.comm import Exchange
from istjax.core.errors import ArgError, Code
from istjax.core.process import is_primary as is_primary  # the one answer (`istjax.core.process`), kept here by name
from istjax.runtimes.base import Runtime
from istjax.runtimes.mpi import compressed, groups, parameter_server, replicas, sharded, subsets, tensor
from istjax.runtimes.mpi.buffers import mpi_collectives as mpi_collectives
from istjax.runtimes.mpi.runtime import GRADIENT_BUFFERS as GRADIENT_BUFFERS
from istjax.runtimes.mpi.runtime import MODES as MODES
from istjax.runtimes.mpi.runtime import MPIRuntime as MPIRuntime
from istjax.runtimes.mpi.runtime import Traffic as Traffic
from istjax.runtimes.mpi.sharded import sharded_layout as sharded_layout
from istjax.runtimes.mpi.tensor import mpi_bytes as mpi_bytes
from istjax.runtimes.mpi.world import ROOT as ROOT
from istjax.runtimes.mpi.world import abort_on_error as abort_on_error
from istjax.runtimes.mpi.world import check_fit as check_fit
from istjax.runtimes.mpi.world import rank as rank
from istjax.runtimes.mpi.world import size as size
from istjax.runtimes.mpi.world import world as _world  # looked up here at each call: tests stand in a fake world

__all__ = ["MODES", "GRADIENT_BUFFERS", "RUNTIME", "ROUNDS", "MPIRuntime", "Traffic", "mpi_runtime", "build",
           "check_fit", "check_launch", "rank", "size", "sharded_layout", "mpi_bytes", "mpi_collectives",
           "is_primary", "abort_on_error", "ROOT"]

#: The exchange modules by ``(algorithm.exchange, mode)``: each gives ``install(rt)``, which fills in an `MPIRuntime`'s
#: round, and ``WHOLE_STATE``, whether a rank's state is the whole model; optionally ``check(algorithm, n)``, what
#: it refuses on ``n`` processes before anything is built. A new exchange is a module and a row here.
ROUNDS: dict[tuple[Exchange, str], ModuleType] = {
    (Exchange.SUBNETWORKS, "parameter_server"): parameter_server,
    (Exchange.SUBNETWORKS, "sharded"): sharded,
    (Exchange.REPLICAS, "parameter_server"): replicas,
    (Exchange.GRADIENTS, "parameter_server"): replicas,
    (Exchange.ACTIVATIONS, "parameter_server"): tensor,  # the model is always in shards
    (Exchange.ACTIVATIONS, "sharded"): tensor,
    (Exchange.SUBSETS, "parameter_server"): subsets,
    (Exchange.GROUPS, "parameter_server"): groups,
}
#: The exchange modules of an algorithm whose change crosses compressed (``algorithm.compressor``), as `ROUNDS`.
COMPRESSED_ROUNDS: dict[tuple[Exchange, str], ModuleType] = {
    (Exchange.REPLICAS, "parameter_server"): compressed,
}


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
                       (Code("Launch the script as `mpiexec -n 2 python ...`",
                             ("Launch it as `mpiexec -n 2 istjax train", {"backend": "mpi"}, "...`")),
                        "(mpiexec is in .venv/bin), or use", {"backend": "simulate"}, "."))
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
    if mode == "sharded" and algorithm.exchange in (Exchange.REPLICAS, Exchange.GRADIENTS, Exchange.SUBSETS,
                                                  Exchange.GROUPS):
        raise ArgError("mode", mode,
                       f"mode='sharded' splits the model among the processes for an algorithm that exchanges "
                       f"sub-networks (ist, resist), but {algorithm.name!r} exchanges {algorithm.exchange}: every "
                       f"process holds the whole model, so the mode would change nothing.",
                       use={"mode": "parameter_server"})
    if algorithm.collect_reads_workers and algorithm.exchange in (Exchange.REPLICAS, Exchange.GRADIENTS):
        raise ArgError("backend", "mpi", f"{algorithm.name!r} reads each worker's trained state at a round's end, and "
                       f"the MPI runtime's exchanges hand it only their sum over the processes;",
                       use=[{"backend": "simulate"}, {"backend": "devices"}])
    if (algorithm.exchange, mode) not in ROUNDS:
        raise ValueError(f"algorithm {algorithm.name!r} declares exchange={algorithm.exchange!r}, which the MPI "
                         f"runtime does not know; exchanges: subnetworks, replicas, gradients, activations, subsets, groups.")
    comm = _world() if comm is None else comm
    n, r = comm.Get_size(), comm.Get_rank()
    exchange = ROUNDS[algorithm.exchange, mode]
    if algorithm.compressor is not None:
        if (algorithm.exchange, mode) not in COMPRESSED_ROUNDS:
            raise ArgError("compression", algorithm.compressor.name,
                           f"{algorithm.name!r} under MPI with compression: no compressed {algorithm.exchange} "
                           f"exchange in mode={mode!r};", use=[{"compression": "none"}, {"backend": "simulate"}])
        exchange = COMPRESSED_ROUNDS[algorithm.exchange, mode]
    if hasattr(exchange, "check"):  # what the exchange itself refuses (codistillation: groups that split a process)
        exchange.check(algorithm, n)
    abort_on_error()
    rt = MPIRuntime(algorithm=algorithm, mode=mode, rank=r, size=n, workers_per_rank=lanes, comm=comm,
                    gradient_buffers=gradient_buffers, loss_split=loss_split)
    rt.whole_state = exchange.WHOLE_STATE
    exchange.install(rt)
    return rt


# ----------------------------------------------------------------------------------------------------------------
# Exchange steps: single-device jitted functions around mpi4jax collectives.


RUNTIME = Runtime("mpi", build, "workers split across the processes of mpiexec (parameter server or sharded); "
                                "options: mode='parameter_server' | 'sharded'",
                  config_options=("mode", "loss_split"), multi_process=True, check_launch=check_launch)
