"""GIST's models: sparse aggregation against dense references, GCN normalisation by hand, GraphSAGE's tiled
sub-networks, and the vectorised round against the plain loop and across runtimes."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
from istjax.algorithms.reference import reference_round
from istjax.data.cluster_batches import cluster_batch_fn
from istjax.graph import Graph, from_edges, ops
from istjax.models.gnn import GCN, GraphSAGE, keep_fraction, keep_mask

N, F, C, K, B = 12, 5, 3, 2, 6


def _graph(n=N, m=24, seed=0):
    rng = np.random.default_rng(seed)
    return from_edges(rng.normal(size=(n, F)).astype(np.float32), rng.integers(0, n, size=(m, 2)))


def _dense_adjacency(g: Graph) -> np.ndarray:
    a = np.zeros((g.num_nodes, g.num_nodes), np.float32)
    for s, r, ok in zip(np.asarray(g.senders), np.asarray(g.receivers), np.asarray(g.edge_mask)):
        a[r, s] += float(ok)
    return a


def test_sparse_aggregation_equals_dense_reference():
    g = _graph()
    x = np.random.default_rng(1).normal(size=(N, 4)).astype(np.float32)
    a = _dense_adjacency(g)
    a_hat = a + np.eye(N, dtype=np.float32)
    d = a_hat.sum(1)
    want_gcn = (a_hat / np.sqrt(d)[:, None] / np.sqrt(d)[None, :]) @ x
    np.testing.assert_allclose(np.asarray(ops.gcn_propagate(g, jnp.asarray(x))), want_gcn, rtol=1e-5, atol=1e-6)
    deg = a.sum(1)
    want_mean = np.where(deg[:, None] > 0, (a @ x) / np.maximum(deg, 1)[:, None], 0.0)
    np.testing.assert_allclose(np.asarray(ops.mean_aggregate(g, jnp.asarray(x))), want_mean, rtol=1e-5, atol=1e-6)


def test_gcn_normalisation_by_hand_on_a_path():
    """The path 0 - 1 - 2 - 3: degrees with self-loops 2, 3, 3, 2, so A_hat[0, 1] = 1 / sqrt(2 * 3), A_hat[1, 2] =
    1/3, A_hat[0, 0] = 1/2, A_hat[1, 1] = 1/3."""
    g = from_edges(np.zeros((4, 1), np.float32), np.array([[0, 1], [1, 2], [2, 3]]))
    edge, self_w = (np.asarray(v) for v in ops.gcn_weights(g))
    w = {(int(s), int(r)): float(e) for s, r, e in zip(np.asarray(g.senders), np.asarray(g.receivers), edge)}
    assert w[(0, 1)] == pytest.approx(1 / np.sqrt(6)) and w[(1, 0)] == pytest.approx(1 / np.sqrt(6))
    assert w[(1, 2)] == pytest.approx(1 / 3) and w[(3, 2)] == pytest.approx(1 / np.sqrt(6))
    np.testing.assert_allclose(self_w, [1 / 2, 1 / 3, 1 / 3, 1 / 2], rtol=1e-6)
    # x = e_0: node 0 keeps 1/2 of itself, node 1 receives 1/sqrt(6), nodes 2 and 3 nothing.
    out = np.asarray(ops.gcn_propagate(g, jnp.asarray([[1.0], [0.0], [0.0], [0.0]])))[:, 0]
    np.testing.assert_allclose(out, [0.5, 1 / np.sqrt(6), 0.0, 0.0], rtol=1e-6)


def test_padding_contributes_nothing():
    g = _graph()
    x = jnp.asarray(np.random.default_rng(2).normal(size=(N, 3)), jnp.float32)
    pad = Graph(jnp.concatenate([g.nodes, jnp.zeros((2, F))]),
                jnp.concatenate([g.senders, jnp.zeros((5,), jnp.int32)]),
                jnp.concatenate([g.receivers, jnp.zeros((5,), jnp.int32)]),
                jnp.concatenate([g.edge_mask, jnp.zeros((5,), bool)]),
                jnp.concatenate([g.node_mask, jnp.zeros((2,), bool)]))
    xp = jnp.concatenate([x, jnp.ones((2, 3))])
    np.testing.assert_allclose(np.asarray(ops.gcn_propagate(pad, xp))[:N], np.asarray(ops.gcn_propagate(g, x)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ops.mean_aggregate(pad, xp))[:N], np.asarray(ops.mean_aggregate(g, x)),
                               rtol=1e-5, atol=1e-6)


def test_from_edges_refuses_out_of_range_indices():
    with pytest.raises(ValueError, match=r"ind.cora.graph: edge 1 = \[2, 7\] refers to a node outside \[0, 5\)"):
        from_edges(np.zeros((5, 2)), np.array([[0, 1], [2, 7]]), where="ind.cora.graph")


def _task(model, g):
    return istjax.classifier(model, jnp.zeros((B,)), example_shared={"graph": g}, num_classes=C)


def _batches(w, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": jnp.asarray(rng.integers(0, N, size=(w, K, B)), jnp.float32),
            "y": jnp.asarray(rng.integers(0, C, size=(w, K, B)), jnp.int32)}


def _close(a, b, rtol=2e-5, atol=2e-6):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb) and la
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def test_graphsage_subnetwork_equals_full_model_without_the_other_features():
    """Worker w's narrow GraphSAGE (its hidden units, tiled [self, neighbour] rows extracted) computes the full
    model's logits when every hidden unit w does not hold is removed (its kernel column and bias zeroed)."""
    g = _graph()
    model = GraphSAGE(hidden=(8, 6), num_classes=C)
    task = _task(model, g)
    assert task.spec.group_sizes == {"hidden_0": 8, "hidden_1": 6}
    params = task.init(jax.random.key(0))
    p = istjax.uniform().sample(jax.random.key(1), task.spec.group_sizes, 2)
    sub = istjax.extract(params, p, task.spec)
    ids = jnp.arange(N, dtype=jnp.float32)
    for w in range(2):
        slots = {g_: int(p.indices[g_].shape[1]) for g_ in p.indices}
        got = model.subnet(slots).apply({"params": jax.tree.map(lambda a: a[w], sub)}, ids, {"graph": g})
        removed = jax.tree.map(lambda a: a, params)
        for i in range(2):
            keep = np.zeros(model.hidden[i], np.float32)
            keep[np.asarray(p.indices[f"hidden_{i}"][w])] = 1.0
            layer = removed[f"layer_{i}"]
            layer["kernel"], layer["bias"] = layer["kernel"] * keep[None, :], layer["bias"] * keep
        want = model.apply({"params": removed}, ids, {"graph": g})
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    # The tiled axis: layer 1's kernel rows i and i + 8 both belong to hidden unit i of layer 0.
    rows = np.asarray(sub["layer_1"]["kernel"]).shape
    assert rows == (2, 2 * 4, 3)


