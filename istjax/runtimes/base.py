"""Backends decide where the W workers of a round run; algorithms do not know which one.

A backend is a `Backend` whose ``make_round(distribute, local, collect, num_workers, local_steps)`` returns the
``round(state, batches) -> (state, metrics)`` function. Built in:

* ``"simulate"``: every worker on one device. ``local`` is vmapped over the worker axis (bound to the axis name
  `istjax.algorithms.WORKERS`, so data parallel's ``lax.pmean`` averages across workers), or the algorithm's
  ``local_fused`` runs instead when it has one; the whole round is one jit-compiled function, compiled once for all
  rounds.

Other backends (local devices, MPI hosts) register themselves with `register`. ``make_round`` is called with
``local_fused=`` only for algorithms that have one; a backend that cannot use it accepts and ignores it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax

__all__ = ["Backend", "register", "get", "names", "check_batches", "simulate"]


class Backend(NamedTuple):
    name: str
    make_round: Callable[..., Callable]
    description: str


_REGISTRY: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    _REGISTRY[backend.name] = backend
    return backend


def names() -> tuple[str, ...]:
    _load_optional()
    return tuple(sorted(_REGISTRY))


def get(name: str) -> Backend:
    if name not in _REGISTRY:  # built-ins never depend on the optional modules importing
        _load_optional()
    if name not in _REGISTRY:
        raise ValueError(f"backend={name!r} is not known; choose one of {sorted(_REGISTRY)}.")
    return _REGISTRY[name]


def _load_optional():
    """Imports modules that register further backends, if present."""
    import importlib

    for mod in ("istjax.runtimes",):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise


def check_batches(batches: Any, num_workers: int, local_steps: int) -> None:
    """Raises a clear error unless every leaf of ``batches`` is `[W, K, ...]`."""
    for path, x in jax.tree_util.tree_flatten_with_path(batches)[0]:
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) < 2 or tuple(shape[:2]) != (num_workers, local_steps):
            raise ValueError(
                f"batches{jax.tree_util.keystr(path)} has shape {shape}; a round needs [W, K, B, ...] = "
                f"[{num_workers}, {local_steps}, ...] (num_workers, local_steps first). Build batches with "
                f"istjax.data.make_batch_fn or reshape yours.")


def _unmapped(local, axis_name):
    """``local`` for a `[1, ...]` stack of one worker, run without `vmap`.

    A vmap of size 1 is not free: XLA drops the unit batch dimension and, on the 2-layer speech model, then computes
    the weight gradient transposed and transposes it back in every step (2.3x slower; benchmarks study 7). Collectives
    over ``axis_name`` (``()`` when there is no other axis: the identity) still see every worker.
    """

    def run(workers, batches):
        first = lambda t: jax.tree.map(lambda x: x[0], t)  # noqa: E731
        out = local(first(workers), first(batches), axis_name=axis_name)
        return jax.tree.map(lambda x: x[None], out)

    return run


def _simulate_round(*, distribute, local, collect, num_workers, local_steps, local_fused=None):
    from istjax.algorithms.base import WORKERS, _summarize

    local_all = local_fused or (_unmapped(local, ()) if num_workers == 1 else jax.vmap(local, axis_name=WORKERS))

    def round_fn(state, batches):
        workers, plan = distribute(state)
        workers, metrics = local_all(workers, batches)
        return collect(state, workers, plan), _summarize(metrics)

    compiled = jax.jit(round_fn)

    def round(state, batches):
        check_batches(batches, num_workers, local_steps)
        return compiled(state, batches)

    round.compiled = compiled  # for cache inspection and AOT lowering
    return round


simulate = register(Backend("simulate", _simulate_round, "all workers on one device, vmapped, one jit"))
