"""Concept drift: a stream whose labels are permuted from a stated round on (the drift of Kamp et al. 2018's
dynamic-averaging experiments, where the concept a stream follows changes and the models must move).

A :class:`Drift` is the round ``at_round`` and a permutation of the classes with no fixed point (`label_permutation`:
every class is renamed, so the old model is wrong on every example after the drift). Its :meth:`Drift.relabel`
maps labels ``y -> permutation[y]`` when the round index is ``>= at_round`` (negative labels, padding, kept), a
pure function of the round, traced or not, so a resumed run sees the stream it would have seen.

* :func:`drifting` wraps a batch function (`istjax.data.BatchFn`, a federated `istjax.data.ClientBatchFn`, an
  augmented or keyed one: anything with ``data``, ``apply`` and ``__call__``) so that round ``r``'s batches carry
  the labels of the concept in force at ``r`` (the driver wraps its batches for a config's ``data.drift_round``).
* The evaluation follows the same concept: `istjax.launch.evaluator.make_evaluator` scores a model whose state has
  completed ``r >= at_round`` rounds against the permuted test and training labels (the concept its next round
  trains on), so the loss jumps at the drift and the curves show the recovery.
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from istjax.core.errors import ArgError
from istjax.core.streams import as_round as _as_round
from istjax.core.streams import check_seed
from istjax.data.dataset import Dataset

__all__ = ["Drift", "DriftingBatchFn", "drift_for", "drifting", "label_permutation"]


def label_permutation(num_classes: int, seed: int) -> np.ndarray:
    """A permutation of ``range(num_classes)`` with no fixed point, a pure function of ``seed``: a random order of
    the classes, each renamed to the next in that order (a cycle through all of them)."""
    order = np.random.default_rng(check_seed(seed)).permutation(num_classes)
    perm = np.empty(num_classes, np.int32)
    perm[order] = np.roll(order, -1)
    return perm


class Drift(NamedTuple):
    """The stream's labels permuted from round ``at_round`` on: ``y -> permutation[y]`` (see the module)."""

    at_round: int
    permutation: np.ndarray  # [C] int32, no fixed point

    def relabel(self, y: Any, round_index: Any) -> Any:
        """``y`` (any shape, int labels; negative entries are padding and kept) as the concept of round
        ``round_index`` names them (a host array too: ``relabel(y, at_round)`` is the drifted concept's labels)."""
        perm = jnp.asarray(self.permutation)
        moved = jnp.where(y >= 0, perm[jnp.clip(y, 0, len(self.permutation) - 1)], y)
        return jnp.where(_as_round(round_index) >= self.at_round, moved, y).astype(jnp.asarray(y).dtype)


def drift_for(dataset: Dataset, at_round: Any, seed: Any = 0) -> Drift:
    """The drift of ``dataset``'s labels at round ``at_round`` (``>= 1``), its permutation drawn from ``seed``.
    Refused for data whose labels are not one class per example (label sets, next-character sequences): renaming
    classes is a drift of single-label classification."""
    try:
        at = operator.index(at_round)
    except TypeError:
        at = -1
    if isinstance(at_round, bool) or at < 1:
        raise ArgError("drift_round", at_round, f"drift_round={at_round!r}:",
                       "give the round (an integer >= 1) from which the labels are permuted, or 0 for no drift.")
    y = np.asarray(dataset.train_y)
    if y.ndim != 1 or dataset.label_weights is not None or dataset.num_classes < 2:
        raise ArgError("drift_round", at_round,
                       f"data set {dataset.name!r} has labels of shape {tuple(y.shape[1:]) or '()'} per example "
                       f"and {dataset.num_classes} classes: a drift permutes the classes of single-label "
                       f"classification data (one label per example, two classes or more).",
                       "Drop data.drift_round for this data set.")
    return Drift(at, label_permutation(int(dataset.num_classes), seed))


class DriftingBatchFn:
    """A batch function whose round-``r`` labels follow the concept in force at ``r`` (`Drift.relabel`); wraps
    any batch function with ``data``, ``apply`` and ``__call__``, keeping its other attributes."""

    def __init__(self, inner: Any, drift: Drift):
        self.inner, self.drift = inner, drift
        self.data = inner.data

    def __getattr__(self, name: str) -> Any:  # num_workers, local_steps, rows, ... of the wrapped function
        return getattr(self.inner, name)

    def _drifted(self, batches: dict, round_index: Any) -> dict:
        return {**batches, "y": self.drift.relabel(batches["y"], round_index)}

    def apply(self, data: dict, round_index: Any) -> dict:
        return self._drifted(self.inner.apply(data, round_index), round_index)

    def __call__(self, round_index: Any, *args: Any, **kwargs: Any) -> dict:
        return self._drifted(self.inner(round_index, *args, **kwargs), round_index)

    def __repr__(self) -> str:
        return f"DriftingBatchFn({self.inner!r}, at_round={self.drift.at_round})"


def drifting(batch_fn: Any, drift: Drift) -> DriftingBatchFn:
    """``batch_fn`` whose labels drift (`DriftingBatchFn`)."""
    return DriftingBatchFn(batch_fn, drift)
