"""Distributed runtime: the ``devices`` backend (local accelerators) and the MPI runtime (several processes).

* ``backend="devices"`` (any algorithm factory): workers split across the local devices with ``jit`` +
  ``shard_map``; see `istjax.distributed.devices`.
* `mpi_runtime` (``mpiexec -n N ...``): wraps a built algorithm so each process runs its share of the workers; parameter
  server or sharded global model; measures the bytes it moves. See `istjax.distributed.mpi` and
  ``docs/distributed.md``. mpi4py and mpi4jax are imported only when the MPI runtime is used.

IST: Yuan et al., arXiv 1910.02120.
"""

from istjax.distributed.devices import DEVICES as DEVICES
from istjax.distributed.devices import devices_used as devices_used
from istjax.distributed.devices import make_devices_round as make_devices_round
from istjax.distributed.mpi import MODES as MODES
from istjax.distributed.mpi import MPIRuntime as MPIRuntime
from istjax.distributed.mpi import abort_on_error as abort_on_error
from istjax.distributed.mpi import check_fit as check_fit
from istjax.distributed.mpi import is_primary as is_primary
from istjax.distributed.mpi import mpi_runtime as mpi_runtime
from istjax.distributed.mpi import rank as rank
from istjax.distributed.mpi import size as size

__all__ = [
    "DEVICES",
    "MODES",
    "MPIRuntime",
    "abort_on_error",
    "check_fit",
    "devices_used",
    "is_primary",
    "make_devices_round",
    "mpi_runtime",
    "rank",
    "size",
]
