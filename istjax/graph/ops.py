"""Sparse neighbour aggregation on a `Graph`: gather along edges, ``jax.ops.segment_sum`` at the receivers.

For node features ``x: [N, H]`` and per-edge weights ``w: [E]`` the aggregate at node ``v`` is
``sum over edges e with receivers[e] == v of w[e] * x[senders[e]]``. Two normalisations, both as edge weights
(padded edges weigh 0, so padding never contributes):

* `gcn_weights`: Kipf and Welling's symmetric ``D^-1/2 (A + I) D^-1/2``, degrees counted with the self-loop, and
  the self-loop's own weight ``1 / deg(v)`` returned separately (self-loops are not stored as edges);
* `mean_weights`: ``1 / deg(v)`` at the receiver, GraphSAGE's mean aggregator (nodes without neighbours get 0).

No N x N matrix is ever formed; memory is ``O(E H)`` for the gathered messages.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from istjax.graph.graph import Graph

__all__ = ["aggregate", "degree", "gcn_propagate", "gcn_weights", "mean_aggregate", "mean_weights"]


def degree(graph: Graph) -> jax.Array:
    """`[N]` float32: real (unmasked) edges arriving at each node."""
    return jax.ops.segment_sum(graph.edge_mask.astype(jnp.float32), graph.receivers, graph.nodes.shape[0])


def aggregate(graph: Graph, x_NxH: jax.Array, weights_E: jax.Array) -> jax.Array:
    """`[N, H]`: ``out[v] = sum_{e: receivers[e] = v} weights[e] * x[senders[e]]``, summed in float32 (a bfloat16
    ``x`` gets a bfloat16 result)."""
    x32_NxH = x_NxH.astype(jnp.float32)
    messages = x32_NxH[graph.senders] * weights_E[:, None].astype(x32_NxH.dtype)
    return jax.ops.segment_sum(messages, graph.receivers, x_NxH.shape[0]).astype(x_NxH.dtype)


def gcn_weights(graph: Graph) -> tuple[jax.Array, jax.Array]:
    """``(edge weights [E], self weights [N])`` of ``D^-1/2 (A + I) D^-1/2`` with ``D`` the degree of ``A + I``.

    A real node has degree ``1 + neighbours``; a padded node gets weight 0 everywhere.
    """
    node = graph.node_mask.astype(jnp.float32)
    deg = degree(graph) + node
    inv_sqrt = jnp.where(deg > 0, jax.lax.rsqrt(jnp.maximum(deg, 1e-12)), jnp.float32(0))
    edge = inv_sqrt[graph.senders] * inv_sqrt[graph.receivers] * graph.edge_mask.astype(jnp.float32)
    return edge, inv_sqrt * inv_sqrt * node


def gcn_propagate(graph: Graph, x_NxH: jax.Array, weights=None) -> jax.Array:
    """``D^-1/2 (A + I) D^-1/2 x`` (pass ``weights=gcn_weights(graph)`` to reuse them across layers)."""
    edge, self_w = gcn_weights(graph) if weights is None else weights
    return aggregate(graph, x_NxH, edge) + self_w[:, None].astype(x_NxH.dtype) * x_NxH


def mean_weights(graph: Graph) -> jax.Array:
    """`[E]`: ``1 / deg(receiver)`` on real edges, 0 on padding."""
    deg = degree(graph)
    return jnp.where(graph.edge_mask, 1.0 / jnp.maximum(deg[graph.receivers], jnp.float32(1)), jnp.float32(0))


def mean_aggregate(graph: Graph, x_NxH: jax.Array, weights=None) -> jax.Array:
    """The mean of each node's neighbours' features (0 for a node without neighbours)."""
    return aggregate(graph, x_NxH, mean_weights(graph) if weights is None else weights)
