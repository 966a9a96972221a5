"""Where channel IST's test-loss gap goes: the decomposition the images report tabulates and the studies draw.

IST's test loss minus a baseline's, split into parts that add up to it run by run: the workers' own fit (their
training loss after K steps), the merge (the merged model's train-mode loss on the same batches minus theirs), the
statistics (test mode minus train mode on those batches) and the rest (the test set's loss at the end minus the
training batches' in test mode over the last evaluation window). Both `experiments.images.report` (tables) and
`experiments.images.studies` (figures) read it from here, so neither imports the other's analysis.
"""

from __future__ import annotations

from typing import Any, Optional

from experiments.tables import runs_of
from istjax.launch.study import paired_difference

GAP_PARTS = (
    ("workers' own fit", lambda r: r["worker_train_loss"]),
    ("the merge", lambda r: r["merge_cost"]),
    ("the statistics", lambda r: r["merged_test_loss"] - r["merged_train_loss"]),
    ("test set vs training batches", lambda r: r["test_loss"] - r["merged_test_loss"]),
)


def _with_parts(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run records with each `GAP_PARTS` value under its name (None where a run lacks a number it needs)."""
    def part(fn, r):
        try:
            return fn(r)
        except (KeyError, TypeError):
            return None
    return [{**r, **{name: part(fn, r) for name, fn in GAP_PARTS}} for r in runs]


def gap_parts(d, ist: str, baseline: str) -> Optional[dict[str, Any]]:
    """``ist``'s test loss minus ``baseline``'s and each `GAP_PARTS` difference, paired by seed
    (`paired_difference`) over the seeds whose runs have every part (so the parts add up to the total on one seed
    set), or None with fewer than two such seeds."""
    def whole(runs):
        return [r for r in _with_parts(runs) if all(r.get(k) is not None for k in ("test_loss", *dict(GAP_PARTS)))]

    a, b = whole(runs_of(d, ist)), whole(runs_of(d, baseline))
    total = paired_difference(a, b, "test_loss")
    if total is None:
        return None
    return {"test_loss": total, "accuracy": paired_difference(a, b, "test_accuracy"),
            **{name: paired_difference(a, b, name) for name, _ in GAP_PARTS}}
