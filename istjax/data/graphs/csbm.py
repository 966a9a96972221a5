"""A generated graph: the contextual stochastic block model (:func:`csbm`).

:func:`csbm` generates a graph whose labels are balanced blocks, whose edges fall inside blocks with a chosen
frequency (``homophily`` = expected fraction of edges inside a block) and whose features are a class mean plus
standard normal noise.  It samples edge counts and then edges, never an N x N matrix: 100,000 nodes take
about a second.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from istjax.core.errors import ArgError
from istjax.core.streams import check_positive
from istjax.graph.graph import from_edges

from istjax.data.graphs.container import GraphData

# --------------------------------------------------------------------------
# Contextual stochastic block model
# --------------------------------------------------------------------------


def _sample_pairs(rng: np.random.Generator, target: int, draw: Any) -> np.ndarray:
    """`target` distinct int64 pair keys: repeatedly `draw(k)` candidates, deduplicate, keep a random `target`."""
    keys = np.zeros(0, np.int64)
    while keys.size < target:
        need = target - keys.size
        keys = np.unique(np.concatenate([keys, draw(need + need // 16 + 16)]))
    if keys.size > target:
        keys = np.sort(rng.choice(keys, size=target, replace=False))
    return keys


def _check_csbm_args(num_nodes: int, num_classes: int, num_features: int, avg_degree: float, homophily: float,
                     snr: float, seed: int, train_per_class: int, num_val: int,
                     num_test: int) -> tuple[int, int, int, int, int, int, int]:
    """`(n, c, f, train_per_class, num_val, num_test, seed)` as checked ints; a ValueError naming a bad argument."""
    n = check_positive("num_nodes", num_nodes, 2)
    c = check_positive("num_classes", num_classes, 2)
    f = check_positive("num_features", num_features, 1)
    train_per_class = check_positive("train_per_class", train_per_class, 1)
    num_val = check_positive("num_val", num_val, 0)
    num_test = check_positive("num_test", num_test, 0)
    seed = check_positive("seed", seed, 0)
    for field, value, low, high in (("avg_degree", avg_degree, 0.0, float(n - 1)), ("homophily", homophily, 0.0, 1.0),
                                    ("snr", snr, 0.0, math.inf)):
        if not isinstance(value, (int, float, np.integer, np.floating)) or not low <= float(value) <= high:
            raise ArgError(field, value, f"{field}={value!r} must be a number in [{low}, {high}].", "")
    if c > n:
        raise ArgError(("num_classes", "num_nodes"), num_classes, f"num_classes={c} is more than num_nodes={n};",
                       "each block needs nodes.")
    if c * train_per_class + num_val + num_test > n:
        raise ArgError(("train_per_class", "num_val", "num_test", "num_nodes"), train_per_class,
                       f"the split needs {c} x {train_per_class} train + {num_val} val + {num_test} test = "
                       f"{c * train_per_class + num_val + num_test} nodes, more than num_nodes={n};", "pass fewer.")
    if train_per_class > n // c:
        raise ArgError("train_per_class", train_per_class,
                       f"train_per_class={train_per_class} is more than the smallest block ({n // c} nodes).", "")
    return n, c, f, train_per_class, num_val, num_test, seed


def _csbm_edge_counts(rng: np.random.Generator, n: int, p_in_pairs: int, avg_degree: float,
                      homophily: float) -> tuple[int, int]:
    """`(m_in, m_out)`: edge counts inside / across blocks, drawn from their binomials (two draws from `rng`)."""
    p_out_pairs = n * (n - 1) // 2 - p_in_pairs
    m = n * float(avg_degree) / 2.0
    p_in = float(homophily) * m / p_in_pairs if p_in_pairs else 0.0
    p_out = (1.0 - float(homophily)) * m / p_out_pairs
    if p_in > 0.5 or p_out > 0.5 or (homophily > 0 and p_in_pairs == 0):
        raise ArgError(("avg_degree", "homophily"), avg_degree,
                       f"avg_degree={avg_degree} with homophily={homophily} needs edge probabilities p_in={p_in:.3g}"
                       f", p_out={p_out:.3g}; this generator is for sparse graphs (both <= 0.5):",
                       "lower avg_degree, move homophily toward 1/num_classes, or add nodes.")
    m_in = int(rng.binomial(p_in_pairs, p_in)) if p_in > 0 else 0
    m_out = int(rng.binomial(p_out_pairs, p_out)) if p_out > 0 else 0
    return m_in, m_out


def _csbm_edges(rng: np.random.Generator, labels: np.ndarray, c: int, avg_degree: float,
                homophily: float) -> np.ndarray:
    """`[M, 2]` int64 distinct undirected edges (u < v) of the block model over `labels`."""
    n = labels.shape[0]
    members = np.argsort(labels, kind="stable")  # nodes grouped by block
    sizes = np.bincount(labels, minlength=c).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    pairs_in_block = sizes * (sizes - 1) // 2
    p_in_pairs = int(pairs_in_block.sum())
    m_in, m_out = _csbm_edge_counts(rng, n, p_in_pairs, avg_degree, homophily)

    def key(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The int64 key of each undirected pair."""
        return np.minimum(u, v) * n + np.maximum(u, v)

    def draw_in(k: int) -> np.ndarray:
        """`k` pair keys uniform over the pairs inside blocks."""
        block = rng.choice(c, size=k, p=pairs_in_block / p_in_pairs)
        size = sizes[block]
        i = rng.integers(0, size)
        j = (i + rng.integers(1, size)) % size  # a different member of the same block
        return key(members[starts[block] + i], members[starts[block] + j])

    def draw_out(k: int) -> np.ndarray:
        """Pair keys uniform over the pairs across blocks, by rejection among `k` and a few more candidates."""
        u, v = rng.integers(0, n, size=(2, k + k // max(c - 1, 1)))
        keep = labels[u] != labels[v]
        return key(u[keep], v[keep])

    keys = np.concatenate([_sample_pairs(rng, m_in, draw_in), _sample_pairs(rng, m_out, draw_out)])
    return np.stack([keys // n, keys % n], axis=1)


def _csbm_features(rng: np.random.Generator, labels: np.ndarray, c: int, f: int, snr: float) -> np.ndarray:
    """`[N, f] float32` features: each node's class mean (`snr` times a random unit vector) plus N(0, 1) noise."""
    directions = rng.standard_normal((c, f))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    means = (float(snr) * directions).astype(np.float32)
    features = rng.standard_normal((labels.shape[0], f), dtype=np.float32)
    features += means[labels]
    return features


def _csbm_split(rng: np.random.Generator, labels: np.ndarray, c: int, train_per_class: int, num_val: int,
                num_test: int) -> list[np.ndarray]:
    """`[train, val, test]` sorted int32 node indices: `train_per_class` random nodes a class, then random others."""
    order = rng.permutation(labels.shape[0])
    by_class = labels[order]
    train = np.concatenate([order[by_class == k][:train_per_class] for k in range(c)])
    rest = order[~np.isin(order, train)]
    return [np.sort(a).astype(np.int32) for a in (train, rest[:num_val], rest[num_val:num_val + num_test])]


def csbm(
    num_nodes: int = 10_000,
    num_classes: int = 5,
    num_features: int = 64,
    avg_degree: float = 10.0,
    homophily: float = 0.8,
    snr: float = 1.0,
    seed: int = 0,
    *,
    train_per_class: int = 20,
    num_val: int = 500,
    num_test: int = 1000,
) -> GraphData:
    """A contextual stochastic block model: blocks as labels, homophilous edges, Gaussian features.

    Labels are ``num_classes`` balanced blocks (sizes differ by at most one), assigned to nodes in a random
    order.  Each pair of nodes in the same block is an edge with probability ``p_in``, each pair in different
    blocks with ``p_out``, chosen so that the expected degree is ``avg_degree`` and the expected fraction of edges
    inside blocks is ``homophily``: ``p_in = homophily * M / P_in`` and ``p_out = (1 - homophily) * M / P_out``
    with ``M = N * avg_degree / 2`` and ``P_in``, ``P_out`` the numbers of pairs inside / across blocks.  So
    ``homophily = 1 / num_classes`` is an Erdos-Renyi graph, larger is homophilous, smaller heterophilous.  The
    edge counts are drawn from their binomials and the edges uniformly among the pairs, so the cost is linear in
    the number of edges (never an N x N matrix).  Features: class ``c`` has mean ``snr * u_c``, ``u_c`` a random
    unit vector in ``R^num_features``; a node's features are its class mean plus standard normal noise.

    The split: ``train_per_class`` random nodes of each class, then ``num_val`` and ``num_test`` random nodes of
    the rest.  The same arguments (``seed`` included) give the same dataset.

    Raises:
      ValueError: an argument out of range, naming it: too few nodes for the split, ``avg_degree`` or
        ``homophily`` that would need an edge probability above 1/2.
    """
    n, c, f, train_per_class, num_val, num_test, seed = _check_csbm_args(
        num_nodes, num_classes, num_features, avg_degree, homophily, snr, seed, train_per_class, num_val, num_test)
    rng = np.random.default_rng(seed)  # one stream, drawn in this order: labels, edges, features, split
    labels = rng.permutation(np.arange(n) % c).astype(np.int32)
    edges = _csbm_edges(rng, labels, c, avg_degree, homophily)
    features = _csbm_features(rng, labels, c, f, snr)
    splits = _csbm_split(rng, labels, c, train_per_class, num_val, num_test)
    graph = from_edges(features, edges, symmetric=True, where="csbm")
    return GraphData("csbm", graph, labels, *splits, num_classes=c)
