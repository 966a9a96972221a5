"""A seeded generator of extreme multi-label data: power-law label frequencies, features that tell the labels
(:func:`synthetic_xmc`), and a train / test pair from one generated problem (:func:`synthetic_xmc_dataset`, the
``xmc-synthetic`` set). Numpy only."""

from __future__ import annotations

from typing import Any

import numpy as np

from istjax.core.errors import ArgError
from istjax.core.streams import check_positive, check_seed
from istjax.data.extreme.batches import take_rows
from istjax.data.extreme.text_format import XMCData, XMCDataset, indptr_from_counts, make_record

__all__ = ["synthetic_xmc", "synthetic_xmc_dataset"]


def _check_real(arg: str, value: Any, low: float, high: float = np.inf) -> float:
    if not isinstance(value, (int, float, np.integer, np.floating)) or not low <= float(value) <= high:
        bounds = f"in [{low}, {high}]" if np.isfinite(high) else f">= {low}"
        raise ArgError(arg, value, f"{arg}={value!r} must be a number {bounds};", f"pass {arg} {bounds}.")
    return float(value)


def _label_sets(rng: np.random.Generator, n: int, num_labels: int, mean: float, exponent: float) -> np.ndarray:
    """``[n, width] int64`` distinct labels per point, -1 padded: ``1 + Poisson(mean - 1)`` of them (at most
    ``num_labels``), drawn one at a time with probability ``∝ (l + 1) ** -exponent`` among those not yet drawn."""
    counts = np.minimum(1 + rng.poisson(mean - 1.0, n), num_labels)
    cdf = np.cumsum((np.arange(num_labels) + 1.0) ** -exponent)
    cdf /= cdf[-1]
    chosen = np.full((n, int(counts.max())), -1, np.int64)
    have = np.zeros(n, np.int64)
    while True:
        short = np.flatnonzero(have < counts)
        if not short.size:
            return chosen
        draw = np.minimum(np.searchsorted(cdf, rng.random(short.size), side="right"), num_labels - 1)
        new = ~(chosen[short] == draw[:, None]).any(1)
        rows = short[new]
        chosen[rows, have[rows]] = draw[new]
        have[rows] += 1


def _feature_draws(rng: np.random.Generator, sets: np.ndarray, indicative: np.ndarray, num_features: int,
                   mean: float, signal: float) -> tuple[np.ndarray, np.ndarray]:
    """``(row [T], feature [T])``: ``1 + Poisson(mean - 1)`` draws per point, each from the indicative features of
    one of its labels (uniform label, uniform feature) with probability ``signal``, else uniform over all."""
    n = len(sets)
    draws = 1 + rng.poisson(mean - 1.0, n)
    from_labels = rng.binomial(draws, signal)
    row_s = np.repeat(np.arange(n), from_labels)
    num_set = (sets >= 0).sum(1)
    slot = (rng.random(row_s.size) * num_set[row_s]).astype(np.int64)
    label = sets[row_s, slot]
    feature_s = indicative[label, rng.integers(0, indicative.shape[1], row_s.size)]
    row_n = np.repeat(np.arange(n), draws - from_labels)
    feature_n = rng.integers(0, num_features, row_n.size)
    return np.concatenate([row_s, row_n]), np.concatenate([feature_s, feature_n])


def _tf_rows(n: int, row: np.ndarray, feature: np.ndarray, num_features: int):
    """CSR ``(indptr, ids, values)`` of the draws: value ``ln(1 + count)``, each row scaled to unit L2 norm."""
    keys, counts = np.unique(row.astype(np.int64) * num_features + feature, return_counts=True)
    rows, ids = keys // num_features, keys % num_features
    values = np.log1p(counts.astype(np.float64))
    norms = np.sqrt(np.bincount(rows, values ** 2, minlength=n))
    return indptr_from_counts(np.bincount(rows, minlength=n)), ids, values / norms[rows]


