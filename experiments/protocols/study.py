"""The studies of docs/protocols.md (issue 59): when must workers talk, on the speech MLP, tuned arms, 3 seeds.

Every cell is `experiments/configs/keywords_speech.py:2` (the 35 synthesised keywords, test voices unseen in
training) at a narrower hidden layer (`HIDDEN`, so that eight workers train on two cores), plain SGD, with the study
runner's tuning protocol (`experiments.grid.run_grid` with a `experiments.grid.Tuning`): each arm's rate (and its
protocol's knob where it has one) is chosen on the last 10 % of the training clips at the reported budget, seed 0,
then the arm trains at its choice over the seeds and is scored on the test clips. The linear model on the same
features is the regime baseline (``--baselines``).

Studies (``python -m experiments.protocols.study STUDY --tune``), each its results file under
``experiments/protocols/results/``:

* ``dynamic`` (``dynamic.json``): Kamp et al.'s claim, about an order of magnitude fewer model transfers than
  periodic averaging at virtually the same loss. W = 8 (a partial synchronisation needs five or more), b = K = 5;
  periodic averaging (``dynamic_averaging`` at delta 0: every round a full synchronisation, each worker's own
  optimizer state, the same code) and dynamic averaging at each of `DELTAS`, each arm's rate tuned over the same
  grid. `experiments.protocols.report` reads, per seed, the transfers and bytes each dynamic arm has moved when its
  test loss first reaches periodic averaging's final one, off the curves (every `EVAL_EVERY` rounds).
* ``drift`` (``drift.json``): the same arms on a stream whose labels are permuted from round `DRIFT_ROUND` on
  (``data.drift_round``, `istjax.data.drift`: every keyword renamed, the evaluation following the concept in force),
  tuned the same way (the final loss is the new concept's): the transfers each protocol makes per round before and
  after the drift (every record sums its rounds' ``model_transfers``), and transfers and bytes to periodic
  averaging's final loss.
* ``admm`` (``admm.json``): consensus ADMM against local SGD at equal bytes (the same rounds: ADMM moves local SGD's
  bytes), W = 4, K = 20, ADMM's ``rho`` tuned with its rate; IST beside them at W = 4 at equal bytes (its rounds
  times the ratio of local SGD's bytes a round to its own, `IST_ROUNDS_FACTOR`).
* ``codistill`` (``codistill.json``): codistillation (2 groups of 2 replicas, local SGD inside) against data parallel
  with 4 workers: test accuracy and rounds to `TARGET`, and prediction churn (`istjax.launch.churn`) between the
  two groups of each codistilled run, between codistilled runs of two seeds and between data-parallel runs of two
  seeds, recorded per pair in the results file (``churn``).

The DELTAS grid was placed before any reported run by `experiments.protocols.pilot` (the comment at `DELTAS` gives
its numbers); no variant is chosen on the test clips. None of these studies has run yet. ::

    python -m experiments.protocols.study dynamic --baselines    # the linear model (a minute)
    python -m experiments.protocols.study dynamic --tune          # tuning, then 3 seeds
    python -m experiments.protocols.study drift --tune
    python -m experiments.protocols.study admm --tune
    python -m experiments.protocols.study codistill --tune
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from typing import Any, Optional

from experiments.grid import REPO, Cell, Tuning, parser, record_baselines, run_grid
from istjax.launch.metrics import read_metrics
from istjax.launch.study import Planned, run_record
from istjax.launch.tuning import Objective, arm_grid

CONFIG = "experiments/configs/keywords_speech.py:2"
RESULTS = REPO / "experiments" / "protocols" / "results"
STUDIES = ("dynamic", "drift", "admm", "codistill")
HIDDEN = 512
LEARNING_RATES = (0.01, 0.03, 0.1)  # plain SGD, every arm
ROUNDS = {"dynamic": 120, "drift": 120, "admm": 60, "codistill": 60}
DRIFT_ROUND, DRIFT_SEED = 60, 0  # drift: the labels are renamed from this round on (halfway), by this seed's cycle
EVAL_EVERY = 5
# dynamic: the thresholds on ||w_i - r||^2 (squared distance over every parameter, float32), placed before any
# reported run by the pilot (`python -m experiments.protocols.pilot`, training clips only): along periodic averaging a
# worker drifts, in one round from the last average, a median 0.105 -> 0.040 (round 0 -> 119) at lr 0.01,
# 0.60 -> 0.16 at 0.03 and 4.6 -> 0.65 at 0.1. The grid spans from under one round's drift at the top rate to many
# rounds' at the middle one (a first guess, 0.1-3, was replaced by it).
DELTAS = (0.3, 1.0, 3.0, 10.0)
RHOS = (0.01, 0.1, 1.0)  # admm: rho, tuned with the rate
# admm: IST at W = 4 moves a quarter of local SGD's bytes a round (`algorithm.comm`: 2,116,096 against 8,464,384), so
# it trains four times the rounds (tests/test_protocols_study.py checks the ratio)
IST_ROUNDS_FACTOR = 4
TARGET = 0.5  # codistill: the test accuracy to reach (the config's own target), fixed before any run
TRACKED = ("round", "samples_seen", "bytes_total", "test_accuracy", "test_loss", "model_transfers", "violations",
           "full_sync")


def _cell(label: str, algorithm: str, workers: int, local_steps: int, rounds: int, extra: Sequence[str] = (),
          **info: Any) -> Cell:
    flags = (f"--config.algorithm.name={algorithm}", f"--config.model.hidden=({HIDDEN},)",
             f"--config.num_workers={workers}", f"--config.local_steps={local_steps}",
             f"--config.num_rounds={rounds}", f"--config.eval_every={EVAL_EVERY}",
             f"--config.checkpoint_every={rounds}", "--config.batch_size=32", "--config.runtime.loss_split=False",
             *extra)
    return Cell(label, CONFIG, flags, {"algorithm": algorithm, "num_workers": workers, **info})


def cells(study: str) -> list[Cell]:
    """The study's cells (module docstring)."""
    rounds = ROUNDS[study]
    if study in ("dynamic", "drift"):
        drift = ((f"--config.data.drift_round={DRIFT_ROUND}", f"--config.data.drift_seed={DRIFT_SEED}")
                 if study == "drift" else ())
        return [_cell("periodic" if d == 0 else f"dynamic_{d:g}".replace(".", "_"), "dynamic_averaging", 8, 5,
                      rounds, (f"--config.algorithm.delta={float(d)}", *drift), delta=float(d))
                for d in (0, *DELTAS)]
    if study == "admm":
        return [_cell("local_sgd", "local_sgd", 4, 20, rounds), _cell("admm", "admm", 4, 20, rounds),
                _cell("ist", "ist", 4, 20, rounds * IST_ROUNDS_FACTOR)]
    target = (f"--config.target_accuracy={TARGET}",)
    return [_cell("data_parallel", "data_parallel", 4, 20, rounds, target),
            _cell("codistillation", "codistillation", 4, 20, rounds,
                  (*target, "--config.algorithm.groups=2", "--config.algorithm.teacher_every=1",
                   "--config.algorithm.burn_in=5"), groups=2)]


