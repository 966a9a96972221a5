"""Which process this is: its index among the processes of a launch, their count, and whether it is the primary one.

Under ``mpiexec`` every process runs the same program; the *primary* one (index 0) writes metrics, plots,
checkpoints and messages, and gathers the whole state for evaluation. This is the one place that decides it. It
reads the launcher's environment (Open MPI, MPICH/Hydra, PMIx), so asking never imports mpi4py (which would
initialise MPI); a process not launched by ``mpiexec`` is index 0 of 1, the primary. The MPI runtime's rank on
``COMM_WORLD`` is the same number (`istjax.runtimes.mpi.rank`).
"""

from __future__ import annotations

import os

__all__ = ["process_index", "process_count", "is_primary"]

_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE")


def _launcher_int(names: tuple[str, ...], default: int) -> int:
    """The first of the launcher's environment variables ``names`` that holds an integer, else ``default``."""
    for var in names:
        value = os.environ.get(var)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                continue
    return default


def process_index() -> int:
    """This process's MPI rank when launched under ``mpiexec`` (Open MPI, MPICH/Hydra, PMIx), else 0."""
    return _launcher_int(_RANK_VARS, 0)


def process_count() -> int:
    """The number of MPI processes when launched under ``mpiexec`` (read from the launcher's environment), else 1."""
    return _launcher_int(_SIZE_VARS, 1)


def is_primary() -> bool:
    """True in the process that writes files and evaluates: MPI rank 0, or the only process."""
    return process_index() == 0
