"""Tests for Cluster-GCN mini-batching (istjax.graph.clusters): partition, table, subgraph gather, epoch schedule."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from istjax.graph import Graph, from_edges
from istjax.data.cluster_batches import cluster_batches, steps_per_epoch
from istjax.graph.clusters import ClusterTable, cluster_table, edge_cut, partition_nodes, subgraph


def _two_cliques(m: int = 10) -> np.ndarray:
    """Edges of two m-cliques (nodes 0..m-1 and m..2m-1) joined by the single edge (m-1, m)."""
    edges = [(i, j) for base in (0, m) for i in range(base, base + m) for j in range(i + 1, base + m)]
    return np.array(edges + [(m - 1, m)])


def _grid(h: int, w: int) -> np.ndarray:
    idx = np.arange(h * w).reshape(h, w)
    return np.concatenate([np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1),
                           np.stack([idx[:-1].ravel(), idx[1:].ravel()], 1)])


def _random_graph(n: int, m: int, seed: int) -> Graph:
    """n nodes, ~m random undirected edges; feature 0 = node id (decodable after gathering)."""
    rng = np.random.default_rng(seed)
    x = np.stack([np.arange(n), rng.normal(size=n)], 1).astype(np.float32)
    return from_edges(x, rng.integers(0, n, size=(m, 2)))


def _edge_set(s, r) -> set[tuple[int, int]]:
    return set(zip(np.asarray(s).tolist(), np.asarray(r).tolist()))


# ----------------------------------------------------------------------------------------------- partition_nodes


def test_metis_recovers_two_cliques():
    pytest.importorskip("pymetis")
    g = from_edges(np.zeros((20, 1), np.float32), _two_cliques(10))
    a = partition_nodes(g, 20, 2, method="metis", seed=0)
    assert a.shape == (20,) and a.dtype == np.int32
    assert len(set(a[:10].tolist())) == 1 and len(set(a[10:].tolist())) == 1 and a[0] != a[10]
    assert edge_cut(g, a) == 1
    # The raw edge list gives the same partition, and the seed makes it deterministic.
    np.testing.assert_array_equal(partition_nodes(_two_cliques(10), 20, 2, seed=0), a)
    assert (partition_nodes(g, None, 1, method="metis") == 0).all()


def test_metis_cuts_far_fewer_edges_than_random():
    pytest.importorskip("pymetis")
    edges = _grid(16, 16)
    metis = partition_nodes(edges, 256, 8, method="metis", seed=1)
    rand = partition_nodes(edges, 256, 8, method="random", seed=1)
    assert set(metis.tolist()) == set(range(8))
    assert np.bincount(metis).max() <= 1.1 * 256 / 8  # METIS balance tolerance
    assert edge_cut(edges, metis) < 0.25 * edge_cut(edges, rand)


def test_random_partition_balanced_and_seeded():
    a = partition_nodes(_grid(7, 9), 63, 5, method="random", seed=3)
    counts = np.bincount(a, minlength=5)
    assert a.dtype == np.int32 and counts.sum() == 63 and counts.max() - counts.min() <= 1
    np.testing.assert_array_equal(a, partition_nodes(_grid(7, 9), 63, 5, method="random", seed=3))
    assert not np.array_equal(a, partition_nodes(_grid(7, 9), 63, 5, method="random", seed=4))


def test_auto_falls_back_to_random_without_pymetis(monkeypatch):
    monkeypatch.setitem(sys.modules, "pymetis", None)  # makes `import pymetis` raise ImportError
    with pytest.warns(UserWarning, match="pymetis is not installed"):
        a = partition_nodes(_grid(5, 5), 25, 4, method="auto", seed=0)
    np.testing.assert_array_equal(a, partition_nodes(_grid(5, 5), 25, 4, method="random", seed=0))
    with pytest.raises(ImportError, match="pip install pymetis"):
        partition_nodes(_grid(5, 5), 25, 4, method="metis")


@pytest.mark.parametrize("method", ["random", "metis"])
def test_bad_num_clusters_raise(method):
    edges = _grid(3, 3)
    for bad in (0, -1, 10):
        with pytest.raises(ValueError, match=rf"num_clusters={bad} must be in \[1, num_nodes=9\]"):
            partition_nodes(edges, 9, bad, method=method)
    with pytest.raises(ValueError, match="num_clusters"):
        partition_nodes(edges, 9, 2.5, method=method)
    with pytest.raises(ValueError, match="method="):
        partition_nodes(edges, 9, 2, method="spectral")
    with pytest.raises(ValueError, match="num_nodes"):
        partition_nodes(from_edges(np.zeros((9, 1), np.float32), edges), 8, 2, method=method)
    with pytest.raises(ValueError, match=r"\[0, num_nodes=9\)"):
        partition_nodes(np.array([[0, 9]]), 9, 2, method=method)


def test_num_clusters_equal_to_n_and_one():
    a = partition_nodes(_grid(3, 3), 9, 9, method="random")
    assert sorted(a.tolist()) == list(range(9))
    assert (partition_nodes(_grid(3, 3), 9, 1, method="random") == 0).all()


# ------------------------------------------------------------------------------------------------- cluster_table


def _setup(n=60, m=150, c=7, seed=0):
    g = _random_graph(n, m, seed)
    a = partition_nodes(g, n, c, method="random", seed=seed)
    train = np.random.default_rng(seed + 1).random(n) < 0.6
    return g, a, train, cluster_table(g, a, train)


def test_cluster_table_shapes_and_every_node_once():
    g, a, train, t = _setup()
    c, sizes = 7, np.bincount(a, minlength=7)
    assert isinstance(t, ClusterTable) and t.num_clusters == c and t.max_nodes == sizes.max()
    assert t.nodes.shape == t.node_mask.shape == (c, sizes.max()) and t.nodes.dtype == jnp.int32
    assert t.senders.shape == t.receivers.shape == t.edge_mask.shape == (c, t.max_edges)
    nodes, nm = np.asarray(t.nodes), np.asarray(t.node_mask)
    assert sorted(nodes[nm].tolist()) == list(range(60))  # every node in exactly one slot
    np.testing.assert_array_equal(nm.sum(1), sizes)
    assert (nodes[~nm] == 0).all()
    for cl in range(c):
        row = nodes[cl, nm[cl]]
        assert (a[row] == cl).all() and (np.diff(row) > 0).all()
    np.testing.assert_array_equal(np.asarray(t.num_train), np.bincount(a[train], minlength=c))
    # Edges: exactly the within-cluster ones, in local indices; padding is 0.
    s, r, em = np.asarray(t.senders), np.asarray(t.receivers), np.asarray(t.edge_mask)
    gs, gr = np.asarray(g.senders), np.asarray(g.receivers)
    within = a[gs] == a[gr]
    assert em.sum() == within.sum() and (s[~em] == 0).all() and (r[~em] == 0).all()
    for cl in range(c):
        got = _edge_set(nodes[cl, s[cl, em[cl]]], nodes[cl, r[cl, em[cl]]])
        assert got == _edge_set(gs[within & (a[gs] == cl)], gr[within & (a[gs] == cl)])


def test_cluster_table_bad_inputs():
    g = _random_graph(10, 20, 0)
    with pytest.raises(ValueError, match="assignment"):
        cluster_table(g, np.zeros(9, np.int32))
    with pytest.raises(ValueError, match="assignment"):
        cluster_table(g, np.full(10, 3, np.int32), num_clusters=3)
    with pytest.raises(ValueError, match="train_mask"):
        cluster_table(g, np.zeros(10, np.int32), np.ones(9, bool))


# ------------------------------------------------------------------------------------------------------ subgraph


def _check_subgraph(g, a, train, labels, t, ids):
    sub, y, lm = jax.jit(subgraph)(t, g.nodes, labels, train, jnp.asarray(ids, jnp.int32))
    q = len(ids)
    assert sub.nodes.shape == (q * t.max_nodes, 2) and sub.senders.shape == (q * t.max_edges,)
    assert y.shape == lm.shape == (q * t.max_nodes,) and lm.dtype == jnp.bool_
    x, nm = np.asarray(sub.nodes), np.asarray(sub.node_mask)
    gid = x[:, 0].astype(np.int64)  # feature 0 is the global node id
    real = [i for i in ids if 0 <= i < t.num_clusters]
    members = np.isin(a, real)
    # Nodes: the union of the clusters, each once; features, labels, loss mask gathered; padding zeroed.
    assert sorted(gid[nm].tolist()) == np.flatnonzero(members).tolist()
    np.testing.assert_array_equal(x[nm], np.asarray(g.nodes)[gid[nm]])
    assert (x[~nm] == 0).all() and (np.asarray(y)[~nm] == 0).all()
    np.testing.assert_array_equal(np.asarray(y)[nm], labels[gid[nm]])
    np.testing.assert_array_equal(np.asarray(lm), nm & train[gid])
    # Edges: the naive induced within-cluster subgraph, computed in numpy over the full edge list.
    gs, gr = np.asarray(g.senders), np.asarray(g.receivers)
    naive = (a[gs] == a[gr]) & members[gs]
    em = np.asarray(sub.edge_mask)
    s, r = np.asarray(sub.senders), np.asarray(sub.receivers)
    assert _edge_set(gid[s[em]], gid[r[em]]) == _edge_set(gs[naive], gr[naive]) and em.sum() == naive.sum()
    assert nm[s[em]].all() and nm[r[em]].all() and (s[~em] == 0).all() and (r[~em] == 0).all()
    # Local offsets: every edge stays inside its cluster's slot.
    assert (s[em] // t.max_nodes == r[em] // t.max_nodes).all()


@pytest.mark.parametrize("ids", [[3], [0, 4, 6], [5, 2, -1], [-1, -1]])
def test_subgraph_matches_naive_induced_subgraph(ids):
    g, a, train, t = _setup()
    labels = (np.arange(60) % 5).astype(np.int32)
    _check_subgraph(g, a, train, labels, t, ids)


# ----------------------------------------------------------------------------------------------- cluster_batches


C, W, K, Q = 11, 3, 4, 3  # S = ceil(11 / 3) = 4 steps per epoch, 1 empty slot per epoch


def _steps(batches, rounds):
    """[W, rounds * K, q] ids, steps numbered across rounds."""
    return np.concatenate([np.asarray(batches(r)) for r in range(rounds)], axis=1)


def test_each_cluster_once_per_epoch_per_worker():
    s = steps_per_epoch(C, Q)
    assert s == 4
    for k in (K, 3, 5):  # K a multiple of S, and epochs straddling rounds
        b = cluster_batches(C, W, k, Q, seed=7)
        ids = _steps(b, 4 * s)  # 4*s*k steps = 4*k epochs
        assert ids.shape == (W, 4 * s * k, Q) and ids.dtype == np.int32
        perms = set()
        for w in range(W):
            for e in range(4 * k):
                epoch = ids[w, e * s:(e + 1) * s].ravel()
                assert sorted(epoch[epoch >= 0].tolist()) == list(range(C))
                assert (epoch[:C] >= 0).all() and (epoch[C:] == -1).all()  # empties only in the last step
                perms.add(tuple(epoch[:C].tolist()))
        assert len(perms) == W * 4 * k  # a fresh permutation per epoch per worker


def test_training_nodes_covered_once_per_epoch():
    g, a, train, t = _setup(c=C)
    labels = np.zeros(60, np.int32)
    b = cluster_batches(C, W, K + 1, Q, seed=2)
    s = steps_per_epoch(C, Q)

    @jax.jit
    def covered(r):
        per_step = jax.vmap(jax.vmap(lambda i: subgraph(t, g.nodes, labels, train, i)))(b(r))
        sub, _, lm = per_step
        return sub.nodes[..., 0], lm  # [W, K, q*Nmax] node ids and loss masks

    rounds = [covered(jnp.int32(r)) for r in range(2 * s)]
    gid = np.concatenate([np.asarray(x) for x, _ in rounds], 1).astype(np.int64)
    lm = np.concatenate([np.asarray(m) for _, m in rounds], 1)
    for w in range(W):
        for e in range(2 * (K + 1)):
            got = gid[w, e * s:(e + 1) * s][lm[w, e * s:(e + 1) * s]]
            assert sorted(got.tolist()) == np.flatnonzero(train).tolist()


def test_batches_deterministic_and_differ_across_workers_and_seeds():
    b = cluster_batches(C, W, K, Q, seed=5)
    r7 = np.asarray(b(7))
    np.testing.assert_array_equal(r7, np.asarray(cluster_batches(C, W, K, Q, seed=5)(7)))
    np.testing.assert_array_equal(r7, np.asarray(b(jnp.int32(7))))
    # Worker w's stream does not depend on how many workers there are.
    np.testing.assert_array_equal(r7[:2], np.asarray(cluster_batches(C, 2, K, Q, seed=5)(7)))
    assert not np.array_equal(r7[0], r7[1]) and not np.array_equal(r7[1], r7[2])
    assert not np.array_equal(r7, np.asarray(cluster_batches(C, W, K, Q, seed=6)(7)))
    assert not np.array_equal(r7, np.asarray(b(8)))
    # Large round indices stay in range (no int32 overflow of round * K).
    big = np.asarray(b(2**31 - 1))
    assert big.shape == (W, K, Q) and big.min() >= -1 and big.max() < C


def test_jit_traced_round_compiles_once():
    b = cluster_batches(C, W, K, Q, seed=1)
    traces = []

    @jax.jit
    def f(r):
        traces.append(1)
        return b(r)

    for r in range(5):
        np.testing.assert_array_equal(np.asarray(f(jnp.int32(r))), np.asarray(b(r)))
    assert len(traces) == 1


def test_cluster_batches_bad_inputs():
    with pytest.raises(ValueError, match="clusters_per_step=5 exceeds num_clusters=4"):
        cluster_batches(4, 1, 1, 5, seed=0)
    for name, args in [("num_clusters", (0, 1, 1, 1)), ("num_workers", (4, 0, 1, 1)),
                       ("local_steps", (4, 1, 0, 1)), ("clusters_per_step", (4, 1, 1, 0))]:
        with pytest.raises(ValueError, match=name):
            cluster_batches(*args, seed=0)
    with pytest.raises(ValueError, match="seed"):
        cluster_batches(4, 1, 1, 1, seed=-1)
    with pytest.raises(ValueError, match="round_index"):
        cluster_batches(4, 1, 1, 1, seed=0)(-1)
