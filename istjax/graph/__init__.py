"""Graphs for GIST: the `Graph` container, sparse neighbour aggregation and normalisation (`istjax.graph.ops`).

Nothing here holds a dense N x N adjacency: edges are index arrays and aggregation is `jax.ops.segment_sum`.
"""

from istjax.graph.graph import Graph as Graph
from istjax.graph.graph import check_graph as check_graph
from istjax.graph.graph import from_edges as from_edges

__all__ = ["Graph", "check_graph", "from_edges"]
