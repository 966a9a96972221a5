"""The protocols study's tables and figure: ``experiments/protocols/results/{dynamic,drift,admm,codistill}.json``
(``python -m experiments.protocols.study STUDY --tune``). Registered in `experiments.tables` when
`experiments.report` imports this module; the pages carry their markers once the files hold reported runs.

Every number is read off the runs' curves (each evaluation's round, bytes, test loss and accuracy, and the model
transfers its rounds counted) by the pure functions below, fixed before any reported run:

* `same_loss`: per seed, periodic averaging's final test loss, the loss "virtually the same" as it (within
  `SAME_LOSS`), and each protocol's model transfers and bytes until its first evaluation at or below that loss;
  `transfer_ratios` and `claim_verdict` read Kamp et al.'s claim (`CLAIMED` times fewer transfers) per ``delta``;
* `transfers_per_round`: the mean transfers a round in each record's window (the drift figure and table);
* `first_reached`: rounds to a target accuracy (codistillation against data parallel).
"""

from __future__ import annotations

import json
import pathlib
import statistics
from collections.abc import Sequence
from typing import Any, Optional

from experiments.claims import claim
from experiments.tables import (baseline_cells, cell, headline_row, markdown_table, mean_spread, nbytes,
                               points_spread, row_of, runs_of, scalar, settings_words, table, tuning_table)
from istjax.launch.metrics import format_mean_std
from istjax.launch.study import paired_difference

DYNAMIC = "experiments/protocols/results/dynamic.json"
DRIFT = "experiments/protocols/results/drift.json"
ADMM = "experiments/protocols/results/admm.json"
CODISTILL = "experiments/protocols/results/codistill.json"
SOURCES = {"dynamic": DYNAMIC, "drift": DRIFT, "admm": ADMM, "codistill": CODISTILL}
ROOT = pathlib.Path(__file__).resolve().parents[2]
FIGURE = ROOT / "docs" / "figures" / "protocols_drift.png"
SAME_LOSS = 1.02  # "virtually the same loss": within 2 % of periodic averaging's final test loss (fixed before runs)
CLAIMED = 10.0  # Kamp et al.: about an order of magnitude fewer model transfers than periodic averaging
ARM_NAMES = {"periodic": "periodic averaging (delta 0)", "local_sgd": "local SGD", "admm": "consensus ADMM",
             "ist": "IST (4x the rounds: equal bytes)", "data_parallel": "data parallel",
             "codistillation": "codistillation (2 groups of 2)"}


def arm_name(label: str) -> str:
    if label.startswith("dynamic_"):
        return f"dynamic averaging, delta {label[len('dynamic_'):].replace('_', '.')}"
    return ARM_NAMES.get(label, label)


# ----------------------------------------------------------------------------------------------------------------
# Reading the curves

def dynamic_labels(d: dict) -> list[str]:
    """The dynamic arms' labels, in the file's order (every cell but periodic averaging)."""
    return [r["label"] for r in d.get("rows", []) if r["label"].startswith("dynamic_")]


def transfers_until(curve: Sequence[dict], point: dict) -> float:
    """The model transfers counted over the rounds up to ``point`` (each record sums its window's)."""
    return sum(p.get("model_transfers", 0.0) for p in curve if p["round"] <= point["round"])


def first_below(curve: Sequence[dict], loss: float) -> Optional[dict]:
    """The first evaluation whose test loss is at or below ``loss``, or None."""
    return next((p for p in curve if p.get("test_loss") is not None and p["test_loss"] <= loss), None)


def first_reached(curve: Sequence[dict], target: float) -> Optional[dict]:
    """The first evaluation whose test accuracy is at or past ``target``, or None."""
    return next((p for p in curve if p.get("test_accuracy") is not None and p["test_accuracy"] >= target), None)


