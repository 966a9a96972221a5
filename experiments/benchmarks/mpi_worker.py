"""Times rounds on the MPI runtime; run by `experiments.benchmarks.run` (study 4) as ``mpiexec -n 2 python -m ...``.

Every rank builds the same algorithm, wraps it with `istjax.runtimes.mpi.mpi_runtime` (parameter-server mode) and
runs one warm-up round and ``--reps`` timed rounds (barrier before and after each, so the time is the slowest
rank's). Rank 0 prints one JSON object per algorithm: median round time, samples/s and the bytes per worker the
runtime measured from the buffers it handed to MPI. With ``--profile``, IST's round is also run with every phase
timed on every rank (`istjax.runtimes.mpi.MPIRuntime.phases`): ``phases_by_rank`` holds each rank's mean seconds per
phase. For data parallel it also times one step's gradient all-reduce (every leaf, as the runtime sends them)
against one plain ``MPI.Allreduce`` of the same bytes: ``allreduce_vs_plain``. With ``--profile`` every rank also
times the matmuls of its workers' training step alone (`measure.phase_matmuls`, K times; the same core, the same
shapes): ``step_matmuls_s_by_rank``, the yardstick of the local phase.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax

from experiments.benchmarks import measure
from experiments.benchmarks.run import Workload, _worker_kernel_shapes


def allreduce_vs_plain(comm, tree, reps: int) -> dict:
    """Data parallel's per-step exchange against the plain thing: `mpi4jax.allreduce` of every leaf of ``tree`` (the
    gradients, as the runtime's jitted exchange runs it) against one `MPI.Allreduce` (mpi4py) of a numpy buffer of
    the same bytes. Returns both medians (s) and their ratio (the runtime's share of the plain bandwidth)."""
    import numpy as np
    from mpi4py import MPI

    from istjax.runtimes.mpi import _Exchange

    x = _Exchange(comm)
    nbytes = sum(int(v.size) * v.dtype.itemsize for v in jax.tree.leaves(tree))
    send, recv = np.ones(nbytes // 4, np.float32), np.empty(nbytes // 4, np.float32)

    def timed(fn):
        fn()
        out = []
        for _ in range(reps):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return statistics.median(out)

    t_tree = timed(lambda: jax.block_until_ready(x.allreduce(tree)))
    t_plain = timed(lambda: comm.Allreduce(send, recv, op=MPI.SUM))
    return {"allreduce_bytes": nbytes, "allreduce_s": t_tree, "plain_allreduce_s": t_plain,
            "allreduce_vs_plain": t_plain / t_tree}


def step_matmuls_s(comm, alg, batch: int, reps: int) -> float:
    """Seconds of this rank's local phase's matmuls alone: forward, weight and input gradients of its L workers'
    sub-network, K steps (median of ``reps``, every rank timing at once, as in a round)."""
    params = jax.eval_shape(alg.init, jax.random.key(0)).params
    lanes = alg.num_workers // comm.Get_size()
    own, args = measure.phase_matmuls(_worker_kernel_shapes(alg, params), lanes, batch)
    jax.block_until_ready(own(*args))
    out = []
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(alg.local_steps):
            r = own(*args)
        jax.block_until_ready(r)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


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
    a = p.parse_args()
    wl = Workload(f"{len(a.hidden.split(',')) + 1}-layer {a.input_dim}-{a.hidden.replace(',', '-')}-35",
                  a.input_dim, tuple(int(h) for h in a.hidden.split(",")), batch=a.batch,
                  local_steps=a.local_steps, num_workers=a.num_workers)
    comm = MPI.COMM_WORLD
    batches = wl.batches(wl.num_workers, wl.local_steps)
    for name in a.algorithms.split(","):
        rt = mpi_runtime(wl.algorithm(name), mode="parameter_server")
        state = rt.init(jax.random.key(0))
        state, metrics = rt.round(state, batches)
        jax.block_until_ready(metrics)
        times = []
        for _ in range(a.reps):
            comm.Barrier()
            t0 = time.perf_counter()
            state, metrics = rt.round(state, batches)
            jax.block_until_ready(metrics)
            comm.Barrier()
            times.append(time.perf_counter() - t0)
        phases, own = None, None
        if a.profile and name == "ist":
            own = comm.gather(step_matmuls_s(comm, rt.algorithm, wl.batch, a.reps), root=0)
            rt.phases = {}
            for _ in range(a.reps):
                comm.Barrier()
                state, metrics = rt.round(state, batches)
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
                "K": wl.local_steps, "B": wl.batch, "round_s": t,
                "samples_per_s": wl.num_workers * wl.local_steps * wl.batch / t,
                "measured_bytes_received": float(metrics.get("measured_bytes_received", float("nan"))),
                "measured_bytes_sent": float(metrics.get("measured_bytes_sent", float("nan"))),
                "timings": {"samples_s": times}, "phases_by_rank": phases,
                "step_matmuls_s_by_rank": own, **exchange}), flush=True)


if __name__ == "__main__":
    main()
