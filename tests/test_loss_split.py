"""The round's loss split (`istjax.algorithms.base.loss_split`): the workers' own loss, the merged model's on the
same batches, and what the merge cost; by hand on tiny networks, and recorded by the driver."""

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
from istjax.models import MLP

D, C = 6, 3


def _mlp_task():
    model = MLP(hidden=(8,), num_classes=C, batch_norm=True, output_batch_norm=True)
    return istjax.classifier(model, jnp.ones((4, D)), MLP.rules(1), num_classes=C)


def _batches(W, K, B=5, seed=1):
    kx, ky = jax.random.split(jax.random.key(seed))
    return {"x": jax.random.normal(kx, (W, K, B, D)), "y": jax.random.randint(ky, (W, K, B), 0, C)}


@pytest.mark.parametrize("make", [istjax.ist, istjax.local_sgd, istjax.data_parallel])
def test_one_worker_merge_costs_nothing(make):
    """W = 1: the merged model is the worker's model (IST writes every unit back, the replicated algorithms average
    one replica), so its training-mode loss on the worker's last batch is the worker's own: exactly, where the two
    are the same function (the replicated algorithms), and to float rounding for IST, whose worker runs its
    sub-network's module (XLA compiles the two forward passes of the round separately; measured: 2e-8 of 0.9)."""
    alg = make(_mlp_task(), optax.sgd(0.3), num_workers=1, local_steps=3)
    state = alg.init(jax.random.key(0))
    for r in range(2):
        state, m = alg.round(state, _batches(1, 3, seed=r))
        loss = float(m["worker_train_loss"])
        assert loss > 0 and np.isfinite(loss)
        if make is istjax.ist:
            assert abs(float(m["merge_cost"])) <= 1e-6 * loss
        else:
            assert float(m["merge_cost"]) == 0.0


def _hand_task():
    """f(x) = sum_j v_j relu(u_j x), loss 1/2 (f(x) - y)^2, two hidden units (one group "h")."""
    params = {"u": jnp.array([1.0, 2.0]), "v": jnp.array([3.0, -1.0])}
    spec = istjax.spec_from_table(params, {"u": ("h",), "v": ("h",)})

    def loss_fn(units):
        def loss(p, batch):
            f = jnp.sum(p["v"][None, :] * nn.relu(p["u"][None, :] * batch["x"][:, None]), axis=1)
            return 0.5 * jnp.mean(jnp.square(f - batch["y"])), {}
        return loss

    return istjax.Task.from_loss(lambda k: params, loss_fn, spec)


def test_two_workers_disjoint_units_by_hand():
    """Two workers, unit w to worker w, one SGD step (lr 0.1) each, worker 0 on (x, y) = (1, 1), worker 1 on (2, 0):

    worker 0: f = 3 relu(1) = 3, r = 2: u0 = 1 - .1 * 2 * 3 = 0.4, v0 = 3 - .1 * 2 * 1 = 2.8;
    worker 1: f = -1 relu(4) = -4, r = -4: u1 = 2 - .1 * (-4)(-1)(2) = 1.2, v1 = -1 - .1 * (-4)(4) = 0.6.
    Workers' own losses after the step: 1/2 (2.8 * 0.4 - 1)^2 = 0.0072 and 1/2 (0.6 * 2.4)^2 = 1.0368 (mean 0.522).
    The merged net (u, v) = ([0.4, 1.2], [2.8, 0.6]) on the same batches: f(1) = 1.12 + 0.72 = 1.84, loss
    1/2 0.84^2 = 0.3528; f(2) = 2.24 + 1.44 = 3.68, loss 1/2 3.68^2 = 6.7712 (mean 3.562); merge cost 3.04."""
    ident = istjax.Sampler(lambda k, s, W: istjax.Partition({"h": jnp.array([[0], [1]], jnp.int32)},
                                                            {"h": jnp.ones((2, 1), bool)}),
                           lambda s, W: {"h": 1}, True, "identity")
    alg = istjax.ist(_hand_task(), optax.sgd(0.1), num_workers=2, local_steps=1, sampler=ident)
    b = {"x": jnp.array([[[1.0]], [[2.0]]]), "y": jnp.array([[[1.0]], [[0.0]]])}
    new, m = alg.round(alg.init(jax.random.key(0)), b)
    np.testing.assert_allclose(new.params["u"], [0.4, 1.2], rtol=1e-6)
    np.testing.assert_allclose(new.params["v"], [2.8, 0.6], rtol=1e-6)
    np.testing.assert_allclose(m["worker_train_loss"], (0.0072 + 1.0368) / 2, rtol=1e-5)
    np.testing.assert_allclose(m["merged_train_loss"], (0.3528 + 6.7712) / 2, rtol=1e-5)
    np.testing.assert_allclose(m["merged_test_loss"], (0.3528 + 6.7712) / 2, rtol=1e-5)
    np.testing.assert_allclose(m["merge_cost"], 3.562 - 0.522, rtol=1e-5)


