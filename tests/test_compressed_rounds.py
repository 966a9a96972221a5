"""Compressed exchanges as an option of local SGD and DiLoCo (issue 60, item 1): exact where the compressor sends
everything, the compressed mean of the workers' changes otherwise, devices == simulate, bytes at the compressed
size, the compressor's state checkpointed and resumed bit for bit, and what is not built refused."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
import istjax.launch.config as config_lib
import istjax.launch.driver as driver
from istjax.algorithms.reference import reference_round
from istjax.algorithms.replicated import Compressed
from istjax.core import compress
from istjax.core.comm import tree_bytes
from istjax.models import MLP
from test_train import assert_states_equal, final_state, tiny_config

W, K, D, C = 4, 2, 6, 3


def _task():
    return istjax.classifier(MLP(hidden=(16,), num_classes=C), jnp.ones((8, D)), num_classes=C)


def _batches(r):
    kx, ky = jax.random.split(jax.random.key(100 + r))
    return {"x": jax.random.normal(kx, (W, K, 8, D)), "y": jax.random.randint(ky, (W, K, 8), 0, C)}


def _rounds(alg, n=3):
    state = alg.init(jax.random.key(0))
    for r in range(n):
        state, _ = alg.round(state, _batches(r))
    return state


def _close(a, b, **tol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), **(tol or {"rtol": 1e-6, "atol": 1e-7}))


@pytest.mark.parametrize("name", ["local_sgd", "diloco"])
@pytest.mark.parametrize("options", [{"compression": "top_k", "compression_fraction": 1.0},
                                     {"compression": "powersgd", "compression_start": 5}])
def test_a_compressor_that_sends_everything_is_the_plain_exchange(name, options):
    """top-k of every entry, or PowerSGD in its uncompressed start: the same models as no compression."""
    plain = _rounds(getattr(istjax, name)(_task(), optax.sgd(0.1), num_workers=W, local_steps=K))
    squeezed = _rounds(getattr(istjax, name)(_task(), optax.sgd(0.1), num_workers=W, local_steps=K, **options))
    _close(plain.params, squeezed.params)
    assert isinstance(squeezed.opt_state, Compressed)
    for r in jax.tree.leaves(squeezed.opt_state.rows.residual if options["compression"] == "powersgd"
                             else squeezed.opt_state.rows):
        np.testing.assert_array_equal(r, 0.0)


def test_compressed_local_sgd_adds_the_compressed_mean_change_and_keeps_the_residuals():
    """One round by hand: the workers trained as local SGD's (the same key and batches), their changes against the
    global model through PowerSGD's exchange (checked by hand in test_compress.py), added to the global model."""
    task = _task()
    alg = istjax.local_sgd(task, optax.sgd(0.1), num_workers=W, local_steps=K, compression="powersgd",
                           compression_rank=1)
    state = alg.init(jax.random.key(0))
    workers, plan = alg.distribute(state)
    trained, _ = jax.vmap(alg.local, axis_name="workers")(workers, _batches(0))
    change = jax.tree.map(lambda t, p: t - p[None], trained.params, state.params)
    approx, rows = compress.stacked_exchange(compress.powersgd(1), change, state.opt_state.rows)
    new, _ = alg.round(state, _batches(0))
    _close(new.params, jax.tree.map(lambda p, a: p + a, state.params, approx), rtol=1e-5, atol=1e-6)
    _close(new.opt_state.rows, rows, rtol=1e-5, atol=1e-6)
    assert not np.allclose(new.params["dense_0"]["kernel"], jnp.mean(trained.params["dense_0"]["kernel"], 0),
                           atol=1e-4)  # compressed: not the plain mean
    _close(new.params, reference_round(alg, state, _batches(0)).params, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("options", [{"compression": "powersgd", "compression_rank": 2},
                                     {"compression": "top_k", "compression_fraction": 0.1}])
def test_devices_equal_simulate(options):
    sim = istjax.local_sgd(_task(), optax.sgd(0.1), num_workers=W, local_steps=K, **options)
    dev = istjax.local_sgd(_task(), optax.sgd(0.1), num_workers=W, local_steps=K, backend="devices", **options)
    a, b = _rounds(sim, 2), _rounds(dev, 2)
    _close(a.params, b.params, rtol=1e-5, atol=1e-6)
    _close(a.opt_state, b.opt_state, rtol=1e-5, atol=1e-6)


def test_bytes_are_the_compressed_sizes():
    task = _task()
    params = jax.eval_shape(task.init, jax.random.key(0))
    for options, squeeze in [({"compression": "powersgd", "compression_rank": 2}, compress.powersgd(2)),
                             ({"compression": "top_k", "compression_fraction": 0.1}, compress.top_k(0.1, W))]:
        alg = istjax.diloco(task, optax.sgd(0.1), num_workers=W, local_steps=K, **options)
        assert alg.comm.sent == squeeze.sent_bytes(params) < tree_bytes(params)
        assert alg.comm.received == squeeze.received_bytes(params)
    # dense_0's kernel [6, 16] at rank 2: (6 + 16) * 2 floats in place of 96; dense_out's [16, 3] rank 2 would
    # send 38 of 48; the two BatchNorm vectors whole.
    assert compress.powersgd(2).sent_bytes(params) == 4 * ((6 + 16) * 2 + (16 + 3) * 2 + 16 + 16)


def test_what_is_not_built_is_refused():
    task = _task()
    with pytest.raises(ValueError, match="compression='zip'"):
        istjax.local_sgd(task, optax.sgd(0.1), num_workers=W, local_steps=K, compression="zip")
    with pytest.raises(ValueError, match="compression_rank=0"):
        istjax.local_sgd(task, optax.sgd(0.1), num_workers=W, local_steps=K, compression="powersgd",
                         compression_rank=0)
    with pytest.raises(ValueError, match="bfloat16 exchange with compression"):
        istjax.diloco(task, optax.sgd(0.1), num_workers=W, local_steps=K, compression="top_k",
                      exchange_dtype="bfloat16")
    for field, value in [("algorithm.compression", "zip"), ("algorithm.compression_fraction", 2.0)]:
        with pytest.raises(config_lib.ConfigError, match=field.split(".")[1]):
            config_lib.build(tiny_config(**{"algorithm.name": "local_sgd", "algorithm.compression": "top_k",
                                            field: value}))
    with pytest.raises(config_lib.ConfigError, match="algorithm.compression"):  # ist does not read it
        config_lib.validate(tiny_config(**{"algorithm.compression": "powersgd"}))


def test_compressed_diloco_from_a_config_resumes_bit_identically(tmp_path):
    extra = {"algorithm.name": "diloco", "algorithm.compression": "powersgd", "algorithm.compression_rank": 1}
    full = tiny_config(**extra)
    driver.train_and_evaluate(full, tmp_path / "full")
    driver.train_and_evaluate(tiny_config(num_rounds=2, **extra), tmp_path / "split")
    driver.train_and_evaluate(full, tmp_path / "split", resume=True)
    (a, step_a), (b, step_b) = final_state(full, tmp_path / "full"), final_state(full, tmp_path / "split")
    assert step_a == step_b == 4
    assert isinstance(a.opt_state, Compressed) and jax.tree.leaves(a.opt_state.rows.residual)
    assert_states_equal(a, b)


def _equal_to_the_reference(alg, rounds):
    """``rounds`` rounds of ``alg``, each from the fast round's state, equal to the reference loop's (models, residuals
    and factors); the last state."""
    state = alg.init(jax.random.key(0))
    for r in range(rounds):
        fast, _ = alg.round(state, _batches(r))
        ref = reference_round(alg, state, _batches(r))
        _close(fast.params, ref.params, rtol=1e-4, atol=1e-6)
        _close(fast.opt_state, ref.opt_state, rtol=1e-4, atol=1e-5)
        state = fast
    return state


@pytest.mark.parametrize("name", ["local_sgd", "diloco"])
@pytest.mark.parametrize("options", [{"compression": "powersgd", "compression_rank": 2, "compression_start": 1},
                                     {"compression": "top_k", "compression_fraction": 0.05}])
def test_compressed_rounds_equal_the_reference_loop(name, options):
    """Three rounds (PowerSGD's first uncompressed), each from the fast round's state: the reference loop's plain
    numpy compressors give the same models, residuals and factors."""
    _equal_to_the_reference(getattr(istjax, name)(_task(), optax.sgd(0.1), num_workers=W, local_steps=K,
                                                  **options), 3)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("n,w,resume", [(2, 2, True), (3, 3, False), (2, 4, False)])
def test_mpi_equals_simulate_moves_the_compressed_bytes_and_resumes_bit_identical(tmp_path, n, w, resume):
    """mpiexec -n 2 (W = 2 and 4) and -n 3 (W = 3): PowerSGD (local SGD; DiLoCo after an uncompressed first
    exchange) and top-k, each rank holding its own workers' compressor rows: parameters, model state and every row
    equal simulate's after 3 rounds; at one worker a rank the bytes handed to MPI per worker == analytic (the
    compressed sizes); -n 2: SIGTERM after round 2 and the resumed run == one never stopped."""
    from test_mpi import MPIEXEC, _mpiexec

    if not MPIEXEC.exists():
        pytest.skip("mpiexec not installed (pip install mpich)")
    out = _mpiexec(n, "compressed.py", str(w), *((str(tmp_path),) if resume else ()), timeout=600)
    assert out.returncode == 0 and "ALL OK" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
    for case in ("local_sgd powersgd", "diloco powersgd start 1", "local_sgd top_k"):
        assert f"OK {case}: mpi == simulate after 3 rounds, compressor rows included; each rank holds {w // n} of " \
               f"{w}" in out.stdout, case
    assert ("bit for bit" in out.stdout) == resume


@pytest.mark.parametrize("options", [{"compression": "powersgd", "compression_rank": 1, "compression_start": 2},
                                     {"compression": "top_k", "compression_fraction": 0.05}])
def test_data_parallel_with_compressed_gradients_equals_the_reference_loop(options):
    """Every step's gradients through the compressor (PowerSGD's first 2 exchanges uncompressed), each worker's
    row carried from step to step: two rounds equal the reference loop's, and the bytes are K compressed gradients."""
    task = _task()
    alg = istjax.data_parallel(task, optax.sgd(0.1), num_workers=W, local_steps=K, **options)
    state = _equal_to_the_reference(alg, 2)
    if options["compression"] == "powersgd":
        np.testing.assert_array_equal(state.opt_state.rows.exchanges, 2 * K)  # one exchange a step, every worker
    params = jax.eval_shape(task.init, jax.random.key(0))
    assert alg.comm.sent == K * compress.compressor(options["compression"], num_workers=W, rank=1,
                                                    fraction=0.05).sent_bytes(params)
    plain = istjax.data_parallel(task, optax.sgd(0.1), num_workers=W, local_steps=K)
    assert not np.allclose(jax.tree.leaves(_rounds(plain, 2).params)[0], jax.tree.leaves(state.params)[0])
    dev = istjax.data_parallel(task, optax.sgd(0.1), num_workers=W, local_steps=K, backend="devices", **options)
    _close(_rounds(dev, 2).params, state.params, rtol=1e-5, atol=1e-6)  # devices == simulate


def test_mpi_refuses_compressed_gradients_clearly():
    from conftest import OneRankOf

    from istjax.runtimes import mpi as M

    alg = istjax.data_parallel(_task(), optax.sgd(0.1), num_workers=W, local_steps=K, compression="powersgd")
    with pytest.raises(ValueError, match="no compressed gradients exchange"):
        M.mpi_runtime(alg, comm=OneRankOf(2))
