"""The ``devices`` backend: the W workers of a round on the local accelerators (or fake CPU devices).

One jit-compiled round, as in ``simulate``, but the worker stage runs under `jax.shard_map` over a 1-D mesh whose
axis is named `DEVICES`: device ``d`` runs workers ``d * L .. (d + 1) * L - 1`` (``L = W / D`` workers per device),
vmapped on the device with the axis name `istjax.WORKERS`. ``distribute`` and ``collect`` (sample, extract, merge,
average) run replicated on every device; only the workers' states and batches are split.

Data parallel averages gradients over all W workers: the backend passes ``axis_name=(WORKERS, DEVICES)`` to an
algorithm's ``local`` when it accepts one, so ``lax.pmean`` reduces over the lanes of a device and across devices.

jax 0.10 shards explicitly: the round places the state replicated and the batches split on the mesh
(`jax.device_put`) before calling the compiled function, and reshards the workers to and from ``P(DEVICES)`` around
the `shard_map`; the merged global state comes back replicated on the mesh's devices.
"""

from __future__ import annotations

import functools

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import istjax.runtimes.base as backends
from istjax.algorithms.base import WORKERS, _summarize

__all__ = ["DEVICES", "devices_used", "make_devices_round"]

DEVICES = "devices"


def devices_used(num_workers: int, devices=None) -> list:
    """The devices a round of ``num_workers`` workers runs on: the first ``D`` local devices, where ``D`` is the
    largest divisor of W not above the device count (all of them when W is a multiple of the device count)."""
    devices = list(jax.local_devices() if devices is None else devices)
    d = max(k for k in range(1, len(devices) + 1) if num_workers % k == 0)
    return devices[:d]


def make_devices_round(*, distribute, local, collect, num_workers, local_steps, devices=None, local_fused=None):
    """``round(state, batches) -> (state, metrics)`` with the worker stage split across local devices.

    Args:
      distribute, local, collect: an algorithm's pieces (see `istjax.algorithms`).
      num_workers: W; runs on `devices_used(W)` devices, ``W / D`` workers per device.
      local_steps: K, for the batch shape check.
      devices: the devices to use (default: ``jax.local_devices()``).
      local_fused: ignored: the workers span several devices, so every algorithm runs its per-worker ``local``.

    Returns:
      ``round``; ``round.mesh`` is the mesh it runs on and ``round.compiled`` the jitted function (inputs already
      placed on the mesh).
    """
    del local_fused
    devs = devices_used(num_workers, devices)
    mesh = jax.make_mesh((len(devs),), (DEVICES,), axis_types=(jax.sharding.AxisType.Explicit,), devices=devs)
    replicated = NamedSharding(mesh, P())
    split = NamedSharding(mesh, P(DEVICES))
    worker_fn = functools.partial(local, axis_name=(WORKERS, DEVICES))  # every Algorithm.local takes it

    if num_workers == len(devs):  # one worker per device: no vmap of size 1 (see `istjax.backends._unmapped`)
        on_device = backends._unmapped(local, DEVICES)
    else:
        def on_device(workers, batches):  # leaves [L, ...]: this device's workers
            return jax.vmap(worker_fn, axis_name=WORKERS)(workers, batches)

    # check_vma=False: the reduction names a vmap axis and a mesh axis together, which the varying-axes checker
    # does not model; the result is replicated by construction (a mean over every worker).
    staged = jax.shard_map(on_device, mesh=mesh, in_specs=(P(DEVICES), P(DEVICES)), out_specs=(P(DEVICES), P(DEVICES)),
                           check_vma=False)

    def round_fn(state, batches):
        workers, plan = distribute(state)
        workers = jax.reshard(workers, split)
        workers, metrics = staged(workers, batches)
        # Merge scatters into replicated arrays: bring the workers' results back to every device first.
        workers, metrics = jax.reshard((workers, metrics), replicated)
        return collect(state, workers, plan), _summarize(metrics)

    compiled = jax.jit(round_fn)

    def round(state, batches):
        backends.check_batches(batches, num_workers, local_steps)
        state = jax.device_put(state, replicated)
        batches = jax.device_put(batches, split)
        return compiled(state, batches)

    round.compiled = compiled
    round.mesh = mesh
    return round


devices = backends.register(backends.Backend(
    "devices", make_devices_round,
    "workers split across the local devices: jit + shard_map over a 1-D mesh, W/D workers vmapped per device"))
