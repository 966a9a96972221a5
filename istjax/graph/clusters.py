"""Cluster-GCN mini-batching: partition a big graph into clusters, train each step on a few of them.

Full-graph GCN training needs the whole graph (features, activations, every layer's messages) at once. Cluster-GCN
(Chiang et al., KDD 2019) instead cuts the node set into ``C`` clusters with a graph partitioner (METIS), so that
most edges stay inside a cluster, and trains each step on the subgraph induced by ``q`` clusters. Edges between
clusters are dropped (a good partition cuts few of them).

The pieces, host side once, then on device every step:

* :func:`partition_nodes` -- ``[N] int32`` cluster id per node (METIS via ``pymetis``, or a balanced random
  split).
* :func:`cluster_table` -- a :class:`ClusterTable`: every cluster's node ids and within-cluster edges as padded,
  static-shape arrays, put on device once.
* `istjax.data.cluster_batches.cluster_batches` (the batching plan lives with the other batching plans in
  ``istjax.data``) -- ``batches(round_index) -> [W, K, q] int32`` cluster ids per worker and local step, a pure
  function of ``(seed, round_index, worker)`` that visits every cluster once per epoch (see there).
* :func:`subgraph` -- a pure ``jnp`` gather of ``q`` clusters into one padded :class:`~istjax.graph.Graph` plus
  labels and a loss mask; jit it, vmap it over workers and steps.

Example (two triangles joined by the edge 2 - 3)::

    >>> import numpy as np
    >>> from istjax.graph import from_edges
    >>> g = from_edges(np.zeros((6, 1), np.float32), np.array([[0, 1], [1, 2], [0, 2], [2, 3], [3, 4], [4, 5], [3, 5]]))
    >>> assignment = partition_nodes(g, 6, 2, method="random", seed=0)
    >>> table = cluster_table(g, assignment)
    >>> from istjax.data.cluster_batches import cluster_batches
    >>> batches = cluster_batches(2, num_workers=1, local_steps=2, clusters_per_step=1, seed=0)
    >>> ids = batches(0)            # [1, 2, 1]: each of the 2 clusters once in the first epoch of 2 steps
    >>> sub, y, loss_mask = subgraph(table, g.nodes, np.zeros(6, np.int32), np.ones(6, bool), ids[0, 0])
"""

from __future__ import annotations

import operator
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from istjax.core.errors import ArgError
from istjax.core.streams import SHARD_TAG as _SHARD_TAG
from istjax.core.streams import check_positive as _check_positive
from istjax.core.streams import check_seed
from istjax.graph.graph import Graph

__all__ = [
    "METHODS",
    "ClusterTable",
    "cluster_table",
    "edge_cut",
    "partition_nodes",
    "subgraph",
]

METHODS = ("metis", "random", "auto")


# ---------------------------------------------------------------------------------------------------------------
# Partitioning (host side, numpy)
# ---------------------------------------------------------------------------------------------------------------


def _num_nodes(graph_or_edges: Any, num_nodes: Any) -> int:
    """The node count: ``num_nodes``, checked against the graph's when a `Graph` is given (None takes it)."""
    if isinstance(graph_or_edges, Graph):
        n = graph_or_edges.num_nodes
        if num_nodes is not None and operator.index(num_nodes) != n:
            raise ArgError("num_nodes", num_nodes, f"num_nodes={num_nodes} but the graph has {n} nodes;",
                           f"pass num_nodes={n} (or None).")
        return n
    if num_nodes is None:
        raise ArgError("num_nodes", None, "num_nodes=None: with an edge list [M, 2] the node count must be given;",
                       "pass num_nodes=N.")
    return _check_positive("num_nodes", num_nodes)


