"""The one graph container: `Graph`, documented to the index (as jraph's ``GraphsTuple`` is).

A `Graph` holds N nodes and E *directed* edges; an undirected edge is stored as two (``u -> v`` and ``v -> u``).
Messages flow from ``senders[e]`` to ``receivers[e]``: aggregating at node ``v`` sums over the edges whose receiver
is ``v``. Self-loops are not stored; the operators that want them (GCN's ``A + I``) add them
(`istjax.graph.ops`). Padding (to give cluster subgraphs one static shape) is explicit: a padded edge has
``edge_mask[e] = False`` (and indices 0), a padded node ``node_mask[v] = False`` (zero features, no edges); padded
entries contribute nothing to any aggregation or degree.

Example, the path 0 - 1 - 2 with 2 features per node::

    >>> import numpy as np
    >>> g = from_edges(np.eye(3, 2, dtype=np.float32), np.array([[0, 1], [1, 2]]))
    >>> g.senders.tolist(), g.receivers.tolist()
    ([1, 0, 2, 1], [0, 1, 1, 2])
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from istjax.core.errors import ArgError

__all__ = ["Graph", "check_graph", "from_edges"]


class Graph(NamedTuple):
    """N nodes with features, E directed edges, and masks for padding.

    Fields:
      nodes: `[N, F] float32` node features.
      senders: `[E] int32`, edge ``e`` goes from node ``senders[e]`` ...
      receivers: `[E] int32` ... to node ``receivers[e]``; both in ``[0, N)``.
      edge_mask: `[E] bool`, False at padded edges.
      node_mask: `[N] bool`, False at padded nodes.
    """

    nodes: Any
    senders: Any
    receivers: Any
    edge_mask: Any
    node_mask: Any

    @property
    def num_nodes(self) -> int:
        return int(self.nodes.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.senders.shape[0])

    def __repr__(self) -> str:
        return f"Graph(nodes={tuple(self.nodes.shape)}, edges={self.num_edges})"


def from_edges(nodes: np.ndarray, edges: np.ndarray, *, symmetric: bool = True, where: str = "edges") -> Graph:
    """A `Graph` from features ``nodes: [N, F]`` and an edge list ``edges: [M, 2]`` of node index pairs.

    Self-loops and duplicate edges are dropped; with ``symmetric`` every edge is stored in both directions. Edges are
    sorted by (receiver, sender). Raises ValueError naming ``where`` for indices outside ``[0, N)`` or a badly shaped
    edge list.
    """
    nodes = np.asarray(nodes, np.float32)
    if nodes.ndim != 2:
        raise ArgError("nodes", nodes.shape, f"{where}: node features must be [N, F], got shape {nodes.shape}.", "")
    n = nodes.shape[0]
    edges = np.asarray(edges)
    if edges.size == 0:
        edges = np.zeros((0, 2), np.int64)
    if edges.ndim != 2 or edges.shape[1] != 2 or not np.issubdtype(edges.dtype, np.integer):
        raise ArgError("edges", edges.shape,
                       f"{where}: the edge list must be integer pairs [M, 2], got {edges.dtype} {edges.shape}.", "")
    bad = (edges < 0) | (edges >= n)
    if bad.any():
        row = int(np.argwhere(bad.any(1))[0, 0])
        raise ArgError("edges", edges[row].tolist(),
                       f"{where}: edge {row} = {edges[row].tolist()} refers to a node outside [0, {n}) "
                       f"({int(bad.any(1).sum())} such edges); the graph has {n} nodes.",
                       "Fix the file or the node count.")
    if symmetric:
        edges = np.concatenate([edges, edges[:, ::-1]])
    edges = edges[edges[:, 0] != edges[:, 1]]
    edges = np.unique(edges, axis=0)  # sorted by (sender, receiver); re-sort by receiver for locality
    edges = edges[np.lexsort((edges[:, 0], edges[:, 1]))]
    e = edges.shape[0]
    return Graph(nodes, edges[:, 0].astype(np.int32), edges[:, 1].astype(np.int32), np.ones((e,), bool),
                 np.ones((n,), bool))


def check_graph(graph: Graph, where: str = "graph") -> None:
    """Raises ValueError naming ``where`` when shapes, dtypes or indices are inconsistent (host-side check)."""
    n = graph.nodes.shape[0]
    for name in ("senders", "receivers", "edge_mask"):
        if np.ndim(getattr(graph, name)) != 1 or np.shape(getattr(graph, name))[0] != np.shape(graph.senders)[0]:
            raise ArgError(f"graph.{name}", np.shape(getattr(graph, name)),
                           f"{where}.{name}: must be [E] like senders ({np.shape(graph.senders)}), got "
                           f"{np.shape(getattr(graph, name))}.", "")
    if np.shape(graph.node_mask) != (n,):
        raise ArgError("graph.node_mask", np.shape(graph.node_mask),
                       f"{where}.node_mask: must be [N] = ({n},), got {np.shape(graph.node_mask)}.", "")
    for name in ("senders", "receivers"):
        idx = np.asarray(getattr(graph, name))
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ArgError(f"graph.{name}", (int(idx.min()), int(idx.max())),
                           f"{where}.{name}: indices must be in [0, {n}); found {int(idx.min())}..{int(idx.max())}.",
                           "")
