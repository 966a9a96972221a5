"""Codistillation (issue 59): the distillation term and its gradient by hand, weight 0 == independent groups, the
fast round against the plain loop, the teachers' staleness, simulate == devices, resume bit for bit from the command
line, and its refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import OneRankOf, resumed_equals_uninterrupted
from test_dynamic import _batches, _close, _task  # the BatchNorm MLP both protocols' tests train

import istjax
from istjax.algorithms.codistill import distillation_term
from istjax.algorithms.reference import reference_round
from istjax.launch import cli
from istjax.launch import config as config_lib


def _codistill(w=4, **kw):
    return istjax.codistillation(_task(), optax.sgd(0.2), num_workers=w, local_steps=3, **kw)


def test_the_distillation_term_and_its_gradient_by_hand():
    """Two classes, one example: student logits (0, ln 3) predict (1/4, 3/4); the teacher says (1/2, 1/2).
    KL = 1/2 ln(2) + 1/2 ln(2/3) = 1/2 ln(4/3); its gradient in the logits is student - teacher = (-1/4, 1/4)."""
    logits, teacher = jnp.asarray([[0.0, np.log(3.0)]]), jnp.asarray([[0.5, 0.5]])
    np.testing.assert_allclose(float(distillation_term(logits, teacher)), 0.5 * np.log(4 / 3), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.grad(distillation_term)(logits, teacher)), [[-0.25, 0.25]], atol=1e-6)
    assert float(distillation_term(logits, jax.nn.softmax(logits))) == pytest.approx(0.0, abs=1e-7)


def test_weight_zero_is_independent_groups():
    """Without the term each group is local SGD over its own replicas, from its own initialisation."""
    alg = _codistill(distill_weight=0.0)
    local = istjax.local_sgd(_task(), optax.sgd(0.2), num_workers=2, local_steps=3)
    state = alg.init(jax.random.key(0))
    start = local.init(jax.random.key(0))
    groups = [start._replace(params=jax.tree.map(lambda v: v[g], state.opt_state.groups[0]),
                             model_state=jax.tree.map(lambda v: v[g], state.opt_state.groups[1])) for g in range(2)]
    for r in range(3):
        state, _ = alg.round(state, _batches(r, 4))
        groups = [local.round(groups[g], jax.tree.map(lambda b: b[2 * g:2 * g + 2], _batches(r, 4)))[0]
                  for g in range(2)]
    for g in range(2):
        _close(jax.tree.map(lambda v: v[g], state.opt_state.groups), (groups[g].params, groups[g].model_state))
    _close((state.params, state.model_state), (groups[0].params, groups[0].model_state))  # group 0 is evaluated


@pytest.mark.parametrize("w,groups,every,burn_in", [(4, 2, 2, 1), (3, 3, 1, 0)])
def test_rounds_equal_the_plain_loop(w, groups, every, burn_in):
    alg = _codistill(w, groups=groups, distill_weight=0.7, teacher_every=every, burn_in=burn_in)
    fast = slow = alg.init(jax.random.key(0))
    for r in range(4):
        fast, metrics = alg.round(fast, _batches(r, w))
        slow = reference_round(alg, slow, _batches(r, w))
        _close((fast.params, fast.model_state, fast.opt_state), (slow.params, slow.model_state, slow.opt_state))
    assert float(metrics["train_distill"]) > 0


def test_the_teachers_are_copies_taken_every_n_rounds():
    """teacher_every = 3: after rounds 1..6 the teachers were taken at 0, 0, 3, 3, 3, 6 rounds, each the groups'
    models of that round, and a worker receives the other group's model on an exchange round only."""
    alg = _codistill(teacher_every=3, distill_weight=0.5)
    state, taken, models = alg.init(jax.random.key(0)), [], {0: None}
    models[0] = state.opt_state.groups
    for r in range(6):
        state, metrics = alg.round(state, _batches(r, 4))
        models[r + 1] = state.opt_state.groups
        taken.append(int(state.opt_state.taken))
        _close(state.opt_state.teachers, models[taken[-1]], atol=0)
        model_bytes = float(np.asarray(metrics["measured_bytes_sent"])[1])  # a second replica: its group's mean
        expected = model_bytes * (2 if (r + 1) % 3 == 0 else 1)  # and, on an exchange, the other group's model
        np.testing.assert_array_equal(np.asarray(metrics["measured_bytes_received"]), expected)
    assert taken == [0, 0, 3, 3, 3, 6]


def test_devices_equal_simulate():
    sim, dev = _codistill(distill_weight=0.5), _codistill(distill_weight=0.5, backend="devices")
    a = b = sim.init(jax.random.key(1))
    for r in range(2):
        a, _ = sim.round(a, _batches(r, 4))
        b, _ = dev.round(b, _batches(r, 4))
    _close((a.params, a.opt_state), (b.params, b.opt_state))


@pytest.mark.parametrize("options,field", [({"groups": 3}, "groups"), ({"groups": 1}, "groups"),
                                           ({"distill_weight": -1.0}, "distill_weight"),
                                           ({"teacher_every": 0}, "teacher_every"), ({"burn_in": -1}, "burn_in")])
