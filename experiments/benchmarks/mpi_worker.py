"""Times rounds on the MPI runtime; run by `experiments.benchmarks.run` (study 4) as ``mpiexec -n 2 python -m ...``.

Every rank builds the same algorithm, wraps it with `istjax.runtimes.mpi.mpi_runtime` (parameter-server mode) and
runs one warm-up round and ``--reps`` timed rounds (barrier before and after each, so the time is the slowest
rank's), each as the driver runs a round between evaluations: without the loss split (``split=False``; the default
config computes it on evaluation rounds only, `istjax.launch.train_loop.split_due`; ``--split`` times every round
with it). Rank 0 prints one JSON object per algorithm: median round time, samples/s and the bytes per worker the
runtime measured from the buffers it handed to MPI. With ``--profile``, IST's round is also run with every phase
timed on every rank (`istjax.runtimes.mpi.MPIRuntime.phases`): ``phases_by_rank`` holds each rank's mean seconds per
phase. For data parallel it also times the gradient all-reduce (every leaf, as the runtime's compiled local phase
sends them) against a plain ``MPI.Allreduce`` of the same bytes: ``allreduce_vs_plain`` (`allreduce_vs_plain`).
(An earlier version also timed each rank's step matmuls alone as a yardstick of the local phase; called one by one
from Python they paid per-call costs the compiled loop does not, so the local phase read 1.35 of them: a yardstick
that could not fail. It was removed; study 1 measures the local phase against the dense matmul rate instead.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax

from experiments.benchmarks.run import Workload


def allreduce_vs_plain(comm, tree, reps: int, steps: int = 10) -> dict:
    """Data parallel's per-step exchange against the plain thing, per all-reduce of ``tree`` (the gradients).

    ``allreduce_s``: as the local phase runs it, `mpi4jax.allreduce` of every leaf inside a compiled loop of
    ``steps`` steps (each step reduces the previous step's result), per step. ``plain_allreduce_s``: one
    `MPI.Allreduce` (mpi4py) of a numpy buffer of the same bytes into a reused one, per call, ``steps`` calls in a
    row. ``allreduce_vs_plain`` is their ratio (the runtime's share of the plain bandwidth). ``standalone_s`` times
    one jitted all-reduce call on its own, whose fresh outputs are page-faulted at every call (a cost the local phase
    pays once per round, not per step): ``standalone_vs_plain``.
    """
    import numpy as np
    from mpi4py import MPI

    from istjax.runtimes.mpi.buffers import TreeCollectives

    x = TreeCollectives(comm)
    nbytes = sum(int(v.size) * v.dtype.itemsize for v in jax.tree.leaves(tree))
    send, recv = np.ones(nbytes // 4, np.float32), np.empty(nbytes // 4, np.float32)
    in_loop = jax.jit(lambda t: jax.lax.fori_loop(0, steps, lambda i, t: jax.tree.map(x.allreduce_traced, t), t))

    def timed(fn, per=1):
        fn()
        out = []
        for _ in range(reps):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) / per)
        return statistics.median(out)

    def plain():
        for _ in range(steps):
            comm.Allreduce(send, recv, op=MPI.SUM)

    t_loop = timed(lambda: jax.block_until_ready(in_loop(tree)), per=steps)
    t_one = timed(lambda: jax.block_until_ready(x.allreduce(tree)))
    t_plain = timed(plain, per=steps)
    return {"allreduce_bytes": nbytes, "allreduce_s": t_loop, "plain_allreduce_s": t_plain,
            "allreduce_vs_plain": t_plain / t_loop, "standalone_s": t_one, "standalone_vs_plain": t_plain / t_one}


def main() -> None:
    from mpi4py import MPI

    from istjax.runtimes.mpi import mpi_runtime

    p = argparse.ArgumentParser()
    p.add_argument("--input-dim", type=int, required=True)
    p.add_argument("--hidden", required=True, help="comma-separated hidden widths")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--local-steps", type=int, required=True)
    p.add_argument("--num-workers", type=int, required=True)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--algorithms", default="ist,data_parallel,local_sgd")
    p.add_argument("--profile", action="store_true", help="also time each phase of the IST parameter-server round "
                                                          "(extra rounds, each phase waited for)")
    p.add_argument("--split", action="store_true", help="time rounds with the loss split (an evaluation round's)")
    p.add_argument("--gradient-buffers", default="leaves", help="data parallel's all-reduce: leaves | one "
                                                                 "(istjax.runtimes.mpi.GRADIENT_BUFFERS)")
    a = p.parse_args()
    wl = Workload(f"{len(a.hidden.split(',')) + 1}-layer {a.input_dim}-{a.hidden.replace(',', '-')}-35",
                  a.input_dim, tuple(int(h) for h in a.hidden.split(",")), batch=a.batch,
                  local_steps=a.local_steps, num_workers=a.num_workers)
    comm = MPI.COMM_WORLD
    batches = wl.batches(wl.num_workers, wl.local_steps)
    for name in a.algorithms.split(","):
        rt = mpi_runtime(wl.algorithm(name), mode="parameter_server", gradient_buffers=a.gradient_buffers)
        state = rt.init(jax.random.key(0))
        state, metrics = rt.round(state, batches)
        jax.block_until_ready(metrics)
        times = []
        for _ in range(a.reps):
            comm.Barrier()
            t0 = time.perf_counter()
            state, metrics = rt.round(state, batches, split=a.split)
            jax.block_until_ready(metrics)
            comm.Barrier()
            times.append(time.perf_counter() - t0)
        phases = None
        if a.profile and name == "ist":
            rt.phases = {}
            for _ in range(a.reps):
                comm.Barrier()
                state, metrics = rt.round(state, batches, split=a.split)
            phases = comm.gather({k: v / a.reps for k, v in rt.phases.items()}, root=0)
            rt.phases = None
        exchange = {}
        if name == "data_parallel":  # one step's gradient all-reduce, alone, against a plain MPI.Allreduce
            params = rt.gather_params(state)
            params = comm.bcast(jax.device_get(params) if params is not None else None, root=0)
            exchange = allreduce_vs_plain(comm, jax.tree.map(jax.numpy.asarray, params), a.reps)
        if comm.Get_rank() == 0:
            t = statistics.median(times)
            print(json.dumps({
                "model": wl.name, "algorithm": name, "backend": f"mpi x{comm.Get_size()}", "W": wl.num_workers,
                "K": wl.local_steps, "B": wl.batch, "loss_split": a.split, "round_s": t,
                "samples_per_s": wl.num_workers * wl.local_steps * wl.batch / t,
                "measured_bytes_received": float(metrics.get("measured_bytes_received", float("nan"))),
                "measured_bytes_sent": float(metrics.get("measured_bytes_sent", float("nan"))),
                "timings": {"samples_s": times}, "phases_by_rank": phases,
                **exchange}), flush=True)


if __name__ == "__main__":
    main()