def _undirected_pairs(graph_or_edges: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` int64: every undirected edge in both directions, no self-loops, no duplicates, sorted by
    ``(src, dst)``. A `Graph` contributes its unmasked edges; an edge list ``[M, 2]`` is read as undirected."""
    if isinstance(graph_or_edges, Graph):
        keep = np.asarray(graph_or_edges.edge_mask, bool)
        s = np.asarray(graph_or_edges.senders, np.int64)[keep]
        r = np.asarray(graph_or_edges.receivers, np.int64)[keep]
    else:
        e = np.asarray(graph_or_edges)
        if e.size == 0:
            e = np.zeros((0, 2), np.int64)
        if e.ndim != 2 or e.shape[1] != 2 or not np.issubdtype(e.dtype, np.integer):
            raise ArgError("graph_or_edges", e.shape,
                           f"graph_or_edges: expected a Graph or integer pairs [M, 2], got {e.dtype} {e.shape}.", "")
        s, r = e[:, 0].astype(np.int64), e[:, 1].astype(np.int64)
    if s.size and (min(s.min(), r.min()) < 0 or max(s.max(), r.max()) >= n):
        raise ArgError(("graph_or_edges", "num_nodes"), (int(min(s.min(), r.min())), int(max(s.max(), r.max()))),
                       f"graph_or_edges: edge endpoints must lie in [0, num_nodes={n}); found "
                       f"{int(min(s.min(), r.min()))}..{int(max(s.max(), r.max()))}.", "Fix the edges or num_nodes.")
    src, dst = np.concatenate([s, r]), np.concatenate([r, s])
    code = np.unique((src * n + dst)[src != dst])
    return code // n, code % n


def _check_num_clusters(num_clusters: Any, n: int) -> int:
    try:
        c = operator.index(num_clusters)
    except TypeError:
        raise ArgError("num_clusters", num_clusters,
                       f"num_clusters={num_clusters!r} must be an integer in [1, num_nodes={n}];", "pass an int.") from None
    if not 1 <= c <= n:
        raise ArgError("num_clusters", c, f"num_clusters={c} must be in [1, num_nodes={n}] (each cluster needs at "
                       f"least one node);", f"pass 1 <= num_clusters <= {n}.")
    return c


def _random_partition(n: int, c: int, seed: int) -> np.ndarray:
    """Balanced: ``order = permutation(fold_in(PRNGKey(seed), _SHARD_TAG), N)`` (the key of the data shard split,
    :mod:`istjax.data.batching`); node ``order[i]`` goes to cluster ``i % C``. Sizes differ by at most one."""
    key = jax.random.fold_in(jax.random.PRNGKey(seed), _SHARD_TAG)
    order = np.asarray(jax.random.permutation(key, n))
    out = np.empty((n,), np.int32)
    out[order] = np.arange(n, dtype=np.int32) % c
    return out


def _metis_partition(pymetis: Any, n: int, c: int, src: np.ndarray, dst: np.ndarray, seed: int) -> np.ndarray:
    if c == 1:
        return np.zeros((n,), np.int32)
    xadj = np.zeros((n + 1,), np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=xadj[1:])
    options = pymetis.Options(seed=seed % 2**31)  # METIS's seed is a C int
    if hasattr(pymetis, "CSRAdjacency"):  # pymetis >= 2025.2; passing xadj/adjncy is deprecated there
        _, parts = pymetis.part_graph(c, pymetis.CSRAdjacency(xadj, dst), options=options)
    else:  # pragma: no cover - older pymetis
        _, parts = pymetis.part_graph(c, xadj=xadj, adjncy=dst, options=options)
    return np.asarray(parts, np.int32)


def partition_nodes(graph_or_edges: Graph | np.ndarray, num_nodes: int | None, num_clusters: int,
                    method: str = "metis", seed: int = 0) -> np.ndarray:
    """Cluster id of every node, ``[N] int32`` in ``[0, num_clusters)``.

    Args:
      graph_or_edges: a `Graph` (its unmasked ``senders -> receivers`` edges) or an integer edge list ``[M, 2]``;
        either way the edges are read as undirected (METIS wants a symmetric adjacency), self-loops and duplicates
        are ignored.
      num_nodes: ``N``; may be None for a `Graph` (then its node count; if given it must match).
      num_clusters: ``C``, ``1 <= C <= N``.
      method: ``"metis"``: METIS k-way / recursive bisection via ``pymetis.part_graph`` on the CSR adjacency
        (``xadj, adjncy``) -- few cut edges, clusters balanced to within METIS's tolerance (a few percent); raises
        ImportError if ``pymetis`` is not installed. ``"random"``: a balanced random split (sizes differ by at most
        one, ignores the edges; the fallback -- it cuts about ``1 - 1/C`` of the edges). ``"auto"``: ``"metis"`` if
        ``pymetis`` imports, else ``"random"`` with a warning.
      seed: METIS's random seed, or the key of the random split; an int in ``[0, 2**32)``.

    METIS may leave a cluster empty on degenerate inputs (e.g. ``C`` close to ``N``); the table and the batches
    handle empty clusters (they contribute nothing).
    """
    if method not in METHODS:
        raise ArgError("method", method, f"method={method!r} is not supported;", f"pass one of {list(METHODS)}.")
    seed = check_seed(seed)
    n = _num_nodes(graph_or_edges, num_nodes)
    c = _check_num_clusters(num_clusters, n)
    src, dst = _undirected_pairs(graph_or_edges, n)
    if method == "random":
        return _random_partition(n, c, seed)
    try:
        import pymetis
    except ImportError:
        if method == "metis":
            raise ImportError("partition_nodes(method='metis') needs pymetis: pip install pymetis, or pass "
                              "method='random' (or 'auto' to fall back automatically).") from None
        warnings.warn("pymetis is not installed: partition_nodes(method='auto') uses a balanced random partition "
                      "(many more cut edges); pip install pymetis for METIS.", stacklevel=2)
        return _random_partition(n, c, seed)
    return _metis_partition(pymetis, n, c, src, dst, seed)


def edge_cut(graph_or_edges: Graph | np.ndarray, assignment: np.ndarray) -> int:
    """Number of undirected edges whose two ends lie in different clusters (those Cluster-GCN drops)."""
    a = np.asarray(assignment)
    src, dst = _undirected_pairs(graph_or_edges, _num_nodes(graph_or_edges, a.shape[0]))
    return int(np.count_nonzero(a[src] != a[dst]) // 2)


# ---------------------------------------------------------------------------------------------------------------
# The cluster table (built on host once, lives on device)
# ---------------------------------------------------------------------------------------------------------------


class ClusterTable(NamedTuple):
    """Every cluster's nodes and within-cluster edges, padded to one static shape (device arrays).

    ``C`` clusters, ``Nmax`` = the largest cluster's node count, ``Emax`` = the largest within-cluster directed
    edge count (both at least 1). Cluster ``c`` holds ``n_c = node_mask[c].sum()`` nodes and
    ``e_c = edge_mask[c].sum()`` directed edges.

    Fields:
      nodes: ``[C, Nmax] int32``; ``nodes[c, i]`` for ``i < n_c`` is the global id (row of the graph's ``nodes``) of
        the ``i``-th node of cluster ``c``, ascending in ``i``; ``nodes[c, i] = 0`` for ``i >= n_c`` (padding).
      node_mask: ``[C, Nmax] bool``; True exactly at ``i < n_c`` (and, if the input graph was itself padded, only
        where that node is real).
      senders: ``[C, Emax] int32``; edge ``j < e_c`` of cluster ``c`` goes from local node ``senders[c, j]`` (an
        index ``i`` into ``nodes[c]``, in ``[0, n_c)``) ...
      receivers: ``[C, Emax] int32`` ... to local node ``receivers[c, j]``. These are the graph's unmasked edges
        whose both ends lie in cluster ``c``, in the graph's edge order; between-cluster edges are dropped. Padded
        entries (``j >= e_c``) are 0.
      edge_mask: ``[C, Emax] bool``; True exactly at ``j < e_c``.
      num_train: ``[C] int32``; training nodes in cluster ``c`` (``train_mask`` summed over it).
    """

    nodes: Any
    node_mask: Any
    senders: Any
    receivers: Any
    edge_mask: Any
    num_train: Any

    @property
    def num_clusters(self) -> int:
        return int(self.nodes.shape[0])

    @property
    def max_nodes(self) -> int:
        return int(self.nodes.shape[1])

    @property
    def max_edges(self) -> int:
        return int(self.senders.shape[1])

    def __repr__(self) -> str:
        return f"ClusterTable(clusters={self.num_clusters}, max_nodes={self.max_nodes}, max_edges={self.max_edges})"


def _pack(groups: np.ndarray, values: list[np.ndarray], num_groups: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Rows ``[G, max(1, max count)]`` of ``values`` grouped by ``groups`` (stable order), padding 0, and the mask."""
    order = np.argsort(groups, kind="stable")
    g = groups[order]
    counts = np.bincount(groups, minlength=num_groups)
    width = max(1, int(counts.max(initial=0)))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    col = np.arange(g.size) - starts[g]
    mask = np.zeros((num_groups, width), bool)
    mask[g, col] = True
    out = []
    for v in values:
        t = np.zeros((num_groups, width), np.int32)
        t[g, col] = v[order]
        out.append(t)
    return out, mask


def cluster_table(graph: Graph, assignment: np.ndarray, train_mask: np.ndarray | None = None, *,
                  num_clusters: int | None = None) -> ClusterTable:
    """The :class:`ClusterTable` of ``graph`` under ``assignment`` (host-side numpy, then put on device).

    Args:
      graph: the full graph (e.g. from `from_edges`); only its unmasked edges are used.
      assignment: ``[N]`` integer cluster id per node, e.g. from :func:`partition_nodes`.
      train_mask: ``[N] bool`` training nodes (for ``num_train``); None counts every node.
      num_clusters: ``C``; None takes ``assignment.max() + 1``. Pass it when a trailing cluster may be empty.
    """
    n = graph.num_nodes
    a = np.asarray(assignment)
    if a.shape != (n,) or not np.issubdtype(a.dtype, np.integer):
        raise ArgError("assignment", a.shape, f"assignment: must be integer [N] = ({n},), got {a.dtype} {a.shape}.", "")
    a = a.astype(np.int64)
    c = int(a.max(initial=-1)) + 1 if num_clusters is None else _check_num_clusters(num_clusters, n)
    if n and (a.min() < 0 or a.max() >= c):
        raise ArgError(("assignment", "num_clusters"), (int(a.min()), int(a.max())),
                       f"assignment: cluster ids must lie in [0, num_clusters={c}); found "
                       f"{int(a.min())}..{int(a.max())}.", "Pass a larger num_clusters or fix the assignment.")
    c = max(c, 1)
    tm = np.ones((n,), bool) if train_mask is None else np.asarray(train_mask)
    if tm.shape != (n,):
        raise ArgError("train_mask", tm.shape, f"train_mask: must be [N] = ({n},), got {tm.shape}.", "")
    tm = tm.astype(bool)

    ids = np.arange(n, dtype=np.int64)
    (nodes_t,), slot_mask = _pack(a, [ids], c)
    real = np.asarray(graph.node_mask, bool)
    node_mask = slot_mask & real[nodes_t]
    # Local index of every node within its cluster: its rank among the cluster's (ascending) node ids.
    local = np.empty((n,), np.int64)
    local[nodes_t[slot_mask]] = np.nonzero(slot_mask)[1]

    s = np.asarray(graph.senders, np.int64)
    r = np.asarray(graph.receivers, np.int64)
    keep = np.asarray(graph.edge_mask, bool) & (a[s] == a[r])
    s, r = s[keep], r[keep]
    (send_t, recv_t), edge_mask = _pack(a[s], [local[s], local[r]], c)
    num_train = np.bincount(a[tm], minlength=c).astype(np.int32)
    return ClusterTable(jnp.asarray(nodes_t, jnp.int32), jnp.asarray(node_mask), jnp.asarray(send_t, jnp.int32),
                        jnp.asarray(recv_t, jnp.int32), jnp.asarray(edge_mask), jnp.asarray(num_train))


# ---------------------------------------------------------------------------------------------------------------
# Gathering a batch of clusters into one padded graph (device, pure jnp)
# ---------------------------------------------------------------------------------------------------------------


def subgraph(table: ClusterTable, graph_nodes: Any, labels: Any, train_mask: Any,
             cluster_ids: Any) -> tuple[Graph, jax.Array, jax.Array]:
    """The padded subgraph of the clusters ``cluster_ids``: pure ``jnp``, static shapes, jit/vmap-compatible.

    Args:
      table: a :class:`ClusterTable` (``C`` clusters, ``Nmax``, ``Emax``).
      graph_nodes: ``[N, F]`` node features of the full graph.
      labels: ``[N]`` node labels (any dtype).
      train_mask: ``[N] bool``, True at training nodes.
      cluster_ids: ``[q]`` integer cluster ids, e.g. one ``[w, k]`` row of :func:`cluster_batches`. An id outside
        ``[0, C)`` (the batches use ``-1``) is an empty slot: its nodes and edges are all masked. Ids should be
        distinct (a repeated cluster appears twice, as two disconnected copies).

    Returns:
      ``(graph, labels, loss_mask)``: ``graph`` has ``q * Nmax`` nodes and ``q * Emax`` edges; slot ``i`` (cluster
      ``cluster_ids[i]``) occupies nodes ``[i * Nmax, (i + 1) * Nmax)`` and edges ``[i * Emax, (i + 1) * Emax)``,
      node ``i * Nmax + l`` being ``table.nodes[cluster_ids[i], l]``. Edges are the clusters' within-cluster edges
      with local indices offset by ``i * Nmax`` (so the graph is the disjoint union of the ``q`` induced
      subgraphs, between-cluster edges dropped). Padded nodes have zero features, no edges, label 0;
      padded edges have indices 0. ``labels: [q * Nmax]`` are the gathered labels; ``loss_mask: [q * Nmax] bool``
      is True exactly at real training nodes.

    To gather all workers and steps at once: ``jax.vmap(jax.vmap(lambda ids: subgraph(table, x, y, m, ids)))(
    batches(r))``.
    """
    ids = jnp.asarray(cluster_ids)
    if ids.ndim != 1 or not jnp.issubdtype(ids.dtype, jnp.integer):
        raise ArgError("cluster_ids", ids.shape, f"cluster_ids: must be integer [q], got {ids.dtype} {ids.shape};",
                       "vmap over leading axes.")
    c, nmax = table.nodes.shape
    emax = table.senders.shape[1]
    q = ids.shape[0]
    ids = ids.astype(jnp.int32)
    valid = (ids >= 0) & (ids < c)
    cid = jnp.clip(ids, 0, c - 1)

    gid = table.nodes[cid]  # [q, Nmax]
    node_mask = (table.node_mask[cid] & valid[:, None]).reshape(q * nmax)
    gid = gid.reshape(q * nmax)
    feats = jnp.take(jnp.asarray(graph_nodes), gid, axis=0)
    feats = jnp.where(node_mask[:, None], feats, jnp.zeros((), feats.dtype))
    lab = jnp.take(jnp.asarray(labels), gid, axis=0)
    lab = jnp.where(node_mask, lab, jnp.zeros((), lab.dtype))
    loss_mask = jnp.take(jnp.asarray(train_mask), gid, axis=0).astype(bool) & node_mask

    edge_mask = (table.edge_mask[cid] & valid[:, None]).reshape(q * emax)
    offset = (jnp.arange(q, dtype=jnp.int32) * nmax)[:, None]
    senders = jnp.where(edge_mask, (table.senders[cid] + offset).reshape(q * emax), 0)
    receivers = jnp.where(edge_mask, (table.receivers[cid] + offset).reshape(q * emax), 0)
    return Graph(feats, senders, receivers, edge_mask, node_mask), lab, loss_mask
