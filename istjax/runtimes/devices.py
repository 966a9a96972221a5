"""The ``devices`` runtime: the W workers of a round on the local accelerators (or fake CPU devices).

One jit-compiled round, as in ``simulate``, but the worker stage runs under `jax.shard_map` over a 1-D mesh whose
axis is named `DEVICES`: device ``d`` runs workers ``d * L .. (d + 1) * L - 1`` (``L = W / D`` workers per device),
mapped on the device with `istjax.runtimes.base.map_workers`. ``distribute`` and ``collect`` (sample, extract,
merge, average) run replicated on every device; only the workers' states and batches are split, and the shared
input is replicated (one copy per device, never one per worker).

Data parallel averages gradients over all W workers: ``local`` runs with ``axis_name=(WORKERS, DEVICES)``, so
``lax.pmean`` reduces over the lanes of a device and across devices.

jax 0.10 shards explicitly: the round places the state and the shared input replicated and the batches split on
the mesh (`jax.device_put`) before calling the compiled function, and reshards the workers to and from
``P(DEVICES)`` around the `shard_map`; the merged global state comes back replicated on the mesh's devices.
"""

from __future__ import annotations

import dataclasses

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from istjax.core.state import ModelStatePolicy, last_steps
from istjax.runtimes.base import (Runtime, check_batches, communicates, end_round, is_traced, local_handle,
                                  map_workers)

__all__ = ["DEVICES", "RUNTIME", "build", "devices_used", "make_mesh"]

#: The devices runtime's name (``runtime.name='devices'``): every worker on its own local device.
DEVICES = "devices"


def devices_used(num_workers: int, devices=None) -> list:
    """The devices a round of ``num_workers`` workers runs on: the first ``D`` local devices, where ``D`` is the
    largest divisor of W not above the device count (all of them when W is a multiple of the device count)."""
    devices = list(jax.local_devices() if devices is None else devices)
    d = max(k for k in range(1, len(devices) + 1) if num_workers % k == 0)
    return devices[:d]


def make_mesh(num_workers: int, devices=None) -> jax.sharding.Mesh:
    devs = devices_used(num_workers, devices)
    return jax.make_mesh((len(devs),), (DEVICES,), axis_types=(jax.sharding.AxisType.Explicit,), devices=devs)


def build(algorithm, devices=None, worker_map: str = "auto", loss_split: bool = True):
    """``algorithm`` with its worker stage split across local devices.

    Args:
      algorithm: an algorithm's pieces (see `istjax.algorithms`); ``local_fused`` is not used (the workers span
        several devices, so every algorithm runs its per-worker ``local``).
      devices: the devices to use (default: ``jax.local_devices()``); W / D workers per device.
      worker_map: how a device runs its workers (`istjax.runtimes.base.map_workers`): ``"vmap"``,
        ``"sequential"`` or ``"auto"``.
      loss_split: add the round's loss split to its metrics on the rounds called with ``split=True``
        (``algorithm.split``; a config's ``runtime.loss_split``, asked for on evaluation rounds:
        ``loss_split_every``), on every worker's last batch brought to every device.

    Returns:
      The algorithm; ``round.mesh`` is the mesh it runs on and ``round.compiled`` the jitted function (inputs
      already placed on the mesh).
    """
    w, k = algorithm.num_workers, algorithm.local_steps
    mesh = make_mesh(w, devices)
    d = mesh.devices.size
    replicated = NamedSharding(mesh, P())
    split_workers = NamedSharding(mesh, P(DEVICES))
    on_device = map_workers(algorithm.local, w // d, outer_axes=(DEVICES,), worker_map=worker_map,
                            communicates=communicates(algorithm))

    # check_vma=False: the reduction names a vmap axis and a mesh axis together, which the varying-axes checker
    # does not model; the result is replicated by construction (a mean over every worker).
    staged = jax.shard_map(on_device, mesh=mesh, in_specs=(P(DEVICES), P(DEVICES), P()),
                           out_specs=(P(DEVICES), P(DEVICES)), check_vma=False)

    def round_fn(state, batches, shared=None, split_now=True):
        workers, plan = algorithm.distribute(state)
        workers = jax.reshard(workers, split_workers)
        workers, metrics = staged(workers, batches, shared)
        # Merge scatters into replicated arrays: bring the workers' results back to every device first.
        workers, metrics = jax.reshard((workers, metrics), replicated)
        last = None
        if loss_split and algorithm.split is not None and split_now is not False:  # every worker's last batch
            last = jax.reshard(last_steps(batches), replicated)
        if algorithm.model_state_policy == ModelStatePolicy.RECOMPUTE:
            batches = jax.reshard(batches, replicated)
        return end_round(algorithm, state, workers, plan, metrics, batches, shared, loss_split=loss_split,
                         split=split_now, split_batches=last)

    compiled = jax.jit(round_fn, static_argnames="split_now")

    def round(state, batches, shared=None, *, split=True):
        check_batches(batches, w, k, getattr(algorithm.task, "example_x", None))
        state, shared = jax.device_put((state, shared), replicated)
        batches = jax.device_put(batches, split_workers)
        if is_traced(split):  # inside the driver's fused step: one program for every round
            return round_fn(state, batches, shared, split)
        return compiled(state, batches, shared, split_now=bool(split))

    round.compiled = compiled
    round.mesh = mesh
    return dataclasses.replace(algorithm, round=round, runtime=local_handle("devices"))


RUNTIME = Runtime("devices", build, "workers split across the local devices: jit + shard_map over a 1-D mesh, "
                                    "W/D workers mapped per device", config_options=("loss_split",))