def _cost(curve: Sequence[dict], point: Optional[dict]) -> Optional[dict]:
    if point is None:
        return None
    return {"round": point["round"], "transfers": transfers_until(curve, point), "bytes": point["bytes_total"]}


def same_loss(d: dict, label: str) -> list[dict]:
    """Per seed both cells trained: periodic averaging's final loss, the loss to reach (``SAME_LOSS`` times it),
    and periodic averaging's and ``label``'s rounds, transfers and bytes until they first reach it (None: not
    reached), with ``ratio`` periodic's transfers over the arm's (None where the arm did not reach it; infinite
    where it reached it with none)."""
    periodic = {r["seed"]: r for r in runs_of(d, "periodic")}
    out = []
    for run in runs_of(d, label):
        p = periodic.get(run["seed"])
        if p is None:
            continue
        goal = SAME_LOSS * p["curve"][-1]["test_loss"]
        base, arm = _cost(p["curve"], first_below(p["curve"], goal)), _cost(run["curve"],
                                                                             first_below(run["curve"], goal))
        ratio = None if arm is None or base is None else (
            float("inf") if arm["transfers"] == 0 else base["transfers"] / arm["transfers"])
        out.append({"seed": run["seed"], "loss": goal, "periodic": base, "arm": arm, "ratio": ratio})
    return out


def transfer_ratios(d: dict, label: str) -> str:
    """Periodic's transfers over ``label``'s to the same loss: mean ± std over the seeds that reached it, range."""
    read = same_loss(d, label)
    ratios = [s["ratio"] for s in read if s["ratio"] is not None]
    missing = len(read) - len(ratios)
    if not ratios:
        return f"not reached ({len(read)} seeds)"
    finite = [r for r in ratios if r != float("inf")]
    text = (mean_spread(finite, 1, "x") + f", range {min(finite):.1f}-{max(finite):.1f}x" if finite else "")
    if len(finite) < len(ratios):
        text += f"{'; ' if text else ''}{len(ratios) - len(finite)} seed(s) with no transfer at all"
    return text + (f"; {missing} of {len(read)} seeds never reached it" if missing else "")


def claim_verdict(d: dict) -> str:
    """Met at a ``delta`` whose every seed reached periodic averaging's loss with at least `CLAIMED` times fewer
    transfers; else missed, with the best lowest-seed ratio of any delta."""
    best = None
    for label in dynamic_labels(d):
        read = same_loss(d, label)
        if not read or any(s["ratio"] is None for s in read):
            continue
        low = min(s["ratio"] for s in read)
        best = (low, label) if best is None or low > best[0] else best
        if low >= CLAIMED:
            return f"met at {arm_name(label)} (its lowest seed {low:.1f}x, the claim about {CLAIMED:g}x)"
    if best is None:
        return "missed (no delta reached periodic averaging's loss in every seed)"
    return (f"missed (the best, {arm_name(best[1])}, {best[0]:.1f}x fewer transfers in its lowest seed; the claim "
            f"about {CLAIMED:g}x)")


def transfers_per_round(d: dict, label: str) -> list[tuple[int, float]]:
    """``(round, mean transfers a round)`` for each record of ``label``'s runs, the mean over seeds of each
    record's window (its transfers over the rounds since the previous record)."""
    runs = runs_of(d, label)
    if not runs:
        return []
    out = []
    for i, point in enumerate(runs[0]["curve"]):
        since = runs[0]["curve"][i - 1]["round"] if i else 0
        values = [r["curve"][i].get("model_transfers", 0.0) / (point["round"] - since) for r in runs
                  if len(r["curve"]) > i]
        out.append((point["round"], statistics.mean(values)))
    return out


# ----------------------------------------------------------------------------------------------------------------
# Tables

def _metric(r: Optional[dict], metric: str) -> str:
    if r is None or f"{metric}_mean" not in r:
        return "-"
    return format_mean_std(r[f"{metric}_mean"], r[f"{metric}_std"], len(r["seeds"]))


