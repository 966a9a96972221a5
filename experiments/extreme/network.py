"""Time to a P@1 target on shaped links: sharded IST against tensor parallelism on xmc-debian-deps.

Tensor parallelism moves about ``7 x H`` activations a sample (all shards, both ways; `istjax.algorithms.tensor.
step_bytes`) whatever the number of labels; IST moves each worker's ``(features + labels) x H / W`` weights both
ways once a round of ``K x B`` samples a worker. Which one reaches a P@1 target sooner on a slow link is measured
here, not assumed: every (link, arm, seed) trains under `experiments.network.slow_net` (P network namespaces joined
by veth links shaped with ``tc`` to the link's rate) through the time-to-accuracy study's `launch` (``istjax train``
under ``mpiexec`` on the namespaces), evaluates every round and stops at the first evaluation at or above
``--target``; its ``time_to_target_s`` counts training only (compilation and evaluation excluded, as in
`experiments.network.time_to_accuracy`). Arms (``--arms``, comma-separated):

* ``ist:K``: sharded IST (no rank holds the whole model), W = P workers, K local steps of B = 128 (the extreme
  study's recipe, ``experiments/configs/xmc_debian_ist.py``, at the Adam settings the race first ran with,
  `RACE_SETTINGS`, or with ``--tuned FILE`` at the choice the tuned extreme study made for the arm on P ranks,
  ``tuning.chosen["<algorithm>_p<P>"]``); a round's all-to-all moves each worker's sub-network
  both ways at once, and its evaluation runs in place by label blocks (`istjax.algorithms.tensor.owner_evaluate`:
  the output layer's rows exchanged for a label block per evaluated chunk, ``[points, H]`` hidden units and each
  rank's top 5, not ``[points, labels]`` partial logits);
* ``tensor_parallel:K``: tensor parallel on P shards, K steps a round (a round is only the unit of evaluation: the
  activations move every step), each step on all W x B = P x 128 examples.

Every run may train up to ``--samples`` samples (``num_rounds`` from the arm's samples a round). Results:
``experiments/extreme/results/network.json`` (the runs, each with its commit; per link and arm the seconds to the
target over the seeds), rendered by `experiments.extreme.report` into ``docs/extreme.md``.

Command (as root, from the repository root)::

    ISTJAX_DATA_DIR=../shared/data python -m experiments.extreme.network --hidden 512 --links 100mbit,1gbit \\
        --arms ist:80,ist:160,tensor_parallel:10 --seeds 0,1,2 --target 0.6 \\
        --tuned experiments/extreme/results/debian.json   # each arm at its tuned choice; the target above the
                                                          # constant predictor's P@1 recorded there

(the committed race; without ``--tuned`` each arm runs at the pinned `RACE_SETTINGS`, as the retired untuned race
did, to P@1 0.5, at 7841fe9).
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from experiments.extreme.study import CONFIG
from experiments.grid import seed_list
from experiments.network import common, slow_net
from experiments.network import time_to_accuracy as tta
from istjax.core.errors import ArgError
from istjax.launch import study as study_lib
from istjax.launch.tuning import chosen_settings, with_settings

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "experiments" / "extreme" / "results" / "network.json"
BATCH = 128
ALGORITHMS = ("ist", "tensor_parallel")
# The race's optimizer settings without --tuned, pinned: those the config shipped when the race first ran (Adam 1e-3,
# its state restarted every round), before the study's tuning moved the config to its choice
# (experiments/extreme/results/network.json records them). With --tuned each arm's choice is applied after them.
RACE_SETTINGS = ("--config.learning_rate=0.001", "--config.algorithm.optimizer_state=reset")


def cell(hidden: int, ranks: int, link: str, algorithm: str, local_steps: int, *, target: float,
         samples: int, settings: Optional[Mapping[str, Any]] = None) -> study_lib.Cell:
    """One (link, arm) of the study: the extreme config at ``hidden`` on ``ranks`` MPI ranks (sharded), evaluated
    every round, stopping at ``target``, for at most ``samples`` samples; ``settings`` (the tuned study's choice for
    the arm, `tuned_settings`) applied after its own overrides and recorded in its info as ``tuned``."""
    rounds = math.ceil(samples / (ranks * local_steps * BATCH))
    overrides = (f"--config.algorithm.name={algorithm}", "--config.runtime.name=mpi", "--config.runtime.mode=sharded",
                 f"--config.num_workers={ranks}", f"--config.sampler.num_owners={ranks}",
                 f"--config.model.hidden=({hidden},)", f"--config.local_steps={local_steps}",
                 f"--config.batch_size={BATCH}", f"--config.target_accuracy={target}",
                 "--config.stop_at_target=True", "--config.eval_every=1", "--config.eval_train_examples=1000",
                 f"--config.num_rounds={rounds}", f"--config.checkpoint_every={rounds}", *RACE_SETTINGS)
    base = study_lib.Cell(f"h{hidden}-r{ranks}-{link}-{algorithm}-k{local_steps}", CONFIG, overrides,
                          {"model": f"h{hidden}", "ranks": ranks, "link": link, "algorithm": algorithm,
                           "hidden": hidden, "local_steps": local_steps, "batch_size": BATCH})
    if settings is None:
        return base
    return with_settings(base, settings, info={**base.info, "tuned": dict(settings)})


def tuned_settings(path: pathlib.Path, ranks: int, algorithms: Sequence[str], target: float
                   ) -> dict[str, dict[str, Any]]:
    """Each algorithm's settings as the tuned extreme study chose them on ``ranks`` ranks (``tuning.chosen
    ["<algorithm>_p<ranks>"]`` of its results file ``path``, `istjax.launch.tuning.chosen_settings`).

    Raises:
      ArgError: (``--tuned``) no such file or no choice for an arm; (``--target``) a target at or below the
        most-frequent-labels predictor's test P@1 recorded there: counting labels reaches it.
    """
    keys = {a: f"{a}_p{ranks}" for a in algorithms}
    chosen, doc = chosen_settings(
        path, list(keys.values()), why="the race trains each arm at the settings the tuned extreme study chose",
        fix=f"Run `python -m experiments.extreme.study --tune` with the arms on {ranks} ranks first, or name its "
            f"results file with --tuned PATH.")
    constant = ((doc.get("baselines") or {}).get("most_frequent_labels") or {}).get("test_precision_at_1")
    if constant is not None and not target > constant:
        raise ArgError("--target", target, f"--target {target}: at or below the most-frequent-labels predictor's "
                       f"test P@1 {constant:.3f} (baselines.most_frequent_labels of {path}); a race to it is won "
                       f"by counting labels.", f"Give a target above {constant:.3f}, e.g. --target 0.5.")
    return {a: chosen[k] for a, k in keys.items()}


def record(p: study_lib.Planned) -> Optional[dict[str, Any]]:
    """The time-to-accuracy study's row of the run (`experiments.network.time_to_accuracy.row`) with the arm's K."""
    r = tta.row(p)
    if r is None:
        return None
    return {**r, "label": p.cell.label, **{k: p.cell.info[k] for k in ("hidden", "local_steps", "batch_size")}}


def summarise(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (link, algorithm, K): the seconds to the target over the seeds that reached it (mean, std), how many
    did, the mean seconds a round and the bytes a worker moves a round (what the links carried)."""
    out = []
    keys = sorted({(r["link"], r["algorithm"], r["local_steps"]) for r in runs},
                  key=lambda k: (slow_net.Link(k[0]).bits_per_second(), k[1], k[2]))
    for link, algorithm, k in keys:
        mine = [r for r in runs if (r["link"], r["algorithm"], r["local_steps"]) == (link, algorithm, k)]
        reached = [r["time_to_target_s"] for r in mine if r.get("time_to_target_s")]
        mean, std = study_lib.mean_std(reached)
        round_s = study_lib.mean_std(r["time_per_round_s"] for r in mine if r.get("time_per_round_s"))[0]
        out.append({"link": link, "algorithm": algorithm, "local_steps": k, "seeds": sorted(r["seed"] for r in mine),
                    "reached": len(reached), "seconds_to_target": mean, "seconds_to_target_std": std,
                    "samples_to_target": study_lib.mean_std(r["samples_to_target"] for r in mine
                                                            if r.get("samples_to_target"))[0],
                    "time_per_round_s": round_s,
                    "bytes_per_worker_per_round": next((r["bytes_sent_per_worker_per_round"] for r in mine
                                                        if r.get("bytes_sent_per_worker_per_round")), None)})
    return out


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--links", default="1gbit,100mbit", help="comma-separated link rates (tc units)")
    ap.add_argument("--arms", default="ist:40,ist:80,ist:160,tensor_parallel:10", help="algorithm:K, comma-separated")
    ap.add_argument("--seeds", type=seed_list, default=[0, 1, 2])
    ap.add_argument("--target", type=float, default=0.5, help="test P@1 to reach")
    ap.add_argument("--samples", type=int, default=204800, help="the most samples a run trains")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run before it is killed")
    ap.add_argument("--workdir", default="runs/extreme-network")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--tuned", default=None, help="a tuned extreme study's results file (e.g. "
                    "experiments/extreme/results/debian.json): each arm at its choice there; without it, at the "
                    "pinned RACE_SETTINGS (Adam 1e-3, state restarted)")
    return ap.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if (code := common.refused("extreme network study", args.links)) is not None:
        return code
    arms = [(a, int(k)) for a, _, k in (s.partition(":") for s in args.arms.split(","))]
    for a, _ in arms:
        if a not in ALGORITHMS:
            print(f"--arms: {a!r} is not one of {ALGORITHMS}", file=sys.stderr)
            return 2
    try:
        settings = (None if args.tuned is None else
                    tuned_settings(pathlib.Path(args.tuned), args.ranks, sorted({a for a, _ in arms}), args.target))
    except ArgError as e:
        print(f"extreme network study: {e}", file=sys.stderr)
        return 2
    cells = [cell(args.hidden, args.ranks, link, a, k, target=args.target, samples=args.samples,
                  settings=None if settings is None else settings[a])
             for link in args.links.split(",") for a, k in arms]
    command = common.command("experiments.extreme.network", argv)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    def document(runs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"study": "extreme_network", "command": command, "started": started,
                "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "target": args.target, "hidden": args.hidden,
                "ranks": args.ranks, "samples": args.samples, "tuned": args.tuned,
                "cells": {c.label: list(c.overrides) for c in cells},
                "summary": summarise(runs), "runs": runs}

    runs = common.run_to_file("extreme_network", cells, args, record=record, document=document, tag="xn")
    print(json.dumps(summarise(runs), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
