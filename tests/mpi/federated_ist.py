"""Run under ``mpiexec -n N`` (``python federated_ist.py M [S]``): IST on sampled clients (`istjax.fedist`) on the
MPI parameter server equals simulate.

Clients of unequal sizes (a Dirichlet split of 60 examples over 9 clients), M of them sampled a round in S slots
(default: M rounded up to a multiple of N, the slots past the M clients pads of weight 0), the slots spread over the
N ranks (S / N each; ``-n 2`` with M = 3 gives rank 1 a client and a pad, whose units keep their value): rank 0
draws the partition over the S slots and the clients' weights (``distribute``'s plan), scatters the sub-networks,
every rank trains its clients' padded local steps, and rank 0 merges what it gathers, weighted by the clients'
example counts, then takes the server's step. The plain server, server momentum and a bfloat16 exchange; 3 rounds
each; the parameters equal simulate's (the same S slots), and the measured bytes per client per round equal the
analytic ones (IST's: a client's sub-network each way). The sharded mode is refused (the owners' merge does not
weigh).

Every rank asserts; rank 0 prints ``OK ...`` lines and ``ALL OK``. Driven by tests/test_federated_ist.py.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

import istjax
from istjax.data import Dataset
from istjax.data.client_batches import client_sampler, make_client_batch_fn
from istjax.data.clients import dirichlet
from istjax.models.mlp import MLP
from istjax.runtimes import mpi as M

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

N, ME = M.size(), M.rank()
CLIENTS_PER_ROUND = int(sys.argv[1])
# S, the worker slots: argv[2], or M rounded up to a multiple of N (the slots past the M clients are pads).
SLOTS = int(sys.argv[2]) if len(sys.argv) > 2 else -(-CLIENTS_PER_ROUND // N) * N
D, C, EXAMPLES, NUM_CLIENTS, ROUNDS = 6, 3, 60, 9, 3
TOL = 2e-5
TOL_BF16 = 2.0 ** -6


def say(msg):
    if ME == 0:
        print(msg, flush=True)


rng = np.random.default_rng(0)
x = rng.normal(size=(EXAMPLES, D)).astype(np.float32)
y = rng.integers(0, C, size=EXAMPLES).astype(np.int32)
data = Dataset(name="toy", train_x=x, train_y=y, test_x=x[:8], test_y=y[:8], num_classes=C)
split = dirichlet(y, NUM_CLIENTS, alpha=0.5, seed=1, min_size=2)
sampler = client_sampler(split, clients_per_round=CLIENTS_PER_ROUND, seed=2, slots=SLOTS)
batch_fn = make_client_batch_fn(data, split, sampler, epochs=2, batch_size=3, seed=3)
K = batch_fn.local_steps
# A shared output bias: the leaf every client holds, merged by the clients' weights.
task = istjax.classifier(MLP(hidden=(8,), num_classes=C, use_bias=True), jnp.zeros((2, D)), MLP.rules(1),
                         num_classes=C)

CASES = {
    "fedist": {},
    "fedist server momentum": {"server_momentum": 0.9, "server_learning_rate": 0.7},
    "fedist exchange bfloat16": {"exchange_dtype": "bfloat16"},
}


def make(options):
    return istjax.fedist(task, optax.sgd(0.2), num_workers=SLOTS, local_steps=K, clients=sampler,
                         **options)


def run(alg):
    state = alg.init(jax.random.key(5))
    metrics = None
    for r in range(ROUNDS):
        state, metrics = alg.round(state, batch_fn(r))
    return state, metrics


sizes = [int(s) for s in split.sizes]
say(f"clients {sizes} (n_max {max(sizes)}), {CLIENTS_PER_ROUND} a round in {SLOTS} slots on {N} ranks, K = {K}")
for label, options in CASES.items():
    rt = M.mpi_runtime(make(options), mode="parameter_server")
    state, metrics = run(rt)
    ref, _ = run(make(options))
    tol = TOL_BF16 if "exchange_dtype" in options else TOL
    params = rt.gather_params(state)  # collective: every rank calls it, rank 0 gets the parameters
    if ME == 0:
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ref.params)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol, err_msg=label)
    analytic = rt.algorithm.comm
    assert metrics["measured_bytes_sent"] == analytic.sent, (label, metrics, analytic)
    assert metrics["measured_bytes_received"] == analytic.received, (label, metrics, analytic)
    say(f"OK {label}: mpi parameter_server == simulate after {ROUNDS} rounds; measured bytes per client per round "
        f"sent {metrics['measured_bytes_sent']} received {metrics['measured_bytes_received']} == analytic "
        f"{tuple(analytic)}")

try:
    M.mpi_runtime(make({}), mode="sharded")
except istjax.ArgError as e:
    assert e.arg == "mode" and "parameter_server" in str(e), e
    say(f"OK fedist sharded: refused ({e})")
else:
    raise AssertionError("fedist in the sharded mode was not refused")

M._world().Barrier()
say("ALL OK")