def _settings(r: Optional[dict]) -> str:
    return settings_words((r or {}).get("tuned") or {}) or "-"


def _ends(d: dict, label: str, key: str) -> list[float]:
    return [run["curve"][-1][key] if key != "transfers" else transfers_until(run["curve"], run["curve"][-1])
            for run in runs_of(d, label) if run.get("curve")]


def _averaging(d: dict, drift_round: Optional[int] = None) -> str:
    """Periodic and dynamic averaging: each arm's choice, final loss and accuracy, transfers and bytes over the
    run, to periodic averaging's loss, and the ratio; with ``drift_round``, transfers a round before and after."""
    head = ["arm", "chosen settings (tuning)", "test loss at the end", "test accuracy at the end",
            "model transfers, whole run", "bytes, whole run (all workers)",
            f"transfers to periodic averaging's loss (x{SAME_LOSS:g})", "periodic's transfers over the arm's"]
    if drift_round is not None:
        head += [f"transfers a round before round {drift_round}", "after it"]
    rows = []
    for label in ["periodic", *dynamic_labels(d)]:
        r = row_of(d, label)
        reads = [s for s in same_loss(d, label) if s["arm"] is not None]
        row = [arm_name(label), _settings(r), mean_spread(_ends(d, label, "test_loss"), 3),
               _metric(r, "test_accuracy"), mean_spread(_ends(d, label, "transfers"), 0),
               mean_spread([b / 1e9 for b in _ends(d, label, "bytes_total")], 2, " GB"),
               mean_spread([s["arm"]["transfers"] for s in reads], 0), "-" if label == "periodic" else
               transfer_ratios(d, label)]
        if drift_round is not None:
            per = transfers_per_round(d, label)
            before = [v for rnd, v in per if rnd <= drift_round]
            after = [v for rnd, v in per if rnd > drift_round]
            row += [cell(statistics.mean(before)) if before else "-", cell(statistics.mean(after)) if after else "-"]
        rows.append(row)
    return markdown_table(head, rows + baseline_cells(d, len(head), {2: "test_loss", 3: "test_accuracy"}))


table("protocols_dynamic", DYNAMIC, shows=("test_loss", "test_accuracy"))(lambda d: _averaging(d))
table("protocols_drift", DRIFT, shows=("test_loss", "test_accuracy"))(
    lambda d: _averaging(d, _drift_round(d)))
for _study, _src in (("dynamic", DYNAMIC), ("drift", DRIFT)):
    scalar(f"protocols.{_study}.verdict", _src, claim_verdict)


def _drift_round(d: dict) -> Optional[int]:
    """The drift's round, from the reported cells' overrides (``--config.data.drift_round=``)."""
    flag = "--config.data.drift_round="
    for r in d.get("rows", []):
        for o in r.get("overrides", ()):
            if o.startswith(flag):
                return int(o[len(flag):])
    return None


@table("protocols_admm", ADMM, shows=("test_accuracy",))
def _admm(d):
    head = ["arm", "chosen settings (tuning)", "rounds", "bytes a worker sends a round", "test accuracy at the end",
            "minus local SGD (paired by seed)"]
    rows = []
    for label in ("local_sgd", "admm", "ist"):
        r = row_of(d, label)
        paired = None if label == "local_sgd" else paired_difference(runs_of(d, label), runs_of(d, "local_sgd"),
                                                                     "test_accuracy")
        rows.append([arm_name(label), _settings(r), cell(r.get("rounds")) if r else "-",
                     nbytes(r["bytes_per_worker_per_round"], binary=False) if r else "-", _metric(r, "test_accuracy"),
                     points_spread(paired["differences"]) if paired else "-"])
    return markdown_table(head, rows + baseline_cells(d, len(head), {4: "test_accuracy"}))


