"""Run under ``mpiexec -n N`` (``python compressed.py W [WORKDIR]``): compressed local SGD and DiLoCo on MPI equal
simulate.

W workers over N ranks (W / N each): every rank holds its own workers' compressor rows (residuals, PowerSGD's
factors); their changes cross compressed inside the compiled end of round (PowerSGD's two all-reduces, top-k's
all-gather of values and indices). A BatchNorm MLP, 3 rounds: the parameters, model state and every worker's rows
(gathered to rank 0) equal simulate's, each rank holds L = W / N rows, and at one worker a rank the measured bytes
per worker per round equal the analytic ones (the compressed sizes, plus the model state whole). With WORKDIR: a
run of the driver stopped by SIGTERM after round 2 and resumed ends bit for bit equal to a run never stopped.

Every rank asserts; rank 0 prints ``OK ...`` lines and ``ALL OK``. Driven by tests/test_compressed_rounds.py.
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
TOL = 1e-5  # the all-reduce adds the workers' factors in another order than simulate's mean

CASES = {"local_sgd powersgd": ("local_sgd", {"compression": "powersgd", "compression_rank": 1}),
         "diloco powersgd start 1": ("diloco", {"compression": "powersgd", "compression_rank": 1,
                                                "compression_start": 1}),
         "local_sgd top_k": ("local_sgd", {"compression": "top_k", "compression_fraction": 0.1})}


def batches(r):
    return _batches(r, W, K)


def make(name, backend, **options):
    return getattr(istjax, name)(task, optax.sgd(0.2), num_workers=W, local_steps=K, backend=backend, **options)


for label, (name, options) in CASES.items():
    rt, simulate = M.mpi_runtime(make(name, "simulate", **options)), make(name, "simulate", **options)
    state, ref = rt.init(jax.random.key(5)), simulate.init(jax.random.key(5))
    rows = lambda s: jax.tree.leaves(s.opt_state.rows)  # noqa: E731
    assert all(np.shape(v)[0] == L for v in rows(state)), "a rank holds its own workers' compressor rows"
    for r in range(ROUNDS):
        state, metrics = rt.round(state, batches(r))
        ref, _ = simulate.round(ref, batches(r))
        check(rt, state, ref, TOL, f"{label}, round {r}")
    assert all(np.shape(v)[0] == L for v in rows(state))
    analytic = rt.algorithm.comm
    if L == 1:
        assert metrics["measured_bytes_sent"] == analytic.sent, (label, metrics, analytic)
        assert metrics["measured_bytes_received"] == analytic.received, (label, metrics, analytic)
    assert analytic.sent < simulate.comm.sent + 1 and metrics["measured_bytes_sent"] > 0
    say(f"OK {label}: mpi == simulate after {ROUNDS} rounds, compressor rows included; each rank holds {L} of {W} "
        f"workers' rows; measured bytes per worker per round sent {metrics['measured_bytes_sent']} received "
        f"{metrics['measured_bytes_received']}, analytic {tuple(analytic)}")


def _all_rows(tree):
    assert all(np.shape(v)[0] == W for v in jax.tree.leaves(tree)), "the checkpoint holds every worker's rows"


def config():
    c = default_config()
    c.algorithm.name, c.runtime.name = "diloco", "mpi"
    c.algorithm.compression, c.algorithm.compression_rank = "powersgd", 1
    c.model.hidden, c.num_workers, c.local_steps, c.batch_size = (16,), W, 2, 16
    c.num_rounds, c.eval_every, c.checkpoint_every, c.progress, c.eval_train_examples = 4, 2, 10, False, 256
    c.target_accuracy = None
    return c


if len(sys.argv) > 2:
    resumed_equals_uninterrupted(config, sys.argv[2], rows=lambda a: _all_rows(a.opt_state.rows))
    say(f"OK SIGTERM after round 2 under mpiexec -n {N}: the resumed run == the uninterrupted one, bit for bit, "
        f"its {W} workers' compressor rows included")

M._world().Barrier()
say("ALL OK")
