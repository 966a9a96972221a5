"""Learning-rate schedules counted in training rounds: the same multiplier for every algorithm, whatever happens to
the optimizer state at a repartition."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
import istjax.launch.config as config_lib
import istjax.launch.driver as driver
from istjax.algorithms.reference import reference_round
from istjax.core.schedule import at_round, make_schedule, round_scheduled
from istjax.models import MLP
from test_train import tiny_config  # the suite's small digits config

D, C, K = 6, 3, 2


def _task():
    return istjax.classifier(MLP(hidden=(8,), num_classes=C), jnp.ones((8, D)), num_classes=C)


def _batches(w, seed):
    kx, ky = jax.random.split(jax.random.key(seed))
    return {"x": jax.random.normal(kx, (w, K, 8, D)), "y": jax.random.randint(ky, (w, K, 8), 0, C)}


def _close(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


def test_make_schedule_values():
    step = make_schedule("step", num_rounds=100, decay_at=(0.5, 0.75), factor=0.1)
    assert [float(step(r)) for r in (0, 49, 50, 74, 75, 99)] == pytest.approx([1, 1, 0.1, 0.1, 0.01, 0.01])
    cosine = make_schedule("cosine", num_rounds=10)
    assert float(cosine(0)) == pytest.approx(1.0) and float(cosine(10)) == pytest.approx(0.0, abs=1e-7)
    assert float(cosine(5)) == pytest.approx(0.5)
    warm = make_schedule("constant", num_rounds=10, warmup_rounds=4)
    assert [float(warm(r)) for r in (0, 1, 3, 8)] == pytest.approx([0.25, 0.5, 1.0, 1.0])
    assert make_schedule("constant", num_rounds=10) is None
    with pytest.raises(ValueError, match="lr_schedule='linear'"):
        make_schedule("linear", num_rounds=10)


def test_one_worker_ist_with_a_round_schedule_is_sgd_at_the_rounds_learning_rate():
    task, lr = _task(), 0.3
    schedule = make_schedule("step", num_rounds=4, decay_at=(0.5,), factor=0.1)  # rounds 2, 3 at lr / 10
    alg = istjax.ist(task, round_scheduled(optax.sgd(lr), schedule), num_workers=1, local_steps=K)
    state = alg.init(jax.random.key(0))
    params = state.params
    for r in range(4):
        b = _batches(1, r)
        state, _ = alg.round(state, b)
        for k in range(K):  # plain SGD, the learning rate of round r, through the optimizer's reset each round
            g = jax.grad(lambda p: task.loss_fn(None)(p, {"x": b["x"][0, k], "y": b["y"][0, k]})[0])(params)
            params = jax.tree.map(lambda p, g: p - lr * float(schedule(r)) * g, params, g)
        _close(state.params, params)


@pytest.mark.parametrize("name", ["ist", "data_parallel", "local_sgd"])
def test_scheduled_rounds_equal_the_reference(name):
    schedule = make_schedule("step", num_rounds=2, decay_at=(0.5,), factor=0.25)
    opt = round_scheduled(optax.sgd(0.2, momentum=0.9), schedule)
    alg = getattr(istjax, name)(_task(), opt, num_workers=2, local_steps=K)
    state = alg.init(jax.random.key(0))
    for r in range(2):  # round 1 runs at a quarter of the learning rate
        b = _batches(2, r)
        fast, _ = alg.round(state, b)
        _close(fast.params, reference_round(alg, state, b).params)
        state = fast


def test_carried_optimizer_state_gets_the_round_stamped():
    opt = round_scheduled(optax.adam(1e-2), make_schedule("cosine", num_rounds=5))
    alg = istjax.ist(_task(), opt, num_workers=2, local_steps=K, optimizer_state="carry")
    state = alg.init(jax.random.key(0))
    for r in range(3):
        workers, _ = alg.distribute(state)
        rounds = jax.tree.leaves(jax.tree.map(lambda s: s.round, workers.opt_state,
                                              is_leaf=lambda s: hasattr(s, "inner")))
        assert all(int(x) == r for v in rounds for x in np.ravel(v))
        state, _ = alg.round(state, _batches(2, r))
    assert at_round((), 3) == ()


def _tiny(**fields):
    return tiny_config(**{"num_rounds": 4, "checkpoint_every": 1, "target_accuracy": None, **fields})


@pytest.mark.slow
def test_config_schedule_fields_and_resume(tmp_path):
    c = _tiny(optimizer="momentum", weight_decay=5e-4, lr_schedule="step", lr_decay_at=(0.5,))
    driver.train_and_evaluate(c, tmp_path / "run")
    more = _tiny(optimizer="momentum", weight_decay=5e-4, lr_schedule="step", lr_decay_at=(0.5,), num_rounds=6)
    # The schedule is measured in num_rounds: more rounds would change every round's learning rate.
    with pytest.raises(config_lib.ConfigError, match=r"num_rounds: 4 -> 6"):
        driver.train_and_evaluate(more, tmp_path / "run", resume=True)
    fixed = _tiny(lr_schedule="cosine", lr_schedule_rounds=10)
    driver.train_and_evaluate(fixed, tmp_path / "fixed")
    fixed.num_rounds = 6
    assert driver.train_and_evaluate(fixed, tmp_path / "fixed", resume=True)["rounds"] == 6
    for field, value, message in [("lr_schedule", "linear", "choose one of"), ("weight_decay", -1.0, "in \\[0, 1\\)"),
                                  ("lr_decay_at", (1.5,), "fractions"), ("lr_decay_factor", 0.0, "\\(0, 1\\]"),
                                  ("warmup_rounds", -2, ">= 0")]:
        with pytest.raises(config_lib.ConfigError, match=f"{field}=.*{message}"):
            config_lib.validate(_tiny(**{field: value}))