def test_devices_runtime_reports_the_same_split():
    """The devices runtime (workers over fake CPU devices) gives the simulate runtime's split."""
    task = _mlp_task()
    sim = istjax.ist(task, optax.sgd(0.3), num_workers=2, local_steps=2)
    dev = istjax.ist(task, optax.sgd(0.3), num_workers=2, local_steps=2, backend="devices")
    state = sim.init(jax.random.key(0))
    b = _batches(2, 2)
    (_, a), (_, d) = sim.round(state, b), dev.round(state, b)
    assert set(a) == set(d) and {"worker_train_loss", "merged_train_loss", "merge_cost"} <= set(a)
    for k in ("worker_train_loss", "merged_train_loss", "merge_cost"):
        np.testing.assert_allclose(float(a[k]), float(d[k]), rtol=1e-5, atol=1e-6)


def test_turned_off_the_round_reports_no_split():
    alg = istjax.ist(_mlp_task(), optax.sgd(0.3), num_workers=2, local_steps=2, loss_split=False)
    _, m = alg.round(alg.init(jax.random.key(0)), _batches(2, 2))
    assert "merge_cost" not in m and "worker_train_loss" not in m


def _counting_splits(monkeypatch) -> list:
    """Counts the loss splits the rounds run, on device (a callback inside the split's branch of `jax.lax.cond`
    fires only when the branch runs)."""
    from istjax.runtimes import base

    ran, when_due = [], base.when_due

    def counted(due, compute):
        def compute_and_count():
            jax.debug.callback(lambda: ran.append(1))
            return compute()
        return when_due(due, compute_and_count)

    monkeypatch.setattr(base, "when_due", counted)
    return ran


def _driver_config(**fields):
    from istjax.launch import config as config_lib

    c = config_lib.default_config()
    c.model.hidden = (16,)
    c.num_workers, c.local_steps, c.batch_size = 2, 2, 8
    c.num_rounds, c.eval_every, c.checkpoint_every = 4, 2, 4
    c.eval_train_examples, c.progress = 256, False
    for k, v in fields.items():
        c[k] = v
    return c


