"""Equivalences between the fast rounds, the plain reference loop, and textbook SGD; hand-checkable numbers."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
from istjax.models import MLP
from istjax.algorithms.reference import reference_round

D, C = 6, 3


def _task(hidden=(8,), batch_norm=True, output_batch_norm=True):
    model = MLP(hidden=hidden, num_classes=C, batch_norm=batch_norm, output_batch_norm=output_batch_norm)
    return istjax.classifier(model, jnp.ones((4, D)), MLP.rules(len(hidden)), num_classes=C)


def _batches(W, K, B=5, seed=1):
    kx, ky = jax.random.split(jax.random.key(seed))
    return {"x": jax.random.normal(kx, (W, K, B, D)), "y": jax.random.randint(ky, (W, K, B), 0, C)}


def _close(a, b, **kw):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), **({"rtol": 1e-5, "atol": 1e-6} | kw))


@pytest.mark.parametrize("hidden,sampler,W", [
    ((8,), istjax.uniform(), 2),
    ((8, 6), istjax.uniform(), 2),           # hidden-to-hidden weight partitioned on both axes
    ((7,), istjax.uniform(pad=True), 3),     # padded, masked
    ((8,), istjax.overlapping(5), 2),        # overlapping units averaged
])
def test_vectorised_round_equals_reference_loop(hidden, sampler, W):
    alg = istjax.ist(_task(hidden), optax.sgd(0.3), num_workers=W, local_steps=3, sampler=sampler)
    state = alg.init(jax.random.key(0))
    for r in range(2):
        b = _batches(W, 3, seed=r)
        fast, _ = alg.round(state, b)
        slow = reference_round(alg, state, b)
        _close(fast.params, slow.params)
        np.testing.assert_array_equal(jax.random.key_data(fast.key), jax.random.key_data(slow.key))
        state = fast


@pytest.mark.parametrize("name", ["data_parallel", "local_sgd"])
def test_replicated_rounds_equal_reference_loop(name):
    make = getattr(istjax, name)
    alg = make(_task(), optax.sgd(0.2), num_workers=3, local_steps=2)
    state = alg.init(jax.random.key(0))
    b = _batches(3, 2)
    _close(alg.round(state, b)[0].params, reference_round(alg, state, b).params)


def test_data_parallel_equals_one_large_batch_sgd_step():
    task = _task(batch_norm=False, output_batch_norm=False)  # BN couples samples within a worker's batch
    W, B, lr = 4, 5, 0.5
    alg = istjax.data_parallel(task, optax.sgd(lr), num_workers=W, local_steps=1)
    state = alg.init(jax.random.key(0))
    b = _batches(W, 1, B)
    new, _ = alg.round(state, b)
    big = {"x": b["x"].reshape(W * B, D), "y": b["y"].reshape(W * B)}
    g = jax.grad(lambda p: task.loss_fn(None)(p, big)[0])(state.params)
    want = jax.tree.map(lambda p, g: p - lr * g, state.params, g)
    _close(new.params, want)


def test_local_sgd_with_one_step_equals_data_parallel():
    task = _task()
    b = _batches(3, 1)
    dp = istjax.data_parallel(task, optax.sgd(0.3), num_workers=3, local_steps=1)
    ls = istjax.local_sgd(task, optax.sgd(0.3), num_workers=3, local_steps=1)
    s = dp.init(jax.random.key(0))
    _close(dp.round(s, b)[0].params, ls.round(ls.init(jax.random.key(0)), b)[0].params)


def test_ist_with_one_worker_equals_plain_sgd():
    task = _task((8, 6))
    K, lr = 4, 0.3
    alg = istjax.ist(task, optax.sgd(lr), num_workers=1, local_steps=K)
    state = alg.init(jax.random.key(0))
    b = _batches(1, K)
    new, metrics = alg.round(state, b)
    params = state.params
    losses = []
    for k in range(K):
        (loss, _), g = jax.value_and_grad(task.loss_fn(None), has_aux=True)(params, {"x": b["x"][0, k],
                                                                                    "y": b["y"][0, k]})
        losses.append(loss)
        params = jax.tree.map(lambda p, g: p - lr * g, params, g)
    _close(new.params, params)  # all K steps reached the global model, the last one included
    np.testing.assert_allclose(float(metrics["train_loss"]), float(np.mean(losses)), rtol=1e-5)


def test_subnetwork_equals_full_network_with_other_neurons_removed():
    """Hand-checkable: without BatchNorm, worker w's sub-network computes the full network with every hidden unit
    it does not hold masked to zero."""
    task = _task((6,), batch_norm=False, output_batch_norm=False)
    params = task.init(jax.random.key(3))
    p = istjax.uniform().sample(jax.random.key(4), task.spec.group_sizes, 3)
    sub = istjax.extract(params, p, task.spec)
    x = jax.random.normal(jax.random.key(5), (4, D))
    sub_model = MLP(hidden=(2,), num_classes=C, batch_norm=False, output_batch_norm=False)
    for w in range(3):
        mask = jnp.zeros(6).at[p.indices["hidden_0"][w]].set(1.0)
        h = nn.relu(x @ params["dense_0"]["kernel"]) * mask[None, :]
        want = h @ params["dense_out"]["kernel"]
        got = sub_model.apply({"params": jax.tree.map(lambda a: a[w], sub)}, x)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_tiny_network_by_hand():
    """A 1-input, 2-hidden-unit linear net, 2 workers, one SGD step each: every number computed by hand.

    f(x) = sum_j v_j * relu(u_j * x); loss = 1/2 (f(x) - y)^2 (written as a Task directly).
    Worker w holds unit w: u_w <- u_w - lr * (f_w - y) * v_w * x, v_w <- v_w - lr * (f_w - y) * u_w * x.
    """
    params = {"u": jnp.array([1.0, 2.0]), "v": jnp.array([3.0, -1.0])}
    spec = istjax.spec_from_table(params, {"u": ("h",), "v": ("h",)})

    def loss_fn(units):
        def loss(p, batch):
            f = jnp.sum(p["v"][None, :] * nn.relu(p["u"][None, :] * batch["x"][:, None]), axis=1)
            return 0.5 * jnp.mean(jnp.square(f - batch["y"])), {}
        return loss

    task = istjax.Task.from_loss(lambda k: params, loss_fn, spec)
    ident = istjax.Sampler(lambda k, s, W: istjax.Partition({"h": jnp.array([[0], [1]], jnp.int32)},
                                                            {"h": jnp.ones((2, 1), bool)}),
                           lambda s, W: {"h": 1}, True, "identity")
    alg = istjax.ist(task, optax.sgd(0.1), num_workers=2, local_steps=1, sampler=ident)
    b = {"x": jnp.array([[[1.0]], [[1.0]]]), "y": jnp.array([[[1.0]], [[1.0]]])}
    new, m = alg.round(alg.init(jax.random.key(0)), b)
    # worker 0: f = 3*1 = 3, r = 2: u0 = 1 - .1*2*3 = 0.4, v0 = 3 - .1*2*1 = 2.8
    # worker 1: f = -1*2 = -2, r = -3: u1 = 2 - .1*(-3)*(-1) = 1.7, v1 = -1 - .1*(-3)*2 = -0.4
    np.testing.assert_allclose(new.params["u"], [0.4, 1.7], rtol=1e-6)
    np.testing.assert_allclose(new.params["v"], [2.8, -0.4], rtol=1e-6)
    np.testing.assert_allclose(m["worker_loss"], [2.0, 4.5], rtol=1e-6)


def test_carried_optimizer_state_follows_the_units():
    task = _task((8,))
    alg = istjax.ist(task, optax.adam(1e-2), num_workers=2, local_steps=2, optimizer_state="carry")
    state = alg.init(jax.random.key(0))
    new, _ = alg.round(state, _batches(2, 2))
    mu = new.opt_state[0].mu
    # Adam's first moment is non-zero exactly where some worker trained; every hidden unit was held by one worker.
    assert np.all(np.abs(np.asarray(mu["dense_0"]["kernel"])).sum(0) > 0)
    assert int(new.opt_state[0].count) == 2  # each worker took 2 steps; counts are averaged


def test_rounds_after_the_first_do_not_recompile():
    compiles = []

    def listener(event, duration, **kw):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        for make, kw in [(istjax.ist, {}), (istjax.data_parallel, {}), (istjax.local_sgd, {})]:
            alg = make(_task(), optax.sgd(0.1), num_workers=2, local_steps=2, **kw)
            state = alg.init(jax.random.key(0))
            state, _ = alg.round(state, _batches(2, 2, seed=0))
            jax.block_until_ready(state)
            before = len(compiles)
            for r in range(1, 4):
                state, _ = alg.round(state, _batches(2, 2, seed=r))
            jax.block_until_ready(state)
            assert len(compiles) == before, f"{alg.name} recompiled after the first round"
            assert alg.round.compiled._cache_size() == 1
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


# --- bad input: clear errors before tracing ---------------------------------------------------------------------

def test_width_not_divisible_by_workers():
    with pytest.raises(ValueError, match=r"'hidden_0' has 10 units, not divisible by num_workers=3.*pad=True"):
        istjax.ist(_task((10,)), optax.sgd(0.1), num_workers=3, local_steps=1)


def test_more_workers_than_units():
    with pytest.raises(ValueError, match=r"num_workers=9 is larger than neuron group 'hidden_0' \(8 units\)"):
        istjax.ist(_task((8,)), optax.sgd(0.1), num_workers=9, local_steps=1, sampler=istjax.uniform(pad=True))


def test_unknown_axis_name():
    model = MLP(hidden=(8,), num_classes=C)
    with pytest.raises(ValueError, match=r"unknown logical axis name\(s\) 'hidden_0'.*Add each to the rules"):
        istjax.classifier(model, jnp.ones((2, D)), {"input": None, "classes": None}, num_classes=C)


def test_bad_batches_shape_named():
    alg = istjax.ist(_task(), optax.sgd(0.1), num_workers=2, local_steps=3)
    with pytest.raises(ValueError, match=r"batches\['x'\] has shape \(2, 2, 5, 6\).*\[2, 3, \.\.\.\]"):
        alg.round(alg.init(jax.random.key(0)), _batches(2, 2))


def test_bad_options_named():
    with pytest.raises(ValueError, match="optimizer_state='keep'"):
        istjax.ist(_task(), optax.sgd(0.1), num_workers=2, local_steps=1, optimizer_state="keep")
    with pytest.raises(ValueError, match="local_steps=0"):
        istjax.local_sgd(_task(), optax.sgd(0.1), num_workers=2, local_steps=0)
    with pytest.raises(ValueError, match="backend='gpu-cluster'"):
        istjax.ist(_task(), optax.sgd(0.1), num_workers=2, local_steps=1, backend="gpu-cluster")


def test_spec_table_typo_and_inconsistent_group():
    params = {"a": jnp.ones((4, 6)), "b": jnp.ones((5, 2))}
    with pytest.raises(ValueError, match="match no parameter"):
        istjax.spec_from_table(params, {"a/kernl": (None, "h")})
    with pytest.raises(ValueError, match="group 'h' has 6 units"):
        istjax.spec_from_table(params, {"a": (None, "h"), "b": ("h", None)})


def test_data_parallel_fused_local_equals_vmapped_pmean():
    """The simulate backend's fused data-parallel phase equals `vmap(local)` with `lax.pmean` across workers."""
    W, K = 3, 4
    alg = istjax.data_parallel(_task(), optax.adam(0.05), num_workers=W, local_steps=K)
    assert alg.local_fused is not None
    state = alg.init(jax.random.key(0))
    workers, _ = alg.distribute(state)
    b = _batches(W, K)
    fused, m_fused = jax.jit(alg.local_fused)(workers, b)
    plain, m_plain = jax.jit(jax.vmap(alg.local, axis_name=istjax.WORKERS))(workers, b)
    _close(fused, plain)
    assert jax.tree.structure(m_fused) == jax.tree.structure(m_plain)
    _close(m_fused, m_plain)
    assert m_fused["loss"].shape == (W, K)


@pytest.mark.parametrize("name", ["ist", "data_parallel", "local_sgd"])
def test_one_worker_runs_unmapped_with_the_same_result(name):
    """W = 1 skips the size-1 vmap in simulate (XLA handles it badly); the round must not change."""
    alg = getattr(istjax, name)(_task(), optax.sgd(0.2), num_workers=1, local_steps=3)
    state = alg.init(jax.random.key(0))
    b = _batches(1, 3)

    @jax.jit
    def vmapped_round(state, batches):
        workers, plan = alg.distribute(state)
        workers, _ = jax.vmap(alg.local, axis_name=istjax.WORKERS)(workers, batches)
        return alg.collect(state, workers, plan)

    got, metrics = alg.round(state, b)
    _close(got.params, vmapped_round(state, b).params)
    assert metrics["worker_loss"].shape == (1,)
