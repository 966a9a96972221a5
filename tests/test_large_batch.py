"""Large-batch training (issue 60, item 3): LARS and LAMB as config optimizers with their trust coefficient, and the
linear scaling rule as a learning-rate option; each step computed by hand on a two-leaf model, and every algorithm's
round with them equal to its reference loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import istjax
import istjax.launch.config as config_lib
import istjax.launch.driver as driver
from istjax.algorithms.reference import reference_round
from istjax.launch.config.parts import make_optimizer, scaled_learning_rate
from test_schedule import K, _batches, _close, _task
from test_train import tiny_config

W_KERNEL, B_BIAS = np.array([[3.0, 4.0]]), np.array([1.0])  # ||kernel|| = 5
G_KERNEL, G_BIAS = np.array([[0.6, -0.8]]), np.array([-2.0])


def _one_step(**fields):
    """The first update ``make_optimizer`` gives for ``fields`` on {kernel [1, 2], bias [1]}."""
    c = config_lib.default_config()
    for k, v in fields.items():
        c[k] = v
    opt = make_optimizer(c)
    params = {"kernel": jnp.asarray(W_KERNEL), "bias": jnp.asarray(B_BIAS)}
    grads = {"kernel": jnp.asarray(G_KERNEL), "bias": jnp.asarray(G_BIAS)}
    with jax.numpy_dtype_promotion("standard"):  # optax's Adam mixes Python floats with its int32 count
        updates, _ = opt.update(grads, opt.init(params), params)
    return {k: np.asarray(v) for k, v in updates.items()}


@pytest.mark.parametrize("trust,expected_trust", [(0.0, 0.001), (0.02, 0.02)])
def test_lars_scales_each_matrix_by_its_trust_ratio_and_leaves_vectors_alone(trust, expected_trust):
    lr, wd = 0.5, 0.1
    up = _one_step(optimizer="lars", learning_rate=lr, weight_decay=wd, trust_coefficient=trust)
    decayed = G_KERNEL + wd * W_KERNEL  # [0.9, -0.4]
    ratio = expected_trust * 5.0 / np.linalg.norm(decayed)
    np.testing.assert_allclose(up["kernel"], -lr * ratio * decayed, rtol=1e-6)
    np.testing.assert_allclose(up["bias"], -lr * G_BIAS, rtol=1e-6)  # no decay, no trust ratio


def test_lamb_scales_adams_step_by_its_trust_ratio():
    lr, wd = 0.01, 0.1
    up = _one_step(optimizer="lamb", learning_rate=lr, weight_decay=wd)
    adam = G_KERNEL / (np.abs(G_KERNEL) + 1e-6)  # Adam's first step, bias-corrected: g / (|g| + eps)
    step = adam + wd * W_KERNEL
    np.testing.assert_allclose(up["kernel"], -lr * 1.0 * 5.0 / np.linalg.norm(step) * step, rtol=1e-5)
    np.testing.assert_allclose(up["bias"], -lr * G_BIAS / (np.abs(G_BIAS) + 1e-6), rtol=1e-5)


def test_the_plain_optimizers_are_unchanged():
    up = _one_step(optimizer="momentum", learning_rate=0.5, weight_decay=0.1)
    np.testing.assert_allclose(up["kernel"], -0.5 * (G_KERNEL + 0.1 * W_KERNEL), rtol=1e-6)
    np.testing.assert_allclose(up["bias"], -0.5 * (G_BIAS + 0.1 * B_BIAS), rtol=1e-6)  # decays every leaf


@pytest.mark.parametrize("name,workers,expected", [("data_parallel", 8, 0.1 * 8 * 32 / 64),
                                                   ("ist", 8, 0.1 * 32 / 64), ("local_sgd", 8, 0.1 * 32 / 64)])
def test_linear_scaling_reads_the_examples_one_step_averages(name, workers, expected):
    c = config_lib.default_config()
    c.algorithm.name, c.num_workers, c.batch_size, c.learning_rate = name, workers, 32, 0.1
    assert scaled_learning_rate(c) == 0.1  # off by default
    c.lr_reference_batch = 64
    assert scaled_learning_rate(c) == pytest.approx(expected)
    up = _one_step(algorithm=c.algorithm, num_workers=workers, batch_size=32, lr_reference_batch=64)
    np.testing.assert_allclose(up["bias"], -expected * G_BIAS, rtol=1e-6)


@pytest.mark.parametrize("optimizer", ["lars", "lamb"])
@pytest.mark.parametrize("name", ["ist", "data_parallel", "local_sgd"])
def test_rounds_with_lars_and_lamb_equal_the_reference(name, optimizer):
    c = config_lib.default_config()
    c.optimizer, c.learning_rate, c.weight_decay, c.warmup_rounds = optimizer, 0.05, 1e-3, 2
    alg = getattr(istjax, name)(_task(), make_optimizer(c), num_workers=2, local_steps=K)
    state = alg.init(jax.random.key(0))
    for r in range(2):  # round 0 at half the rate (the warm-up)
        b = _batches(2, r)
        fast, _ = alg.round(state, b)
        _close(fast.params, reference_round(alg, state, b).params)
        state = fast


def test_config_refuses_bad_large_batch_fields():
    for field, value, message in [("optimizer", "lion", "choose one of"), ("trust_coefficient", -0.1, ">= 0"),
                                  ("lr_reference_batch", -1, ">= 0")]:
        with pytest.raises(config_lib.ConfigError, match=f"{field}=.*{message}"):
            config_lib.validate(tiny_config(**{field: value}))


def test_lars_trains_from_a_config_and_resumes(tmp_path):
    c = tiny_config(**{"algorithm.name": "data_parallel"}, optimizer="lars", learning_rate=2.0, trust_coefficient=0.01,
                    lr_reference_batch=16, warmup_rounds=2, lr_schedule_rounds=6, num_rounds=3, checkpoint_every=1,
                    target_accuracy=None)
    assert np.isfinite(driver.train_and_evaluate(c, tmp_path / "run")["test_loss"])
    c.num_rounds = 6
    assert driver.train_and_evaluate(c, tmp_path / "run", resume=True)["rounds"] == 6
