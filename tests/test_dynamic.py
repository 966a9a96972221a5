"""Dynamic model averaging (issue 59): delta = 0 is periodic averaging, delta = inf moves nothing but flags, the
coordinator's balancing on hand-built cases, the fast round against the plain loop (models, transfers counted),
simulate == devices, bytes counted into the run's record, resume bit for bit, and its refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import OneRankOf, resumed_equals_uninterrupted

import istjax
from istjax.algorithms.dynamic import FLAG_BYTES, balance
from istjax.algorithms.reference import reference_round
from istjax.core.comm import tree_bytes
from istjax.launch import cli
from istjax.launch.metrics import read_metrics
from istjax.models import MLP


def _task():
    model = MLP(hidden=(8,), num_classes=3, batch_norm=True)
    return istjax.classifier(model, jnp.ones((4, 6)), MLP.rules(1), num_classes=3)


def _batches(seed, w, k=3):
    kx, ky = jax.random.split(jax.random.key(seed))
    return {"x": jax.random.normal(kx, (w, k, 5, 6)), "y": jax.random.randint(ky, (w, k, 5), 0, 3)}


def _close(a, b, atol=1e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=atol)


def _dynamic(delta, w=4, **kw):
    return istjax.dynamic_averaging(_task(), optax.sgd(0.2), num_workers=w, local_steps=3, delta=delta, **kw)


def _model_bytes():
    task = _task()
    key = jax.random.key(0)
    return tree_bytes((jax.eval_shape(task.init, key), jax.eval_shape(task.init_state, key)))


def test_delta_zero_is_periodic_averaging():
    """Every worker violates delta = 0 after it trains, so all average every round: local SGD (plain SGD has no
    optimizer state to tell them apart), each worker sending its model and its flag."""
    dyn, local = _dynamic(0.0), istjax.local_sgd(_task(), optax.sgd(0.2), num_workers=4, local_steps=3)
    a, s = dyn.init(jax.random.key(0)), local.init(jax.random.key(0))
    for r in range(3):
        a, metrics = dyn.round(a, _batches(r, 4))
        s, _ = local.round(s, _batches(r, 4))
        assert float(metrics["full_sync"]) == 1 and float(metrics["synced_workers"]) == 4
    _close((a.params, a.model_state), (s.params, s.model_state), atol=1e-6)
    np.testing.assert_array_equal(np.asarray(metrics["measured_bytes_sent"]), FLAG_BYTES + _model_bytes())
    np.testing.assert_array_equal(np.asarray(a.opt_state.transfers), 3)


def test_delta_infinite_moves_nothing_but_flags():
    """No worker ever violates: each trains alone (== its own plain run), and a round moves one flag a worker."""
    dyn = _dynamic(float("inf"))
    state = dyn.init(jax.random.key(0))
    alone = istjax.local_sgd(_task(), optax.sgd(0.2), num_workers=1, local_steps=3)
    for r in range(3):
        state, metrics = dyn.round(state, _batches(r, 4))
        np.testing.assert_array_equal(np.asarray(metrics["measured_bytes_sent"]), FLAG_BYTES)
        np.testing.assert_array_equal(np.asarray(metrics["measured_bytes_received"]), 0)
        assert float(metrics["model_transfers"]) == 0
    for w in range(4):
        one = alone.init(jax.random.key(0))
        for r in range(3):
            one, _ = alone.round(one, jax.tree.map(lambda b: b[w:w + 1], _batches(r, 4)))
        _close(jax.tree.map(lambda v: v[w], state.opt_state.workers.params), one.params)
    first = jax.tree.leaves(state.opt_state.workers.params)[0]
    assert len({float(jnp.sum(v)) for v in first}) == 4  # the workers are apart


def _order(key, w, violators):
    return [int(i) for i in np.asarray(jax.random.permutation(key, w)) if i not in violators]


def test_balancing_by_hand():
    """Scalars ``x_i`` against r = 0, delta = 1. Sixteen workers: worker 0 at 5 violates (25 > 1); alone its average
    is 5 (25 > 1), with the next of the random order (every other worker at -1) 2 (4 > 1), with the next three
    0.5 (0.25 <= 1): those four average and no other moves. Eight workers, the same: the doubling reaches four,
    half of them, so all eight average and r moves. Four workers, worker 0 at 0.5: no violation, nothing moves."""
    key, r = jax.random.key(7), {"x": jnp.zeros(())}
    x16 = {"x": jnp.asarray([5.0] + [-1.0] * 15)}
    got = balance(x16, r, key, 1.0)
    expected = {0, *_order(key, 16, {0})[:3]}
    assert set(np.flatnonzero(np.asarray(got.synced)).tolist()) == expected and not bool(got.full)
    np.testing.assert_array_equal(np.asarray(got.violators), np.arange(16) == 0)
    got = balance({"x": jnp.asarray([5.0] + [-1.0] * 7)}, r, key, 1.0)
    assert np.asarray(got.synced).all() and bool(got.full)
    got = balance({"x": jnp.asarray([0.5, 0.0, 0.2, -0.9])}, r, key, 1.0)
    assert not np.asarray(got.synced).any() and not bool(got.full) and not np.asarray(got.violators).any()


def test_rounds_equal_the_plain_loop_with_partial_syncs_counted_alike():
    """W = 8, delta = 0.6, six rounds: the fast round and the paper's loop (`reference_round`) agree on every
    worker's model and optimizer state and on the transfers counted; the rounds include partial synchronisations."""
    dyn = _dynamic(0.6, w=8)
    fast = slow = dyn.init(jax.random.key(0))
    for r in range(6):
        fast, _ = dyn.round(fast, _batches(r, 8))
        slow = reference_round(dyn, slow, _batches(r, 8))
        _close((fast.params, fast.model_state, fast.opt_state.workers),
               (slow.params, slow.model_state, slow.opt_state.workers))
        np.testing.assert_array_equal(np.asarray(fast.opt_state.transfers), np.asarray(slow.opt_state.transfers))
        np.testing.assert_array_equal(np.asarray(fast.opt_state.syncs), np.asarray(slow.opt_state.syncs))
    partial, full = np.asarray(fast.opt_state.syncs).tolist()
    assert partial >= 1 and full >= 1, (partial, full)


