#!/usr/bin/env bash
# Creates .venv and installs istjax with everything it needs, including the MPI stack.
# Idempotent: a second run only checks what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
stamp="$VENV/.istjax-installed"
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ] && [ "$stamp" -nt scripts/setup_env.sh ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install --quiet --upgrade pip
# The package and its extras (jax on CPU, flax, optax, orbax, tfds, mpich + mpi4py, tests).
$PIP install --quiet -e ".[data,mpi,test]"
# mpi4jax builds from source: mpicc from the mpich wheel must be on PATH, the build must not pull another jax,
# and CUDA_PATH must name an existing folder (an empty one builds the CPU bridge only).
if ! "$VENV/bin/python" -c "import mpi4jax" 2>/dev/null; then
  $PIP install --quiet "nanobind" "setuptools>=82" "cython" "wheel"
  empty_cuda="$(pwd)/$VENV/no-cuda"
  mkdir -p "$empty_cuda"
  PATH="$(pwd)/$VENV/bin:$PATH" CUDA_PATH="$empty_cuda" MPI4JAX_BUILD_CUDA=false \
    $PIP install --quiet --no-build-isolation --no-cache-dir "mpi4jax>=0.9"
fi
"$VENV/bin/python" -c "import jax, flax, optax, orbax.checkpoint, mpi4py, mpi4jax; print('istjax env ok: jax', jax.__version__)"
touch "$stamp"