def test_bad_options_are_refused_naming_them(options, field):
    with pytest.raises(istjax.ArgError, match=field):
        _codistill(**options)


def test_a_task_without_predictions_is_refused():
    from istjax.theory import consensus, random_quadratic

    task = consensus.quadratic_task(random_quadratic(0, dim=2, num_workers=2))
    with pytest.raises(istjax.ArgError, match="istjax.classifier"):
        istjax.codistillation(task, optax.sgd(0.1), num_workers=2, local_steps=1)


def test_mpi_refuses_groups_that_split_a_process_naming_the_counts_that_fit():
    with pytest.raises(istjax.ArgError) as e:
        _codistill(w=6, groups=2, backend="mpi", comm=OneRankOf(3))
    assert "groups" in str(e.value) and "divide the process count 3" in str(e.value) and "2, 4" in str(e.value)


@pytest.mark.parametrize("n,w,groups,resume", [pytest.param(2, 4, 2, True, marks=pytest.mark.slow), (3, 3, 3, False),
                                               pytest.param(4, 4, 2, False, marks=pytest.mark.slow)])
def test_mpi_equals_simulate_and_resumes_bit_identical(tmp_path, n, w, groups, resume):
    """mpiexec -n 2 (W = 4, G = 2: a group a rank), -n 3 (W = G = 3: one replica a group, no allreduce) and -n 4
    (W = 4, G = 2: a group across two ranks): every group's model, the teachers and the global fields equal
    simulate's over 4 rounds, two of them exchanges; the bytes handed to MPI as counted (at one worker a rank,
    simulate's per worker); -n 2: SIGTERM after round 2 and the resumed run == one never stopped."""
    from test_mpi import MPIEXEC, _mpiexec

    if not MPIEXEC.exists():
        pytest.skip("mpiexec not installed (pip install mpich)")
    out = _mpiexec(n, "codistill.py", str(w), str(groups), *((str(tmp_path),) if resume else ()), timeout=600)
    assert out.returncode == 0 and "ALL OK" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"OK codistillation W={w} G={groups}: mpi == simulate after 4 rounds" in out.stdout
    assert ("bit for bit" in out.stdout) == resume


TINY = ["--config.model.hidden=(16,)", "--config.progress=False", "--config.eval_train_examples=256",
        "--config.algorithm.name=codistillation", "--config.num_workers=4", "--config.local_steps=4",
        "--config.algorithm.teacher_every=2", "--config.algorithm.burn_in=1", "--config.eval_every=2",
        "--config.checkpoint_every=2"]


def test_train_from_the_command_line_resumes_bit_identical(tmp_path, compilation_cache):
    resumed_equals_uninterrupted(
        lambda workdir, *flags: cli.main(["istjax", "train", *TINY, *flags, f"--workdir={workdir}"]), tmp_path)


def test_help_lists_the_protocols_and_their_fields(capsys):
    assert cli.main(["istjax", "train", "--help"]) == 0
    out = capsys.readouterr().out
    for text in ("codistillation", "dynamic_averaging", "admm", "algorithm.groups = 2", "algorithm.distill_weight",
                 "algorithm.teacher_every", "algorithm.burn_in", "algorithm.delta = 0.1"):
        assert text in out, text


def test_churn_between_runs_and_between_groups(tmp_path, compilation_cache):
    """Prediction churn, by hand on arrays; between a run and itself 0; between two runs of different seeds and
    between a codistillation run's groups, a fraction of the test set equal to a count of its disagreements."""
    from istjax.launch.churn import churn, disagreement, group_churn
    from istjax.launch.restore import restore_run

    assert disagreement(np.array([0, 1, 2, 2]), np.array([0, 2, 2, 1])) == 0.5
    with pytest.raises(ValueError, match="shapes"):
        disagreement(np.zeros(3), np.zeros(4))
    flags = ["--config.num_rounds=2", "--config.eval_every=2", "--config.checkpoint_every=2"]
    for name, seed in (("a", 0), ("b", 1)):
        workdir = f"--workdir={tmp_path / name}"
        assert cli.main(["istjax", "train", *TINY, *flags, f"--config.seed={seed}", workdir]) == 0
    assert churn(tmp_path / "a", tmp_path / "a") == 0.0
    between = churn(tmp_path / "a", tmp_path / "b")
    _, experiment, _, _ = restore_run(tmp_path / "a")
    n = len(experiment.dataset.test_y)
    assert 0 < between < 1 and abs(between * n - round(between * n)) < 1e-9
    groups = group_churn(tmp_path / "a")
    assert set(groups) == {"0-1", "mean"} and 0 <= groups["mean"] < 1 and groups["mean"] == groups["0-1"]
    config = ["istjax", "train", "--config.progress=False", "--config.num_rounds=1", f"--workdir={tmp_path / 'ist'}"]
    assert cli.main(config) == 0
    with pytest.raises(config_lib.ConfigError, match="codistillation"):
        group_churn(tmp_path / "ist")
