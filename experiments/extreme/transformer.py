"""IST against tensor parallelism on a transformer at the same width under the same memory cap per rank.

The extreme-classification study's question (`experiments.extreme.study`: which algorithm trains a model no rank
holds whole, and how well) asked of the character-level transformer of ``experiments/configs/
shakespeare_transformer.py``, both arms on P = 2 ranks of ``mpiexec``, each rank in its own cgroup limited to
``--cap`` and ``runtime.memory_limit`` set to the same cap (`experiments.extreme.limits`), the same samples
(``--rounds`` rounds of W = P workers x K x B windows):

* ``ist``: sharded IST by width (W = P workers; every layer's heads and feed-forward units dealt stratified by P
  owners, so no rank holds the whole model), test-time scaling, Adam's state restarted every round (pinned: the
  config now carries it);
* ``tensor_parallel``: Megatron's split of the same network (`istjax.algorithms.tensor`, from the transformer's own
  ``tensor_logits``): each rank holds 1/P of every layer's heads and units and the rest whole, one all-reduce after
  each attention and feed-forward branch, forward and backward; exact full-model training on the same batches.

Per run: validation nats/char (the held-out plays' windows), each rank's peak memory under the cap, the bytes a
worker moves per round (measured), and the time per round. The results file
(``experiments/extreme/results/transformer.json``) has the study runner's record, ``rows`` (one per arm) and the
trivial baselines on the same windows (`istjax.launch.baselines`: character n-gram tables; the regime, the trigram
table).

With ``--tune``, each arm's Adam rate (and IST's optimizer state; tensor parallelism carries Adam's state by
construction) is first chosen on the tuning split (`istjax.launch.tuning.tune`: the last tenth of the training
plays' windows evaluated, the rest trained on, the held-out plays never read; seed 0, a quarter of the rounds,
``--tune-rounds``) with the same trainer, and both arms train at their choice; the file records it as ``tuning``.

Command (as root, from the repository root)::

    python -m experiments.extreme.transformer --cap 2GiB --rounds 30 --seeds 0,1,2 [--tune]
"""

from __future__ import annotations

import argparse
import json
import pathlib
from collections.abc import Sequence
from typing import Any, Optional

from experiments.extreme import study as extreme
from istjax.core.memory import parse_bytes
from istjax.launch import study as study_lib
from istjax.launch.args import load_config
from istjax.launch.baselines import baseline_sections
from istjax.launch.tuning import Objective, arm_grid, recorded_tuning, tune, tuned_cells

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = "experiments/configs/shakespeare_transformer.py"
OUT = ROOT / "experiments" / "extreme" / "results" / "transformer.json"
RATES = (1e-3, 2e-3, 4e-3)  # --tune's Adam rates: half, equal to and twice the config's 2e-3
ARMS = {"ist": ("--config.algorithm.name=ist", "--config.runtime.mode=sharded", "--config.sampler.name=stratified"),
        "tensor_parallel": ("--config.algorithm.name=tensor_parallel", "--config.runtime.mode=sharded")}


def cells(cap: int, rounds: int, ranks: int = 2) -> list[study_lib.Cell]:
    """One cell per arm (labels ``<algorithm>_p<P>``): the shipped transformer config on ``ranks`` ranks under
    ``cap`` bytes a rank, ``rounds`` rounds of the same batches."""
    common = ("--config.runtime.name=mpi", f"--config.num_workers={ranks}", f"--config.sampler.num_owners={ranks}",
              f"--config.num_rounds={rounds}", f"--config.eval_every={rounds}", f"--config.checkpoint_every={rounds}",
              f"--config.runtime.memory_limit={cap}",
              "--config.algorithm.optimizer_state=reset")  # as this study ran
    return [study_lib.Cell(f"{name}_p{ranks}", CONFIG, (*arm, *common), {"algorithm": name, "ranks": ranks})
            for name, arm in ARMS.items()]


def record(p: study_lib.Planned) -> Optional[dict[str, Any]]:
    """The runner's record (validation nats/char is its ``test_loss``) plus the ranks' peaks under the cap."""
    base = study_lib.run_record(p)
    if base is None:
        return None
    try:
        lim = json.loads(extreme._limit_file(p.run_dir).read_text())["run"]
    except (OSError, ValueError, KeyError):
        lim = {}
    peaks = lim.get("rank_peak_bytes") or {}
    return {**base, "cgroup_peak_bytes": max(peaks.values(), default=None)}


def rows(cells_: Sequence[study_lib.Cell], runs: Sequence[dict]) -> list[dict]:
    """One row per arm: the seeds that trained, validation nats/char (mean, sample std), the largest rank's cgroup
    peak, bytes a worker moves per round and seconds per round."""
    out = []
    for c in cells_:
        mine = [r for r in runs if r["label"] == c.label]
        if not mine:
            continue
        loss = study_lib.mean_std(r.get("test_loss") for r in mine)
        out.append({**c.info, "label": c.label, "seeds": [r["seed"] for r in mine],
                    "validation_loss_mean": loss[0], "validation_loss_std": loss[1],
                    "cgroup_peak_bytes": max((r["cgroup_peak_bytes"] or 0 for r in mine), default=None),
                    "bytes_per_worker_per_round": mine[0].get("bytes_per_worker_per_round"),
                    "time_per_round_s": study_lib.mean_std(r["time_per_round_s"] for r in mine)[0]})
    return out


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cap", default="2GiB", help="memory a rank may hold (cgroup limit and runtime.memory_limit)")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--workdir", default="runs/extreme_transformer")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds a run may take")
    ap.add_argument("--mpiexec", default=str(pathlib.Path(__import__("sys").executable).parent / "mpiexec"))
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--tune", action="store_true", help="first choose each arm's Adam rate (and IST's optimizer "
                    "state) on the tuning split, seed 0, runs under WORKDIR/tuning (module docstring)")
    ap.add_argument("--tune-rounds", type=int, default=None, help="rounds a tuning run trains (default a quarter "
                    "of --rounds)")
    args = ap.parse_args(argv)
    cap = parse_bytes(args.cap)
    cells_ = cells(cap, args.rounds)
    seeds = [int(s) for s in args.seeds.split(",")]
    command = "python -m experiments.extreme.transformer " + " ".join(argv if argv is not None else
                                                                        __import__("sys").argv[1:])
    # the trivial baselines on the same validation windows: unigram, bigram, trigram tables (the regime: trigram)
    sections = baseline_sections(load_config(str(ROOT / CONFIG)))
    train = extreme.trainer(cap, args.timeout, args.mpiexec)
    if args.tune:
        rounds = args.tune_rounds or max(1, args.rounds // 4)
        tuning = tune(cells(cap, rounds), lambda c: arm_grid(c, RATES, root=ROOT), args.workdir,
                      objective=Objective("test_loss", "min"), root=ROOT, study="extreme_transformer tuning",
                      train=train, earlier=recorded_tuning(args.out))
        cells_, sections = tuned_cells(cells_, tuning), {**sections, "tuning": {**tuning, "rounds": rounds}}
    outcome = study_lib.run_study("extreme_transformer", cells_, seeds, args.workdir, root=ROOT, command=command,
                                  out=args.out, train=train, record=record, sections=sections)
    doc = json.loads(pathlib.Path(args.out).read_text())
    doc["cap_bytes"] = cap
    doc["rows"] = rows(cells_, outcome.records)
    study_lib.write_json(args.out, doc)


if __name__ == "__main__":
    main()
