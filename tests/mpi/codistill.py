"""Run under ``mpiexec -n N`` (``python codistill.py W G [WORKDIR]``): codistillation on MPI equals simulate.

W workers in G groups over N ranks (G divides N: each rank's workers in one group). Each group's replicas average by
an allreduce among the group's ranks; every other round (after a round of burn-in) each group's first rank
broadcasts its model to the other groups' ranks, which retake their teachers. A BatchNorm MLP, 4 rounds: every
group's model, the teachers' copies, the round they were taken and the global fields (gathered to rank 0) equal
simulate's; the bytes each rank handed to MPI equal the count (a model each way for a replica of a group of more than
one; on an exchange round G - 1 models received a rank, one sent by a group's first rank), and at one worker a rank
equal simulate's per worker. With WORKDIR: a
run of the driver stopped by SIGTERM after round 2 resumes bit for bit equal to a run never stopped.

Every rank asserts; rank 0 prints ``OK ...`` lines and ``ALL OK``. Driven by tests/test_codistill.py.
"""

import sys

import jax
import numpy as np
import optax

import istjax
from istjax.core.comm import tree_bytes
from istjax.launch.config import default_config
from istjax.runtimes import mpi as M
from protocol_case import TASK as task
from protocol_case import batches as _batches
from protocol_case import check, say
from stopping import resumed_equals_uninterrupted

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

N, ME = M.size(), M.rank()
W, G, K, ROUNDS = int(sys.argv[1]), int(sys.argv[2]), 3, 4
L, R = W // N, W // G
TOL = 1e-5


def batches(r):
    return _batches(r, W, K)


def make(groups=G):
    return istjax.codistillation(task, optax.sgd(0.2), num_workers=W, local_steps=K, groups=groups,
                                 distill_weight=0.5, teacher_every=2, burn_in=1)


model_bytes = tree_bytes((jax.eval_shape(task.init, jax.random.key(0)),
                          jax.eval_shape(task.init_state, jax.random.key(0))))
rt, simulate = M.mpi_runtime(make()), make()
state, ref = rt.init(jax.random.key(5)), simulate.init(jax.random.key(5))
leader = ME % (N // G) == 0
for r in range(ROUNDS):
    state, metrics = rt.round(state, batches(r))
    ref, expected = simulate.round(ref, batches(r))
    check(rt, state, ref, TOL, f"round {r}")
    exchanged = (r + 1) % 2 == 0
    assert float(metrics["teachers_exchanged"]) == float(exchanged), (r, metrics["teachers_exchanged"])
    within = model_bytes * L if R > 1 else 0
    sent = (within + (model_bytes if exchanged and leader else 0)) // L
    received = (within + ((G - 1) * model_bytes if exchanged else 0)) // L
    assert (metrics["measured_bytes_sent"], metrics["measured_bytes_received"]) == (sent, received), (r, metrics)
    if L == 1:  # one worker a rank: the single-process count per worker
        assert metrics["measured_bytes_sent"] == float(np.asarray(expected["measured_bytes_sent"])[ME])
        assert metrics["measured_bytes_received"] == float(np.asarray(expected["measured_bytes_received"])[ME])
say(f"OK codistillation W={W} G={G}: mpi == simulate after {ROUNDS} rounds, every group's model and the teachers "
    f"included; bytes per worker (rank 0) this round sent {metrics['measured_bytes_sent']} received "
    f"{metrics['measured_bytes_received']}, as counted")


def config():
    c = default_config()
    c.algorithm.name, c.algorithm.groups, c.runtime.name = "codistillation", G, "mpi"
    c.algorithm.teacher_every, c.algorithm.burn_in = 2, 1
    c.model.hidden, c.num_workers, c.local_steps, c.batch_size = (16,), W, 2, 16
    c.num_rounds, c.eval_every, c.checkpoint_every, c.progress, c.eval_train_examples = 4, 2, 10, False, 256
    c.target_accuracy = None
    return c


if len(sys.argv) > 3:
    resumed_equals_uninterrupted(config, sys.argv[3], rows=None)
    say(f"OK SIGTERM after round 2 under mpiexec -n {N}: the resumed run == the uninterrupted one, bit for bit, "
        f"every group's model and the teachers included")

M._world().Barrier()
say("ALL OK")