def _target(d: dict) -> Optional[float]:
    flag = "--config.target_accuracy="
    found = [o[len(flag):] for r in d.get("rows", []) for o in r.get("overrides", ()) if o.startswith(flag)]
    return float(found[0]) if found else None


@table("protocols_codistill", CODISTILL, shows=("test_accuracy",))
def _codistill(d):
    target = _target(d)
    head = ["arm", "chosen settings (tuning)", "test accuracy at the end", f"rounds to {target:g}"]
    rows = []
    for label in ("data_parallel", "codistillation"):
        hits = [first_reached(run["curve"], target) for run in runs_of(d, label)]
        got = [h["round"] for h in hits if h]
        rows.append([arm_name(label), _settings(row_of(d, label)), _metric(row_of(d, label), "test_accuracy"),
                     mean_spread(got, 1) + (f" ({len(hits) - len(got)} of {len(hits)} not reached)"
                                          if len(got) < len(hits) else "")])
    churn = markdown_table(["models compared", "pairs", "prediction churn (mean ± std)"],
                           [[k, cell(len(v)), f"{statistics.mean(v):.3f}" + (
                               f" ± {statistics.stdev(v):.3f}" if len(v) > 1 else "")]
                            for k, v in churn_groups(d).items()])
    return (markdown_table(head, rows + baseline_cells(d, len(head), {2: "test_accuracy"}))
            + "\n\nPrediction churn, the fraction of test clips two models label differently:\n\n" + churn)


def churn_groups(d: dict) -> dict[str, list[float]]:
    """The file's churn pairs grouped: two data-parallel runs (independent models), two codistilled runs, the two
    groups of one codistilled run."""
    groups: dict[str, list[float]] = {}
    for p in d.get("churn", []):
        kind = ("the two groups of one codistilled run" if p["pair"].startswith("groups") else
                f"two {arm_name(p['arm'])} runs (seeds apart)")
        groups.setdefault(kind, []).append(p["churn"])
    return groups


ALL_TARGET = 0.5  # every protocol's bytes to this test accuracy (the codistill study's target), fixed before runs


def to_target(d: dict, label: str, target: float = ALL_TARGET) -> dict[str, Any]:
    """The cell ``label``'s runs: per seed, the bytes (all workers) and rounds until the first evaluation at or
    past ``target`` (None: not reached)."""
    out = []
    for run in runs_of(d, label):
        hit = first_reached(run["curve"], target)
        out.append({"seed": run["seed"], "bytes": None if hit is None else hit["bytes_total"],
                    "round": None if hit is None else hit["round"]})
    return {"label": label, "seeds": out}


def _bytes_to(read: dict[str, Any]) -> str:
    got = [s["bytes"] / 1e9 for s in read["seeds"] if s["bytes"] is not None]
    missing = len(read["seeds"]) - len(got)
    if not got:
        return f"not reached ({len(read['seeds'])} seeds)"
    return mean_spread(got, 2, " GB") + (f", {missing} of {len(read['seeds'])} not reached" if missing else "")


@table("protocols_all", DYNAMIC, ADMM, CODISTILL, shows=("test_accuracy",))
def _all(dynamic, admm, codistill):
    """Every protocol on the one task (the keywords MLP): its workers, its accuracy at the end and its bytes to
    `ALL_TARGET`, IST among them at local SGD's bytes."""
    rows = []
    for d, labels in ((dynamic, ["periodic", *dynamic_labels(dynamic)]), (admm, ["local_sgd", "admm", "ist"]),
                      (codistill, ["data_parallel", "codistillation"])):
        for label in labels:
            r = row_of(d, label)
            if r is None:
                continue
            rows.append([arm_name(label), cell(r["num_workers"]), cell(r.get("rounds")),
                         _metric(r, "test_accuracy"), _bytes_to(to_target(d, label))])
    head = ["protocol", "W", "rounds", "test accuracy at the end", f"bytes to {ALL_TARGET:g} (all workers)"]
    return markdown_table(head, rows + baseline_cells(dynamic, len(head), {3: "test_accuracy"}))


