"""BatchNorm statistics of a merged model, recomputed from N batches (`model_state="recompute"`,
``recompute_batches``): equal to their definition computed with numpy on a tiny ResNet."""

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
