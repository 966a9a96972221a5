"""Run under ``mpiexec -n N`` (``python dynamic.py W [WORKDIR]``): dynamic averaging on MPI equals simulate.

W workers over N ranks (W / N each): every rank holds its own workers' models and optimizer states; flags go to rank
0, and only the models of the subset it asks for move, to it and back. A BatchNorm MLP with Adam (each worker's
moments its own), four rounds at three thresholds: delta = 0 (every round a full synchronisation), delta = inf
(nothing moves but the flags) and one between (partial and full synchronisations among its rounds: a partial one needs
W >= 5, where a violator and one more are less than half). Every
worker's model and optimizer state, the reference model, the counters and the global fields of the gathered state
equal simulate's; the bytes handed to MPI for each worker equal the ones simulate counts, round by round; each rank
holds L = W / N workers' rows. A whole state restored from a checkpoint's layout runs on. With WORKDIR: a run of the
driver stopped by SIGTERM after round 2 checkpoints every worker's rows (gathered to rank 0) and, resumed by the same
command, ends bit for bit equal to a run never stopped.

Every rank asserts; rank 0 prints ``OK ...`` lines and ``ALL OK``. Driven by tests/test_dynamic.py.
"""

import sys

import jax
import numpy as np
import optax

import istjax
from istjax.algorithms.dynamic import FLAG_BYTES
from istjax.launch.config import default_config
from istjax.runtimes import mpi as M
from protocol_case import TASK as task
from protocol_case import batches as _batches
from protocol_case import check, say
from stopping import resumed_equals_uninterrupted

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

N, ME = M.size(), M.rank()
W, K, ROUNDS = int(sys.argv[1]), 3, 4
L = W // N
TOL = 1e-5
#: The thresholds and what their rounds must include: (partial, full) synchronisations at least.
DELTAS = {"delta 0": (0.0, 0, ROUNDS), "delta inf": (float("inf"), 0, 0), "delta 0.4": (0.4, 1, 1)}


def batches(r):
    return _batches(r, W, K, shift=True)


def make(delta):
    return istjax.dynamic_averaging(task, optax.adam(0.05), num_workers=W, local_steps=K, delta=delta)


for label, (delta, partial_at_least, full_at_least) in DELTAS.items():
    rt, simulate = M.mpi_runtime(make(delta)), make(delta)
    state, ref = rt.init(jax.random.key(5)), simulate.init(jax.random.key(5))
    assert all(np.shape(v)[0] == L for v in jax.tree.leaves(state.opt_state.workers)), "a rank holds its own workers"
    moved = 0.0
    for r in range(ROUNDS):
        state, metrics = rt.round(state, batches(r))
        ref, expected = simulate.round(ref, batches(r))
        for field in ("measured_bytes_sent", "measured_bytes_received"):
            np.testing.assert_array_equal(metrics[field], np.asarray(expected[field]), err_msg=f"{label} {field} {r}")
        for field in ("model_transfers", "violations", "synced_workers", "full_sync"):
            assert float(metrics[field]) == float(expected[field]), (label, field, r, metrics[field])
        moved += float(np.sum(metrics["measured_bytes_received"]))
        check(rt, state, ref, TOL, f"{label}, round {r}")
    partial, full = np.asarray(state.opt_state.syncs).tolist()
    assert partial >= partial_at_least and full >= full_at_least, (label, partial, full)
    if delta == float("inf"):
        assert moved == 0 and (metrics["measured_bytes_sent"] == FLAG_BYTES).all(), label
    say(f"OK {label}: mpi == simulate after {ROUNDS} rounds, every worker's model and moments included; each rank "
        f"holds {L} of {W} workers; bytes per worker counted alike every round (this round sent "
        f"{metrics['measured_bytes_sent'].tolist()}); partial/full synchronisations {partial}/{full}")

# A whole state (a checkpoint's layout: every worker's rows) handed to every rank: each keeps its own rows.
rt, simulate = M.mpi_runtime(make(0.4)), make(0.4)
ref = simulate.init(jax.random.key(6))
ref, _ = simulate.round(ref, batches(0))
state, _ = rt.round(ref, batches(1))
ref, _ = simulate.round(ref, batches(1))
check(rt, state, ref, TOL, "from a whole state")
say("OK from a whole state: each rank keeps its own workers' rows and runs on == simulate")


def _all_rows(tree):
    assert all(np.shape(v)[0] == W for v in jax.tree.leaves(tree)), "the checkpoint holds every worker's rows"


def config():
    c = default_config()
    c.algorithm.name, c.algorithm.delta, c.runtime.name = "dynamic_averaging", 0.05, "mpi"
    c.model.hidden, c.num_workers, c.local_steps, c.batch_size = (16,), W, 2, 16
    c.num_rounds, c.eval_every, c.checkpoint_every, c.progress, c.eval_train_examples = 4, 2, 10, False, 256
    c.target_accuracy = None
    return c


if len(sys.argv) > 2:
    resumed_equals_uninterrupted(config, sys.argv[2], rows=lambda a: _all_rows(a.opt_state.workers))
    say(f"OK SIGTERM after round 2 under mpiexec -n {N}: the resumed run == the uninterrupted one, bit for bit, "
        f"its {W} workers' models, moments and the counters included")

M._world().Barrier()
say("ALL OK")