@pytest.mark.parametrize("model", [GCN(hidden=(8, 6), num_classes=C, layer_norm=True),
                                   GraphSAGE(hidden=(8, 6), num_classes=C, layer_norm=True)],
                         ids=["gcn", "sage"])
@pytest.mark.slow
def test_gist_round_equals_reference_loop_and_devices(model):
    g = _graph()
    task = _task(model, g)
    alg = istjax.ist(task, optax.sgd(0.1, momentum=0.9), num_workers=2, local_steps=K)
    state = alg.init(jax.random.key(3))
    b = _batches(2)
    fast, metrics = alg.round(state, b, {"graph": g})
    _close(fast.params, reference_round(alg, state, b, {"graph": g}).params)
    assert np.isfinite(float(metrics["train_loss"]))
    dev = istjax.ist(task, optax.sgd(0.1, momentum=0.9), num_workers=2, local_steps=K, backend="devices")
    _close(dev.round(state, b, {"graph": g})[0].params, fast.params, rtol=1e-4, atol=1e-5)
    # The output bias is the only shared leaf; every other weight is partitioned.
    shared = {"/".join(str(k.key) for k in path) for path, leaf in
              jax.tree_util.tree_flatten_with_path(task.spec.leaves)[0] if leaf.shared}
    assert shared == {"output/bias"}


def test_bad_hidden_widths_are_refused():
    with pytest.raises(ValueError, match=r"GCN.hidden=\(\): give the hidden widths"):
        GCN(hidden=())
    g = _graph()
    task = _task(GCN(hidden=(7,), num_classes=C), g)
    with pytest.raises(ValueError, match="not divisible by num_workers=2"):
        istjax.ist(task, optax.sgd(0.1), num_workers=2, local_steps=1)


