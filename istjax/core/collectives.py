"""`Collectives`: the collectives over P shards a tensor-parallel step is written against, whoever supplies them.

An algorithm that splits every layer across shards (`istjax.algorithms.tensor`) states a shard's step once against
this record; a runtime supplies it: the MPI runtime's mpi4jax calls (`istjax.runtimes.mpi`), or `lax_collectives`
over the named axis of a ``vmap`` over shards (one process: the tests' oracle). It lives in the core so that
algorithms and runtimes both read it and neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax

from istjax.core.state import WORKERS

__all__ = ["Collectives", "lax_collectives"]


class Collectives(NamedTuple):
    """The raw collectives over the P shards a shard's step needs (no gradients: `istjax.algorithms.tensor.differentiable` adds them).

    Attributes:
      index: ``() -> int array``: this shard's index ``p``.
      size: P.
      all_gather: ``x [...] -> [P, ...]`` every shard's ``x`` in shard order.
      all_sum, all_max: ``x -> x`` summed / maximised over shards, elementwise.
      all_to_all: ``x [P, ...] -> [P, ...]``: row ``q`` goes to shard ``q``; row ``q`` of the result came from shard q.
    """

    index: Callable[[], jax.Array]
    size: int
    all_gather: Callable
    all_sum: Callable
    all_max: Callable
    all_to_all: Callable


def lax_collectives(size: int, axis_name=WORKERS) -> Collectives:
    """`Collectives` over the named axis of a ``vmap`` (or ``shard_map``) over the P shards."""
    return Collectives(index=lambda: jax.lax.axis_index(axis_name), size=size,
                       all_gather=lambda x: jax.lax.all_gather(x, axis_name),
                       all_sum=lambda x: jax.lax.psum(x, axis_name),
                       all_max=lambda x: jax.lax.pmax(x, axis_name),
                       all_to_all=lambda x: jax.lax.all_to_all(x, axis_name, 0, 0))
