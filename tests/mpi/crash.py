"""Run under ``mpiexec -n 2``: rank 1 fails after one round; the job must end non-zero, naming rank 1.

``python crash.py exit``: rank 1 calls ``os._exit(3)`` (mpiexec sees a dead process).
``python crash.py kill``: rank 1 is SIGKILLed (mpiexec reports ``RANK 1 ... KILLED BY SIGNAL: 9``).
``python crash.py raise``: rank 1 raises; `istjax.runtimes.abort_on_error` (installed by ``mpi_runtime``)
prints the rank and calls MPI_Abort. Rank 0 meanwhile blocks in the next round's allreduce.
"""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

import istjax
from istjax.runtimes import mpi as M
from istjax.models.mlp import MLP

W, K, B, D = 2, 1, 4, 8
task = istjax.classifier(MLP(hidden=(8,), num_classes=3), jnp.zeros((B, D)), MLP.rules(1), num_classes=3)
rt = M.mpi_runtime(istjax.local_sgd(task, optax.sgd(0.1), num_workers=W, local_steps=K), mode="parameter_server")
batches = {"x": jnp.asarray(np.random.default_rng(0).normal(size=(W, K, B, D)), jnp.float32),
           "y": jnp.zeros((W, K, B), jnp.int32)}
state = rt.init(jax.random.key(0))
for r in range(1000):
    state, _ = rt.round(state, batches)
    if r == 1 and rt.rank == 1:
        if sys.argv[1] == "kill":
            os.kill(os.getpid(), 9)
        if sys.argv[1] == "exit":
            print("rank 1: exiting with os._exit(3)", flush=True)
            os._exit(3)
        raise RuntimeError("injected failure")
print("UNREACHABLE: the job should have ended", flush=True)