@pytest.mark.slow
def test_cluster_minibatch_round_equals_reference_and_covers_training_nodes():
    """Cluster-GCN mini-batches: each step trains on the subgraph of its clusters (loss over their training
    nodes); the vectorised round equals the plain loop, and the driver-facing batch function is pure in the round."""
    from istjax.graph import task as graph_task

    rng = np.random.default_rng(4)
    n = 40
    g = from_edges(rng.normal(size=(n, F)).astype(np.float32), rng.integers(0, n, size=(80, 2)))
    shared = graph_task.with_clusters({"graph": g}, rng.integers(0, C, size=n), np.arange(0, n, 2), 4,
                                      method="metis")
    task = graph_task.cluster_classifier(GraphSAGE(hidden=(8,), num_classes=C, layer_norm=True), shared)
    alg = istjax.ist(task, optax.sgd(0.1), num_workers=2, local_steps=3)
    batches = cluster_batch_fn(shared, num_workers=2, local_steps=3, clusters_per_step=2, seed=0)
    b = batches(0)
    assert b["x"].shape == (2, 3, 2) and b["x"].dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(batches(5)["x"]), np.asarray(batches.apply(batches.data, 5)["x"]))
    state = alg.init(jax.random.key(0))
    fast, metrics = alg.round(state, b, shared)
    _close(fast.params, reference_round(alg, state, b, shared).params)
    assert np.isfinite(float(metrics["train_loss"]))
    with pytest.raises(ValueError, match="with_clusters"):
        graph_task.cluster_classifier(GraphSAGE(hidden=(8,), num_classes=C), {"graph": g})


@pytest.mark.slow
def test_gist_from_configs_full_graph_and_clusters(tmp_path):
    """`istjax train` on a graph: full-graph GCN (GIST) and Cluster-GCN GraphSAGE on a generated CSBM graph, and
    the config errors for graph batching."""
    import ml_collections

    from istjax.launch import config as config_lib

    c = config_lib.default_config()
    c.data.name = "csbm"
    c.data.kwargs = ml_collections.ConfigDict({"num_nodes": 600, "num_classes": 3, "num_features": 8,
                                                  "num_val": 50, "num_test": 300, "seed": 1})
    c.model = ml_collections.ConfigDict({"name": "gcn", "hidden": (16,), "layer_norm": True})
    c.num_workers, c.local_steps, c.batch_size, c.data.sharding = 2, 2, 30, "shared"
    c.num_rounds, c.eval_every, c.progress, c.target_accuracy, c.optimizer = 4, 2, False, None, "adam"
    c.learning_rate = 0.01
    full = istjax.train_and_evaluate(c, tmp_path / "full")
    assert full["rounds"] == 4 and full["test_accuracy"] > 0.5  # 3 informative blocks: well above chance (1/3)
    c.model.name, c.data.graph_batches, c.data.num_clusters, c.data.clusters_per_step = "graphsage", "clusters", 6, 2
    mini = istjax.train_and_evaluate(c, tmp_path / "clusters")
    assert mini["rounds"] == 4 and np.isfinite(mini["test_loss"])
    c.data.num_clusters = 601
    with pytest.raises(config_lib.ConfigError, match=r"data.num_clusters=601 must be in \[1, num_nodes=600\]"):
        config_lib.validate(c)
    c.data.num_clusters, c.data.clusters_per_step = 6, 7
    with pytest.raises(config_lib.ConfigError, match="data.clusters_per_step=7 exceeds num_clusters=6; use --config.data.clusters_per_step=6 or less"):
        config_lib.validate(c)
    c.data.name, c.data.kwargs, c.data.clusters_per_step = "digits", ml_collections.ConfigDict(), 1
    with pytest.raises(config_lib.ConfigError, match="data.graph_batches=.clusters.: cuts a graph into clusters"):
        config_lib.validate(c)


