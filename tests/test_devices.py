"""The ``devices`` backend (jit + shard_map over the 4 fake CPU devices of conftest) equals ``simulate``."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
from istjax.runtimes import DEVICES, devices_used
from istjax.models.mlp import MLP

K, B, D, C = 2, 8, 12, 5


def _task(hidden=(32, 16), use_bias=True):
    model = MLP(hidden=hidden, num_classes=C, use_bias=use_bias)
    return istjax.classifier(model, jnp.zeros((B, D)), MLP.rules(len(hidden)), num_classes=C)


def _batches(w, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": jnp.asarray(rng.normal(size=(w, K, B, D)), jnp.float32),
            "y": jnp.asarray(rng.integers(0, C, size=(w, K, B)), jnp.int32)}


FACTORIES = {
    "ist": lambda task, w, backend: istjax.ist(task, optax.sgd(0.1), num_workers=w, local_steps=K, backend=backend),
    "ist_adam_carry": lambda task, w, backend: istjax.ist(task, optax.adam(1e-2), num_workers=w, local_steps=K,
                                                         optimizer_state="carry", backend=backend),
    "data_parallel": lambda task, w, backend: istjax.data_parallel(task, optax.sgd(0.1), num_workers=w,
                                                                   local_steps=K, backend=backend),
    "local_sgd": lambda task, w, backend: istjax.local_sgd(task, optax.sgd(0.1), num_workers=w, local_steps=K,
                                                           backend=backend),
}


def _run(alg, w, rounds=2):
    state = alg.init(jax.random.key(3))
    for r in range(rounds):
        state, metrics = alg.round(state, _batches(w, seed=r))
    return state, metrics


# Two workers per device (vmapped inside the shard_map) for every algorithm; one per device for IST.
@pytest.mark.parametrize("name,w", [(n, 8) for n in sorted(FACTORIES)] + [("ist", 4)])
def test_devices_equals_simulate(name, w):
    assert len(jax.devices()) == 4
    # Biases in front of BatchNorm get ~0 gradients; Adam would blow their float noise up to full steps.
    task = _task(use_bias=name != "ist_adam_carry")
    ref_state, ref_metrics = _run(FACTORIES[name](task, w, "simulate"), w)
    alg = FACTORIES[name](task, w, "devices")
    state, metrics = _run(alg, w)
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(ref_state.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(np.asarray(metrics["worker_loss"]), np.asarray(ref_metrics["worker_loss"]),
                               rtol=2e-5, atol=2e-6)
    assert int(state.round) == 2
    # The workers really ran on all four devices.
    assert alg.round.mesh.axis_names == (DEVICES,) and alg.round.mesh.devices.size == 4


@pytest.mark.slow
def test_data_parallel_averages_over_all_workers_not_per_device():
    """With 2 workers per device, a per-device mean would differ from the mean over all 8 workers."""
    task = _task()
    batches = _batches(8)
    loss_fn = task.loss_fn(None)
    alg1 = istjax.data_parallel(task, optax.sgd(0.1), num_workers=8, local_steps=1, backend="devices")
    p0 = alg1.init(jax.random.key(3)).params
    first = jax.tree.map(lambda x: x[:, 0], batches)
    g = jax.vmap(jax.grad(lambda p, b: loss_fn(p, b)[0]), in_axes=(None, 0))(p0, first)
    mean_g = jax.tree.map(lambda x: jnp.mean(x, axis=0), g)
    one = {k: v[:, :1] for k, v in batches.items()}
    s1, _ = alg1.round(alg1.init(jax.random.key(3)), one)
    for a, p, gm in zip(jax.tree.leaves(s1.params), jax.tree.leaves(p0), jax.tree.leaves(mean_g)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(p - 0.1 * gm), rtol=1e-5, atol=1e-6)


def test_devices_used_divides_workers():
    devs = jax.devices()
    assert len(devices_used(8, devs)) == 4
    assert len(devices_used(6, devs)) == 3
    assert len(devices_used(2, devs)) == 2
    assert len(devices_used(5, devs)) == 1


def test_devices_rejects_bad_batches_before_tracing():
    alg = FACTORIES["ist"](_task(), 4, "devices")
    with pytest.raises(ValueError, match=r"\[W, K, B, \.\.\.\]"):
        alg.round(alg.init(jax.random.key(0)), _batches(2))
