"""The ``simulate`` runtime: every worker on one device, the whole round one jit-compiled function.

``local`` is mapped over the `[W]` worker axis with `istjax.runtimes.base.map_workers` (vmapped, axis name
`istjax.WORKERS`, so data parallel's ``lax.pmean`` averages across workers; one worker unmapped; workers that do
not communicate run one after another where that is faster: conv models on CPU), or the
algorithm's ``local_fused`` runs instead when it has one. Compiled once for all rounds. For laptops, tests and
theory runs.
"""

from __future__ import annotations

import dataclasses

import jax

from istjax.runtimes.base import (Runtime, check_batches, communicates, end_round, is_traced, local_handle,
                                  map_workers)

__all__ = ["RUNTIME", "build"]


def build(algorithm, worker_map: str = "auto", loss_split: bool = True):
    """``algorithm`` with a single-device, single-jit ``round`` (see the module docstring).

    ``worker_map``: how the workers' local phases run on the device (`istjax.runtimes.base.map_workers`):
    ``"vmap"``, ``"sequential"`` or ``"auto"``. ``loss_split``: add the round's loss split to its metrics on the
    rounds called with ``split=True`` (``algorithm.split``, `istjax.algorithms.base.loss_split`; a config's
    ``runtime.loss_split``, asked for on evaluation rounds: ``loss_split_every``).
    """
    w, k = algorithm.num_workers, algorithm.local_steps
    local_all = algorithm.local_fused or map_workers(algorithm.local, w, worker_map=worker_map,
                                                     communicates=communicates(algorithm))

    def round_fn(state, batches, shared=None, split=True):
        workers, plan = algorithm.distribute(state)
        workers, metrics = local_all(workers, batches, shared)
        return end_round(algorithm, state, workers, plan, metrics, batches, shared, loss_split=loss_split,
                         split=split)

    compiled = jax.jit(round_fn, static_argnames="split")

    def round(state, batches, shared=None, *, split=True):
        check_batches(batches, w, k, getattr(algorithm.task, "example_x", None))
        if is_traced(split):  # inside the driver's fused step: one program for every round
            return round_fn(state, batches, shared, split)
        return compiled(state, batches, shared, split=bool(split))

    round.compiled = compiled  # for cache inspection and AOT lowering
    return dataclasses.replace(algorithm, round=round, runtime=local_handle("simulate"))


RUNTIME = Runtime("simulate", build, "all workers on one device, vmapped, one jit", config_options=("loss_split",),
                  wall_time="one process computes every worker, no communication")
