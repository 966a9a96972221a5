"""Runtimes: where the W workers of a round run. See `istjax.runtimes.base` for the interface."""

from istjax.runtimes.devices import DEVICES as DEVICES
from istjax.runtimes.devices import devices_used as devices_used
from istjax.runtimes.devices import make_devices_round as make_devices_round
from istjax.runtimes.mpi import MODES as MODES
from istjax.runtimes.mpi import MPIRuntime as MPIRuntime
from istjax.runtimes.mpi import abort_on_error as abort_on_error
from istjax.runtimes.mpi import check_fit as check_fit
from istjax.runtimes.mpi import is_primary as is_primary
from istjax.runtimes.mpi import mpi_runtime as mpi_runtime
from istjax.runtimes.mpi import rank as rank
from istjax.runtimes.mpi import size as size
