"""Consensus ADMM (issue 59): its rounds against the closed-form iteration on a quadratic, its fixed point against the
minimiser (local SGD's against its biased closed form), the reference loop, simulate == devices, rho = 0 == local SGD,
the duals checkpointed and resumed bit for bit from the command line, and its refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import OneRankOf, resumed_equals_uninterrupted

import istjax
from istjax.algorithms.reference import reference_round
from istjax.launch import cli
from istjax.models import MLP
from istjax.theory import consensus as theory
from istjax.theory import random_quadratic

W, K, STEP, RHO = 3, 5, 0.1, 0.5


def _problem():
    return random_quadratic(0, dim=4, num_workers=W, heterogeneity=1.0)


def _admm(task, **kw):
    return istjax.admm(task, optax.sgd(STEP), num_workers=W, local_steps=K, **({"rho": RHO} | kw))


def _x(state):
    return np.asarray(state.params["x"], np.float64)


def test_three_rounds_on_a_quadratic_equal_the_closed_form_iteration_and_the_reference_loop():
    problem = _problem()
    alg, batches = _admm(theory.quadratic_task(problem)), theory.quadratic_batches(problem, K)
    state = slow = alg.init(jax.random.key(0))
    point = theory.AdmmPoint(np.zeros(problem.dim), np.zeros((W, problem.dim)))
    for _ in range(3):
        state, metrics = alg.round(state, batches)
        slow = reference_round(alg, slow, batches)
        point = theory.admm_round(problem, point, step_size=STEP, local_steps=K, rho=RHO)
        np.testing.assert_allclose(_x(state), point.z, atol=1e-6)
        np.testing.assert_allclose(np.asarray(state.opt_state.duals["x"]), point.u, atol=1e-6)
        np.testing.assert_allclose(_x(slow), point.z, atol=1e-6)
        np.testing.assert_allclose(np.asarray(slow.opt_state.duals["x"]), point.u, atol=1e-6)
    assert float(metrics["train_prox"]) > 0  # the penalty is in the loss the workers descend
    np.testing.assert_allclose(np.sum(point.u, axis=0), 0, atol=1e-12)  # the duals sum to zero after every round


def test_admm_converges_to_the_minimiser_where_local_sgd_stays_biased():
    """On heterogeneous quadratics with K = 5 local steps, local SGD settles at its closed-form fixed point, away
    from the minimiser; ADMM with the same steps settles at the minimiser, its duals at (b_i - L_i x*) / rho."""
    problem = _problem()
    task, batches = theory.quadratic_task(problem), theory.quadratic_batches(problem, K)
    admm, local = _admm(task), istjax.local_sgd(task, optax.sgd(STEP), num_workers=W, local_steps=K)
    a, s = admm.init(jax.random.key(0)), local.init(jax.random.key(0))
    for _ in range(400):
        a, _ = admm.round(a, batches)
        s, _ = local.round(s, batches)
    best, biased = problem.minimiser(), theory.local_sgd_fixed_point(problem, step_size=STEP, local_steps=K)
    fixed = theory.admm_fixed_point(problem, rho=RHO)
    np.testing.assert_allclose(fixed.z, best)
    np.testing.assert_allclose(_x(a), best, atol=1e-5)
    np.testing.assert_allclose(np.asarray(a.opt_state.duals["x"]), fixed.u, atol=1e-4)
    np.testing.assert_allclose(_x(s), biased, atol=1e-5)
    assert np.linalg.norm(biased - best) > 0.05  # the bias is real: far above float32's noise
    assert problem.loss(_x(a)) < problem.loss(_x(s))
    one_step = theory.local_sgd_fixed_point(problem, step_size=STEP, local_steps=1)
    np.testing.assert_allclose(one_step, best, atol=1e-10)  # K = 1 is gradient descent on the mean: no bias


def _mlp_task():
    model = MLP(hidden=(8,), num_classes=3, batch_norm=True)
    return istjax.classifier(model, jnp.ones((4, 6)), MLP.rules(1), num_classes=3)


def _batches(seed=1, w=W, k=2):
    kx, ky = jax.random.split(jax.random.key(seed))
    return {"x": jax.random.normal(kx, (w, k, 5, 6)), "y": jax.random.randint(ky, (w, k, 5), 0, 3)}


def _close(a, b, atol=1e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=atol)


def test_mlp_rounds_equal_the_reference_loop_and_devices_equal_simulate():
    """A BatchNorm MLP, W = 4 on the 4 fake CPU devices (one worker each), two rounds: simulate == devices ==
    the plain loop, parameters, model state and duals."""
    task = _mlp_task()
    sim = istjax.admm(task, optax.sgd(0.2), num_workers=4, local_steps=2, rho=0.3)
    dev = istjax.admm(task, optax.sgd(0.2), num_workers=4, local_steps=2, rho=0.3, backend="devices")
    a = b = c = sim.init(jax.random.key(0))
    for r in range(2):
        batches = _batches(r, w=4)
        a, _ = sim.round(a, batches)
        b, _ = dev.round(b, batches)
        c = reference_round(sim, c, batches)
    for other in (b, c):
        _close((a.params, a.model_state, a.opt_state), (other.params, other.model_state, other.opt_state))
    assert any(np.any(np.asarray(u) != 0) for u in jax.tree.leaves(a.opt_state))


def test_rho_zero_is_local_sgd():
    task = _mlp_task()
    admm = istjax.admm(task, optax.sgd(0.2), num_workers=W, local_steps=2, rho=0.0)
    local = istjax.local_sgd(task, optax.sgd(0.2), num_workers=W, local_steps=2)
    a = s = admm.init(jax.random.key(1))
    s = s._replace(opt_state=())
    for r in range(3):
        a, _ = admm.round(a, _batches(r))
        s, _ = local.round(s, _batches(r))
    _close(a.params, s.params, atol=1e-6)  # the duals sum to zero, so z is the mean of the x_i


def test_bytes_are_local_sgds():
    task = _mlp_task()
    admm = istjax.admm(task, optax.sgd(0.2), num_workers=W, local_steps=2)
    local = istjax.local_sgd(task, optax.sgd(0.2), num_workers=W, local_steps=2)
    assert admm.comm == local.comm


@pytest.mark.parametrize("rho", [-0.1, "1", True, float("nan")])
def test_a_bad_rho_is_refused_naming_it(rho):
    with pytest.raises(istjax.ArgError, match="rho") as e:
        istjax.admm(_mlp_task(), optax.sgd(0.1), num_workers=2, local_steps=1, rho=rho)
    assert "rho" in str(e.value) and ">= 0" in str(e.value)


TINY = ["--config.model.hidden=(16,)", "--config.progress=False", "--config.eval_train_examples=256",
        "--config.algorithm.name=admm", "--config.algorithm.rho=0.05", "--config.num_workers=2",
        "--config.local_steps=4", "--config.eval_every=2", "--config.checkpoint_every=2"]


def test_train_from_the_command_line_resumes_bit_identical(tmp_path, compilation_cache):
    """`istjax train --config.algorithm.name=admm` on digits: a run stopped after round 2 and resumed ends bit for
    bit equal to one never stopped, its duals included (they are in the checkpoint)."""
    final = resumed_equals_uninterrupted(
        lambda workdir, *flags: cli.main(["istjax", "train", *TINY, *flags, f"--workdir={workdir}"]), tmp_path)
    assert all(np.shape(u)[0] == 2 for u in jax.tree.leaves(final.opt_state.duals))
    assert any(np.any(np.asarray(u) != 0) for u in jax.tree.leaves(final.opt_state.duals))


def test_help_lists_admm_and_its_rho(capsys):
    assert cli.main(["istjax", "train", "--help"]) == 0
    out = capsys.readouterr().out
    assert "admm" in out and "algorithm.rho = 0.1" in out


def test_mpi_sharded_mode_is_refused_naming_the_parameter_server_mode():
    with pytest.raises(istjax.ArgError) as e:
        istjax.admm(_mlp_task(), optax.sgd(0.1), num_workers=2, local_steps=1, backend="mpi", mode="sharded",
                    comm=OneRankOf(2))
    assert "mode='parameter_server'" in str(e.value), str(e.value)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("n,w,resume", [(2, 4, True), (3, 3, False)])
def test_mpi_equals_simulate_keeps_duals_on_their_ranks_and_resumes_bit_identical(tmp_path, n, w, resume):
    """mpiexec -n 2 (W = 4) and -n 3 (W = 3): each rank holds its own workers' duals; parameters, model state and
    every dual equal simulate's after 3 rounds, float32 and a bfloat16 exchange; measured bytes == analytic (local
    SGD's); a whole restored state runs on; -n 2: SIGTERM after round 2 and the resumed run == one never stopped."""
    from test_mpi import MPIEXEC, _mpiexec

    if not MPIEXEC.exists():
        pytest.skip("mpiexec not installed (pip install mpich)")
    out = _mpiexec(n, "consensus.py", str(w), *((str(tmp_path),) if resume else ()), timeout=600)
    assert out.returncode == 0 and "ALL OK" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
    for case in ("admm", "admm exchange bfloat16"):
        assert f"OK {case}: mpi == simulate after 3 rounds, duals included; each rank holds {w // n} of {w}" \
            in out.stdout, case
    assert "OK from a whole state" in out.stdout
    assert ("bit for bit" in out.stdout) == resume


@pytest.mark.parametrize("flags,field,reader", [
    (["--config.algorithm.name=local_sgd", "--config.algorithm.rho=0.5"], "algorithm.rho", "admm"),
    (["--config.algorithm.name=ist", "--config.algorithm.delta=1.0"], "algorithm.delta", "dynamic_averaging"),
    (["--config.algorithm.name=admm", "--config.algorithm.groups=3"], "algorithm.groups", "codistillation"),
    (["--config.algorithm.name=local_sgd", "--config.algorithm.prox_mu=0.1"], "algorithm.prox_mu", "fedavg"),
])
def test_a_field_the_algorithm_does_not_read_is_refused_naming_who_reads_it(tmp_path, capsys, flags, field, reader):
    assert cli.main(["istjax", "train", *flags, f"--workdir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert field in err and "does not read it" in err and f"--config.algorithm.name={reader}" in err, err
    assert not (tmp_path / "config.json").exists()  # refused before anything is written
