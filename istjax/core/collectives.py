"""`Collectives`: the collectives over P shards a tensor-parallel step is written against, whoever supplies them.

An algorithm that splits every layer across shards (`istjax.algorithms.tensor`) states a shard's step once against
this record; a runtime supplies it: the MPI runtime's mpi4jax calls (`istjax.runtimes.mpi`), or `lax_collectives`
over the named axis of a ``vmap`` over shards (one process: the tests' oracle). It lives in the core so that
algorithms, models and runtimes all read it and none imports another.

`differentiable` gives them the adjoints a shard's loss needs when every shard computes the same loss (Megatron-LM,
arXiv 1909.08053: its ``f`` and ``g``): `Differentiable.enter` (identity forward, sum backward) where a value every
shard holds whole enters a shard's own columns, `Differentiable.reduce` (sum forward, identity backward) where the
shards' partial sums meet, `Differentiable.gather_columns` (all-gather forward, reduce-scatter backward). A model's
shard pass (`istjax.core.contract`: ``tensor_logits``) is written against them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax

import jax.numpy as jnp

from istjax.core.state import WORKERS

__all__ = ["Collectives", "Differentiable", "differentiable", "lax_collectives"]


class Collectives(NamedTuple):
    """The raw collectives over the P shards a shard's step needs (no gradients: `differentiable` adds them).

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


class Differentiable(NamedTuple):
    """The collectives as a shard's forward pass and loss use them, with the adjoints of "every shard computes the
    same loss" (module docstring). Values cross in float32 whatever the compute dtype (a bfloat16 activation is
    summed in float32 and returned in bfloat16; mpi4jax has no bfloat16).

    Attributes:
      index: ``() -> int array``, this shard's index ``p``; size: P.
      enter: ``x -> x``, forward the identity; its gradient is summed over the shards. Where a value every shard
        holds whole (the residual stream, a row-split layer's output) enters a computation on the shard's own
        columns, each shard's cotangent is its columns' part of the whole one.
      reduce: ``x -> sum over shards``; the result feeds a computation every shard repeats, so its cotangent is
        already the same everywhere and passes back unchanged (a plain ``psum``'s adjoint would multiply it by P).
      gather_columns: ``[..., h] -> [..., P * h]`` (all-gather of the last axis, shard order); its gradient is
        summed over shards, each keeping its own columns (a reduce-scatter: all-to-all and a local sum).
      replicated_sum: `reduce` (the name the vocabulary-parallel loss reads it by).
      max: ``x -> max over shards``, without gradient (the log-sum-exp's shift).
    """

    index: Callable
    size: int
    enter: Callable
    reduce: Callable
    gather_columns: Callable
    max: Callable

    @property
    def replicated_sum(self) -> Callable:
        return self.reduce


def _in_float32(collective: Callable) -> Callable:
    """``collective`` on ``x`` cast to float32 (when it is a lower float), its result cast back to ``x``'s dtype."""
    def run(x):
        if x.dtype == jnp.float32 or not jnp.issubdtype(x.dtype, jnp.floating):
            return collective(x)
        return collective(x.astype(jnp.float32)).astype(x.dtype)

    return run


def differentiable(c: Collectives) -> Differentiable:
    """`Differentiable` collectives over ``c`` (custom VJPs)."""
    all_sum, all_gather, all_to_all = _in_float32(c.all_sum), _in_float32(c.all_gather), _in_float32(c.all_to_all)

    @jax.custom_vjp
    def enter(x):
        return x

    enter.defvjp(lambda x: (x, None), lambda _, ct: (all_sum(ct),))

    @jax.custom_vjp
    def reduce(x):
        return all_sum(x)

    reduce.defvjp(lambda x: (all_sum(x), None), lambda _, ct: (ct,))

    @jax.custom_vjp
    def gather_columns(h):
        parts = all_gather(h)  # [P, ..., h]
        return jnp.moveaxis(parts, 0, -2).reshape(h.shape[:-1] + (c.size * h.shape[-1],))

    def gather_bwd(_, ct):
        width = ct.shape[-1] // c.size
        parts = jnp.moveaxis(ct.reshape(ct.shape[:-1] + (c.size, width)), -2, 0)  # [P, ..., h]: block q to shard q
        return (jnp.sum(all_to_all(parts), axis=0),)

    gather_columns.defvjp(lambda h: (gather_columns(h), None), gather_bwd)
    return Differentiable(c.index, c.size, enter, reduce, gather_columns,
                          lambda x: c.all_max(jax.lax.stop_gradient(x)))
