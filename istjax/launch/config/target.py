"""A run's target: the test metric a time-to-target run races to, and the one rule that says a record reached it.

A config names at most one target (`istjax.launch.config.check` refuses both):

* ``target_accuracy``: a fraction, reached by an evaluation whose ``test_accuracy`` is at or above it (the task's
  own accuracy: P@1 for XMC);
* ``target_loss``: a positive loss, reached by an evaluation whose ``test_loss`` is at or below it (a language
  model's validation nats per character, where lower is better).

`reached` is what both the stop (``stop_at_target``, `istjax.launch.train_loop`) and the summary's time and samples
to the target (`istjax.launch.summary.run_summary`) ask, so they cannot disagree::

    >>> from istjax.launch.config import default_config
    >>> c = default_config()
    >>> c.target_loss = 2.0
    >>> target_of(c).words()
    'test loss 2.0 (at or below)'
    >>> reached(c, {"test_loss": 1.95}), reached(c, {"test_loss": 2.01}), reached(c, None)
    (True, False, False)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Optional

__all__ = ["TARGETS", "Target", "target_of", "reached"]

#: The target fields -> (the record's metric they compare with, whether lower is better), in the order looked up.
TARGETS = {"target_accuracy": ("test_accuracy", False), "target_loss": ("test_loss", True)}


@dataclasses.dataclass(frozen=True)
class Target:
    """One target: its config ``field``, its ``value``, the record ``metric`` it is compared with, and whether a
    lower metric is better (``lower``: a loss)."""

    field: str
    value: float
    metric: str
    lower: bool

    def met_by(self, record: Optional[Mapping[str, Any]]) -> bool:
        """Whether ``record`` (an evaluation record, or None on a process that did not evaluate) reached it; a
        missing or non-finite metric never does."""
        v = None if record is None else record.get(self.metric)
        if v is None or not math.isfinite(float(v)):
            return False
        return float(v) <= self.value if self.lower else float(v) >= self.value

    def words(self, labels: Optional[Mapping[str, str]] = None) -> str:
        """``'test accuracy 0.9'`` / ``'validation nats/char 2.0 (at or below)'``: the metric as ``labels`` (a
        summary's ``metric_labels``) names it, the value, and the direction for a loss."""
        default = self.metric.replace("_", " ")
        what = f"{(labels or {}).get(self.metric, default)} {self.value}"
        return f"{what} (at or below)" if self.lower else what


def target_of(config: Mapping[str, Any]) -> Optional[Target]:
    """The target ``config`` sets (a config or a dict read from ``config.json``/``summary.json``), or None. A
    config written before ``target_loss`` existed has only ``target_accuracy``."""
    for field, (metric, lower) in TARGETS.items():
        value = config.get(field)
        if value is not None:
            return Target(field, float(value), metric, lower)
    return None


def reached(config: Mapping[str, Any], record: Optional[Mapping[str, Any]]) -> bool:
    """Whether evaluation ``record`` reached ``config``'s target (False without one, or without a record)."""
    target = target_of(config)
    return target is not None and target.met_by(record)
