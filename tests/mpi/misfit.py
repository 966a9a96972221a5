"""Run under ``mpiexec -n 2``: W = 3 does not fit 2 processes; every rank refuses before compiling anything."""

import sys

import jax.numpy as jnp
import optax

import istjax
from istjax.runtimes import mpi as M
from istjax.models.mlp import MLP

task = istjax.classifier(MLP(hidden=(6,), num_classes=3), jnp.zeros((4, 8)), MLP.rules(1), num_classes=3)
try:
    M.mpi_runtime(istjax.local_sgd(task, optax.sgd(0.1), num_workers=3, local_steps=1))
except ValueError as e:
    print(f"rank {M.rank()}: {e}", flush=True)
    sys.exit(2)
