"""The four BatchNorm handlings of issue 35's study, each equal to its definition computed with numpy on a tiny ResNet:
statistics recomputed on the merged model from W x 1 or W x N batches (`model_state="recompute"`,
``recompute_batches``), per-worker statistics carried and averaged (``model_state="carry"``), and batch statistics at
test time (``batch_norm="batch"``)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
from istjax.core.errors import ArgError
from istjax.models import ResNet

W, K, B = 2, 3, 6


def _task():
    model = ResNet(stage_sizes=(1, 1), widths=(4, 8), num_classes=3, channel_partition="inner")
    return istjax.classifier(model, jnp.zeros((2, 8, 8, 1)), num_classes=3)


def _batches():
    kx, ky = jax.random.split(jax.random.key(7))
    return {"x": jax.random.normal(kx, (W, K, B, 8, 8, 1)), "y": jax.random.randint(ky, (W, K, B), 0, 3)}


def _stem_statistics(kernel, images_NxBxHxWxC):
    """The stem BatchNorm's recomputed statistics by definition: the stem conv (3x3, stride 1, SAME, no bias) of
    every batch, each channel's mean and (biased) variance over a batch, averaged over the N batches."""
    means, variances = [], []
    for x in np.asarray(images_NxBxHxWxC):
        h = np.asarray(jax.lax.conv_general_dilated(jnp.asarray(x), kernel, (1, 1), "SAME",
                                                    dimension_numbers=("NHWC", "HWIO", "NHWC")), np.float64)
        means.append(h.mean(axis=(0, 1, 2)))
        variances.append(h.var(axis=(0, 1, 2)))
    return np.mean(means, axis=0), np.mean(variances, axis=0)


@pytest.mark.parametrize("n", [1, K])
def test_statistics_recomputed_from_n_batches_equal_numpys(n):
    """After a round, the merged model's stem statistics are those of its own stem conv on each worker's first n
    batches of the round (W x n batches)."""
    alg = istjax.ist(_task(), optax.sgd(0.1), num_workers=W, local_steps=K, model_state="recompute",
                     recompute_batches=n)
    b = _batches()
    new, _ = alg.round(alg.init(jax.random.key(0)), b)
    images = np.asarray(b["x"][:, :n]).reshape(W * n, B, 8, 8, 1)
    mean, var = _stem_statistics(new.params["conv_stem"]["kernel"], images)
    got = new.model_state["batch_stats"]["bn_stem"]
    np.testing.assert_allclose(got["mean"], mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["var"], var, rtol=1e-4, atol=1e-5)
    if n > 1:  # more batches are another statistic: the option is read
        one, _ = _stem_statistics(new.params["conv_stem"]["kernel"], np.asarray(b["x"][:, 0]))
        assert not np.allclose(one, mean, rtol=1e-3)


def test_recompute_batches_is_refused_where_it_changes_nothing_or_is_out_of_range():
    with pytest.raises(ArgError, match="recompute_batches=2 says how many batches"):
        istjax.ist(_task(), optax.sgd(0.1), num_workers=W, local_steps=K, recompute_batches=2)
    with pytest.raises(ArgError, match="from 1 to local_steps=3"):
        istjax.local_sgd(_task(), optax.sgd(0.1), num_workers=W, local_steps=K, model_state="recompute",
                         recompute_batches=4)


def test_per_worker_statistics_carried_are_the_workers_running_averages_averaged():
    """``model_state="carry"`` (per-worker statistics merged): with a zero learning rate (the stem conv fixed), each
    worker's stem running mean and variance are the momentum-0.9 average over its K batches of the batch's mean and
    (biased) variance, starting from 0 and 1; the stem is held by every worker, so the merge averages them."""
    alg = istjax.ist(_task(), optax.sgd(0.0), num_workers=W, local_steps=K, model_state="carry")
    b = _batches()
    state = alg.init(jax.random.key(0))
    new, _ = alg.round(state, b)
    kernel = state.params["conv_stem"]["kernel"]
    means, variances = [], []
    for w in range(W):
        mean, var = np.zeros(4), np.ones(4)
        for k in range(K):
            m, v = _stem_statistics(kernel, np.asarray(b["x"][w, k])[None])
            mean, var = 0.9 * mean + 0.1 * m, 0.9 * var + 0.1 * v
        means.append(mean)
        variances.append(var)
    got = new.model_state["batch_stats"]["bn_stem"]
    np.testing.assert_allclose(got["mean"], np.mean(means, axis=0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["var"], np.mean(variances, axis=0), rtol=1e-4, atol=1e-5)


def test_batch_statistics_at_test_time_normalise_with_the_evaluated_batch():
    """``batch_norm="batch"``: the layer normalises each channel with the batch's own mean and (biased) variance at
    test time as in training (numpy's definition), so the test-time network's logits are its training-mode ones."""
    from istjax.models.layers import BatchStatNorm

    x = jax.random.normal(jax.random.key(3), (5, 4, 4, 3)) * 2.0 + 1.0
    layer = BatchStatNorm(group="g")
    params = {"params": {"scale": jnp.asarray([0.5, 1.0, 2.0]), "bias": jnp.asarray([0.1, -0.2, 0.3])}}
    h = np.asarray(x, np.float64)
    expect = (h - h.mean((0, 1, 2))) / np.sqrt(h.var((0, 1, 2)) + 1e-5) * [0.5, 1.0, 2.0] + [0.1, -0.2, 0.3]
    np.testing.assert_allclose(layer.apply(params, x), expect, rtol=1e-4, atol=1e-5)

    model = ResNet(stage_sizes=(1, 1), widths=(4, 8), num_classes=3, channel_partition="inner", batch_norm="batch")
    images = jax.random.normal(jax.random.key(4), (6, 8, 8, 1))
    variables = model.init(jax.random.key(0), images, train=False)
    assert "batch_stats" not in variables  # nothing to carry, recompute or average
    np.testing.assert_allclose(model.apply(variables, images, train=False), model.apply(variables, images,
                                                                                        train=True), rtol=1e-5)