for _study, _src in SOURCES.items():
    tuning_table(f"protocols_tuning_{_study}", _src, "clips",
                 lambda t: f"tuning-split {t['objective']['metric'].replace('_', ' ')} at the end")


# ----------------------------------------------------------------------------------------------------------------
# Figure

def plot(source: Optional[pathlib.Path] = None, out: Optional[pathlib.Path] = None) -> pathlib.Path:
    """The drift study: transfers a round (each record's window, mean over seeds) and test loss against rounds, one
    line per arm, the drift's round dotted. Drawn from the results file alone."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = json.loads((source or ROOT / DRIFT).read_text())
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for label in ["periodic", *dynamic_labels(d)]:
        per = transfers_per_round(d, label)
        if not per:
            continue
        line, = top.plot([r for r, _ in per], [v for _, v in per], label=arm_name(label), linewidth=1.2)
        runs = runs_of(d, label)
        for i, run in enumerate(runs):
            bottom.plot([p["round"] for p in run["curve"]], [p["test_loss"] for p in run["curve"]],
                        color=line.get_color(), linewidth=0.8, alpha=0.7)
    at = _drift_round(d)
    for ax in (top, bottom):
        if at is not None:
            ax.axvline(at, color="k", linestyle=":", linewidth=1)
    top.set_ylabel("model transfers a round")
    top.set_yscale("symlog", linthresh=1)
    top.legend(fontsize=8)
    bottom.set_ylabel("test loss (the concept in force)")
    bottom.set_xlabel("round")
    top.set_title(f"8 workers, labels renamed at round {at} (dotted)", fontsize=10)
    fig.tight_layout()
    path = out or FIGURE
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------------------------------------------
# Figures for prose, the regime gate's claims, the README's rows

def gain(d: dict, label: str, against: str) -> str:
    """``label`` minus ``against`` in test accuracy, paired by seed, in points."""
    paired = paired_difference(runs_of(d, label), runs_of(d, against), "test_accuracy")
    return points_spread(paired["differences"] if paired else [])


def churn_text(d: dict) -> str:
    """Each kind of pair's mean churn, in words."""
    return "; ".join(f"{kind} {statistics.mean(v):.3f}" for kind, v in churn_groups(d).items())


scalar("protocols.linear", CODISTILL, lambda d: f"{d['baselines']['linear']['test_accuracy']:.3f}")
scalar("protocols.admm.gain", ADMM, lambda d: gain(d, "admm", "local_sgd"))
scalar("protocols.admm.ist_gain", ADMM, lambda d: gain(d, "ist", "local_sgd"))
scalar("protocols.codistill.gain", CODISTILL, lambda d: gain(d, "codistillation", "data_parallel"))
scalar("protocols.codistill.churn", CODISTILL, churn_text)
for _study, _src in (("dynamic", DYNAMIC), ("drift", DRIFT)):
    for _delta in ("1", "3", "10"):
        scalar(f"protocols.{_study}.ratio_{_delta}", _src, lambda d, lb=f"dynamic_{_delta}": transfer_ratios(d, lb))

claim("protocols.dynamic_vs_periodic", table="protocols_dynamic",
      arms=("periodic", "dynamic_0_3", "dynamic_1", "dynamic_3", "dynamic_10"), metric="test_accuracy",
      text="dynamic averaging's transfers to periodic averaging's loss, across delta")
claim("protocols.admm_vs_local_sgd", table="protocols_admm", arms=("local_sgd", "admm", "ist"),
      metric="test_accuracy", text="ADMM and IST against local SGD at equal bytes")
claim("protocols.codistill_vs_dp", table="protocols_codistill", arms=("data_parallel", "codistillation"),
      metric="test_accuracy", text="codistillation against data parallel, and their churn")


