"""Runtimes: where the W workers of a round run. Each receives an algorithm's pieces (`istjax.runtimes.base`).

* ``"simulate"`` (`istjax.runtimes.simulate`): every worker on one device, one jit.
* ``"devices"`` (`istjax.runtimes.devices`): workers split across the local devices with ``shard_map``.
* ``"mpi"`` (`istjax.runtimes.mpi`): workers split across ``mpiexec`` processes (mpi4py and mpi4jax are imported
  only when it is used).

`RUNTIMES` is the registry (a config's ``backend``); ``get(name)`` gives a `Runtime`, ``register`` adds one (a
runtime is ``(name, build, description, config_options, multi_process)``).
"""

from istjax.core.process import is_primary as is_primary
from istjax.core.registry import Registry
from istjax.runtimes import devices as _devices
from istjax.runtimes import mpi as _mpi
from istjax.runtimes import simulate as _simulate
from istjax.runtimes.base import Runtime, RuntimeHandle
from istjax.runtimes.devices import DEVICES as DEVICES
from istjax.runtimes.devices import devices_used as devices_used
from istjax.runtimes.mpi import MODES as MODES
from istjax.runtimes.mpi import MPIRuntime as MPIRuntime
from istjax.runtimes.mpi import abort_on_error as abort_on_error
from istjax.runtimes.mpi import check_fit as check_fit
from istjax.runtimes.mpi import mpi_runtime as mpi_runtime
from istjax.runtimes.mpi import rank as rank
from istjax.runtimes.mpi import size as size

#: The runtimes by config name (``runtime.name``): ``simulate``, ``devices``, ``mpi``.
RUNTIMES: Registry[Runtime] = Registry(
    "runtime", field="backend", entries={r.name: r for r in (_simulate.RUNTIME, _devices.RUNTIME, _mpi.RUNTIME)},
    hint="Add one with istjax.runtimes.register(Runtime(name, build, description)).")


def register(runtime: Runtime) -> Runtime:
    """Adds ``runtime`` (replacing one of the same name); returns it."""
    return RUNTIMES.register(runtime.name, runtime)


def names() -> tuple[str, ...]:
    """The runtimes' config names (``runtime.name``), in registration order."""
    return tuple(RUNTIMES.names())


def get(name) -> Runtime:
    """The runtime called ``name`` (or ``name`` itself when it is a `Runtime`)."""
    return name if isinstance(name, Runtime) else RUNTIMES.get(name)


__all__ = ["DEVICES", "MODES", "MPIRuntime", "RUNTIMES", "Runtime", "RuntimeHandle", "abort_on_error", "check_fit",
           "devices_used", "get", "is_primary", "mpi_runtime", "names", "rank", "register", "size"]
