"""Time to a validation-loss target on a shaped link: IST against DiLoCo and data parallel on the transformer.

Every (link, arm, seed) trains `experiments/configs/shakespeare_transformer.py` on ``--ranks`` MPI processes (one
worker each) placed in network namespaces joined by veth links shaped with ``tc`` to the link's rate
(`experiments.network.slow_net`, through the time-to-accuracy study's `launch`), evaluated every round, for
``--samples`` windows. The seconds to the target are read from the run's own curve: the training seconds
(compilation and evaluation excluded) at the first evaluation whose validation loss is at or below ``--target``.
Arms (``--arms``, comma-separated): ``ist`` (by width, test-time scaling, the study's best setting), ``data_parallel``
and ``diloco``, all in the parameter-server mode (rank 0 evaluates the whole model: the sharded mode's evaluation in
place all-reduces ``[B, T, D]`` activations per layer, minutes a run on a 100 Mbit/s link; evaluation is excluded
from the seconds either way), evaluated every ``--eval-every`` rounds.

Command (as root, from the repository root)::

    python -m experiments.text.network --links 100mbit --arms ist,data_parallel,diloco --seeds 0,1,2 --target 2.7

Results: ``experiments/text/results/network.json``, rendered by `experiments.text.report` into
``docs/transformers.md``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections.abc import Sequence
from typing import Any, Optional

from experiments.grid import seed_list
from experiments.network import common
from experiments.network import time_to_accuracy as tta
from experiments.text.study import B, CONFIG, K
from istjax.launch import study as study_lib
from istjax.launch.metrics import read_metrics

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "experiments" / "text" / "results" / "network.json"
ARMS = ("ist", "data_parallel", "diloco")


def cell(ranks: int, link: str, algorithm: str, *, samples: int, eval_every: int) -> study_lib.Cell:
    rounds = samples // (ranks * K * B)
    overrides = (f"--config.algorithm.name={algorithm}", "--config.runtime.name=mpi",
                 "--config.runtime.mode=parameter_server", f"--config.num_workers={ranks}",
                 f"--config.local_steps={K}", f"--config.batch_size={B}", "--config.model.scaling=test",
                 f"--config.eval_every={eval_every}", f"--config.num_rounds={rounds}",
                 f"--config.checkpoint_every={rounds}")
    return study_lib.Cell(f"r{ranks}-{link}-{algorithm}", CONFIG, overrides,
                          {"model": "transformer", "ranks": ranks, "link": link, "algorithm": algorithm})


def record(p: study_lib.Planned, target: float) -> Optional[dict[str, Any]]:
    """The run's row (`experiments.network.time_to_accuracy.row`) with its validation-loss curve and the training
    seconds and samples at the first evaluation at or below ``target`` (None: not reached)."""
    r = tta.row(p)
    if r is None:
        return None
    curve = [(m["wall_time_s"], m["samples_seen"], m["test_loss"])
             for m in (read_metrics(p.run_dir) if (p.run_dir / "metrics.jsonl").exists() else [])
             if m.get("test_loss") is not None and m.get("wall_time_s") is not None]
    hit = next((c for c in curve if c[2] <= target), None)
    return {**r, "label": p.cell.label, "loss_curve": curve, "seconds_to_target": hit and hit[0],
            "samples_to_target": hit and hit[1]}


def summarise(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (link, algorithm): the seconds to the target over the seeds that reached it (mean, std), how many did,
    the mean seconds a round and the bytes a worker sends a round."""
    out = []
    for link, algorithm in sorted({(r["link"], r["algorithm"]) for r in runs}):
        mine = [r for r in runs if (r["link"], r["algorithm"]) == (link, algorithm)]
        reached = [r["seconds_to_target"] for r in mine if r.get("seconds_to_target")]
        mean, std = study_lib.mean_std(reached)
        out.append({"link": link, "algorithm": algorithm, "seeds": sorted(r["seed"] for r in mine),
                    "reached": len(reached), "seconds_to_target": mean, "seconds_to_target_std": std,
                    "time_per_round_s": study_lib.mean_std(r["time_per_round_s"] for r in mine
                                                           if r.get("time_per_round_s"))[0],
                    "bytes_per_worker_per_round": next((r["bytes_sent_per_worker_per_round"] for r in mine
                                                        if r.get("bytes_sent_per_worker_per_round")), None)})
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--links", default="100mbit", help="comma-separated link rates (tc units)")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--seeds", type=seed_list, default=[0, 1, 2])
    ap.add_argument("--target", type=float, default=2.7, help="validation loss (nats per character) to reach")
    ap.add_argument("--samples", type=int, default=19200, help="windows every run trains")
    ap.add_argument("--eval-every", type=int, default=3, help="rounds between evaluations")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run before it is killed")
    ap.add_argument("--workdir", default="runs/text-network")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    if (code := common.refused("text network study", args.links)) is not None:
        return code
    arms = args.arms.split(",")
    if any(a not in ARMS for a in arms):
        print(f"--arms: each of {ARMS}", file=sys.stderr)
        return 2
    cells = [cell(args.ranks, link, a, samples=args.samples, eval_every=args.eval_every)
             for link in args.links.split(",") for a in arms]
    command = common.command("experiments.text.network", argv)

    def document(runs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"study": "text_network", "command": command, "target": args.target, "ranks": args.ranks,
                "samples": args.samples, "cells": {c.label: list(c.overrides) for c in cells},
                "summary": summarise(runs), "runs": runs}

    runs = common.run_to_file("text_network", cells, args, record=lambda p: record(p, args.target),
                              document=document, tag="tn")
    print(json.dumps(summarise(runs), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
