"""Example weights (`istjax.core.weights`): a batch's ``"weight"`` makes the loss the weighted mean over its examples,
a step of weight 0 changes nothing, and a round's summary weighs its steps by their examples; checked by hand and
against the same computation on the examples that count, and without weights nothing changes."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
from istjax.algorithms.base import local_train
from istjax.core.errors import ArgError
from istjax.core.state import WorkerState, last_steps, summarize
from istjax.core.task import scored, scores
from istjax.core.weights import weighted_mean
from istjax.models import MLP, Transformer
from istjax.xmc import loss as xmc_loss

D, C, B = 5, 3, 6


def _task(batch_norm=False):
    model = MLP(hidden=(8,), num_classes=C, batch_norm=batch_norm, output_batch_norm=batch_norm)
    return istjax.classifier(model, jnp.ones((4, D)), MLP.rules(1), num_classes=C)


def _batch(b=B, seed=0, **extra):
    kx, ky = jax.random.split(jax.random.key(seed))
    return {"x": jax.random.normal(kx, (b, D)), "y": jax.random.randint(ky, (b,), 0, C), **extra}


def _leaves_equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb) and la
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _leaves_close(a, b, rtol=1e-6, atol=1e-7):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def test_weighted_mean_by_hand():
    """(2 * 1 + 1 * 4) / 3 = 2; a value of weight 0 adds nothing, NaN included; all weights 0 give exactly 0."""
    assert float(weighted_mean(jnp.array([1.0, 4.0, jnp.nan]), jnp.array([2.0, 1.0, 0.0]))) == 2.0
    assert float(weighted_mean(jnp.array([jnp.inf, 3.0]), jnp.zeros(2))) == 0.0
    np.testing.assert_allclose(weighted_mean(jnp.array([[1.0, 3.0], [5.0, 7.0]]), jnp.array([[1.0, 1.0], [0.0, 0.0]]),
                                             1), [2.0, 0.0])


def test_weights_on_a_subset_give_the_subsets_loss_and_accuracy():
    """Weights 1 on examples {0, 2, 3} and 0 elsewhere: the training loss and accuracy of the subset alone, and the
    test-time ones too (both read the batch's weights)."""
    task = _task()
    params = task.init(jax.random.key(1))
    batch, keep = _batch(), np.array([0, 2, 3])
    weight = jnp.zeros(B).at[keep].set(1.0)
    subset = {"x": batch["x"][keep], "y": batch["y"][keep]}
    for fn in (task.loss_fn(None), lambda p, b: task.evaluate(p, {}, b)):
        value, aux = jax.jit(fn)(params, {**batch, "weight": weight})
        want, want_aux = jax.jit(fn)(params, subset)
        np.testing.assert_allclose(value, want, rtol=1e-6)
        np.testing.assert_allclose(aux["accuracy"], want_aux["accuracy"], rtol=1e-6)


def test_weights_scale_examples():
    """Weight 2 on an example counts it twice: the loss of the batch with that example repeated."""
    task = _task()
    params = task.init(jax.random.key(1))
    batch = _batch(3)
    twice = {"x": jnp.concatenate([batch["x"], batch["x"][:1]]), "y": jnp.concatenate([batch["y"], batch["y"][:1]])}
    value, _ = task.loss_fn(None)(params, {**batch, "weight": jnp.array([2.0, 1.0, 1.0])})
    np.testing.assert_allclose(value, task.loss_fn(None)(params, twice)[0], rtol=1e-6)


def test_weights_of_one_give_the_unweighted_loss_and_no_weights_run_the_old_code():
    """All weights 1: the unweighted loss to float rounding; no weights: bit for bit softmax cross-entropy of the
    module's logits (`istjax.core.task.scores`), the code without weights."""
    task = _task()
    params = task.init(jax.random.key(2))
    batch = _batch(seed=3)
    loss = jax.jit(task.loss_fn(None))
    plain, plain_aux = loss(params, batch)
    ones, ones_aux = loss(params, {**batch, "weight": jnp.ones(B)})
    np.testing.assert_allclose(ones, plain, rtol=1e-6)
    np.testing.assert_allclose(ones_aux["accuracy"], plain_aux["accuracy"], rtol=1e-6)
    by_hand = jax.jit(lambda p, b: scores(task.module.apply({"params": p}, b["x"]), b["y"]))(params, batch)
    np.testing.assert_array_equal(np.asarray(plain), np.asarray(by_hand[0]))
    np.testing.assert_array_equal(np.asarray(plain_aux["accuracy"]), np.asarray(by_hand[1]["accuracy"]))


def test_language_model_weights_pick_windows():
    """The text family's transformer (`lm_scores`, mean over positions): weights [1, 0, 1] score windows 0 and 2."""
    V, T = 7, 4
    model = Transformer(num_classes=V, num_layers=1, embed_dim=8, num_heads=2, mlp_dim=8, context=T, scaling="none")
    ids = jnp.asarray(np.random.default_rng(0).integers(0, V, size=(3, T + 1)), jnp.int32)
    task = istjax.classifier(model, ids[:2, :T], num_classes=V)
    params = task.init(jax.random.key(0))
    batch = {"x": ids[:, :T], "y": ids[:, 1:]}
    value, aux = task.loss_fn(None)(params, {**batch, "weight": jnp.array([1.0, 0.0, 1.0])})
    want, want_aux = task.loss_fn(None)(params, jax.tree.map(lambda a: a[jnp.array([0, 2])], batch))
    np.testing.assert_allclose(value, want, rtol=1e-6)
    np.testing.assert_allclose(aux["accuracy"], want_aux["accuracy"], rtol=1e-6)


def test_multilabel_scores_weigh_points():
    """The extreme-classification scores (`istjax.xmc.loss.scores`, label sets padded with -1), weights [0, 1, 1]:
    every metric, PSP@k's parts included, is the one of points 1 and 2 alone."""
    logits = jax.random.normal(jax.random.key(0), (3, 8))
    labels = jnp.array([[1, 4, -1], [0, -1, -1], [2, 5, 7]], jnp.int32)
    score = functools.partial(xmc_loss.scores, loss="softmax", label_weights=xmc_loss.LabelWeights(np.arange(1, 9)))
    value, aux = scored(score, logits, {"y": labels, "weight": jnp.array([0.0, 1.0, 1.0])})
    want, want_aux = score(logits[1:], labels[1:])
    np.testing.assert_allclose(value, want, rtol=1e-6)
    assert set(aux) == set(want_aux) and any(k.startswith("psp_at_1") for k in aux)
    for k in aux:
        np.testing.assert_allclose(aux[k], want_aux[k], rtol=1e-6, atol=1e-7, err_msg=k)


def _worker(task, optimizer, seed=0):
    params = task.init(jax.random.key(seed))
    return WorkerState(params, task.init_state(jax.random.key(seed)), optimizer.init(params))


def _steps(k, seed, weight):
    kx, ky = jax.random.split(jax.random.key(seed))
    return {"x": jax.random.normal(kx, (k, B, D)), "y": jax.random.randint(ky, (k, B), 0, C),
            "weight": jnp.asarray(weight, jnp.float32)}


def test_a_step_of_zero_weight_changes_nothing():
    """BatchNorm statistics and Adam (count and moments, after one real step): a step whose weights are all 0 leaves
    the whole worker state bit for bit; its loss and examples are exactly 0."""
    task, adam = _task(batch_norm=True), optax.adam(0.1)
    loss = task.train_loss(None)
    started, _ = local_train(loss, adam, _worker(task, adam), _steps(1, 1, np.ones((1, B))))
    after, metrics = jax.jit(lambda w, b: local_train(loss, adam, w, b))(started, _steps(1, 2, np.zeros((1, B))))
    _leaves_equal(after, started)
    assert float(metrics["loss"][0]) == 0.0 and float(metrics["examples"][0]) == 0.0


def test_padded_steps_at_the_end_equal_training_only_the_real_steps():
    """K = 5 steps of which the last 2 are padding (weight 0; other data): the state and summary of training only
    the 3 real steps. A partial step (weights [1, 1, 1, 1, 0, 0]) trains as the step on its 4 examples alone."""
    task, adam = _task(batch_norm=True), optax.adam(0.05)
    loss = task.train_loss(None)
    weight = np.ones((5, B))
    weight[2, 4:] = 0.0
    weight[3:] = 0.0
    padded = _steps(5, 3, weight)
    real = jax.tree.map(lambda a: a[:3], padded)
    run = jax.jit(lambda w, b: local_train(loss, adam, w, b))
    (long, m_long), (short, m_short) = run(_worker(task, adam), padded), run(_worker(task, adam), real)
    _leaves_equal(long, short)
    s_long, s_short = summarize(jax.tree.map(lambda a: a[None], m_long)), summarize(jax.tree.map(lambda a: a[None],
                                                                                                   m_short))
    assert float(s_long["train_examples"]) == float(s_short["train_examples"]) == 2 * B + 4
    for k in ("train_loss", "train_accuracy", "worker_loss"):
        np.testing.assert_allclose(s_long[k], s_short[k], rtol=1e-6, err_msg=k)
    assert bool(s_long["finite"])

    sgd, plain = optax.sgd(0.1), _task()
    cut = {"x": padded["x"][2:3, :4], "y": padded["y"][2:3, :4]}
    partial = jax.tree.map(lambda a: a[2:3], padded)
    _leaves_close(local_train(plain.train_loss(None), sgd, _worker(plain, sgd), partial)[0],
                  local_train(plain.train_loss(None), sgd, _worker(plain, sgd), cut)[0])


def test_replicas_under_a_gradient_reduce_skip_together():
    """Data parallel's replicas (a pmean of the gradients): worker 0's step is padding, worker 1's is not, so both
    apply the mean gradient and stay equal; when every worker's step is padding, none moves."""
    task, sgd = _task(), optax.sgd(0.1)
    loss = task.train_loss(None)
    start = jax.tree.map(lambda a: jnp.stack([a, a]), _worker(task, sgd))
    pmean = lambda t: jax.lax.pmean(t, "w")  # noqa: E731
    run = jax.vmap(lambda w, b: local_train(loss, sgd, w, b, grad_reduce=pmean), axis_name="w")
    batches = jax.tree.map(lambda a: jnp.stack([a, a]), _steps(1, 4, np.ones((1, B))))
    one_padded = {**batches, "weight": batches["weight"].at[0].set(0.0)}
    moved, _ = run(start, one_padded)
    _leaves_equal(jax.tree.map(lambda a: a[0], moved.params), jax.tree.map(lambda a: a[1], moved.params))
    assert not all(np.allclose(a[0], b[0]) for a, b in zip(jax.tree.leaves(moved.params),
                                                           jax.tree.leaves(start.params)))
    still, _ = run(start, {**batches, "weight": jnp.zeros_like(batches["weight"])})
    _leaves_equal(still, start)


def test_summarize_weighs_steps_by_their_examples():
    """[W, K] = [2, 3] by hand. Examples [[2, 1, 0], [0, 3, 0]], losses [[1, 4, NaN-free 0], [0, 2, 0]]:
    train_loss = (2 + 4 + 6) / 6 = 2, worker_loss = [(2 + 4) / 3, 6 / 3] = [2, 2], train_accuracy =
    (2 * 0.5 + 1 * 1 + 3 * 0.25) / 6 = 2.75 / 6, train_examples = 6. A worker with no example: loss 0.
    Without examples: the plain means, as before."""
    metrics = {"loss": jnp.array([[1.0, 4.0, 0.0], [0.0, 2.0, 0.0]]),
               "accuracy": jnp.array([[0.5, 1.0, 0.0], [0.0, 0.25, 0.0]]),
               "examples": jnp.array([[2.0, 1.0, 0.0], [0.0, 3.0, 0.0]])}
    out = summarize(metrics)
    assert set(out) == {"train_loss", "worker_loss", "finite", "train_accuracy", "train_examples"}
    np.testing.assert_allclose(out["train_loss"], 2.0, rtol=1e-6)
    np.testing.assert_allclose(out["worker_loss"], [2.0, 2.0], rtol=1e-6)
    np.testing.assert_allclose(out["train_accuracy"], 2.75 / 6, rtol=1e-6)
    assert float(out["train_examples"]) == 6.0 and bool(out["finite"])
    empty = summarize({**metrics, "examples": metrics["examples"].at[1].set(0.0)})
    np.testing.assert_allclose(empty["worker_loss"], [2.0, 0.0], rtol=1e-6)
    plain = summarize({k: v for k, v in metrics.items() if k != "examples"})
    assert set(plain) == {"train_loss", "worker_loss", "finite", "train_accuracy"}
    np.testing.assert_allclose(plain["train_loss"], 7.0 / 6, rtol=1e-6)
    np.testing.assert_allclose(plain["worker_loss"], [5.0 / 3, 2.0 / 3], rtol=1e-6)
    np.testing.assert_allclose(plain["train_accuracy"], 1.75 / 6, rtol=1e-6)


def test_last_steps_are_the_last_with_examples():
    """The loss split's batches: step K - 1 without weights; with them, each worker's last step with an example
    (worker 1's steps 1 and 2 are padding), and step K - 1 for a worker with none."""
    x = jnp.arange(3 * 3 * 2, dtype=jnp.float32).reshape(3, 3, 2)
    weight = jnp.array([[[1, 1], [1, 0], [0, 1]], [[1, 0], [0, 0], [0, 0]], [[0, 0]] * 3], jnp.float32)
    np.testing.assert_array_equal(last_steps({"x": x})["x"], x[:, 2:])
    picked = last_steps({"x": x, "weight": weight})
    np.testing.assert_array_equal(picked["x"][:, 0], np.stack([x[0, 2], x[1, 0], x[2, 2]]))
    np.testing.assert_array_equal(picked["weight"][:, 0], np.stack([weight[0, 2], weight[1, 0], weight[2, 2]]))


def test_round_reports_examples_and_splits_the_loss_on_real_steps():
    """One local SGD worker whose last step is padding: the round reports its examples, and the loss split reads its
    last real step (its own loss there, not the padding's 0; one worker: the merge costs nothing)."""
    task = _task()
    alg = istjax.local_sgd(task, optax.sgd(0.1), num_workers=1, local_steps=3)
    weight = np.ones((1, 3, B))
    weight[0, 1, 3:] = 0.0
    weight[0, 2] = 0.0
    batches = jax.tree.map(lambda a: a[None], _steps(3, 5, weight[0]))
    _, m = alg.round(alg.init(jax.random.key(0)), batches)
    assert float(m["train_examples"]) == B + 3
    assert float(m["worker_train_loss"]) > 0 and float(m["merge_cost"]) == 0.0


def test_cluster_minibatches_refuse_weights():
    """Cluster-GCN batches weigh nodes by the training mask: a batch with example weights is refused, naming it."""
    from istjax.graph import from_edges
    from istjax.graph import task as graph_task
    from istjax.models.gnn import GraphSAGE

    rng = np.random.default_rng(0)
    n = 12
    g = from_edges(rng.normal(size=(n, 3)).astype(np.float32), rng.integers(0, n, size=(20, 2)))
    shared = graph_task.with_clusters({"graph": g}, rng.integers(0, C, size=n), np.arange(0, n, 2), 2,
                                      method="random")
    task = graph_task.cluster_classifier(GraphSAGE(hidden=(4,), num_classes=C), shared)
    params = task.init(jax.random.key(0))
    batch = {"x": jnp.array([0.0]), "weight": jnp.ones(1)}
    with pytest.raises(ArgError, match="cluster_classifier: a batch of cluster ids"):
        task.train_loss(None)(params, {}, batch, shared)
