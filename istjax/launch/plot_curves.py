"""A seed group's curve in one panel of `istjax plot`: `group_curve` averages the runs that differ only in ``seed``
on their common rounds (each seed interpolated between its own evaluations) with a band around the mean (`BANDS`),
against rounds, wall time or the bytes one worker moved each way (`bytes_per_worker`, the convention `istjax
compare`'s bytes columns share).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple, Optional

from istjax.launch.plot_records import Run

__all__ = ["BANDS", "BYTES_CONVENTION", "BYTES_FIELDS", "BYTES_PER_WORKER", "Curve", "bytes_per_worker",
           "group_curve"]


# The band drawn around a seed group's mean: the min..max across seeds, or mean +- one sample standard deviation.
BANDS = {"minmax": "min–max across seeds", "std": "±1 std across seeds"}
# The bytes panel (and `istjax compare`'s bytes columns): what one worker moved each way, as summary.json counts.
BYTES_PER_WORKER = "bytes_per_worker"
BYTES_CONVENTION = "bytes per worker, each way"


def bytes_per_worker(rec: dict[str, Any], num_workers: Optional[int]) -> Optional[float]:
    """Bytes one worker moved each way so far, from a record's ``bytes_total`` (all workers, both ways):
    ``bytes_total / (2 W)``; the convention of ``summary.json``'s ``bytes_sent_per_worker_per_round`` and
    ``bytes_received_per_worker_per_round`` (equal for the analytic counts; the mean of the two where a runtime
    measured them apart). None when the record lacks ``bytes_total`` or W is unknown."""
    total = rec.get("bytes_total")
    w = rec.get("num_workers", num_workers)
    if not isinstance(total, (int, float)) or isinstance(total, bool) or not w:
        return None
    return float(total) / (2 * int(w))


BYTES_FIELDS = ("bytes_total", BYTES_PER_WORKER)


def _points(run: Run, x_field: str, y_field: str = "test_accuracy") -> tuple[list[float], list[float], list[float]]:
    """``(rounds, x, y)`` of the records with finite values (x = round for ``"round"``, `bytes_per_worker` for
    ``"bytes_per_worker"``; y the record's ``y_field``, the test accuracy by default), by round."""
    by_round: dict[float, tuple[float, float]] = {}
    for rec in run.records:
        r, y = rec.get("round"), rec.get(y_field)
        x = r if x_field == "round" else rec.get(x_field)
        if x_field == BYTES_PER_WORKER:
            x = bytes_per_worker(rec, run.num_workers)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (r, x, y)):
            continue
        if x_field in BYTES_FIELDS and x <= 0:
            continue  # nothing communicated yet: no place on a log axis
        if x_field != "round" and "wall_time_s" not in rec and float(r) in by_round:
            continue  # a re-evaluation of a finished run: keep the training record of that round
        by_round[float(r)] = (float(x), float(y))
    rounds = sorted(by_round)
    return rounds, [by_round[r][0] for r in rounds], [by_round[r][1] for r in rounds]


class Curve(NamedTuple):
    """A group's curve in one panel: x, mean accuracy, and the band (None for a single run)."""

    x: list[float]
    y: list[float]
    lo: Optional[list[float]]
    hi: Optional[list[float]]


def group_curve(group: Sequence[Run], x_field: str, band: str = "minmax",
                y_field: str = "test_accuracy") -> Optional[Curve]:
    """The mean curve of a seed group in the panel of ``x_field`` (``"round"``, ``"wall_time_s"``,
    ``"bytes_per_worker"``: `bytes_per_worker`; or any numeric record field, such as ``"bytes_total"``) with its band
    (``band``: a key of `BANDS`), on the group's grid of rounds: the union of the seeds' evaluated rounds inside the
    range all of them cover, each seed interpolated linearly between its own evaluations (exact at rounds every seed
    evaluated). x is the seeds' mean at each round; y the record's ``y_field`` (the test accuracy by default). None:
    no common range.
    """
    import numpy as np

    pts = [_points(r, x_field, y_field) for r in group]
    if any(not p[0] for p in pts):
        return None
    if len(group) == 1:
        _, x, y = pts[0]
        return Curve(x, y, None, None)
    start, stop = max(p[0][0] for p in pts), min(p[0][-1] for p in pts)
    grid = sorted({r for p in pts for r in p[0] if start <= r <= stop})
    if not grid:
        return None
    xs = np.array([np.interp(grid, p[0], p[1]) for p in pts])
    ys = np.array([np.interp(grid, p[0], p[2]) for p in pts])
    mean = ys.mean(0)
    if band == "std":
        std = ys.std(0, ddof=1)
        lo, hi = mean - std, mean + std
    else:
        lo, hi = ys.min(0), ys.max(0)
    return Curve(xs.mean(0).tolist(), mean.tolist(), lo.tolist(), hi.tolist())
