"""`EmbeddingBag`: a linear layer on sparse rows that never densifies them.

A sparse input row is a list of ``(feature id, value)`` pairs, padded with ``(0, 0)``
(`istjax.data.extreme.feature_pairs`: ``x [B, nnz, 2] float32``, ids exact in float32). The layer computes
``x_dense @ kernel`` as ``sum_j value_j * kernel[id_j]``: a gather of ``nnz`` kernel rows per example and a weighted sum, ``B * nnz * H``
multiply-adds instead of ``B * F * H`` for ``F`` features (Amazon-670k: 135,909 features, about 75 nonzero per point).
A padded slot has value 0 and adds nothing, so no mask is needed.

Memory: gathering every slot's row at once makes a ``[B, nnz, H]`` block, ``nnz`` times the layer's output (the
Debian set's 256 slots at H = 512 and B = 128: 67 MB, beside an output of 0.26 MB), and its gradient scatters the
same block back. ``slot_chunk = c`` sums the slots ``c`` at a time in a `jax.lax.scan` (a ``[B, c, H]`` block,
float32 accumulation), and the kernel's gradient, which autodiff takes through the scan, scatters ``c`` slots at a
time into one ``[F, H]`` buffer; ``0`` gathers all of them at once. Both give the same sums up to float rounding
(the slots are added in another order).

Its kernel ``[F, H]`` carries logical names (``"input"``, the hidden group): IST partitions it by columns (a worker's
hidden units), exactly as the dense MLP's first layer; from an owner's slice of the columns (the sharded MPI mode,
`istjax.models.owner_forward`) the same sum gives that owner's units.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

import istjax.core.tiled_init as tiled_init
from istjax.core import precision

__all__ = ["EmbeddingBag", "bag", "slot_chunks", "SLOT_CHUNK"]

#: The slots `EmbeddingBag` sums at a time unless told otherwise (``experiments/benchmarks/xmc.py``, study 1, measures
#: it against all slots at once: time and scratch memory, forward and gradient).
SLOT_CHUNK = 8


def bag(x_BxNx2: jax.Array, kernel_FxH: jax.Array, slot_chunk: int = 0) -> jax.Array:
    """``[B, H]``: each row's ``sum_j value_j * kernel[id_j]`` (module docstring), all slots at once
    (``slot_chunk = 0`` or at least ``nnz``) or ``slot_chunk`` at a time."""
    n = x_BxNx2.shape[-2]
    if not slot_chunk or slot_chunk >= n:
        return _block(x_BxNx2, kernel_FxH)
    chunks_CxBxcx2 = slot_chunks(x_BxNx2, slot_chunk)

    def add(y_BxH, x_Bxcx2):
        return y_BxH + _block(x_Bxcx2, kernel_FxH, jnp.float32), None

    y0 = jnp.zeros(x_BxNx2.shape[:-2] + kernel_FxH.shape[-1:], jnp.float32)
    return jax.lax.scan(add, y0, chunks_CxBxcx2)[0].astype(kernel_FxH.dtype)


def slot_chunks(x_BxNx2: jax.Array, slot_chunk: int) -> jax.Array:
    """``[C, B, slot_chunk, 2]``: the slots ``slot_chunk`` at a time, the last chunk padded with ``(0, 0)`` pairs (id 0
    at value 0 adds nothing), in the order `bag` sums them."""
    pad = -x_BxNx2.shape[-2] % slot_chunk
    x = jnp.pad(x_BxNx2, [(0, 0)] * (x_BxNx2.ndim - 2) + [(0, pad), (0, 0)])
    return jnp.moveaxis(x.reshape(x.shape[:-2] + (-1, slot_chunk, 2)), -3, 0)


def _block(x_BxNx2: jax.Array, kernel_FxH: jax.Array, out=None) -> jax.Array:
    """All ``N`` slots' rows gathered at once (``[B, N, H]``), weighted and summed (in ``out``'s dtype, else the
    kernel's)."""
    ids = x_BxNx2[..., 0].astype(jnp.int32)
    rows_BxNxH = jnp.take(kernel_FxH, ids, axis=0, mode="clip")  # ids are checked < F where the data is made
    return jnp.einsum("...n,...nh->...h", x_BxNx2[..., 1].astype(kernel_FxH.dtype), rows_BxNxH,
                      preferred_element_type=out)


class EmbeddingBag(nn.Module):
    """``x [B, nnz, 2] -> [B, features]``: the dense layer ``x_dense @ kernel (+ bias)`` on ``(id, value)`` pairs.

    Attributes:
      features: output width (hidden units).
      num_embeddings: the number of feature ids ``F`` (the kernel's rows).
      names: the logical names of the kernel's axes, ``(input, output)``; the bias carries the output's.
      use_bias: add a bias.
      kernel_init: the kernel's initializer (default ``N(0, 1)``: a unit-norm row, as tf-idf rows are, gives
        unit-variance outputs; drawn tile by tile, `istjax.core.tiled_init`, so a rank holding a block of the
        columns draws only that block).
      dtype: the compute dtype, ``"float32"`` or ``"bfloat16"`` (`istjax.core.precision`): the kernel's rows are
        read in it (the ids stay exact: the input is never cast); the kernel stays float32.
      slot_chunk: the slots summed at a time (`bag`; module docstring): ``0``, all at once (a ``[B, nnz, H]``
        block); the default `SLOT_CHUNK` (8) keeps an ``[B, 8, H]`` one.
    """

    features: int
    num_embeddings: int
    names: tuple[str, str] = ("input", "hidden_0")
    use_bias: bool = True
    kernel_init: nn.initializers.Initializer = tiled_init.normal(stddev=1.0)
    dtype: str = "float32"
    slot_chunk: int = SLOT_CHUNK

    @nn.compact
    def __call__(self, x_BxNx2: jax.Array) -> jax.Array:
        kernel = self.param("kernel", nn.with_logical_partitioning(self.kernel_init, self.names),
                            (self.num_embeddings, self.features))
        y = bag(x_BxNx2, precision.cast(kernel, self.dtype), self.slot_chunk)
        if self.use_bias:
            y = y + precision.cast(self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros,
                                                                                    self.names[1:]),
                                              (self.features,)), self.dtype)[None, :]
        return y
