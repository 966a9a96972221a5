"""Time to a validation-loss target on a shaped link: IST against local SGD, DiLoCo and data parallel on the
transformer, each arm at the settings the tuned text study chose for it.

Every (link, arm, seed) trains `experiments/configs/shakespeare_transformer.py` on ``--ranks`` MPI processes (one
worker each) placed in network namespaces joined by veth links shaped with ``tc`` to the link's rate
(`experiments.network.slow_net`, through the time-to-accuracy study's `launch`), evaluated every ``--eval-every``
rounds, until its first evaluation whose validation loss is at or below ``--target`` (``--config.target_loss`` with
``--config.stop_at_target=True``) or for ``--samples`` windows when it never gets there. The seconds to the target
are read from the run's own curve: the training seconds (compilation and evaluation excluded) at that evaluation.
Arms (``--arms``, comma-separated; `ARMS` maps each to its arm in the tuned study): ``ist`` (by width), ``local_sgd``,
``diloco`` and ``data_parallel``, all in the parameter-server mode (rank 0 evaluates the whole model: the sharded
mode's evaluation in place all-reduces ``[B, T, D]`` activations per layer, minutes a run on a 100 Mbit/s link;
evaluation is excluded from the seconds either way).

**Tuned settings.** Each arm trains at what `experiments.text.tuned` chose for it at W = ``--ranks`` on the tuning
split (``tuning.chosen["<arm>_w<W>"]`` of ``--tuned``: Adam's rate, the optimizer state restarted or carried, DiLoCo's
outer rate, IST's scaling), applied as ``--config.FIELD=VALUE`` overrides after the cell's own
(`istjax.launch.tuning.with_settings`). A missing file or choice is refused (exit 2), as is a ``--target`` at or
above the trigram table's validation loss recorded there (``baselines.trigram.test_loss``, 2.064 nats/char): a race
to a loss that counting characters reaches says nothing about the models.

**Time.** A run stops at the target, so its curve ends there; an arm that never reaches it trains all
``--samples`` windows (128,000: the tuned study's budget, 200 rounds at W = 2). On 2 cores at 100 Mbit/s every
arm of the tuned race reached 2.0 nats/char in every seed, each run in 3.5-5.5 minutes with compilation and
evaluations (the 12 runs about an hour); a run that never reaches the target would take, at the race's seconds a
round, about 7 (IST) to 16 minutes (data parallel). ``--timeout`` (2,400 s a run) leaves data
parallel twice its full time.

Command (as root, from the repository root, once ``python -m experiments.text.tuned --workers 2`` has chosen)::

    python -m experiments.text.network --links 100mbit --seeds 0,1,2 --target 2.0

Results: ``experiments/text/results/network.json`` (per cell its overrides and tuned settings, the tuned file's path
and the trigram loss the target is below), rendered by `experiments.text.report` into ``docs/transformers.md``;
figure ``docs/figures/text_network.png`` (every run's validation loss against training seconds and against windows,
`plot`), redrawn from the file by ``--plot``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from experiments.grid import seed_list
from experiments.network import common
from experiments.network import time_to_accuracy as tta
from experiments.text.study import B, CONFIG, K, NAMES
from istjax.core.errors import ArgError
from istjax.launch import study as study_lib
from istjax.launch.metrics import read_metrics
from istjax.launch.tuning import chosen_settings, with_settings

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "experiments" / "text" / "results" / "network.json"
TUNED = ROOT / "experiments" / "text" / "results" / "tuned.json"
FIGURE = ROOT / "docs" / "figures" / "text_network.png"
COLORS = {"ist": "tab:blue", "local_sgd": "tab:green", "diloco": "tab:orange", "data_parallel": "tab:red"}
# A raced arm -> its arm in the tuned study (`experiments.text.tuned.ARMS`), whose choice at W = ranks it trains at.
ARMS = {"ist": "ist_width", "local_sgd": "local_sgd", "diloco": "diloco", "data_parallel": "data_parallel"}
SAMPLES = 128_000  # the tuned study's budget (200 rounds at W = 2): where its arms end below the trigram table
TARGET = 2.0  # nats per character, below the trigram table's 2.064


def cell(ranks: int, link: str, algorithm: str, *, samples: int, eval_every: int, target: float = TARGET,
         settings: Optional[Mapping[str, Any]] = None) -> study_lib.Cell:
    """One (link, arm) of the race: the config on ``ranks`` MPI ranks (parameter server), IST by width, stopping at
    its first evaluation at or below the validation loss ``target`` (``target_loss``, ``stop_at_target``), else
    after ``samples`` windows; ``settings`` (a tuning's choice, `tuned_settings`) applied after the cell's own
    overrides and recorded in its info as ``tuned``."""
    rounds = samples // (ranks * K * B)
    overrides = (f"--config.algorithm.name={algorithm}", "--config.runtime.name=mpi",
                 "--config.runtime.mode=parameter_server", f"--config.num_workers={ranks}",
                 f"--config.local_steps={K}", f"--config.batch_size={B}",
                 *(("--config.model.split=width",) if algorithm == "ist" else ()),
                 f"--config.eval_every={eval_every}", f"--config.num_rounds={rounds}",
                 f"--config.checkpoint_every={rounds}", f"--config.target_loss={target}",
                 "--config.stop_at_target=True",
                 "--config.algorithm.optimizer_state=reset")  # each arm's tuned choice sets its own, where it reads one
    base = study_lib.Cell(f"r{ranks}-{link}-{algorithm}", CONFIG, overrides,
                          {"model": "transformer", "ranks": ranks, "link": link, "algorithm": algorithm})
    return with_settings(base, settings or {}, info={**base.info, "tuned": dict(settings or {})})


def tuned_settings(path: pathlib.Path, ranks: int, arms: Sequence[str]) -> tuple[dict[str, dict[str, Any]], float]:
    """Each of ``arms`` 's settings as `experiments.text.tuned` chose them at W = ``ranks`` (``tuning.chosen
    ["<ARMS[arm]>_w<ranks>"]`` of the results file ``path``, `istjax.launch.tuning.chosen_settings`), and the
    trigram table's validation loss recorded there (``baselines.trigram.test_loss``), which the target must be below.

    Raises:
      ArgError: (``--tuned``) no such file, no choice for an arm at W = ``ranks``, or no trigram loss.
    """
    keys = {a: f"{ARMS[a]}_w{ranks}" for a in arms}
    chosen, doc = chosen_settings(path, list(keys.values()),
                                  why="the race trains each arm at the settings the tuned text study chose",
                                  fix=f"Run `python -m experiments.text.tuned --workers {ranks}` first, or name its "
                                      f"results file with --tuned PATH.")
    trigram = ((doc.get("baselines") or {}).get("trigram") or {}).get("test_loss")
    if trigram is None:
        raise ArgError("--tuned", str(path), f"--tuned {path}: no baselines.trigram.test_loss (the trigram table's "
                       f"validation loss, which the target must be below).", f"Record it with `python -m "
                       f"experiments.text.study --baselines --out {path}`.")
    return {a: chosen[k] for a, k in keys.items()}, float(trigram)


def check_target(target: float, trigram: float, path: pathlib.Path) -> float:
    """``target`` when it is below ``trigram`` (the trigram table's validation loss in the tuned file ``path``).

    Raises:
      ArgError: (``--target``) a target at or above it: counting characters reaches it, so the race says nothing
        about the models.
    """
    if not target < trigram:
        raise ArgError("--target", target, f"--target {target}: at or above the trigram table's validation loss "
                       f"{trigram:.3f} nats/char (baselines.trigram.test_loss of {path}); a race to it is won by "
                       f"counting characters.", f"Give a target below {trigram:.3f}, e.g. --target {TARGET}.")
    return target


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
    return {**r, "label": p.cell.label, "tuned": p.cell.info.get("tuned"), "loss_curve": curve,
            "seconds_to_target": hit and hit[0], "samples_to_target": hit and hit[1]}


def summarise(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (link, algorithm): the seconds to the target over the seeds that reached it (mean, std), how many did,
    the mean windows to the target over those seeds, the mean seconds a round, the bytes a worker sends a round and
    the settings it trained at (``tuned``)."""
    out = []
    for link, algorithm in sorted({(r["link"], r["algorithm"]) for r in runs}):
        mine = [r for r in runs if (r["link"], r["algorithm"]) == (link, algorithm)]
        reached = [r["seconds_to_target"] for r in mine if r.get("seconds_to_target")]
        mean, std = study_lib.mean_std(reached)
        out.append({"link": link, "algorithm": algorithm, "seeds": sorted(r["seed"] for r in mine),
                    "reached": len(reached), "seconds_to_target": mean, "seconds_to_target_std": std,
                    "samples_to_target": study_lib.mean_std(r["samples_to_target"] for r in mine
                                                            if r.get("samples_to_target"))[0],
                    "time_per_round_s": study_lib.mean_std(r["time_per_round_s"] for r in mine
                                                           if r.get("time_per_round_s"))[0],
                    "bytes_per_worker_per_round": next((r["bytes_sent_per_worker_per_round"] for r in mine
                                                        if r.get("bytes_sent_per_worker_per_round")), None),
                    "tuned": next((r["tuned"] for r in mine if r.get("tuned") is not None), None)})
    return out


def plot(doc: Mapping[str, Any], path: pathlib.Path = FIGURE) -> pathlib.Path:
    """Every run's validation loss against its training seconds (left) and against the windows it trained (right),
    an arm's seeds in its colour, with the target and the trigram table's loss as horizontal lines: the left panel
    is the race, the right one what each arm needs to get there."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10.4, 3.8), sharey=True)
    for r in doc["runs"]:
        seconds, windows, loss = zip(*r["loss_curve"]) if r.get("loss_curve") else ((), (), ())
        label = f"{NAMES[r['algorithm']]} ({r['link']})"
        axes[0].plot(seconds, loss, ".-", color=COLORS.get(r["algorithm"]), alpha=0.8, label=label)
        axes[1].plot(windows, loss, ".-", color=COLORS.get(r["algorithm"]), alpha=0.8, label=label)
    for ax, xlabel in zip(axes, ("training seconds (compilation and evaluation excluded)",
                                 "windows trained (all workers)")):
        ax.axhline(doc["target"], color="black", ls=":", lw=1)
        ax.axhline(doc["trigram_loss"], color="gray", ls="--", lw=1)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("validation loss (nats per character)")
    axes[0].set_title(f"to {doc['target']} nats/char (dotted); trigram table dashed")
    handles = dict(zip(*reversed(axes[0].get_legend_handles_labels())))  # one entry per arm
    axes[1].legend(handles.values(), handles.keys(), fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _relative(path: pathlib.Path) -> str:
    """``path`` as the results file records it: from the repository root when under it."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--links", default="100mbit", help="comma-separated link rates (tc units)")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--seeds", type=seed_list, default=[0, 1, 2])
    ap.add_argument("--target", type=float, default=TARGET,
                    help="validation loss (nats per character) to reach; below the tuned file's trigram loss")
    ap.add_argument("--tuned", type=pathlib.Path, default=TUNED,
                    help="the tuned text study's results file, whose choices at W = --ranks the arms train at")
    ap.add_argument("--samples", type=int, default=SAMPLES, help="windows every run trains")
    ap.add_argument("--eval-every", type=int, default=5, help="rounds between evaluations")
    ap.add_argument("--timeout", type=float, default=2400, help="seconds per run before it is killed")
    ap.add_argument("--workdir", default="runs/text-network")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--plot", action="store_true", help="only redraw the figure from --out's file")
    args = ap.parse_args(argv)
    figure = FIGURE if pathlib.Path(args.out).resolve() == OUT else pathlib.Path(args.out).with_suffix(".png")
    if args.plot:
        print(plot(json.loads(pathlib.Path(args.out).read_text()), figure))
        return 0
    arms = args.arms.split(",")
    if any(a not in ARMS for a in arms):
        print(f"--arms: each of {', '.join(ARMS)}", file=sys.stderr)
        return 2
    try:
        settings, trigram = tuned_settings(args.tuned, args.ranks, arms)
        check_target(args.target, trigram, args.tuned)
    except ArgError as e:
        print(f"text network study: {e}", file=sys.stderr)
        return 2
    if (code := common.refused("text network study", args.links)) is not None:
        return code
    cells = [cell(args.ranks, link, a, samples=args.samples, eval_every=args.eval_every, target=args.target,
                  settings=settings[a]) for link in args.links.split(",") for a in arms]
    command = common.command("experiments.text.network", argv)

    def document(runs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"study": "text_network", "command": command, "target": args.target, "ranks": args.ranks,
                "samples": args.samples, "tuned": _relative(args.tuned), "trigram_loss": trigram,
                "cells": {c.label: list(c.overrides) for c in cells},
                "settings": {c.label: c.info["tuned"] for c in cells}, "summary": summarise(runs), "runs": runs}

    runs = common.run_to_file("text_network", cells, args, record=lambda p: record(p, args.target),
                              document=document, tag="tn")
    print(json.dumps(summarise(runs), indent=1))
    print(f"figure: {plot(document(runs), figure)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