@pytest.mark.slow
def test_dropout_draws_from_the_step_key_the_batch_carries(tmp_path):
    """Dropout in training only, from the per-(worker, step) key `with_step_keys` adds: the same keys give the same
    round (and the plain loop agrees), other keys another round; the driver adds the keys when the rate is > 0."""
    from istjax.data.augment import _DROPOUT_TAG, _round_keys

    g = _graph()
    task = _task(GCN(hidden=(8,), num_classes=C, dropout=0.5), g)
    alg = istjax.ist(task, optax.sgd(0.1), num_workers=2, local_steps=K)
    state = alg.init(jax.random.key(0))
    b = _batches(2)
    keyed = {**b, "rng": _round_keys(jnp.uint32(0), jnp.int32(0), 2, K, _DROPOUT_TAG)}
    other = {**b, "rng": _round_keys(jnp.uint32(1), jnp.int32(0), 2, K, _DROPOUT_TAG)}
    one, _ = alg.round(state, keyed, {"graph": g})
    _close(one.params, alg.round(state, keyed, {"graph": g})[0].params)
    _close(one.params, reference_round(alg, state, keyed, {"graph": g}).params)
    assert not np.allclose(np.asarray(one.params["layer_0"]["kernel"]),
                           np.asarray(alg.round(state, other, {"graph": g})[0].params["layer_0"]["kernel"]))
    batch = {"x": jnp.arange(N, dtype=jnp.float32), "y": jnp.zeros((N,), jnp.int32)}
    e1 = task.evaluate(one.params, one.model_state, batch, {"graph": g})[0]
    assert float(e1) == float(task.evaluate(one.params, one.model_state, batch, {"graph": g})[0])
    with pytest.raises(ValueError, match=r"GCN.dropout=1.5: must be a rate in \[0, 1\)"):
        GCN(dropout=1.5)

    import ml_collections

    from istjax.launch import config as config_lib

    c = config_lib.default_config()
    c.data.name = "csbm"
    c.data.kwargs = ml_collections.ConfigDict({"num_nodes": 400, "num_classes": 3, "num_features": 8,
                                                  "num_val": 50, "num_test": 200, "seed": 1})
    c.model = ml_collections.ConfigDict({"name": "gcn", "hidden": (16,), "dropout": 0.5})
    c.num_workers, c.local_steps, c.batch_size, c.data.sharding = 2, 2, 30, "shared"
    c.num_rounds, c.eval_every, c.progress, c.target_accuracy = 2, 2, False, None
    summary = istjax.train_and_evaluate(c, tmp_path / "dropout")
    assert summary["rounds"] == 2 and np.isfinite(summary["test_loss"])


@pytest.mark.parametrize("keep,max_bits,k", [(0.5, 16, 1), (0.25, 16, 2), (0.75, 16, 2), (0.3, 6, 6), (0.3, 16, 16)])
def test_keep_mask_is_a_k_bit_uniform_below_the_keep_fraction(keep, max_bits, k):
    """Dropout's bit-sliced mask: entry e keeps iff the k-bit integer its planes' bits spell is below q, where
    q / 2^k is the keep rate (exact when k bits write it, else rounded); the rate over many entries is q / 2^k."""
    q, got_k = keep_fraction(keep, max_bits)
    assert got_k == k and abs(q / 2 ** k - keep) <= 2 ** -(k + 1)
    shape, key = (7, 45), jax.random.key(3)  # 315 entries: the last word is partly used
    words = -(-315 // 32)
    planes = np.asarray(jax.random.bits(key, (k, words), jnp.uint32))
    entry_bits = (planes[:, :, None] >> np.arange(32, dtype=np.uint32)) & 1  # [k, words, 32]
    u = sum(entry_bits[j].astype(np.int64) << (k - 1 - j) for j in range(k)).reshape(-1)[:315]
    np.testing.assert_array_equal(np.asarray(keep_mask(key, keep, shape, max_bits)), (u < q).reshape(shape))
    rate = float(np.asarray(keep_mask(jax.random.key(4), keep, (400, 500), max_bits)).mean())
    assert abs(rate - q / 2 ** k) < 0.005
    assert not np.asarray(keep_mask(key, 2 ** -20, shape)).any() and np.asarray(keep_mask(key, 1 - 2 ** -20, shape)).all()


def test_dropout_keeps_entries_scaled_and_draws_new_masks_per_key():
    """GCN's input dropout at 0.5: each feature either 0 or doubled, about half kept, another key another mask;
    no dropout at evaluation."""
    g = from_edges(np.ones((N, 64), np.float32), np.stack([np.arange(N - 1), np.arange(1, N)], 1))
    model = GCN(hidden=(4,), num_classes=C, dropout=0.5)
    params = model.init({"params": jax.random.key(0)}, jnp.arange(N), {"graph": g}, train=False)

    def dropped(key):
        h = model.apply(params, jnp.zeros((N, 64)) + g.nodes, True, method=lambda m, x, t: m._drop(x, t),
                        rngs={"dropout": key})
        return np.asarray(h)

    a, b = dropped(jax.random.key(1)), dropped(jax.random.key(2))
    assert set(np.unique(a)) <= {0.0, 2.0} and abs((a == 2).mean() - 0.5) < 0.05
    assert (a != b).any()
    np.testing.assert_array_equal(model.apply(params, g.nodes, False, method=lambda m, x, t: m._drop(x, t)), g.nodes)
