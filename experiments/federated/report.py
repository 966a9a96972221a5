"""The federated study's tables and figures: ``experiments/federated/results/{claim,momentum,ist,shakespeare}.json``
(``python -m experiments.federated.study STUDY --tune``). Registered in `experiments.tables` when
`experiments.report` imports this module.

Every number here is read off the runs' curves (each run's evaluations: round, bytes, test accuracy) by the pure
functions below, so a table changes only with its file:

* `reached`: the first evaluation at or past the target, a run's rounds and bytes to it (None: not reached within
  its budget, a censored run);
* `claim_ratios`: per seed, FedSGD's rounds to the target over FedAvg's (a lower bound where FedSGD never reached
  it: its budget over FedAvg's rounds);
* `at_round`, `at_bytes`: a run's accuracy at a round, or at the first evaluation that has moved a given number of
  bytes (IST on clients read at FedAvg's rounds and at FedAvg's bytes).
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence
from typing import Any, Optional

from experiments.tables import (baseline_cells, cell, fixed, headline_row, markdown_table, mean_spread, nbytes,
                               points_spread, row_of, runs_of, scalar, settings_words, table, tuning_table)
from istjax.launch.metrics import format_mean_std
from istjax.launch.study import paired_difference

CLAIM = "experiments/federated/results/claim.json"
MOMENTUM = "experiments/federated/results/momentum.json"
IST = "experiments/federated/results/ist.json"
SHAKESPEARE = "experiments/federated/results/shakespeare.json"
SOURCES = {"claim": CLAIM, "momentum": MOMENTUM, "ist": IST, "shakespeare": SHAKESPEARE}
# The claim's two data sets: each its results file and the trivial baseline its target is set above
CLAIMS = {"claim": (CLAIM, "linear"), "shakespeare": (SHAKESPEARE, "trigram")}
ROOT = pathlib.Path(__file__).resolve().parents[2]
FIGURES = {study: ROOT / "docs" / "figures" / f"federated_{study}.png" for study in SOURCES}
CLAIMED = 10.0  # McMahan et al.: FedAvg reaches the target in 10-100x fewer rounds than FedSGD
SPLIT_NAMES = {"iid": "IID", "dir0.5": "Dirichlet 0.5", "dir0.1": "Dirichlet 0.1", "shards": "2 shards a client",
               "natural": "Shakespeare by speaking role"}
ARM_NAMES = {"fedsgd": "FedSGD", "fedavg": "FedAvg", "fedavgm": "FedAvgM", "fedist": "IST on clients (fedist)"}


# ----------------------------------------------------------------------------------------------------------------
# Reading the curves

def reached(curve: Sequence[dict], target: float, metric: str = "test_accuracy") -> Optional[dict]:
    """The first evaluation whose ``metric`` is at or past ``target`` (its ``round`` and ``bytes_total``), or None."""
    return next((p for p in curve if p.get(metric) is not None and p[metric] >= target), None)


def at_round(curve: Sequence[dict], rounds: int) -> Optional[dict]:
    """The evaluation at round ``rounds`` exactly (None where the run was not evaluated there)."""
    return next((p for p in curve if p["round"] == rounds), None)


def at_bytes(curve: Sequence[dict], nbytes_: float) -> Optional[dict]:
    """The first evaluation that has moved at least ``nbytes_`` bytes (all slots together), or None."""
    return next((p for p in curve if p.get("bytes_total", 0) >= nbytes_), None)


def _target(d: dict) -> float:
    return float(d["target"]["value"])


def claim_ratios(d: dict, target: Optional[float] = None) -> list[dict]:
    """Per seed both arms trained: FedSGD's and FedAvg's rounds to the target (None: not reached), and the ratio
    ``fedsgd / fedavg`` with ``bound`` True where FedSGD never reached it (the ratio then its budget over FedAvg's
    rounds, a lower bound); no ratio where FedAvg did not reach it. ``target``: another level than the file's (a
    reading after the fact, never the verdict)."""
    target, out = _target(d) if target is None else target, []
    avg = {r["seed"]: r for r in runs_of(d, "fedavg")}
    for sgd in runs_of(d, "fedsgd"):
        if sgd["seed"] not in avg:
            continue
        a, s = reached(avg[sgd["seed"]]["curve"], target), reached(sgd["curve"], target)
        ratio = None if a is None else (s or {"round": sgd["rounds"]})["round"] / a["round"]
        out.append({"seed": sgd["seed"], "fedavg": a, "fedsgd": s, "ratio": ratio, "bound": s is None})
    return out


def ratio_text(d: dict, target: Optional[float] = None) -> str:
    """The claim's ratio: mean ± std over seeds and their range, '>' where a seed's FedSGD never reached
    (``target``: at another level, `claim_ratios`)."""
    pairs = [p for p in claim_ratios(d, target) if p["ratio"] is not None]
    if not pairs:
        return "not measured (FedAvg reached the target in no seed)"
    ratios = [p["ratio"] for p in pairs]
    bound = any(p["bound"] for p in pairs)
    lo, hi = min(ratios), max(ratios)
    return (f"{'at least ' if bound else ''}{mean_spread(ratios, 1, 'x')}, range {lo:.1f}-{hi:.1f}x"
            + (" (FedSGD did not reach it within its budget in some seeds: those ratios are lower bounds)"
               if bound else ""))


def claim_verdict(d: dict, baseline: Optional[str] = None) -> str:
    """'met' when every seed's ratio is at least `CLAIMED` (10x), else 'missed', with the lowest ratio; no verdict
    where both arms end below the trivial ``baseline`` (a study's rule: such a comparison is not a result)."""
    if baseline is not None and _below_baseline(d, baseline):
        return (f"no verdict: both arms end below the {baseline} baseline "
                f"({fixed(d['baselines'][baseline]['test_accuracy'], 3)}), so the comparison is not a result")
    pairs = claim_ratios(d)
    if not pairs or any(p["ratio"] is None for p in pairs):
        return "missed (FedAvg did not reach the target in every seed)"
    low = min(p["ratio"] for p in pairs)
    return f"{'met' if low >= CLAIMED else 'missed'} (lowest seed {low:.1f}x, the claim {CLAIMED:g}-100x)"


def _below_baseline(d: dict, baseline: str) -> bool:
    """Every arm's mean test accuracy at its end below the trivial ``baseline``'s."""
    floor = d["baselines"][baseline]["test_accuracy"]
    rows = [row_of(d, label) for label in ("fedavg", "fedsgd")]
    return all(r is not None and r["test_accuracy_mean"] < floor for r in rows)


# ----------------------------------------------------------------------------------------------------------------
# Tables

def _accuracy(r: Optional[dict]) -> str:
    if r is None:
        return "-"
    return format_mean_std(r["test_accuracy_mean"], r["test_accuracy_std"], len(r["seeds"]))


def _settings(r: Optional[dict]) -> str:
    return settings_words((r or {}).get("tuned") or {}) or "-"


def budget(r: dict) -> int:
    """A row's budget in rounds: its ``--config.num_rounds`` override (a run that stops at the target records the
    rounds it trained instead), else its rounds."""
    flag = "--config.num_rounds="
    given = [o[len(flag):] for o in r.get("overrides", ()) if o.startswith(flag)]
    return int(given[-1]) if given else int(r["rounds"])


def _end_accuracy(r: Optional[dict], runs: Sequence[dict]) -> str:
    """The row's accuracy at the end of its runs, marked where they stopped at the target (their end is there)."""
    stopped = sum(run["rounds"] < budget(r) for run in runs) if r else 0
    return _accuracy(r) + (f" (where {stopped} of {len(runs)} stopped, at the target)" if stopped else "")


def _claim(d):
    """The claim's table on either data set: each arm's choice, budget, end accuracy (marked where runs stopped at
    the target), rounds and bytes to the target, the trivial baselines beneath; then each seed's rounds and ratio."""
    target = _target(d)
    pairs = claim_ratios(d)
    arms = []
    for label in ("fedavg", "fedsgd"):
        r, runs = row_of(d, label), runs_of(d, label)
        hit = [reached(run["curve"], target) for run in runs]
        rounds = [h["round"] for h in hit if h]
        nbytes_ = [h["bytes_total"] for h in hit if h]
        missing = len(hit) - len(rounds)
        arms.append([ARM_NAMES[label], _settings(r), cell(budget(r)) if r else "-", _end_accuracy(r, runs),
                     (f"not reached in {budget(r)} ({missing} of {len(hit)} seeds)" if not rounds and r else
                      mean_spread(rounds, 1) + (f" ({missing} of {len(hit)} not reached)" if missing else "")),
                     mean_spread([b / 1e6 for b in nbytes_], 1, " MB") if nbytes_ else "-"])
    head = ["arm", "chosen settings (tuning)", "budget (rounds)", "test accuracy at the end (mean ± std)",
            f"rounds to {target:g}", f"bytes to {target:g} (all clients)"]
    table_ = markdown_table(head, arms + baseline_cells(d, len(head), {3: "test_accuracy"}))
    seeds = markdown_table(
        ["seed", "FedAvg's rounds", "FedSGD's rounds", "FedSGD / FedAvg"],
        [[cell(p["seed"]), cell(p["fedavg"]["round"]) if p["fedavg"] else "not reached",
          cell(p["fedsgd"]["round"]) if p["fedsgd"] else "not reached",
          "-" if p["ratio"] is None else f"{'>' if p['bound'] else ''}{p['ratio']:.1f}x"] for p in pairs])
    return f"{table_}\n\nEach seed's rounds to {target:g} (the first evaluation at or past it):\n\n{seeds}"


for _study, (_src, _baseline) in CLAIMS.items():
    table(f"federated_{_study}", _src, shows=("test_accuracy",))(_claim)
    scalar(f"federated.{_study}.ratio", _src, ratio_text)
    scalar(f"federated.{_study}.verdict", _src, lambda d, b=_baseline: claim_verdict(d, b))
    scalar(f"federated.{_study}.target", _src, lambda d: f"{_target(d):g}")
    scalar(f"federated.{_study}.{_baseline}", _src,
           lambda d, b=_baseline: fixed(d["baselines"][b]["test_accuracy"], 3))


@table("federated_momentum", MOMENTUM, shows=("test_accuracy",))
def _momentum(d):
    rows = []
    for split in ("iid", "dir0.5", "dir0.1"):
        key = split.replace(".", "_")
        avg, mom = row_of(d, f"fedavg_{key}"), row_of(d, f"fedavgm_{key}")
        rows.append([SPLIT_NAMES[split], _accuracy(avg), _settings(avg), _accuracy(mom), _settings(mom),
                     momentum_gain(d, split)])
    head = ["split", "FedAvg", "its settings", "FedAvgM (momentum 0.9)", "its settings",
            "FedAvgM - FedAvg (paired by seed)"]
    return markdown_table(head, rows + baseline_cells(d, len(head), {1: "test_accuracy"}))


def momentum_gain(d: dict, split: str) -> str:
    """FedAvgM minus FedAvg on ``split``, paired by seed, in points: mean ± std (n seeds)."""
    key = split.replace(".", "_")
    paired = paired_difference(runs_of(d, f"fedavgm_{key}"), runs_of(d, f"fedavg_{key}"), "test_accuracy")
    return points_spread(paired["differences"] if paired else [])


for _split in ("iid", "dir0.5", "dir0.1"):
    scalar(f"federated.momentum.gain_{_split.replace('.', '_')}", MOMENTUM,
           lambda d, s=_split: momentum_gain(d, s))


@headline_row("FedAvgM (server momentum 0.9) against FedAvg on Fashion-MNIST's clients, IID and Dirichlet 0.5 / 0.1 "
              "label skew, the 2NN, 200 rounds, each arm's rates tuned on a tuning split, 3 seeds (`python -m "
              "experiments.federated.study momentum --tune`)", "`docs/federated.md`", MOMENTUM)
def _headline_momentum(d):
    by = {r["label"]: r for r in d["rows"]}
    return "; ".join(f"{SPLIT_NAMES[s]}: FedAvg {_accuracy(by.get('fedavg_' + s.replace('.', '_')))}, FedAvgM "
                     f"{_accuracy(by.get('fedavgm_' + s.replace('.', '_')))}, difference {momentum_gain(d, s)}"
                     for s in ("iid", "dir0.5", "dir0.1"))


def _acc(p: Optional[dict]) -> Optional[float]:
    return None if p is None else p.get("test_accuracy")


def ist_readings(d: dict, split: str) -> dict[str, Any]:
    """IST on clients against FedAvg on ``split``, per seed: FedAvg's accuracy at its end, fedist's at FedAvg's
    rounds and at FedAvg's bytes (all clients), and fedist's loss split at its end."""
    key = split.replace(".", "_")
    avg = {r["seed"]: r for r in runs_of(d, f"fedavg_{key}")}
    out = []
    for r in runs_of(d, f"fedist_{key}"):
        a = avg.get(r["seed"])
        if a is None:
            continue
        end = a["curve"][-1]
        out.append({"seed": r["seed"], "fedavg": _acc(end), "equal_rounds": _acc(at_round(r["curve"], end["round"])),
                    "equal_bytes": _acc(at_bytes(r["curve"], end["bytes_total"])),
                    "worker_train_loss": r.get("worker_train_loss"), "merged_train_loss": r.get("merged_train_loss")})
    return {"split": split, "seeds": out}


def _mean_of(seeds: Sequence[dict], key: str, digits: int = 3) -> str:
    values = [s[key] for s in seeds if s.get(key) is not None]
    return mean_spread(values, digits) if values else "-"


@table("federated_ist", IST, shows=("test_accuracy",))
def _ist(d):
    rows = []
    for split in ("iid", "dir0.1"):
        read, key = ist_readings(d, split), split.replace(".", "_")
        seeds = read["seeds"]
        avg, ist = row_of(d, f"fedavg_{key}"), row_of(d, f"fedist_{key}")
        rows.append([SPLIT_NAMES[split], _mean_of(seeds, "fedavg"), _mean_of(seeds, "equal_rounds"),
                     _mean_of(seeds, "equal_bytes"),
                     points_spread([s["equal_bytes"] - s["fedavg"] for s in seeds if s["equal_bytes"] is not None]),
                     nbytes(avg["bytes_per_worker_per_round"], binary=False) if avg else "-",
                     nbytes(ist["bytes_per_worker_per_round"], binary=False) if ist else "-",
                     f"{_mean_of(seeds, 'worker_train_loss')} / {_mean_of(seeds, 'merged_train_loss')}"])
    head = ["split", "FedAvg (its rounds)", "fedist at FedAvg's rounds", "fedist at FedAvg's bytes",
            "fedist - FedAvg at equal bytes", "FedAvg bytes a client a round", "fedist's",
            "fedist's loss split at its end: workers' / merged model's training loss"]
    return markdown_table(head, rows + baseline_cells(d, len(head), {1: "test_accuracy"}))


def _tuning_score(t: dict) -> str:
    over = "mean over the run's evaluations" if t["objective"].get("at") == "mean" else "at the end"
    return f"tuning-split accuracy, {over}"


for _study, _src in SOURCES.items():
    tuning_table(f"federated_tuning_{_study}", _src, "examples", _tuning_score)


HEADLINE_WHAT = ("FedAvg against FedSGD on Fashion-MNIST's pathological clients (2 label-sorted shards each, 10 of 100 "
                 "a round), the 2NN, each arm's rate tuned on a tuning split, 3 seeds (`python -m "
                 "experiments.federated.study claim --tune`)")


def _headline(d):
    """The README's row (registered once ``claim.json`` is committed)."""
    return (f"rounds to {_target(d):g} test accuracy, FedSGD over FedAvg: {ratio_text(d)}; the paper's 10-100x "
            f"{claim_verdict(d).split(' ')[0]}")


# ----------------------------------------------------------------------------------------------------------------
# Figures

def plot(study: str, source: Optional[pathlib.Path] = None, out: Optional[pathlib.Path] = None) -> pathlib.Path:
    """Each run's test accuracy against rounds (``claim``, ``momentum``: one panel per split) or against bytes
    (``ist``), every seed a line, the claim's target dashed. Drawn from the results file alone."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = json.loads((source or ROOT / SOURCES[study]).read_text())
    panels = {"claim": ("shards",), "momentum": ("iid", "dir0.5", "dir0.1"), "ist": ("iid", "dir0.1"),
              "shakespeare": ("natural",)}[study]
    x = "bytes_total" if study == "ist" else "round"
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.6), squeeze=False)
    colours = {"fedsgd": "#d95f02", "fedavg": "#1b9e77", "fedavgm": "#7570b3", "fedist": "#e7298a"}
    for ax, split in zip(axes[0], panels):
        for r in d.get("rows", []):
            if r.get("split") != split:
                continue
            for i, run in enumerate(runs_of(d, r["label"])):
                xs = [p[x] / (1e9 if x == "bytes_total" else 1) for p in run["curve"]]
                ax.plot(xs, [p["test_accuracy"] for p in run["curve"]], color=colours[r["arm"]], linewidth=1,
                        alpha=0.8, label=ARM_NAMES[r["arm"]] if i == 0 else None)
        if study in CLAIMS:
            ax.axhline(_target(d), color="k", linestyle="--", linewidth=1, label=f"target {_target(d):g}")
            ax.set_xscale("log")
        name = CLAIMS.get(study, (None, "linear"))[1]
        baseline = ((d.get("baselines") or {}).get(name) or {}).get("test_accuracy")
        if baseline is not None:
            ax.axhline(baseline, color="grey", linestyle=":", linewidth=1, label=f"{name} baseline")
        ax.set_xlabel("GB moved, all clients" if x == "bytes_total" else "round")
        ax.set_ylabel("test accuracy")
        ax.set_ylim(*((0.1, 0.6) if study == "shakespeare" else (0.5, 0.95)))
        ax.set_title(SPLIT_NAMES[split], fontsize=10)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = out or FIGURES[study]
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
