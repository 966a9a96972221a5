"""Test configuration: strict JAX (no silent rank or dtype promotion) and 4 fake CPU devices."""

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

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")
