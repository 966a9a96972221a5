"""The MPI world this job runs in: its ranks, the root, and a failing rank ending the whole job.

mpi4py is imported late (importing it initialises MPI), so importing istjax never starts MPI.
"""

from __future__ import annotations

import sys
import time
import traceback
from typing import Optional

from istjax.core.errors import ArgError

__all__ = ["ROOT", "world", "rank", "size", "abort_on_error", "check_fit"]

#: The rank that holds the parameter server's model and writes the run's files.
ROOT = 0
_ABORT_GRACE_S = 1.0  # seconds a failing rank waits, after printing why, before MPI_Abort


def world():
    """``COMM_WORLD``."""
    from mpi4py import MPI  # late: importing mpi4py initialises MPI

    return MPI.COMM_WORLD


def rank() -> int:
    """This process's MPI rank (0 when not launched by mpiexec)."""
    return world().Get_rank()


def size() -> int:
    """The number of MPI processes (1 when not launched by mpiexec)."""
    return world().Get_size()


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
        comm = world()
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

def check_fit(num_workers: int, num_processes: Optional[int] = None) -> int:
    """Returns ``L = W / N``, the workers per process; raises an `ArgError` naming the fix (the nearest multiples of N
    for ``num_workers``) when W does not fit.

    Call it (every rank does, inside `mpi_runtime`) before anything is compiled, so every rank refuses the same config.
    """
    n = size() if num_processes is None else num_processes
    if num_workers % n:
        lower, upper = (num_workers // n) * n, (num_workers // n + 1) * n
        fits = [{"num_workers": w} for w in (lower, upper) if w]
        launch = f"launch with mpiexec -n N for an N that divides {num_workers}"
        raise ArgError("num_workers", num_workers,
                       f"num_workers={num_workers} does not fit {n} MPI processes: each process runs num_workers / "
                       f"{n} workers, so num_workers must be a multiple of {n}.", use=[*fits, launch])
    return num_workers // n
