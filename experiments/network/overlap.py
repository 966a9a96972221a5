"""Does data parallel gain from all-reducing each gradient as soon as it exists? Measured on shaped links.

Run as root from the repository root::

    python -m experiments.network.overlap                     # 1 Gbit/s and 10 Gbit/s, 2 ranks
    python -m experiments.network.overlap --links 100mbit --reps 2

Data parallel's local phase all-reduces the gradients of every step inside its compiled step. With
``gradient_buffers="leaves"`` (the default of `istjax.runtimes.mpi`) each parameter leaf has its own all-reduce,
which XLA may start as soon as that leaf's gradient is computed, so the last layer's exchange could overlap the
earlier layers' backward pass. With ``"one"`` the gradients are concatenated into one buffer after the whole backward
pass: no overlap is possible, but there is one MPI call per step. For every link rate this script runs
`experiments.benchmarks.mpi_worker` (data parallel, 2-layer 4096-4096-35, W = 2, K = 20, B = 128) across the
namespaces of `experiments.network.slow_net` once per variant, interleaved, and writes the median round seconds of
each and their ratio to ``--out`` (default ``experiments/network/overlap.json``, and ``.md``). The default is kept
only where it is not slower.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any, Optional

from experiments.network import slow_net
from istjax.launch.provenance import code_version

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
VARIANTS = ("leaves", "one")


def worker_command(variant: str, reps: int) -> list[str]:
    return [sys.executable, "-m", "experiments.benchmarks.mpi_worker", "--input-dim", "4096", "--hidden", "4096",
            "--batch", "128", "--local-steps", "20", "--num-workers", "2", "--reps", str(reps),
            "--algorithms", "data_parallel", "--gradient-buffers", variant]


def one_run(rate: str, variant: str, reps: int, tag: str, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "experiments.network.slow_net", "--hosts", "2", "--rate", rate, "--tag", tag,
           "--timeout", str(timeout), "--", *worker_command(variant, reps)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not rows:
        return {"link": rate, "variant": variant, "error": (out.stderr or out.stdout)[-1500:]}
    r = rows[0]
    return {"link": rate, "variant": variant, "round_s": r["round_s"], "rounds_s": r["timings"]["samples_s"],
            "allreduce_s": r.get("allreduce_s"), "plain_allreduce_s": r.get("plain_allreduce_s")}


def markdown(result: dict[str, Any]) -> str:
    lines = ["Data parallel under `mpiexec -n 2` across shaped links (2-layer 4096-4096-35, W = 2, K = 20, B = 128): "
             "median round seconds with the gradients all-reduced leaf by leaf (overlap possible) or as one buffer",
             "", "| link | leaves (s) | one buffer (s) | one / leaves |", "|---|---|---|---|"]
    for e in result["summary"]:
        if e.get("one_over_leaves"):
            lines.append(f"| {e['link']} | {e['leaves']:.2f} | {e['one']:.2f} | {e['one_over_leaves']:.3f} |")
        else:  # a variant failed on this link (its error is in the runs)
            lines.append(f"| {e['link']} | - | - | - |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m experiments.network.overlap", description=__doc__.split("\n\n")[0])
    ap.add_argument("--links", default="1gbit,10gbit", help="comma-separated link rates (tc units)")
    ap.add_argument("--reps", type=int, default=3, help="timed rounds per run (after one warm-up)")
    ap.add_argument("--repeats", type=int, default=2, help="runs per variant, interleaved")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", default=str(ROOT / "experiments" / "network" / "overlap.json"))
    args = ap.parse_args(argv)
    why = slow_net.missing_privileges()
    if why:
        ap.error(why)
    links = args.links.split(",")
    for rate in links:
        slow_net.Link(rate)
    code = code_version()  # the code measured, taken before it runs
    t0, runs = time.time(), []
    for rate in links:
        for k in range(args.repeats):
            for variant in VARIANTS:
                row = one_run(rate, variant, args.reps, f"ov{len(runs)}", args.timeout)
                print(f"{rate} {variant}: {row.get('round_s', row.get('error'))}", flush=True)
                runs.append(row)
    summary = []
    for rate in links:
        e: dict[str, Any] = {"link": rate}
        for v in VARIANTS:
            times = sorted(t for r in runs if (r["link"], r["variant"]) == (rate, v) for t in r.get("rounds_s", []))
            if times:
                e[v] = times[len(times) // 2]
        if e.get("leaves") and e.get("one"):
            e["one_over_leaves"] = e["one"] / e["leaves"]
        summary.append(e)
    result = {"code": code, "runs": runs, "summary": summary, "wall_s": time.time() - t0}
    out = pathlib.Path(args.out)
    out.write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
