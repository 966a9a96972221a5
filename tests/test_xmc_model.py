"""Extreme classification as a task: (id, value) pairs, the embedding bag, `SparseMLP` and its sub-networks, the
multi-label loss and on-device P@k against the host metrics, and `istjax train` on the sparse data sets."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import istjax
from istjax.core import contract, subnet
from istjax.core.errors import ArgError
from istjax.data import extreme, load_dataset
from istjax.data.extreme.text_format import make_record
from istjax.launch.config import build
from istjax.launch import config as config_lib
from istjax.launch import driver
from istjax.models import SparseMLP, build_model
from istjax.models.embedding_bag import EmbeddingBag, bag
from istjax.xmc import loss as xmc_loss
from istjax.xmc import metrics


def _sparse(rng, n=6, features=12, nnz=5):
    """``(pairs [n, nnz, 2], dense [n, features])`` of random sparse rows (some shorter, padded with (0, 0))."""
    pairs = np.zeros((n, nnz, 2), np.float32)
    dense = np.zeros((n, features), np.float32)
    for i in range(n):
        k = rng.integers(1, nnz + 1)
        ids = np.sort(rng.choice(features, size=k, replace=False))
        vals = rng.normal(size=k).astype(np.float32)
        pairs[i, :k, 0], pairs[i, :k, 1] = ids, vals
        dense[i, ids] = vals
    return pairs, dense


def test_the_embedding_bag_equals_the_dense_matmul_on_the_densified_input():
    rng = np.random.default_rng(0)
    pairs, dense = _sparse(rng)
    layer = EmbeddingBag(features=7, num_embeddings=12)
    params = layer.init(jax.random.key(1), jnp.asarray(pairs))
    kernel, bias = params["params"]["kernel"].value, params["params"]["bias"].value
    got = layer.apply(params, jnp.asarray(pairs))
    np.testing.assert_allclose(got, dense @ np.asarray(kernel) + np.asarray(bias)[None, :], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bag(jnp.asarray(pairs), kernel), dense @ np.asarray(kernel), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8])
def test_the_bag_summed_a_chunk_of_slots_at_a_time_equals_the_block_forward_and_gradients(chunk):
    # 5 slots: chunks that divide them, that do not (padded with (0, 0) pairs), and that cover them all (the block)
    rng = np.random.default_rng(3)
    pairs, dense = _sparse(rng, n=9, features=12, nnz=5)
    x = jnp.asarray(pairs)
    kernel = jnp.asarray(rng.normal(size=(12, 7)), jnp.float32)
    dy = jnp.asarray(rng.normal(size=(9, 7)), jnp.float32)

    def loss(k, c):
        return jnp.vdot(bag(x, k, c), dy)

    np.testing.assert_allclose(bag(x, kernel, chunk), bag(x, kernel, 0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(bag(x, kernel, chunk), dense @ np.asarray(kernel), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jax.grad(loss)(kernel, chunk), jax.grad(loss)(kernel, 0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(jax.grad(loss)(kernel, chunk), dense.T @ np.asarray(dy), rtol=1e-5, atol=1e-5)
    # leading axes beyond the batch (a worker axis) keep their shape
    xs = jnp.stack([x, x[::-1]])
    np.testing.assert_allclose(bag(xs, kernel, chunk)[1], bag(x[::-1], kernel, 0), rtol=1e-6, atol=1e-6)


def test_the_chunked_bag_never_holds_the_points_by_slots_by_units_block():
    # The compiled gradient's scratch memory: the block version holds [B, nnz, H] (and its cotangent); a chunk of 4
    # slots holds [B, 4, H]. Measured by XLA's own buffer assignment, not by timing.
    b, nnz, h, f = 64, 128, 256, 1000
    rng = np.random.default_rng(0)
    x = jnp.asarray(np.stack([rng.integers(0, f, (b, nnz)), rng.random((b, nnz))], -1), jnp.float32)
    kernel = jnp.zeros((f, h), jnp.float32)

    def scratch(c):
        fn = jax.jit(jax.grad(lambda k: jnp.sum(bag(x, k, c) ** 2)))
        return fn.lower(kernel).compile().memory_analysis().temp_size_in_bytes

    block = b * nnz * h * 4
    assert scratch(0) >= block
    assert scratch(4) < block / 8


def test_sparse_mlp_refuses_a_negative_slot_chunk_and_trains_the_same_with_any():
    with pytest.raises(ArgError, match="bag_slot_chunk=-1.*int >= 0"):
        build_model("sparse_mlp", {"hidden": (16,), "bag_slot_chunk": -1}, num_classes=6, num_feature_ids=12)
    pairs, _ = _sparse(np.random.default_rng(1), n=4, features=12, nnz=6)
    models = [build_model("sparse_mlp", {"hidden": (16,), "bag_slot_chunk": c}, num_classes=6, num_feature_ids=12)
              for c in (0, 4)]
    params = models[0].init(jax.random.key(0), jnp.asarray(pairs))
    np.testing.assert_allclose(models[1].apply(params, jnp.asarray(pairs)), models[0].apply(params, jnp.asarray(pairs)),
                               rtol=1e-5, atol=1e-5)


def _points(rows):
    """An XMCData from ``[(labels, {id: value})]`` over 10 features and 6 labels."""
    f_ptr, f_ids, f_vals, l_ptr, l_ids = [0], [], [], [0], []
    for labels, feats in rows:
        f_ids += sorted(feats)
        f_vals += [feats[i] for i in sorted(feats)]
        l_ids += sorted(labels)
        f_ptr.append(len(f_ids))
        l_ptr.append(len(l_ids))
    arr = lambda a, t: np.asarray(a, t)  # noqa: E731
    return make_record("t", arr(f_ptr, np.int64), arr(f_ids, np.int32), arr(f_vals, np.float32),
                       arr(l_ptr, np.int64), arr(l_ids, np.int32), 10, 6)


def test_feature_pairs_pad_with_zero_and_keep_the_largest_values_of_a_long_row():
    data = _points([([0], {3: 0.5, 1: -2.0, 9: 0.25}), ([1, 2], {0: 1.0, 2: 0.1, 4: -0.3, 5: 0.2, 8: 0.05})])
    pairs, cut = extreme.feature_pairs(data, nnz=4)
    assert cut == 1 and pairs.shape == (2, 4, 2) and pairs.dtype == np.float32
    np.testing.assert_array_equal(pairs[0], [[1, -2.0], [3, 0.5], [9, 0.25], [0, 0]])
    # Row 1 keeps |value| 1.0, 0.3, 0.2, 0.1 (drops 8: 0.05), ids ascending.
    np.testing.assert_allclose(pairs[1], [[0, 1.0], [2, 0.1], [4, -0.3], [5, 0.2]])
    ds = extreme.as_dataset(extreme.XMCDataset("t", data, data), nnz=4, log=(seen := []).append)
    assert ds.num_feature_ids == 10 and ds.num_classes == 6 and ds.train_y.shape == (2, 8)
    np.testing.assert_array_equal(ds.train_y[1], [1, 2, -1, -1, -1, -1, -1, -1])
    assert len(seen) == 2 and "1 of 2 train points have more than nnz=4" in seen[0]
    with pytest.raises(ArgError, match="nnz"):
        extreme.feature_pairs(data, nnz=0)


def _model_and_params(hidden=(8,), loss="softmax", seed=0, rescale=True):
    model = SparseMLP(hidden=hidden, num_classes=6, num_features=12, loss=loss, rescale=rescale)
    pairs, _ = _sparse(np.random.default_rng(seed), n=10)
    task = istjax.classifier(model, jnp.asarray(pairs), num_classes=6)
    return model, task, task.init(jax.random.key(seed)), jnp.asarray(pairs)


@pytest.mark.parametrize("rescale", [False, True])
def test_a_workers_subnetwork_equals_the_full_network_with_the_other_hidden_units_removed(rescale):
    """Without rescaling, exactly the full network with the other units removed; with it, the kept units' outgoing
    weights scaled by H / h (8 / 4 here), as inverted dropout scales what survives."""
    model, task, params, x = _model_and_params(rescale=rescale)
    assert task.spec.group_sizes == {"hidden_0": 8}
    partition = istjax.uniform().sample(jax.random.key(3), task.spec.group_sizes, 2)
    subs = subnet.extract(params, partition, task.spec)  # every leaf [W, ...]
    idx = np.asarray(partition.indices["hidden_0"])
    for w in range(2):
        mine = idx[w][idx[w] < 8]
        sub = jax.tree.map(lambda a: a[w], subs)
        worker = model.subnet({"hidden_0": len(mine)})
        assert worker.full_hidden == (8,) and worker.hidden == (len(mine),)
        got = worker.apply({"params": sub}, x)
        # The full network with the other units removed: their outgoing weights zeroed (ReLU(.) * 0 = 0).
        removed = jax.tree.map(lambda a: a, params)
        keep = np.zeros(8, np.float32)
        keep[mine] = 8 / len(mine) if rescale else 1.0
        removed["dense_out"]["kernel"] = params["dense_out"]["kernel"] * jnp.asarray(keep)[:, None]
        want = model.apply({"params": removed}, x)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_losses_and_precision_by_hand():
    logits = jnp.asarray([[3.0, 1.0, 0.0, 2.0], [0.0, 0.0, 5.0, 1.0]])
    labels = jnp.asarray([[0, 2, -1], [3, -1, -1]])
    # softmax: point 0 targets 1/2 on labels 0 and 2; point 1 on label 3.
    lse = np.log(np.exp([3.0, 1.0, 0.0, 2.0]).sum()), np.log(np.exp([0.0, 0.0, 5.0, 1.0]).sum())
    want = ((lse[0] - (3.0 + 0.0) / 2) + (lse[1] - 1.0)) / 2
    np.testing.assert_allclose(xmc_loss.multilabel_loss(logits, labels, "softmax"), want, rtol=1e-6)
    sp = np.log1p(np.exp(np.asarray(logits)))
    want_bce = ((sp[0].sum() - 3.0 - 0.0) / 4 + (sp[1].sum() - 1.0) / 4) / 2
    np.testing.assert_allclose(xmc_loss.multilabel_loss(logits, labels, "bce"), want_bce, rtol=1e-6)
    loss, aux = xmc_loss.scores(logits, labels)
    # Top-1: point 0 -> label 0 (hit), point 1 -> label 2 (miss): P@1 = 1/2. Top-3: point 0 {0, 3, 1}: 1 hit;
    # point 1 {2, 3, 0 or 1}: 1 hit -> P@3 = 1/3.
    assert float(aux["accuracy"]) == float(aux["precision_at_1"]) == 0.5
    np.testing.assert_allclose(aux["precision_at_3"], 1 / 3, rtol=1e-6)
    with pytest.raises(ArgError, match="loss"):
        SparseMLP(hidden=(4,), num_classes=6, num_features=12, loss="hinge")


def test_on_device_ranking_scores_equal_the_host_metrics():
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(64, 40)).astype(np.float32)
    labels = np.full((64, 8), -1, np.int32)
    for i in range(64):
        k = rng.integers(1, 9)
        labels[i, :k] = np.sort(rng.choice(40, size=k, replace=False))
    got = xmc_loss.ranking_scores(jnp.asarray(logits), jnp.asarray(labels))
    top = np.argsort(-logits, axis=1, kind="stable")[:, :5]
    for k in (1, 3, 5):
        np.testing.assert_allclose(got[f"precision_at_{k}"], metrics.precision_at_k(top, labels, k), rtol=1e-5)
    np.testing.assert_allclose(got["ndcg_at_5"], metrics.ndcg_at_k(top, labels, 5), rtol=1e-5)


def test_psp_at_k_over_batches_equals_the_host_metric_of_the_whole_split():
    """PSP@k is a ratio of two sums over the split: the evaluation's example-weighted means of its parts over
    unequal batches, divided (`contract.ratios`), equal pyxclib's ratio on all points at once."""
    rng = np.random.default_rng(5)
    n, classes = 90, 30
    logits = rng.normal(size=(n, classes)).astype(np.float32)
    labels = np.full((n, 6), -1, np.int32)
    for i in range(n):
        k = rng.integers(0, 7)  # some points without labels: they add 0 to both sums
        labels[i, :k] = rng.choice(classes, size=k, replace=False)
    counts = np.bincount(labels[labels >= 0], minlength=classes) + rng.integers(0, 5, classes)
    p = metrics.propensities(counts, 500)
    weights = xmc_loss.LabelWeights(1.0 / p)
    top = np.argsort(-logits, axis=1, kind="stable")[:, :5]
    chunks = np.array_split(np.arange(n), [17, 50])  # unequal batches: a mean of per-batch ratios would differ
    parts = [(xmc_loss.scores(jnp.asarray(logits[c]), jnp.asarray(labels[c]), "softmax", weights)[1], len(c))
             for c in chunks]
    means = {name: sum(float(aux[name]) * m for aux, m in parts) / n for name in parts[0][0]}
    got = contract.ratios(means)
    assert not any(name.endswith(("_numerator", "_denominator")) for name in got)
    for k in (1, 3, 5):
        np.testing.assert_allclose(got[f"psp_at_{k}"], metrics.psp_at_k(top, labels, p, k), rtol=1e-5)
    per_batch = np.mean([float(aux["psp_at_3_numerator"]) / float(aux["psp_at_3_denominator"]) for aux, _ in parts])
    assert abs(per_batch - got["psp_at_3"]) > 1e-4  # the check can fail: the naive mean of ratios is another number
    with pytest.raises(ArgError, match="label_weights"):
        xmc_loss.LabelWeights(np.array([1.0, -2.0]))
    assert hash(weights) == hash(xmc_loss.LabelWeights(1.0 / p)) and "L=30" in repr(weights)


