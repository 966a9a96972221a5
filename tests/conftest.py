"""Test configuration: strict JAX (no silent rank or dtype promotion) and 4 fake CPU devices."""

import contextlib
import os

# Tests compile far more than they compute. LLVM at -O0 changes no result a test reads and nearly halves a
# compile-bound test (tests/test_resist.py's round equivalence: 116 s instead of 211 s here); every subprocess a
# test starts (mpiexec ranks, the CLI) passes it on too.
FAST_COMPILE = "--xla_backend_optimization_level=0"

# Must happen before jax is imported anywhere: multi-worker code is tested on fake CPU devices.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
if FAST_COMPILE not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " " + FAST_COMPILE
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Real data sets for tests (Cora, Citeseer, spoken digits) sit in ../shared/data beside the repository; loaders read
# $ISTJAX_DATA_DIR. Tests that need a file skip with its path named when it is absent.
_SHARED_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data")
if os.path.isdir(_SHARED_DATA):
    os.environ.setdefault("ISTJAX_DATA_DIR", os.path.normpath(_SHARED_DATA))

# MPI ranks launched by tests outnumber this machine's cores (mpiexec -n 3 on 2 cores): a rank waiting in a collective
# busy-polls, taking the core the rank it waits for needs. Let an idle poll sleep 1 us (MPICH's progress throttle):
# tests/mpi/sharded_families.py under -n 2 took 139 s instead of 231 s, under -n 3 216 s instead of 285 s.
os.environ.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")


@contextlib.contextmanager
def persistent_compilation_cache(folder):
    """JAX's persistent compilation cache in ``folder`` (every program, however quick to compile), restored after:
    runs that differ only in their workdir (a run and its resume) compile identical programs, which the second loads.
    The cache is set up once per process, so it is reset on entering and on leaving."""
    from jax.experimental.compilation_cache import compilation_cache as cc

    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes")
    old = {n: getattr(jax.config, n) for n in names}
    cc.reset_cache()
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    try:
        yield
    finally:
        for n, v in old.items():
            jax.config.update(n, v)
        cc.reset_cache()


def cached_compiles_env(env: dict, folder=None) -> dict:
    """``env`` for a child process (the CLI) with the same cache in ``folder`` (None: ``env`` as it is): one child's
    compiles serve the next (give each concurrent process, an MPI rank, its own folder: entries are not written
    atomically)."""
    if folder is None:
        return env
    return dict(env, JAX_COMPILATION_CACHE_DIR=str(folder), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")


@pytest.fixture(scope="module")
def compilation_cache(tmp_path_factory):
    """`persistent_compilation_cache` for a test module's runs (a run and its resume load each other's programs)."""
    with persistent_compilation_cache(tmp_path_factory.mktemp("jax_cache")):
        yield


class OneRankOf:
    """Rank 0 of a ``ranks``-process MPI world, as far as building the MPI runtime asks before it refuses (its size
    and rank): a refusal made while the runtime is built is tested without mpiexec."""

    def __init__(self, ranks: int = 2):
        self.ranks = ranks

    def Get_size(self):
        return self.ranks

    def Get_rank(self):
        return 0


def final_state(workdir):
    """``(state, step)``: the newest checkpoint of the run in ``workdir``, restored in its algorithm's layout."""
    from istjax.launch import config as config_lib
    from istjax.launch.checkpoint import Checkpointer

    algorithm = config_lib.build(config_lib.load_run_config(workdir)).algorithm
    like = jax.jit(algorithm.init)(jax.random.key(0))
    with Checkpointer(workdir / "checkpoints", enabled=False) as ckpt:
        state, _, step = ckpt.restore_latest(like)
    return state, step


def resumed_equals_uninterrupted(train, root, *flags, rounds: int = 4):
    """``train(workdir, *flags)`` (the CLI, returning its exit code) for ``rounds`` rounds into ``root / "full"``, and
    for half of them into ``root / "split"``, then resumed there to ``rounds``: both final checkpoints equal bit for
    bit, parameters and optimizer state (what an algorithm keeps between rounds). Returns the final state."""
    assert train(root / "full", *flags, f"--config.num_rounds={rounds}") == 0
    assert train(root / "split", *flags, f"--config.num_rounds={rounds // 2}") == 0
    assert train(root / "split", *flags, f"--config.num_rounds={rounds}", "--resume") == 0
    (a, step_a), (b, step_b) = final_state(root / "full"), final_state(root / "split")
    assert step_a == step_b == rounds
    leaves_a, leaves_b = jax.tree.leaves((a.params, a.opt_state)), jax.tree.leaves((b.params, b.opt_state))
    assert len(leaves_a) == len(leaves_b) > 0
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    return a