def grid(cell: Cell) -> dict:
    """An arm's tuning grid: the rate over `LEARNING_RATES` (plain SGD keeps no state to restart or carry); ADMM's
    ``rho`` over `RHOS` with it; codistillation's weight over 0.5 and 1."""
    variants = {"admm": {"algorithm.rho": RHOS},
                "codistillation": {"algorithm.distill_weight": (0.5, 1.0)}}.get(cell.info["algorithm"])
    return arm_grid(cell, LEARNING_RATES, optimizer_states=(), variants=variants, root=REPO)


def tuning_of(study: str) -> Tuning:
    """Each arm judged on the tuning split by its final test loss (dynamic and drift: the loss is what the claim
    reads) or accuracy."""
    objective = Objective("test_loss", "min") if study in ("dynamic", "drift") else Objective("test_accuracy", "max")
    return Tuning(grid, objective, 0.1)


def record(p: Planned) -> Optional[dict[str, Any]]:
    """`run_record` plus the run's curve (every evaluation's round, samples, bytes, test accuracy and loss)."""
    r = run_record(p)
    if r is None:
        return None
    curve = [{k: m[k] for k in TRACKED if k in m} for m in read_metrics(p.run_dir) if "test_accuracy" in m]
    return {**r, "curve": curve, "run_dir": str(p.run_dir.relative_to(p.run_dir.parents[1]))}  # <label>/s<seed>


def churn_pairs(runs: Sequence[dict[str, Any]], workdir) -> list[dict[str, Any]]:
    """Prediction churn (`istjax.launch.churn`) between every two seeds of each arm, and between the groups of each
    codistilled run: ``[{"arm", "pair", "churn"}]``."""
    from istjax.launch.churn import churn, group_churn

    out = []
    by_arm: dict[str, list] = {}
    for r in runs:
        by_arm.setdefault(r["label"], []).append(r)
    for arm, rs in by_arm.items():
        for a, b in itertools.combinations(sorted(rs, key=lambda r: r["seed"]), 2):
            out.append({"arm": arm, "pair": f"seeds {a['seed']}-{b['seed']}",
                        "churn": churn(workdir / a["run_dir"], workdir / b["run_dir"])})
        if arm == "codistillation":
            out += [{"arm": arm, "pair": f"groups, seed {r['seed']}",
                     "churn": group_churn(workdir / r["run_dir"])["mean"]} for r in rs]
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = parser("python -m experiments.protocols.study", __doc__.split("\n\n")[0], STUDIES, baselines=True,
               tune=True)
    args = p.parse_args(argv)
    out = RESULTS / f"{args.study}.json"
    if args.plot:
        if args.study != "drift":
            p.error(f"--plot: the {args.study} study has no figure (its tables are in docs/protocols.md); the drift "
                    f"study draws one")
        from experiments.protocols.report import plot

        print(f"wrote {plot()}")
        return 0
    if args.baselines:
        print(f"wrote {record_baselines(out, cells(args.study)[0])}")
        return 0
    workdir = args.workdir or REPO / "runs" / "protocols"
    tuning = tuning_of(args.study) if args.tune else None
    command = "python -m experiments.protocols.study " + " ".join(sys.argv[1:] if argv is None else argv)
    code = run_grid(f"protocols {args.study}", cells(args.study), args.seeds, workdir, out, command.strip(),
                    only=[s for s in args.only.split(",") if s], jobs=args.jobs, tuning=tuning, record=record)
    if args.study == "codistill" and code == 0:
        _add_churn(out, workdir)
    return code


def _add_churn(out, workdir) -> None:
    import json

    doc = json.loads(out.read_text())
    doc["churn"] = churn_pairs(doc.get("runs", []), workdir)
    out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
