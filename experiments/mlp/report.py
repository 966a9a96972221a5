"""The MLP studies' tables: ``experiments/mlp/results/*.json`` (``python -m experiments.mlp.studies``). Registered in
`experiments.tables` when `experiments.report` imports this module.
"""

from __future__ import annotations

from experiments.tables import (ResultsError, accuracy, algorithm_name, cell, fixed, headline_row, markdown_table,
                               nbytes, points_above_baseline, result_rows, results_table, scalar, spread, table,
                               tuning_caption, tuning_rows)

DIGITS = "experiments/mlp/results/digits.json"
MNIST1D = "experiments/mlp/results/mnist1d.json"
KEYWORDS_GEN = "experiments/mlp/results/keywords.json"


def _per_algorithm(rows, fn, sep=" / ") -> str:
    by = {r["algorithm"]: r for r in rows}
    return sep.join(fn(by[a]) for a in ("ist", "data_parallel", "local_sgd") if a in by)


def _three_way(d) -> str:
    """'IST / data parallel / local SGD: a ± s / ...; bytes ...' from an MLP study's rows."""
    rows = result_rows(d)
    acc = _per_algorithm(rows, lambda r: f"{r['test_accuracy_mean']:.3f} ± {r['test_accuracy_std']:.3f}")
    moved = _per_algorithm(rows, lambda r: nbytes(r["bytes_per_worker_per_round"] / 2, binary=False))
    n = min(len(r["seeds"]) for r in rows)
    linear = ((d.get("baselines") or {}).get("linear") or {}).get("test_accuracy")
    beside = "" if linear is None else f" (a linear model: {linear:.3f})"
    return f"{acc} test accuracy (mean ± std, {n} seeds){beside}; {moved} per worker per round each way"


results_table("keywords_generalisation", KEYWORDS_GEN, [
    "algorithm", "num_workers", "test_accuracy", ("min-max", spread),
    ("train loss", lambda r: fixed(r["train_loss_mean"], 3)), ("samples (all workers)", lambda r: cell(r["samples_seen"])),
    ("bytes per worker per round", lambda r: nbytes(r["bytes_per_worker_per_round"], binary=False)),
    ("s per round (simulate)", lambda r: fixed(r["time_per_round_s_mean"]))], baselines=True, tuned=True)


@table("keywords_tuning", KEYWORDS_GEN)
def _keywords_tuning(d):
    """Every tuning run of ``python -m experiments.mlp.studies keywords --tune``, each arm's best first."""
    if not d.get("tuning"):
        raise ResultsError(f"{KEYWORDS_GEN} records no tuning stage; fix: run python -m experiments.mlp.studies "
                           f"keywords --tune")
    t = d["tuning"]
    return (tuning_caption(t, "clips") + " The tuning clips are spoken by training voices: the choice is made on "
            "unseen clips, not on unseen voices.\n\n"
            + markdown_table(["arm", "settings", "tuning accuracy"], tuning_rows(t, algorithm_name)))
# the linear baseline (`python -m experiments.mlp.studies keywords --baselines`) and how far the cells lie above it
scalar("keywords.linear", KEYWORDS_GEN, lambda d: d["baselines"]["linear"]["test_accuracy"])
scalar("keywords.above_linear", KEYWORDS_GEN, lambda d: points_above_baseline(d, [r["label"] for r in result_rows(d)]))


def _keywords_gap(d) -> float:
    by = {r["algorithm"]: r for r in result_rows(d)}
    return by["ist"]["test_accuracy_mean"] - by["data_parallel"]["test_accuracy_mean"]


scalar("keywords.gen_gap", KEYWORDS_GEN, lambda d: f"{100 * _keywords_gap(d):+.1f}")


BREAST_CANCER = "experiments/mlp/results/breast_cancer.json"
results_table("breast_cancer", BREAST_CANCER, [
    "algorithm", "num_workers", "test_accuracy", ("min-max", spread),
    ("train loss", lambda r: fixed(r["train_loss_mean"], 3)), ("samples (all workers)", lambda r: cell(r["samples_seen"])),
    ("bytes per worker per round, each way", lambda r: nbytes(r["bytes_per_worker_per_round"] / 2, binary=False))],
    baselines=True)
# the linear baseline (`python -m experiments.mlp.studies breast_cancer --baselines`)
scalar("breast_cancer.linear", BREAST_CANCER, lambda d: d["baselines"]["linear"]["test_accuracy"])


scalar("digits.ist", DIGITS, lambda d: accuracy([r for r in result_rows(d) if r["algorithm"] == "ist"][0]))


@headline_row("digits, W = 4, 76,800 samples: IST / data parallel / local SGD "
              "(`python -m experiments.mlp.studies digits`)", "`experiments/mlp/results/digits.json`", DIGITS)
def _headline_digits(d):
    return _three_way(d)


@headline_row("generalisation on the synthesised keywords (35 words, test voices unseen in training), 2-layer speech "
              "MLP, W = 2, 204,800 samples, each arm's rate tuned on held-out training clips: IST / data parallel "
              "(`python -m experiments.mlp.studies keywords --tune`)",
              "`docs/network.md`", KEYWORDS_GEN)
def _headline_keywords_generalisation(d):
    gap = _keywords_gap(d)
    return (_three_way(d) + f"; IST {'above' if gap > 0 else 'below'} data parallel by {100 * abs(gap):.1f} points "
            "(the paper, real Speech Commands: .8153 vs .7938)")


@headline_row("MNIST-1D, W = 4, 192,000 samples: IST / data parallel / local SGD, a negative result "
              "(`python -m experiments.mlp.studies mnist1d`)", "`experiments/mlp/results/mnist1d.json`", MNIST1D)
def _headline_mnist1d(d):
    return _three_way(d) + "; IST trails both here: each worker holds 1/16 of the 512 x 512 hidden weight"
