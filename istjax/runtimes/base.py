"""The runtime interface: a runtime receives an algorithm's pieces and decides where its W workers run.

A `Runtime` is ``(name, build, description)``; ``build(algorithm, **options)`` returns the algorithm with its
``init``, ``round`` and ``runtime`` (a `RuntimeHandle`) bound. The pieces (``distribute``, ``local``, ``collect``,
``local_fused``) and declarations (``exchange``, ...) are all a runtime reads (FedJAX's ``for_each_client``
backends have this shape). Built in (the registry, `istjax.runtimes.get`, lives in the package):

* ``"simulate"``: every worker on one device (`istjax.runtimes.simulate`).
* ``"devices"``: workers split across the local devices with ``shard_map`` (`istjax.runtimes.devices`).
* ``"mpi"``: workers split across the processes of ``mpiexec`` (`istjax.runtimes.mpi`).

Every runtime maps ``local`` over the workers it holds with `map_workers` (one worker runs unmapped), passes the
round's shared input to every worker unstacked, and checks the batches with `check_batches`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Optional

import jax

from istjax.core.state import WORKERS, first_worker

__all__ = ["Runtime", "RuntimeHandle", "check_batches", "map_workers", "local_handle"]

PyTree = Any


class RuntimeHandle(NamedTuple):
    """What a driver needs to know about the runtime an algorithm was bound to.

    Attributes:
      name: the runtime's name.
      fusable: the round traces inside an outer ``jit`` (so a driver may fuse batch drawing and the round).
      primary: this process writes files and evaluates (rank 0 under MPI; always True in one process).
      gather: ``state -> TrainState`` the whole state on the primary process (None elsewhere); every process must
        call it (collective under MPI).
      agree: ``int -> int``: the largest value any process passes (so every process stops after the same round).
      whole_state: the state each process holds is the whole `TrainState` (False for sharded MPI, whose pieces
        are gathered for evaluation and checkpointed shard by shard).
      rank, size: this process and the process count.
    """

    name: str
    fusable: bool
    primary: bool
    gather: Callable[[Any], Any]
    agree: Callable[[int], int]
    whole_state: bool = True
    rank: int = 0
    size: int = 1


def local_handle(name: str) -> RuntimeHandle:
    """The handle of a single-process runtime."""
    return RuntimeHandle(name=name, fusable=True, primary=True, gather=lambda state: state, agree=lambda v: v)


class Runtime(NamedTuple):
    """A runtime: ``build(algorithm, **options) -> algorithm`` with ``init``, ``round`` and ``runtime`` bound."""

    name: str
    build: Callable[..., Any]
    description: str


def check_batches(batches: Any, num_workers: int, local_steps: int) -> None:
    """Raises a clear error unless every leaf of ``batches`` is `[W, K, ...]`."""
    for path, x in jax.tree_util.tree_flatten_with_path(batches)[0]:
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) < 2 or tuple(shape[:2]) != (num_workers, local_steps):
            raise ValueError(
                f"batches{jax.tree_util.keystr(path)} has shape {shape}; a round needs [W, K, B, ...] = "
                f"[{num_workers}, {local_steps}, ...] (num_workers, local_steps first). Build batches with "
                f"istjax.data.make_batch_fn or reshape yours. Inputs every worker reads (a graph) go in shared=.")


def map_workers(local: Callable, num_workers: int, *, outer_axes: tuple[str, ...] = (),
                reduce: Optional[Callable] = None) -> Callable:
    """``run(workers [n], batches [n, K, ...], shared) -> (workers [n], metrics [n, K])``: ``local`` for ``n``
    workers held here, the shared input passed to each unstacked.

    ``n > 1`` maps with `vmap` over the axis named `WORKERS` (collectives then reduce over it and ``outer_axes``).
    ``n == 1`` runs unmapped: a vmap of size 1 is not free (XLA drops the unit batch dimension and, on the 2-layer
    speech model, computes the weight gradient transposed and transposes it back in every step: 2.3x slower;
    benchmarks study 7); collectives then reduce over ``outer_axes`` only (``()``: the identity).
    ``reduce`` (a cross-process gradient mean) is passed on to ``local``.
    """
    if num_workers == 1:
        def run_one(workers, batches, shared=None):
            out = local(first_worker(workers), first_worker(batches), shared, axis_name=outer_axes, reduce=reduce)
            return jax.tree.map(lambda x: x[None], out)

        return run_one

    axis_name = (WORKERS,) + tuple(outer_axes) if outer_axes else WORKERS

    def one(worker, batches_K, shared):
        return local(worker, batches_K, shared, axis_name=axis_name, reduce=reduce)

    mapped = jax.vmap(one, in_axes=(0, 0, None), axis_name=WORKERS)
    return lambda workers, batches, shared=None: mapped(workers, batches, shared)