@headline_row("Dynamic model averaging against periodic averaging (Kamp et al.: about 10x fewer model transfers at "
              "virtually the same loss), the keywords MLP, 8 workers, b = 5, delta 0.3-10, each arm's rate tuned on "
              "a tuning split, 3 seeds (`python -m experiments.protocols.study dynamic --tune`)",
              "`docs/protocols.md`", DYNAMIC)
def _headline_dynamic(d):
    return (f"transfers to periodic averaging's final loss (within 2 %), periodic's over dynamic's: delta 1 "
            f"{transfer_ratios(d, 'dynamic_1')}; delta 3 and 10 {transfer_ratios(d, 'dynamic_3')} and "
            f"{transfer_ratios(d, 'dynamic_10')}; the claim {claim_verdict(d)}")


@headline_row("Consensus ADMM and IST against local SGD at equal bytes, the keywords MLP, 4 workers, K = 20, tuned "
              "arms (ADMM's rho with its rate), 3 seeds (`python -m experiments.protocols.study admm --tune`)",
              "`docs/protocols.md`", ADMM)
def _headline_admm(d):
    return (f"local SGD {_metric(row_of(d, 'local_sgd'), 'test_accuracy')}; ADMM {gain(d, 'admm', 'local_sgd')}, "
            f"IST {gain(d, 'ist', 'local_sgd')} against it (paired by seed); linear baseline "
            f"{d['baselines']['linear']['test_accuracy']:.3f}")


@headline_row("Codistillation (2 groups of 2) against data parallel (4 workers) and prediction churn (Anil et al.: "
              "codistilled models churn much less), the keywords MLP, tuned arms, 3 seeds (`python -m "
              "experiments.protocols.study codistill --tune`)", "`docs/protocols.md`", CODISTILL)
def _headline_codistill(d):
    return (f"data parallel {_metric(row_of(d, 'data_parallel'), 'test_accuracy')}, codistillation "
            f"{_metric(row_of(d, 'codistillation'), 'test_accuracy')}; churn: {churn_text(d)}")


def drift_transfers(d: dict, label: str) -> str:
    """``label``'s mean transfers a round before the drift, in the `SETTLE` rounds after it, and after those."""
    at, per = _drift_round(d), transfers_per_round(d, label)
    parts = ([v for r, v in per if r <= at], [v for r, v in per if at < r <= at + SETTLE],
             [v for r, v in per if r > at + SETTLE])
    before, soon, later = (f"{statistics.mean(p):.1f}" if p else "-" for p in parts)
    return f"{before} before, {soon} in the {SETTLE} rounds after it, {later} after those"


SETTLE = 10  # rounds just after the drift, read apart (fixed before the drift study's reported runs)


for _label in ("periodic", "dynamic_1", "dynamic_3", "dynamic_10"):
    scalar(f"protocols.drift.transfers_{_label}", DRIFT, lambda d, lb=_label: drift_transfers(d, lb))
# delta 3 and 10 end below the linear model under the drift: their transfers are read, their comparison is no result
claim("protocols.drift", table="protocols_drift", arms=("periodic", "dynamic_0_3", "dynamic_1"),
      metric="test_accuracy", text="dynamic averaging under concept drift, the arms above the linear model")


@headline_row("Dynamic model averaging under concept drift (the keywords renamed at round 60 of 120), 8 workers, "
              "tuned arms, 3 seeds (`python -m experiments.protocols.study drift --tune`)", "`docs/protocols.md`",
              DRIFT)
def _headline_drift(d):
    return (f"model transfers a round (all workers), before and after the drift: periodic averaging "
            f"{drift_transfers(d, 'periodic')}; delta 1 {drift_transfers(d, 'dynamic_1')}, delta 3 "
            f"{drift_transfers(d, 'dynamic_3')}, delta 10 {drift_transfers(d, 'dynamic_10')}; to periodic "
            f"averaging's final loss: {claim_verdict(d)}")
