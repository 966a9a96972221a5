"""Run under ``mpiexec -n N`` (``python consensus.py W [WORKDIR]``): consensus ADMM on MPI equals simulate.

W workers over N ranks (W / N each): every rank holds its own workers' duals only, sums what they send
(``x_i + u_i``) with the other ranks' and keeps their new duals. A BatchNorm MLP, 3 rounds, in float32 and with a
bfloat16 exchange: the parameters, model state and every worker's dual (gathered to rank 0) equal simulate's, each
rank holds L = W / N rows of duals, and the measured bytes per worker per round equal the analytic ones (local
SGD's; bfloat16: received x N, an all-gather). Then the whole state restored from a checkpoint's layout (every
worker's rows on every rank) runs on, each rank keeping its own rows. With WORKDIR: a run of the driver stopped by
SIGTERM after round 2 (every rank signals itself) checkpoints every worker's duals (gathered to rank 0) and, resumed
by the same command, ends bit for bit equal to a run never stopped.

Every rank asserts; rank 0 prints ``OK ...`` lines and ``ALL OK``. Driven by tests/test_consensus.py.
"""

import sys

import jax
import numpy as np
import optax

import istjax
from istjax.launch.config import default_config
from istjax.runtimes import mpi as M
from protocol_case import TASK as task
from protocol_case import batches as _batches
from protocol_case import check, say
from stopping import resumed_equals_uninterrupted

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

N, ME = M.size(), M.rank()
W, K, ROUNDS = int(sys.argv[1]), 3, 3
L = W // N
TOL_FIRST, TOL, TOL_BF16 = 2e-6, 1e-4, 2.0 ** -6


def batches(r):
    return _batches(r, W, K)


def make(backend, **options):
    return istjax.admm(task, optax.sgd(0.2), num_workers=W, local_steps=K, rho=0.3, backend=backend, **options)


for label, options in {"admm": {}, "admm exchange bfloat16": {"exchange_dtype": "bfloat16"}}.items():
    rt, simulate = M.mpi_runtime(make("simulate", **options)), make("simulate", **options)
    state, ref = rt.init(jax.random.key(5)), simulate.init(jax.random.key(5))
    assert all(np.shape(u)[0] == L for u in jax.tree.leaves(state.opt_state)), "a rank holds its own workers' duals"
    bf16 = "exchange_dtype" in options
    for r in range(ROUNDS):
        state, metrics = rt.round(state, batches(r))
        ref, _ = simulate.round(ref, batches(r))
        if r in (0, ROUNDS - 1):
            check(rt, state, ref, TOL_BF16 if bf16 else TOL_FIRST if r == 0 else TOL, f"{label}, round {r}")
    assert all(np.shape(u)[0] == L for u in jax.tree.leaves(state.opt_state))
    analytic = rt.algorithm.comm
    assert metrics["measured_bytes_sent"] == analytic.sent, (label, metrics, analytic)
    assert metrics["measured_bytes_received"] == analytic.received * (N if bf16 else 1), (label, metrics, analytic)
    say(f"OK {label}: mpi == simulate after {ROUNDS} rounds, duals included; each rank holds {L} of {W} workers' "
        f"duals; measured bytes per worker per round sent {metrics['measured_bytes_sent']} received "
        f"{metrics['measured_bytes_received']} == analytic {tuple(analytic)}")

# A whole state (a checkpoint's layout: every worker's duals) handed to every rank: each keeps its own rows.
rt, simulate = M.mpi_runtime(make("simulate")), make("simulate")
ref = simulate.init(jax.random.key(6))
ref, _ = simulate.round(ref, batches(0))
state, _ = rt.round(ref, batches(1))
ref, _ = simulate.round(ref, batches(1))
check(rt, state, ref, TOL_FIRST, "from a whole state")
say("OK from a whole state: each rank keeps its own workers' rows and runs on == simulate")


def _all_rows(tree):
    assert all(np.shape(v)[0] == W for v in jax.tree.leaves(tree)), "the checkpoint holds every worker's rows"


def config():
    c = default_config()
    c.algorithm.name, c.algorithm.rho, c.runtime.name = "admm", 0.05, "mpi"
    c.model.hidden, c.num_workers, c.local_steps, c.batch_size = (16,), W, 2, 16
    c.num_rounds, c.eval_every, c.checkpoint_every, c.progress, c.eval_train_examples = 4, 2, 10, False, 256
    c.target_accuracy = None
    return c


if len(sys.argv) > 2:
    resumed_equals_uninterrupted(config, sys.argv[2], rows=lambda a: _all_rows(a.opt_state))
    say(f"OK SIGTERM after round 2 under mpiexec -n {N}: the resumed run == the uninterrupted one, bit for bit, "
        f"its {W} workers' duals included")

M._world().Barrier()
say("ALL OK")