def _records(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("backend", ["simulate", "devices"])
def test_a_traced_flag_runs_the_split_only_where_true(backend):
    """Inside an outer jit (the driver's fused step) ``split`` is traced: True gives the unconditional round's split
    (the program every round ran before the flag), False its NaN placeholder, the state the same to the bit."""
    alg = istjax.ist(_mlp_task(), optax.sgd(0.3), num_workers=2, local_steps=2, backend=backend)
    state, b = alg.init(jax.random.key(0)), _batches(2, 2)
    step = jax.jit(lambda s, flag: alg.round(s, b, split=flag))
    (s0, plain), (s1, on), (s2, off) = alg.round(state, b), step(state, True), step(state, False)
    keys = {"worker_train_loss", "merged_train_loss", "merge_cost"}
    assert keys <= set(plain) and set(on) == set(off) == set(plain)
    for k in keys:
        np.testing.assert_allclose(float(on[k]), float(plain[k]), rtol=1e-6, atol=1e-7)
        assert np.isnan(off[k])
    for a, c in zip(jax.tree.leaves((s0.params, s1.params)), jax.tree.leaves((s2.params, s2.params))):
        np.testing.assert_array_equal(a, c)
    _, none = alg.round(state, b, split=False)  # a Python bool: decided before tracing, no keys
    assert not keys & set(none)


def test_the_driver_computes_the_split_on_evaluation_rounds_only(tmp_path, monkeypatch):
    """Default: the split runs on the 2 evaluation rounds of 4 (counted on device), each record its round's own;
    the same rounds' splits as a run computing it every round and recording every round (the numbers before the
    change), to float rounding."""
    from istjax.launch import driver

    ran = _counting_splits(monkeypatch)
    driver.train_and_evaluate(_driver_config(), tmp_path / "eval")
    assert len(ran) == 2
    ran.clear()
    driver.train_and_evaluate(_driver_config(eval_every=1, loss_split_every=1), tmp_path / "every")
    assert len(ran) == 4
    every = {r["round"]: r for r in _records(tmp_path / "every")}
    for r in _records(tmp_path / "eval"):
        assert r["split_rounds"] == 1 and every[r["round"]]["split_rounds"] == 1
        for k in ("worker_train_loss", "merged_train_loss", "merge_cost"):
            np.testing.assert_allclose(r[k], every[r["round"]][k], rtol=1e-6, atol=1e-7)


def test_driver_records_the_split_averaged_since_the_last_record(tmp_path):
    """``loss_split_every=1``: every round computes it and each record averages the rounds since the last."""
    from istjax.launch import driver

    summary = driver.train_and_evaluate(_driver_config(loss_split_every=1), tmp_path)
    records = _records(tmp_path)
    for r in records:
        assert r["split_rounds"] == 2
        assert np.isfinite([r["worker_train_loss"], r["merged_train_loss"]]).all()
        assert "merged_test_loss" not in r  # the MLP normalises with test-batch statistics: 8 examples are refused
        np.testing.assert_allclose(r["merge_cost"], r["merged_train_loss"] - r["worker_train_loss"], rtol=1e-5,
                                   atol=1e-6)
    assert summary["merged_train_loss"] == records[-1]["merged_train_loss"]


def test_a_run_stopped_between_two_records_averages_the_same_rounds(tmp_path, monkeypatch):
    """A SIGTERM after round 1 of a 4-round window checkpoints and stops; resumed, the record at round 4 averages
    rounds 1-4 (`split_rounds` 4), equal to the uninterrupted run's to the bit: the window is in the checkpoint."""
    import os
    import signal

    from istjax.launch import driver
    from istjax.launch import run as run_lib

    c = _driver_config(eval_every=4, loss_split_every=1)
    driver.train_and_evaluate(c, tmp_path / "whole")

    add, rounds = run_lib._SplitWindow.add, []

    def add_then_stop(self, metrics, due):  # a real SIGTERM to this process after the first round
        add(self, metrics, due)
        rounds.append(1)
        if len(rounds) == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(run_lib._SplitWindow, "add", add_then_stop)
    with pytest.raises(driver.Interrupted):
        driver.train_and_evaluate(c, tmp_path / "stopped")
    assert [p.name for p in (tmp_path / "stopped" / "checkpoints").iterdir()] == ["1"]
    driver.train_and_evaluate(c, tmp_path / "stopped")

    def last(run):
        return json.loads((tmp_path / run / "metrics.jsonl").read_text().splitlines()[-1])

    whole, resumed = last("whole"), last("stopped")
    assert whole["split_rounds"] == resumed["split_rounds"] == 4
    for k in ("worker_train_loss", "merged_train_loss", "merge_cost"):
        assert resumed[k] == whole[k], k