def test_num_features_comes_from_the_data_and_a_mismatched_pairing_is_refused():
    model = build_model("sparse_mlp", {"hidden": (16,)}, num_classes=6, num_feature_ids=12)
    assert model.num_features == 12
    with pytest.raises(ArgError, match="num_features.*Dataset.num_feature_ids"):
        build_model("sparse_mlp", {"hidden": (16,)}, num_classes=6)
    c = config_lib.default_config()
    c.data.name, c.data.kwargs = "xmc_synthetic", {"num_train": 300, "num_test": 100}
    with pytest.raises(Exception, match="model.name=sparse_mlp"):
        build(c)
    c = config_lib.default_config()
    config_lib.use_model(c, "sparse_mlp", hidden=(16,))
    with pytest.raises(Exception, match="data.name=xmc_synthetic"):
        build(c)


def test_istjax_train_runs_ist_on_sparse_data_and_records_precision_at_k(tmp_path):
    c = config_lib.default_config()
    c.data.name = "xmc_synthetic"
    c.data.kwargs = {"num_train": 1200, "num_test": 300, "num_features": 400, "num_labels": 50}
    config_lib.use_model(c, "sparse_mlp", hidden=(64,))
    c.num_workers, c.local_steps, c.batch_size, c.num_rounds = 2, 5, 64, 20
    c.optimizer, c.learning_rate, c.eval_every, c.eval_batch_size = "adam", 3e-3, 10, 300
    c.progress = False
    summary = driver.train_and_evaluate(c, tmp_path)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    last = records[-1]
    assert last["test_accuracy"] == last["test_precision_at_1"] == summary["test_accuracy"]
    assert 1.0 >= last["test_precision_at_1"] >= last["test_precision_at_3"] >= last["test_precision_at_5"] > 0
    # Learned: 50 labels with 4 a point; chance P@1 is about 0.08 (power-law: most frequent label ~ 0.35).
    assert last["test_precision_at_1"] > 0.5 and records[0]["test_loss"] > last["test_loss"]
    # PSP@k from the training labels' propensities (the data's label_weights), exact over the split.
    assert 0 < last["test_psp_at_1"] <= 1 and 0 < last["test_psp_at_5"] <= 1
    assert not any(k.endswith(("_numerator", "_denominator")) for k in last)