def synthetic_xmc(num_points: int = 10_000, num_features: int = 5_000, num_labels: int = 1_000, *,
                  labels_per_point: float = 4.0, features_per_point: float = 30.0, label_exponent: float = 1.0,
                  features_per_label: int = 8, signal: float = 0.5, seed: int = 0) -> XMCData:
    """A seeded synthetic XMC problem (numpy only): power-law label frequencies, features that tell the labels.

    The problem (fixed by ``seed``): label ``l`` has ``features_per_label`` *indicative* features, drawn uniformly
    (with replacement) from all ``num_features``, so labels overlap in features only by chance, and a popularity
    ``∝ (l + 1) ** -label_exponent`` (Zipf; label 0 is the most frequent, as in ``xmc-debian-deps``). Each point:

    1. ``1 + Poisson(labels_per_point - 1)`` distinct labels (capped at ``num_labels``), drawn by popularity
       without replacement (mean about ``labels_per_point``);
    2. ``1 + Poisson(features_per_point - 1)`` feature draws; each, with probability ``signal``, one of the
       indicative features of one of the point's labels (both uniform), else a noise feature uniform over all;
    3. value of a feature ``ln(1 + times drawn)``, the row scaled to unit L2 norm (like tf-idf rows). Repeated draws
       merge, so the mean nonzero count is below ``features_per_point`` (about 26 for 30 with the other defaults).

    Predicting the labels needs a separate direction per label (their indicative sets are unrelated), so the best
    rank-``H`` predictor, and a model with ``H`` hidden units, improves with ``H`` up to about ``num_labels``.

    Args:
      num_points, num_features, num_labels: the sizes (>= 1).
      labels_per_point: mean labels per point (>= 1).
      features_per_point: mean feature draws per point (>= 1).
      label_exponent: the Zipf exponent of label popularity (>= 0; 0: uniform).
      features_per_label: indicative features per label (>= 1).
      signal: the fraction of feature draws that come from the labels' indicative features (in [0, 1]).
      seed: fixes both the problem (the labels' indicative features) and the points drawn from it.

    Returns:
      An :class:`XMCData` named ``"synthetic"``, as :func:`read_xmc` returns. The same arguments give the same
      arrays; to split one problem into train and test, generate once and :func:`take_rows` (as
      :func:`synthetic_xmc_dataset` does).
    """
    n, num_features, num_labels, per_label = (check_positive(a, v) for a, v in (
        ("num_points", num_points), ("num_features", num_features), ("num_labels", num_labels),
        ("features_per_label", features_per_label)))
    per_point, exponent, draws, signal = (_check_real(a, v, low, high) for a, v, low, high in (
        ("labels_per_point", labels_per_point, 1.0, np.inf), ("label_exponent", label_exponent, 0.0, np.inf),
        ("features_per_point", features_per_point, 1.0, np.inf), ("signal", signal, 0.0, 1.0)))
    world, points = (np.random.default_rng([check_seed(seed), stream]) for stream in (0, 1))
    indicative = world.integers(0, num_features, (num_labels, per_label))
    sets = _label_sets(points, n, num_labels, per_point, exponent)
    row, feature = _feature_draws(points, sets, indicative, num_features, draws, signal)
    ascending = np.sort(np.where(sets >= 0, sets, num_labels), axis=1)  # -1 padding last
    return make_record("synthetic", *_tf_rows(n, row, feature, num_features), indptr_from_counts((sets >= 0).sum(1)),
                   ascending[ascending < num_labels], num_features, num_labels)  # label ids row by row


def synthetic_xmc_dataset(num_train: int = 8000, num_test: int = 2000, **kwargs: Any) -> XMCDataset:
    """A train / test pair from one :func:`synthetic_xmc` problem (same labels' features, same label frequencies):
    its first ``num_train`` points and the ``num_test`` after them. ``kwargs``: :func:`synthetic_xmc`'s arguments
    other than ``num_points``."""
    num_train = check_positive("num_train", num_train)
    num_test = check_positive("num_test", num_test)
    if "num_points" in kwargs:
        raise ArgError("num_points", kwargs["num_points"], "xmc-synthetic takes num_train and num_test,",
                       "not num_points.")
    data = synthetic_xmc(num_train + num_test, **kwargs)
    train = take_rows(data, np.arange(num_train))._replace(name="xmc-synthetic/train")
    test = take_rows(data, np.arange(num_train, num_train + num_test))._replace(name="xmc-synthetic/test")
    return XMCDataset("xmc-synthetic", train, test)
