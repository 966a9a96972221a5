"""Run under ``mpiexec -n N`` (across namespaces, by tests/test_network.py): two rounds of IST on the MPI runtime.

Prints, on every rank, one line ``BYTES rank=R sent=S received=V`` with this rank's bytes handed to MPI over the two
rounds (the runtime's ``measured_bytes_*`` per worker, times its workers), then rank 0 prints ``DONE``.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

import istjax
from istjax.models.mlp import MLP
from istjax.runtimes import mpi as M

N, ME = M.size(), M.rank()
W, K, B, D, C, H = N, 2, 16, 64, 5, int(sys.argv[1]) if len(sys.argv) > 1 else 1024
task = istjax.classifier(MLP(hidden=(H,), num_classes=C), jnp.zeros((B, D)), MLP.rules(1), num_classes=C)
alg = istjax.ist(task, optax.sgd(0.1), num_workers=W, local_steps=K, backend="mpi")
state = alg.init(jax.random.key(0))
sent = received = 0
for r in range(2):
    rng = np.random.default_rng(r)
    batches = {"x": jnp.asarray(rng.normal(size=(W, K, B, D)), jnp.float32),
               "y": jnp.asarray(rng.integers(0, C, size=(W, K, B)), jnp.int32)}
    state, metrics = alg.round(state, batches)
    lanes = W // N
    sent += int(metrics["measured_bytes_sent"]) * lanes
    received += int(metrics["measured_bytes_received"]) * lanes
print(f"BYTES rank={ME} sent={sent} received={received}", flush=True)
if ME == 0:
    print("DONE", flush=True)
