"""Run under ``mpiexec -n N`` (``python federated.py M [S]``): federated averaging on MPI equals simulate.

Clients of unequal sizes (a Dirichlet split of 60 examples over 9 clients), M of them sampled a round in S slots
(default: M rounded up to a multiple of N, the slots past the M clients pads of weight 0), the slots spread over the
N ranks (S / N each; with N not dividing M, unevenly: ``-n 2`` with M = 3 gives rank 1 a client and a pad): each
rank trains its clients' padded local steps, the server's weighted mean is an all-reduce of weighted replicas
(`istjax.core.state.weighted_replicas`). FedAvg, FedAvgM, FedAdam and FedProx in float32, FedAvg with a bfloat16
exchange; 3 rounds each; parameters on every rank equal simulate's (the same S slots), and the measured bytes per
client per round equal the analytic ones (bfloat16: received x N, an all-gather).

Every rank asserts; rank 0 prints ``OK ...`` lines and ``ALL OK``. Driven by tests/test_federated.py.
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
# float32: one round differs from simulate's by the rounding of another summation order (an all-reduce of the
# ranks' sums); over 3 rounds local SGD amplifies it (simulate alone, 3 clients in 4 slots against 3 in 3: 1e-7
# after a round, 1.9e-5 after 3 with FedAvgM), so the first round is held tight and the third looser.
TOL_FIRST, TOL = 2e-6, 1e-4
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
task = istjax.classifier(MLP(hidden=(8,), num_classes=C), jnp.zeros((2, D)), MLP.rules(1), num_classes=C)

CASES = {
    "fedavg": {},
    "fedavgm": {"server_momentum": 0.9},
    "fedadam": {"server_optimizer": "adam", "server_learning_rate": 0.03},
    "fedprox": {"prox_mu": 0.1},
    "fedavg exchange bfloat16": {"exchange_dtype": "bfloat16"},
}


def make(backend, options):
    return istjax.fedavg(task, optax.sgd(0.2), num_workers=SLOTS, local_steps=K, clients=sampler,
                         backend=backend, **options)


def check(rt, state, ref, tol, label):
    params = rt.gather_params(state)  # collective: every rank calls it, rank 0 gets the parameters
    if ME == 0:
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ref.params)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol, err_msg=label)


sizes = [int(s) for s in split.sizes]
say(f"clients {sizes} (n_max {max(sizes)}), {CLIENTS_PER_ROUND} a round in {SLOTS} slots on {N} ranks, K = {K}")
for label, options in CASES.items():
    rt, simulate = M.mpi_runtime(make("simulate", options)), make("simulate", options)
    state, ref = rt.init(jax.random.key(5)), simulate.init(jax.random.key(5))
    bf16 = "exchange_dtype" in options
    for r in range(ROUNDS):
        state, metrics = rt.round(state, batch_fn(r))
        ref, ref_metrics = simulate.round(ref, batch_fn(r))
        if r in (0, ROUNDS - 1):
            check(rt, state, ref, TOL_BF16 if bf16 else TOL_FIRST if r == 0 else TOL, f"{label}, round {r}")
        if r == 0 and not bf16:  # the loss split over the counted clients (a pad slot counts none), every rank's
            assert float(metrics["split_workers"]) == float(ref_metrics["split_workers"]) == CLIENTS_PER_ROUND
            for k in ("worker_train_loss", "merged_train_loss", "merge_cost"):
                np.testing.assert_allclose(float(metrics[k]), float(ref_metrics[k]), rtol=1e-4, atol=1e-6,
                                           err_msg=f"{label} {k}")
    analytic = rt.algorithm.comm
    gathers = bf16  # 16 bits all-gathered: each rank receives N pieces
    assert metrics["measured_bytes_sent"] == analytic.sent, (label, metrics, analytic)
    assert metrics["measured_bytes_received"] == analytic.received * (N if gathers else 1), (label, metrics, analytic)
    say(f"OK {label}: mpi == simulate after {ROUNDS} rounds; measured bytes per client per round sent "
        f"{metrics['measured_bytes_sent']} received {metrics['measured_bytes_received']} == analytic "
        f"{tuple(analytic)}{' (x N received: all-gather)' if gathers else ''}")

M._world().Barrier()
say("ALL OK")
