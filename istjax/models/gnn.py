"""Graph neural networks for GIST (Wolfe et al., arXiv 2102.10424): GCN and GraphSAGE with partitioned features.

Both read the graph as the round's *shared input* (``shared["graph"]``, an `istjax.graph.Graph` every worker reads
and none copies) and take a batch of node indices as ``x``: the forward pass runs over the whole graph (or the
cluster subgraph a mini-batch brings, ``shared["graph"]`` replaced by the batch's own) and returns the logits of the
batch's nodes. GIST partitions the hidden feature dimension of every layer but the output:

* `GCN` (Kipf and Welling, ICLR 2017): ``h_{l+1} = act(norm(A_hat h_l W_l + b_l))`` with ``A_hat = D^-1/2 (A + I)
  D^-1/2``. Kernel ``W_l: [H_l, H_{l+1}]`` is ``("hidden_{l-1}", "hidden_l")``; the bias is ``("hidden_l",)``.
* `GraphSAGE` (Hamilton et al., NeurIPS 2017) with the mean aggregator: ``h_{l+1} = act(norm([h_l, mean_N(h_l)]
  W_l + b_l))``. The concatenation puts hidden unit ``i`` of layer ``l`` at input positions ``i`` and ``i + H_l`` of
  ``W_{l+1}``: that axis is the tiled group ``"hidden_l*2"`` (`istjax.core.spec.tile_positions`).

The output layer's bias is shared (averaged at each sync); the input features and classes are never partitioned.
``layer_norm=True`` normalises each hidden layer without affine parameters, as GIST does (a worker normalises over
its own features). ``subnet(units)`` is the same model with ``hidden_l`` = the worker's slots.

``dropout`` (Kipf and Welling: 0.5 on the input features and on every hidden layer) draws its keep mask bit-sliced
(`keep_mask`): one random bit per entry for a rate of 0.5 instead of a 32-bit uniform, so dropping a
``[2708, 1433]`` feature matrix costs a few ms on a CPU where ``jax.random.bernoulli`` takes about 160 ms (the step's
largest cost, paid by every worker at every step).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from istjax.core import precision
from istjax.core.errors import ArgError
import istjax.models.owner_forward as owner_forward
from istjax.graph import ops
from istjax.graph.graph import Graph

__all__ = ["GCN", "GraphSAGE", "keep_fraction", "keep_mask"]

KEEP_BITS = 16  # resolution of a dropout rate that is not a multiple of a power of 1/2 (2^-16)


def keep_fraction(keep: float, max_bits: int = KEEP_BITS) -> tuple[int, int]:
    """``(q, k)`` with ``q / 2^k`` the keep probability `keep_mask` draws: ``keep`` with the fewest bits k that
    write it exactly, or rounded to the nearest multiple of ``2^-max_bits``."""
    q, k = round(float(keep) * 2 ** max_bits), max_bits
    while k > 1 and q % 2 == 0:
        q, k = q // 2, k - 1
    return q, k


def keep_mask(key: jax.Array, keep: float, shape: tuple[int, ...], max_bits: int = KEEP_BITS) -> jax.Array:
    """A boolean mask, each entry True with probability ``keep``, independently.

    Each entry's k-bit uniform integer ``u`` is spread over k planes of random 32-bit words (bit ``e % 32`` of word
    ``e // 32`` of plane ``j`` is bit ``j`` of entry ``e``, most significant first) and the entry is kept when
    ``u < q`` for ``keep = q / 2^k``, compared plane by plane with bitwise operations on whole words. k is the
    fewest bits that write ``keep`` exactly (1 for 0.5, 2 for 0.25 or 0.75), at most ``max_bits``, where a rate
    that no k-bit fraction writes is rounded to the nearest multiple of ``2^-max_bits``. The random words drawn are
    ``k / 32`` per entry instead of one.
    """
    n = 1
    for d in shape:
        n *= int(d)
    q, k = keep_fraction(keep, max_bits)
    if q <= 0 or q >= 2 ** k:  # keep rounds to 0 or 1
        return jnp.full(shape, q > 0)
    words = -(-n // 32)
    planes = jax.random.bits(key, (k, words), jnp.uint32)
    below = jnp.zeros((words,), jnp.uint32)  # u < q already decided by the bits so far
    equal = jnp.full((words,), 0xFFFFFFFF, jnp.uint32)  # u == q on the bits so far
    for j in range(k):
        if (q >> (k - 1 - j)) & 1:
            below, equal = below | (equal & ~planes[j]), equal & planes[j]
        else:
            equal = equal & ~planes[j]
    bits = (below[:, None] >> jnp.arange(32, dtype=jnp.uint32)[None, :]) & 1
    return bits.reshape(-1)[:n].reshape(shape).astype(bool)


def _dense(features: int, names: tuple, name: str, dtype: str = "float32", use_bias: bool = True) -> nn.Dense:
    return nn.Dense(features, use_bias=use_bias, name=name, **precision.dense_options(dtype),
                    kernel_init=nn.with_logical_partitioning(nn.initializers.glorot_uniform(), names),
                    bias_init=nn.with_logical_partitioning(nn.initializers.zeros, names[1:]))


def _graph_of(shared: Any) -> Graph:
    graph = shared["graph"] if isinstance(shared, Mapping) else shared
    if not isinstance(graph, Graph):
        raise TypeError(f"GNN models read an istjax.graph.Graph as shared['graph']; got {type(graph).__name__}.")
    return graph


class _GNN(nn.Module):
    """Fields and groups shared by `GCN` and `GraphSAGE`; ``dtype`` is the compute dtype, ``"float32"`` or
    ``"bfloat16"`` (`istjax.core.precision`; parameters stay float32, neighbour sums run in float32)."""

    hidden: tuple[int, ...] = (64,)
    num_classes: int = 7
    layer_norm: bool = False
    dropout: float = 0.0
    dtype: str = "float32"

    def __post_init__(self):
        hidden = tuple(self.hidden) if isinstance(self.hidden, (tuple, list)) else self.hidden
        if not isinstance(hidden, tuple) or not hidden or any(
                not isinstance(h, int) or isinstance(h, bool) or h < 1 for h in hidden):
            raise ArgError("hidden", self.hidden, f"{type(self).__name__}.hidden={self.hidden!r}:",
                           "give the hidden widths as positive ints, e.g. (64,) or (256, 256).")
        if not isinstance(self.num_classes, int) or self.num_classes < 1:
            raise ArgError("num_classes", self.num_classes,
                           f"{type(self).__name__}.num_classes={self.num_classes!r}: must be a positive int.", "")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ArgError("dropout", self.dropout, f"{type(self).__name__}.dropout={self.dropout!r}: must be a rate in "
                                                    f"[0, 1),", "e.g. 0.5.")
        if not isinstance(self.layer_norm, bool):
            raise ArgError("layer_norm", self.layer_norm,
                           f"{type(self).__name__}.layer_norm={self.layer_norm!r}: must be True or False.", "")
        object.__setattr__(self, "hidden", hidden)
        super().__post_init__()

    def subnet(self, units: Mapping[str, int]):
        return self.clone(hidden=tuple(int(units.get(f"hidden_{i}", h)) for i, h in enumerate(self.hidden)))

    def _act(self, h: jax.Array) -> jax.Array:
        if self.layer_norm:
            h = precision.in_float32(nn.LayerNorm(use_bias=False, use_scale=False))(h)
        return nn.relu(h)

    def _drop(self, h: jax.Array, train: bool) -> jax.Array:
        """Dropout in training (the ``"dropout"`` rng: a step key the batch carries, `istjax.data.with_step_keys`):
        each entry kept with probability ``1 - dropout`` (`keep_mask`) and scaled by its inverse."""
        if not train or not self.dropout:
            return h
        q, k = keep_fraction(1.0 - float(self.dropout))
        mask = keep_mask(self.make_rng("dropout"), 1.0 - float(self.dropout), h.shape)
        return jnp.where(mask, h * (2 ** k / q if q else 0.0), jnp.zeros_like(h))

    def __call__(self, x_B: jax.Array, shared: Any, train: bool = True) -> jax.Array:
        graph = _graph_of(shared)
        logits = self.propagate(graph, train)
        return logits[x_B.astype(jnp.int32)]

    # Evaluation from an owner's slice of every hidden layer's features (the sharded MPI mode): this module's own
    # __call__ with each dense layer's partial sums reduced and LayerNorm's statistics summed across the owners
    # (`istjax.models.owner_forward`); propagation over the graph acts on each feature alone.
    owner_logits = owner_forward.owner_logits_method


class GCN(_GNN):
    """Kipf and Welling's GCN; hidden features partitioned (see the module docstring)."""

    def partition_rules(self) -> dict[str, Any]:
        rules: dict[str, Any] = {"features": None, "classes": None}
        rules.update({f"hidden_{i}": f"hidden_{i}" for i in range(len(self.hidden))})
        return rules

    @nn.compact
    def propagate(self, graph: Graph, train: bool = False) -> jax.Array:
        weights = ops.gcn_weights(graph)
        h = self._drop(graph.nodes, train)
        names_in = "features"
        for i, width in enumerate(self.hidden):
            h = ops.gcn_propagate(graph, _dense(width, (names_in, f"hidden_{i}"), f"layer_{i}", self.dtype)(h), weights)
            h = self._drop(self._act(h), train)
            names_in = f"hidden_{i}"
        return ops.gcn_propagate(graph, _dense(self.num_classes, (names_in, "classes"), "output", self.dtype)(h), weights)


class GraphSAGE(_GNN):
    """GraphSAGE with the mean aggregator; a layer reads ``[self, mean of neighbours]`` (tiled groups)."""

    def partition_rules(self) -> dict[str, Any]:
        rules: dict[str, Any] = {"features_pair": None, "classes": None}
        for i in range(len(self.hidden)):
            rules[f"hidden_{i}"] = f"hidden_{i}"
            rules[f"hidden_{i}_pair"] = f"hidden_{i}*2"
        return rules

    @nn.compact
    def propagate(self, graph: Graph, train: bool = False) -> jax.Array:
        weights = ops.mean_weights(graph)
        h = self._drop(graph.nodes, train)
        names_in = "features_pair"
        for i, width in enumerate(self.hidden):
            pair = jnp.concatenate([h, ops.mean_aggregate(graph, h, weights)], axis=-1)
            h = self._drop(self._act(_dense(width, (names_in, f"hidden_{i}"), f"layer_{i}", self.dtype)(pair)), train)
            names_in = f"hidden_{i}_pair"
        pair = jnp.concatenate([h, ops.mean_aggregate(graph, h, weights)], axis=-1)
        return _dense(self.num_classes, (names_in, "classes"), "output", self.dtype)(pair)