def test_the_dataset_registry_loads_the_training_views():
    ds = load_dataset("xmc_synthetic", num_train=100, num_test=50, num_features=80, num_labels=20, nnz=16)
    assert ds.train_x.shape == (100, 16, 2) and ds.test_y.shape[0] == 50 and ds.num_feature_ids == 80
    ids = ds.train_x[..., 0]
    assert ids.max() < 80 and np.all(ids == np.round(ids))


MPIEXEC = pathlib.Path(sys.executable).parent / "mpiexec"
ROOT = pathlib.Path(__file__).resolve().parents[1]
needs_mpi = pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not installed (pip install mpich)")


def _mpiexec(n, *cmd, timeout=600):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    return subprocess.run([str(MPIEXEC), "-n", str(n), *cmd], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=ROOT)


@needs_mpi
@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3])
def test_sharded_ist_on_the_extreme_task_equals_simulate(n):
    """tests/mpi/sharded_xmc.py: params and Adam state == simulate, measured == analytic bytes, 1/N of each layer per
    rank, evaluation in place == the gathered model's (20 s at -n 2, 34 s at -n 3 here)."""
    out = _mpiexec(n, sys.executable, str(ROOT / "tests" / "mpi" / "sharded_xmc.py"))
    assert out.returncode == 0 and "ALL OK" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("OK sharded xmc") == 2


