"""The regime gate: a claimed comparison holds only between arms that beat the study's trivial baseline, on a metric
its table shows.

A comparison between two models that have not learned what a table of counts gives (a language model above the
trigram table's loss, a classifier below a linear model) ranks two failures. A study declares, in its results file,
its trivial baselines and which of them is its *regime* baseline (``baselines`` and ``regime``, written by
`istjax.launch.baselines.record_sections`)::

    "baselines": {"trigram": {"test_loss": 2.067, ...}, ...},
    "regime": {"baseline": "trigram", "metric": "test_loss", "direction": "min"}

and, in its ``experiments/<family>/report.py``, each claim its page makes, on which table, between which cells and
resting on which metric::

    claim("text.ist_near_local_sgd", table="text_study", arms=("ist_w2", "local_sgd_w2"), metric="test_loss",
          text="IST within 0.05 nats/char of local SGD at W = 2")

``python -m experiments.report --check`` then fails (`problems`) where a claim names a metric its table does not
show (`experiments.tables.Entry.shows`), where the table's results file declares no regime, and where an arm's
value of the regime metric (its row's ``<metric>_mean``, its ``<metric>``, or the mean over its runs) does not beat
the regime baseline's, naming the cell, both numbers and the file.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from typing import Any, Optional

__all__ = ["Claim", "CLAIMS", "claim", "arm_value", "problems"]


@dataclasses.dataclass(frozen=True)
class Claim:
    """A comparison a page makes: ``name``, the registered ``table`` it is read from, the ``arms`` compared (row
    labels of the table's results file), the ``metric`` it rests on and its words (``text``)."""
    name: str
    table: str
    arms: tuple[str, ...]
    metric: str
    text: str = ""


CLAIMS: list[Claim] = []


def claim(name: str, *, table: str, arms: Sequence[str], metric: str, text: str = "") -> Claim:
    """Registers a claim (`Claim`) that ``--check`` holds to the regime gate."""
    if any(c.name == name for c in CLAIMS):
        raise ValueError(f"claim {name!r} is registered twice")
    c = Claim(name, table, tuple(arms), metric, text)
    CLAIMS.append(c)
    return c


def arm_value(doc: dict[str, Any], arm: str, metric: str) -> Optional[float]:
    """An arm's ``metric`` in a results file: its row's ``<metric>_mean`` or ``<metric>``, else the mean over its
    runs that record it; None where it has none."""
    for row in doc.get("rows") or []:
        if isinstance(row, dict) and row.get("label") == arm:
            for key in (f"{metric}_mean", metric):
                if isinstance(row.get(key), (int, float)):
                    return float(row[key])
    values = [r[metric] for r in doc.get("runs") or []
              if isinstance(r, dict) and r.get("label") == arm and isinstance(r.get(metric), (int, float))]
    return statistics.fmean(values) if values else None


def _regime(doc: dict[str, Any], source: str) -> tuple[Optional[dict], Optional[float], Optional[str]]:
    """``(regime, the baseline's value, problem)`` of a results file."""
    regime = doc.get("regime")
    if not isinstance(regime, dict) or not {"baseline", "metric", "direction"} <= set(regime):
        return None, None, (f"{source} declares no regime baseline; fix: record the study's baselines and regime "
                            f"(istjax.launch.baselines.baseline_sections, record_sections) and rerun its report")
    base = (doc.get("baselines") or {}).get(regime["baseline"]) or {}
    if not isinstance(base.get(regime["metric"]), (int, float)) or regime["direction"] not in ("min", "max"):
        return None, None, (f"{source}: regime {regime!r} names no {regime['metric']} of a recorded baseline (or "
                            f"a direction other than 'min' or 'max'); fix: record_sections with the baseline")
    return regime, float(base[regime["metric"]]), None


def problems(claims: Sequence[Claim], registry: dict[str, Any], load: Callable[[str, Claim], Any]) -> list[str]:
    """Every claim's problems (module docstring), each one line naming the claim; ``load(source, claim)`` reads a
    results file (as `experiments.report` loads it)."""
    found = []
    for c in claims:
        entry = registry.get(c.table)
        if entry is None:
            found.append(f"claim {c.name!r} names no table {c.table!r}; fix: name a registered table")
            continue
        if c.metric not in entry.shows:
            found.append(f"claim {c.name!r} rests on {c.metric}, which table {c.table!r} does not show (it shows "
                         f"{', '.join(entry.shows) or 'no declared metric'}); fix: add the metric's column to the "
                         f"table, or rest the claim on a metric it shows")
        source = entry.sources[0]
        doc = load(source, c)
        regime, base, problem = _regime(doc if isinstance(doc, dict) else {}, source)
        if problem:
            found.append(f"claim {c.name!r}: {problem}")
            continue
        metric, better = regime["metric"], (min if regime["direction"] == "min" else max)
        for arm in c.arms:
            value = arm_value(doc, arm, metric)
            if value is None:
                found.append(f"claim {c.name!r}: cell {arm!r} has no {metric} in {source}; fix: name a cell of the "
                             f"table")
            elif value == base or better(value, base) != value:
                found.append(f"claim {c.name!r}: cell {arm!r} ({metric} {value:.4g}) does not beat the regime "
                             f"baseline {regime['baseline']!r} ({base:.4g}) of {source}; fix: train it where it "
                             f"learns (a larger budget, a tuned rate), or withdraw the claim")
    return found
