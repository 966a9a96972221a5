"""Bytes per round per worker (analytic and measured) and per-rank peak memory, IST vs data parallel vs local SGD,
for the IST paper's 2-layer speech MLP (4096 -> 4096 -> 35, BatchNorm, batch 128, K = 20 local steps; arXiv
1910.02120) on 2 and 4 MPI processes (one worker per process).

Command (launches every mpiexec run itself and prints one table):

    .venv/bin/python -m experiments.distributed.comm_and_memory [--procs 2 4] [--rounds 1]

Each (processes, algorithm, mode) is its own ``mpiexec -n P`` launch, so ``ru_maxrss`` (the peak resident memory of
a process) belongs to that configuration alone. Data are random (bytes and memory do not depend on them). The rows,
with the command, commit and machine, go to ``experiments/distributed/results/comm_and_memory.json`` (``--out``),
which `experiments.report` renders into docs/distributed.md and the README. Bytes and array sizes are exact; the
peak resident memory is one measurement per launch (it moves by tens of MiB between launches).
"""

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve()
REPO = HERE.parents[2]
CONFIGS = [("ist", "parameter_server"), ("ist", "sharded"), ("data_parallel", "parameter_server"),
           ("local_sgd", "parameter_server")]
D, H, C, B, K = 4096, 4096, 35, 128, 20


def child(algorithm: str, mode: str, rounds: int):
    import jax
    import jax.numpy as jnp
    import optax

    import istjax
    from istjax.runtimes import mpi as M
    from istjax.models.mlp import MLP

    n = M.size()
    w = n
    task = istjax.classifier(MLP(hidden=(H,), num_classes=C), jnp.zeros((B, D)), MLP.rules(1), num_classes=C)
    opt = optax.sgd(0.01)
    if algorithm == "ist":
        alg = istjax.ist(task, opt, num_workers=w, local_steps=K, sampler=istjax.stratified(num_owners=n))
    else:
        alg = getattr(istjax, algorithm)(task, opt, num_workers=w, local_steps=K)
    rt = M.mpi_runtime(alg, mode=mode)
    state = rt.init(jax.random.key(0))
    kx, ky = jax.random.split(jax.random.key(1))
    lanes = rt.workers_per_rank  # pass only this rank's rows: a full [W, K, B, D] batch would dwarf a shard
    batches = {"x": jax.random.normal(kx, (lanes, K, B, D), jnp.float32),
               "y": jax.random.randint(ky, (lanes, K, B), 0, C, jnp.int32)}
    for _ in range(rounds):
        state, metrics = rt.round(state, batches)
    jax.block_until_ready(state)
    held = max(x.nbytes for x in jax.live_arrays() if x.nbytes != batches["x"].nbytes)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    everyone = M._world().gather({"rss": rss, "largest_array": rt.largest_array_bytes, "live": held}, root=0)
    if M.is_primary():
        print("RESULT " + json.dumps({
            "procs": n, "algorithm": algorithm, "mode": mode,
            "analytic_received": alg.comm.received, "analytic_sent": alg.comm.sent,
            "measured_received": int(metrics["measured_bytes_received"]),
            "measured_sent": int(metrics["measured_bytes_sent"]),
            "max_rss": [e["rss"] for e in everyone], "largest_array": [e["largest_array"] for e in everyone],
            "full_model_bytes": 4 * (D * H + 2 * H + H * C)}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", type=pathlib.Path,
                    default=REPO / "experiments" / "distributed" / "results" / "comm_and_memory.json")
    ap.add_argument("--child", nargs=2, metavar=("ALGORITHM", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(*args.child, args.rounds)
    from istjax.launch.provenance import code_version, machine
    mpiexec = pathlib.Path(sys.executable).parent / "mpiexec"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    rows = []
    for n in args.procs:
        for algorithm, mode in CONFIGS:
            cmd = [str(mpiexec), "-n", str(n), sys.executable, "-m", "experiments.distributed.comm_and_memory", "--rounds", str(args.rounds),
                   "--child", algorithm, mode]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
            line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
            if out.returncode or not line:
                sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
            rows.append(json.loads(line[0][len("RESULT "):]))
            print(f"done: P={n} {algorithm} {mode}", file=sys.stderr, flush=True)
    command = "python -m experiments.distributed.comm_and_memory" + (
        f" --procs {' '.join(map(str, args.procs))}" if args.procs != [2, 4] else "") + (
        f" --rounds {args.rounds}" if args.rounds != 1 else "")
    doc = {"study": "comm_and_memory", "command": command, "code": code_version(), "machine": machine(),
           "model": f"{D}-{H}-{C}", "batch": B, "local_steps": K, "rounds": args.rounds, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