@pytest.mark.slow
@needs_mpi
def test_the_readme_command_trains_the_small_extreme_config_sharded_on_two_processes(tmp_path):
    """The README's extreme-classification command (shortened to 10 rounds): no rank holds the whole model."""
    out = _mpiexec(2, str(pathlib.Path(sys.executable).parent / "istjax"), "train",
                   "--config=experiments/configs/xmc_synthetic_ist.py", "--config.runtime.name=mpi",
                   "--config.runtime.mode=sharded", "--config.num_rounds=10", "--config.progress=False",
                   f"--workdir={tmp_path}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    last = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["round"] == 10 and last["test_precision_at_1"] > 0.3, last


DEBIAN = pathlib.Path(os.environ.get("ISTJAX_DATA_DIR") or ROOT.parent / "shared" / "data") / "xmc-debian-deps"


@pytest.mark.skipif(not (DEBIAN / "train.txt.gz").is_file(),
                    reason=f"xmc-debian-deps is not in {DEBIAN} (set ISTJAX_DATA_DIR to the folder holding it)")
def test_the_debian_training_view_has_the_sets_shapes_and_truncates_what_it_says(tmp_path, monkeypatch):
    monkeypatch.setenv("ISTJAX_CACHE_DIR", str(tmp_path))
    ds = load_dataset("xmc_debian_deps", data_dir=str(DEBIAN))
    assert ds.train_x.shape == (43333, 256, 2) and ds.test_x.shape == (10345, 256, 2)
    assert ds.train_y.shape == (43333, 256) and ds.num_classes == 15186 and ds.num_feature_ids == 31435
    assert ds.train_x[..., 0].max() < 31435 and ds.train_y.max() < 15186 and (ds.train_y[:, 0] >= 0).all()
    raw = extreme.load_xmc_debian_deps(DEBIAN)
    assert extreme.feature_pairs(raw.train)[1] == 21 and extreme.feature_pairs(raw.test)[1] == 2
