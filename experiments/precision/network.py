"""Time to accuracy on shaped links with a bfloat16 exchange beside float32 (issue 37; docs/precision.md).

Run as root from the repository root (``ISTJAX_DATA_DIR`` pointing at the folder holding FSDD)::

    python -m experiments.precision.network                          # IST, 100 Mbit/s and 1 Gbit/s, seeds 0,1,2
    python -m experiments.precision.network --algorithms ist,local_sgd --links 100mbit --seeds 0

The IST paper's 2-layer speech MLP on FSDD (``experiments/configs/fsdd_speech.py:2``) on the MPI runtime across
real network namespaces joined by ``tc``-shaped links (`experiments.network.slow_net`), one worker per rank, each
run stopping at the first evaluation at or above the target: the cells and the launch are
`experiments.network.time_to_accuracy`'s, with ``exchange_dtype`` float32, with bfloat16, and with bfloat16 and
``compute_dtype=bfloat16`` too (``bfloat16-compute``). Every run's training seconds to the target (compilation
excluded), its rounds and its bytes per worker per round go to ``experiments/precision/results/time_to_accuracy.json``,
with per cell the mean and spread over seeds and each bfloat16 variant's speed-up over float32 taken seed by seed
(same seed, same data, same partitions).
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import sys
import time
from collections.abc import Sequence
from typing import Any, Optional

from experiments.grid import REPO, seed_list
from experiments.network import slow_net
from experiments.network import time_to_accuracy as tta
from istjax.launch import study
from istjax.launch.study import mean_std

OUT = REPO / "experiments" / "precision" / "results" / "time_to_accuracy.json"
# What each cell crosses the wire in and computes in: float32; a bfloat16 exchange; a bfloat16 exchange and compute.
VARIANTS = {"float32": (), "bfloat16": ("--config.exchange_dtype=bfloat16",),
            "bfloat16-compute": ("--config.exchange_dtype=bfloat16", "--config.compute_dtype=bfloat16")}


def cells(args: argparse.Namespace) -> list[study.Cell]:
    """(link, algorithm, variant) on 2 ranks: `experiments.network.time_to_accuracy.cell` with the variant's
    dtypes (`VARIANTS`)."""
    out = []
    for rate, algorithm, variant in itertools.product(args.links.split(","), args.algorithms.split(","), VARIANTS):
        base = tta.cell("2", algorithm, args.ranks, rate, target=args.target, max_rounds=args.max_rounds,
                        extra=VARIANTS[variant] or ("--config.exchange_dtype=float32",))
        out.append(study.Cell(f"{base.label}-{variant}", base.config, base.overrides,
                              {**base.info, "exchange": variant}))
    return out


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (link, algorithm, exchange): time to target and bytes per round over seeds; bfloat16's speed-up over
    float32 seed by seed."""
    rows = []
    keys = sorted({(r["link"], r["algorithm"], r["exchange"]) for r in runs},
                  key=lambda k: (slow_net.Link(k[0]).bits_per_second(), k[1], list(VARIANTS).index(k[2])))
    for link, algorithm, exchange in keys:
        mine = [r for r in runs if (r["link"], r["algorithm"], r["exchange"]) == (link, algorithm, exchange)]
        reached = [r for r in mine if r.get("time_to_target_s") is not None]
        row = {"link": link, "algorithm": algorithm, "exchange": exchange, "seeds": len(mine),
               "reached": len(reached)}
        for field in ("time_to_target_s", "time_per_round_s", "round_to_target", "bytes_sent_per_worker_per_round",
                      "test_accuracy"):
            m, s = mean_std([r[field] for r in reached if r.get(field) is not None])
            row[f"{field}_mean"], row[f"{field}_std"] = m, s
        if exchange != "float32":
            base = {r["seed"]: r for r in runs if (r["link"], r["algorithm"], r["exchange"]) == (link, algorithm,
                                                                                                   "float32")}
            ratios = [base[r["seed"]]["time_to_target_s"] / r["time_to_target_s"] for r in reached
                      if r["seed"] in base and base[r["seed"]].get("time_to_target_s")]
            bytes_ratio = [base[r["seed"]]["bytes_sent_per_worker_per_round"] / r["bytes_sent_per_worker_per_round"]
                           for r in reached if r["seed"] in base and r.get("bytes_sent_per_worker_per_round")]
            row["speedup_vs_float32_mean"], row["speedup_vs_float32_std"] = mean_std(ratios)
            row["bytes_ratio_vs_float32"] = mean_std(bytes_ratio)[0]
        rows.append(row)
    return rows


def run_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    def record(p: study.Planned) -> Optional[dict[str, Any]]:
        r = tta.row(p)
        return None if r is None else {**r, "exchange": p.cell.info["exchange"]}

    workdir = pathlib.Path(args.workdir or REPO / "runs" / "precision" / "network")
    outcome = study.run_study("precision_network", cells(args), args.seeds, workdir, root=REPO,
                              train=tta.trainer(args.timeout, "bf"), record=record)
    return outcome.records


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m experiments.precision.network", description=__doc__.split("\n\n")[0])
    ap.add_argument("--links", default="100mbit,1gbit")
    ap.add_argument("--algorithms", default="ist")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--seeds", type=seed_list, default=[0, 1, 2])
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--max-rounds", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    why = slow_net.missing_privileges()
    if why:
        ap.error(why)
    command = " ".join(["python -m experiments.precision.network", *(sys.argv[1:] if argv is None else argv)])
    t0 = time.time()
    runs = run_all(args)
    result = {"command": command, "target": args.target, "ranks": args.ranks, "wall_s": time.time() - t0,
              "rows": summarise(runs), "runs": runs}
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for r in result["rows"]:
        print({k: v for k, v in r.items() if not k.endswith("_std")})
    return result


if __name__ == "__main__":
    main()