def test_devices_equal_simulate():
    sim, dev = _dynamic(0.6, w=8), _dynamic(0.6, w=8, backend="devices")
    a = b = sim.init(jax.random.key(1))
    for r in range(3):
        a, ma = sim.round(a, _batches(r, 8))
        b, mb = dev.round(b, _batches(r, 8))
    _close((a.params, a.opt_state.workers), (b.params, b.opt_state.workers))
    np.testing.assert_array_equal(np.asarray(ma["measured_bytes_sent"]), np.asarray(mb["measured_bytes_sent"]))


@pytest.mark.parametrize("delta", [-1.0, float("nan"), "0.1", True])
def test_a_bad_delta_is_refused_naming_it(delta):
    with pytest.raises(istjax.ArgError, match="delta"):
        _dynamic(delta)


@pytest.mark.parametrize("n,w,resume", [pytest.param(2, 8, True, marks=pytest.mark.slow), (3, 6, False)])
def test_mpi_equals_simulate_moving_only_the_asked_models_and_resumes_bit_identical(tmp_path, n, w, resume):
    """mpiexec -n 2 (W = 8) and -n 3 (W = 6): each rank holds its own workers; at delta 0, inf and one between
    (partial and full synchronisations), every worker's model and moments, the reference and the counters equal
    simulate's over 4 rounds, and the bytes handed to MPI for each worker equal simulate's count every round; a whole
    restored state runs on; -n 2: SIGTERM after round 2 and the resumed run == one never stopped."""
    from test_mpi import MPIEXEC, _mpiexec

    if not MPIEXEC.exists():
        pytest.skip("mpiexec not installed (pip install mpich)")
    out = _mpiexec(n, "dynamic.py", str(w), *((str(tmp_path),) if resume else ()), timeout=600)
    assert out.returncode == 0 and "ALL OK" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
    for case in ("delta 0", "delta inf", "delta 0.4"):
        assert f"OK {case}: mpi == simulate after 4 rounds" in out.stdout, case
    assert "OK from a whole state" in out.stdout
    assert ("bit for bit" in out.stdout) == resume


def test_the_sharded_mode_is_refused_naming_the_mode_that_runs_it():
    with pytest.raises(istjax.ArgError) as e:
        _dynamic(0.1, backend="mpi", comm=OneRankOf(2), mode="sharded")
    assert "parameter_server" in str(e.value)


TINY = ["--config.model.hidden=(16,)", "--config.progress=False", "--config.eval_train_examples=256",
        "--config.algorithm.name=dynamic_averaging", "--config.num_workers=4", "--config.local_steps=4",
        "--config.eval_every=2", "--config.checkpoint_every=2", "--config.learning_rate=0.05"]


def test_train_from_the_command_line_counts_bytes_and_resumes_bit_identical(tmp_path, compilation_cache):
    """`istjax train --config.algorithm.name=dynamic_averaging` on digits at a delta no round reaches: the record's
    bytes are the flags alone (counted, not local SGD's analytic bytes); a run stopped after round 2 and resumed
    ends bit for bit equal to one never stopped, every worker's model and the counters included."""
    def train(workdir, *flags):
        return cli.main(["istjax", "train", *TINY, *flags, f"--workdir={workdir}"])

    resumed_equals_uninterrupted(train, tmp_path, "--config.algorithm.delta=1e9")
    records = read_metrics(tmp_path / "full")
    assert records[-1]["bytes_total"] == 4 * 4 * FLAG_BYTES  # 4 rounds, 4 workers, a flag each, nothing else
    assert train(tmp_path / "zero", "--config.num_rounds=2", "--config.algorithm.delta=0") == 0
    assert read_metrics(tmp_path / "zero")[-1]["bytes_total"] > 1000 * 4 * 4 * FLAG_BYTES  # models moved
