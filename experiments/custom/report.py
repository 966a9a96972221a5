"""Is a model a good fit for IST? ``experiments/custom/results/fit.json`` (``python -m experiments.custom.fit``).
Registered in `experiments.tables` when `experiments.report` imports this module.
"""

from __future__ import annotations

from experiments.tables import (ResultsError, accuracy, algorithm_name, baseline_cells, fixed, headline_row,
                               markdown_table, percent, result_rows, scalar, table)

FIT = "experiments/custom/results/fit.json"
REMEDIES = {"none": "none (the researcher's model)",
            "scale": "train-time scaling (x full / sub-network channels)",
            "norm": "LayerNorm after each partitioned sum",
            "batchnorm": "batch-statistics BatchNorm after each partitioned sum and on the logits"}


def _fit(d, algorithm: str, remedy: str) -> dict:
    for r in result_rows(d):
        if r["algorithm"] == algorithm and r.get("remedy") == remedy:
            return r
    raise ResultsError(f"no row for {algorithm} with remedy {remedy!r}")


def _fit_gap(d, remedy: str) -> float:
    """Local SGD's mean test accuracy minus IST's on the model with ``remedy``, in points."""
    return 100 * (_fit(d, "local_sgd", remedy)["test_accuracy_mean"] - _fit(d, "ist", remedy)["test_accuracy_mean"])


@table("fit.table", FIT, shows=("test_accuracy",))
def _fit_table(d):
    """Every cell, then the data's trivial baseline (a linear model, ``--baselines``) beneath, in the accuracy
    column."""
    return markdown_table(
        ["remedy", "algorithm", "test accuracy (mean ± std over seeds)", "lowest / highest seed",
         "train loss of the full network"],
        [[REMEDIES.get(r["remedy"], r["remedy"]), algorithm_name(r["algorithm"]), accuracy(r),
          f"{fixed(r['test_accuracy_min'], 3)} / {fixed(r['test_accuracy_max'], 3)}", fixed(r["train_loss_mean"], 3)]
         for r in result_rows(d)] + baseline_cells(d, 5, {2: "test_accuracy"}, name_at=1))


for _a, _r in (("ist", "none"), ("local_sgd", "none"), ("ist", "batchnorm"), ("local_sgd", "batchnorm")):
    scalar(f"fit.{_a}_{_r}", FIT, lambda d, a=_a, r=_r: accuracy(_fit(d, a, r)))
for _r in ("scale", "norm"):
    scalar(f"fit.ist_{_r}", FIT, lambda d, r=_r: accuracy(_fit(d, "ist", r)))
for _r in ("none", "scale"):
    scalar(f"fit.loss_ist_{_r}", FIT, lambda d, r=_r: fixed(_fit(d, "ist", r)["train_loss_mean"], 2))
scalar("fit.linear", FIT, lambda d: d["baselines"]["linear"]["test_accuracy"])  # ``--baselines``
scalar("fit.gap_none", FIT, lambda d: fixed(_fit_gap(d, "none"), 1))
scalar("fit.gap_batchnorm", FIT, lambda d: fixed(_fit_gap(d, "batchnorm"), 1))
scalar("fit.gap_closed", FIT, lambda d: percent(1 - _fit_gap(d, "batchnorm") / _fit_gap(d, "none"), 0))


@headline_row("a model istjax does not ship: a researcher's 1-D CNN on MNIST-1D (`model.module`), W = 4, 192,000 "
              "samples, IST vs local SGD (`python -m experiments.custom.fit`)", "`docs/ist_fit.md`", FIT)
def _headline_fit(d):
    return (f"as written: IST {accuracy(_fit(d, 'ist', 'none'))}, local SGD {accuracy(_fit(d, 'local_sgd', 'none'))}"
            f"; with batch-statistics BatchNorm after its partitioned sums: IST "
            f"{accuracy(_fit(d, 'ist', 'batchnorm'))}, local SGD {accuracy(_fit(d, 'local_sgd', 'batchnorm'))}: "
            f"{percent(1 - _fit_gap(d, 'batchnorm') / _fit_gap(d, 'none'), 0)} of the gap to local SGD closed")
