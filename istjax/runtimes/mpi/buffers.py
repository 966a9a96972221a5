"""The exchanges' buffers: jitted pytree collectives over mpi4jax, the 16-bit packing of a rounding wire, and the
spare buffers a rank donates to the next round's exchange.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from istjax.core import precision
from istjax.core.collectives import Collectives
from istjax.runtimes.mpi.world import ROOT

__all__ = ["TreeCollectives", "Spares", "mpi_collectives", "packing", "unpacked", "zeros_like", "lane_shapes",
           "batchable_allgather"]

PyTree = Any


def batchable_allgather() -> None:
    """Gives mpi4jax's all-gather (0.9.1 has none) the batching rule its all-reduce has, so that it runs inside the
    lanes' ``vmap`` (data parallel's bfloat16 gradients): the all-gather of a batch is the all-gather of the whole
    array, ``[N, B, ...]``, the batch on axis 1."""
    from jax.interpreters import batching
    from mpi4jax._src.collective_ops.allgather import mpi_allgather_p  # late: needs MPI

    if mpi_allgather_p in batching.fancy_primitive_batchers:
        return

    def rule(args, dims, **params):
        (x,), (d,) = args, dims
        return mpi_allgather_p.bind(jnp.moveaxis(x, d, 0), **params), 1

    batching.primitive_batchers[mpi_allgather_p] = rule


class TreeCollectives:
    """Jitted pytree collectives.

    The ``*_into(buf, t)`` ones take first a buffer of the result's shapes and donate it: XLA writes the result into
    it, so an exchange repeated every round reuses the last round's memory (`Spares`) instead of allocating (and
    page-faulting) a fresh one (a 34 MB scatter: 44 -> 9 ms). ``scatter_rows_into`` and ``gather_rows_into`` move
    blocks of rows: root's leaves are `[W, ...]`, rank ``r`` sends or receives rows ``r * L .. (r + 1) * L - 1``
    (`[L, ...]`); the split and join of root's rows happen inside the jit, so they are free reshapes, not copies.
    """

    def __init__(self, comm):
        import mpi4jax  # late: needs MPI
        from mpi4py import MPI

        self.comm = comm
        c, n, root = comm, comm.Get_size(), comm.Get_rank() == ROOT

        def tree_op(op):
            return lambda t: jax.tree.map(op, t)

        def into(fn):  # result written into the donated first argument
            return jax.jit(lambda buf, t: fn(t), donate_argnums=0, keep_unused=True)

        def scatter_rows(x):  # root: [W, ...] -> [N, L, ...] -> each rank's [L, ...]
            return mpi4jax.scatter(x.reshape((n, x.shape[0] // n) + x.shape[1:]) if root else x, ROOT, comm=c)

        def gather_rows(x):  # each rank's [L, ...] -> root: [N, L, ...] -> [W, ...]
            got = mpi4jax.gather(x, ROOT, comm=c)
            return got.reshape((got.shape[0] * got.shape[1],) + got.shape[2:]) if root else got

        self.scatter_rows_into = into(tree_op(scatter_rows))
        self.gather_rows_into = into(tree_op(gather_rows))
        self.alltoall_into = into(tree_op(lambda x: mpi4jax.alltoall(x, comm=c)))
        self.allreduce_into = into(tree_op(lambda x: mpi4jax.allreduce(x, op=MPI.SUM, comm=c)))
        self.gather = jax.jit(tree_op(lambda x: mpi4jax.gather(x, ROOT, comm=c)))
        self.allreduce = jax.jit(tree_op(lambda x: mpi4jax.allreduce(x, op=MPI.SUM, comm=c)))
        self.allgather = jax.jit(tree_op(lambda x: mpi4jax.allgather(x, comm=c)))

        def allreduce_sum(x):  # for use inside a traced function
            return mpi4jax.allreduce(x, op=MPI.SUM, comm=c)

        self.allreduce_traced = allreduce_sum
        batchable_allgather()
        self.allgather_traced = lambda x: mpi4jax.allgather(x, comm=c)


def packing(wire: precision.Wire, like: PyTree) -> tuple[Callable, Callable]:
    """``(pack, unpack)`` of trees shaped like ``like`` over ``wire``: float32 leaves as the 16 bits of their rounded
    values (`istjax.core.precision.pack`: mpi4jax has no bfloat16), for use inside a jit; identities for float32."""
    if wire.exact:
        return (lambda t: t), (lambda t: t)
    return (lambda t: precision.pack(t, wire.dtype)), (lambda t: precision.unpack(t, like, wire.dtype))


def unpacked(v: jax.Array, wire: precision.Wire) -> jax.Array:
    """A leaf as it crossed a rounding ``wire`` back in float32: 16 bits (`packing`) unpacked, others as they are."""
    return precision.unpack(v, jax.ShapeDtypeStruct((), jnp.float32), wire.dtype) if v.dtype == jnp.uint16 else v


def zeros_like(shapes: PyTree) -> PyTree:
    """A fresh buffer per leaf of ``shapes`` (`jax.ShapeDtypeStruct` leaves), e.g. the first round's spare."""
    return jax.jit(lambda: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes))()


def lane_shapes(workers: PyTree, lanes: int) -> PyTree:
    """The shapes of ``workers`` (leaves `[W, ...]`, arrays or `jax.ShapeDtypeStruct`) for this rank's L lanes."""
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct((lanes,) + s.shape[1:], s.dtype), workers)


class Spares:
    """Buffers a rank keeps between rounds by name, each donated to the next call that writes a result of its shapes
    (an ``TreeCollectives.*_into``, a step with a donated output buffer). Only buffers the runtime owns are kept: results
    read within the round (received workers, sums) and never returned to the caller."""

    def __init__(self):
        self._bufs: dict = {}

    def take(self, name: str, like: PyTree) -> PyTree:
        """The buffer kept as ``name``, or zeros shaped like ``like`` (arrays or `jax.ShapeDtypeStruct`) at first."""
        buf = self._bufs.pop(name, None)
        return zeros_like(jax.eval_shape(lambda t: t, like)) if buf is None else buf

    def keep(self, **bufs: PyTree) -> None:
        self._bufs.update(bufs)


def mpi_collectives(comm, me: int):
    """`istjax.algorithms.tensor.Collectives` of mpi4jax calls, for use inside a traced function."""
    import mpi4jax
    from mpi4py import MPI

    return Collectives(index=lambda: jnp.int32(me), size=comm.Get_size(),
                       all_gather=lambda x: mpi4jax.allgather(x, comm=comm),
                       all_sum=lambda x: mpi4jax.allreduce(x, op=MPI.SUM, comm=comm),
                       all_max=lambda x: mpi4jax.allreduce(x, op=MPI.MAX, comm=comm),
                       all_to_all=lambda x: mpi4jax.alltoall(x, comm=comm))
