"""The constant predictor of extreme multi-label classification: always the most frequent training labels.

It reads no feature: every point gets the same ranking, the labels by how many training points carry them (most
first, the lower id among equals). What it scores is what a model gets for knowing only the label frequencies; a
race's target or a claim is meaningful only above it. Its scores are those of `istjax.xmc.metrics` (P@k, nDCG@k,
PSP@k, the definitions the task's own evaluation is held to), named as a run's evaluation names them
(`istjax.xmc.loss.scores`): ``test_accuracy`` (P@1), ``test_precision_at_k``, ``test_ndcg_at_5`` and, with the
training labels' propensities, ``test_psp_at_k``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from istjax.core.errors import ArgError
from istjax.xmc.loss import KS
from istjax.xmc.metrics import ndcg_at_k, precision_at_k, psp_at_k

__all__ = ["most_frequent_labels", "constant_predictor_scores", "constant_baseline"]


def most_frequent_labels(train_labels: Any, k: int, num_labels: Optional[int] = None) -> np.ndarray:
    """``[k] int64``: the ``k`` label ids most training points carry, most first, the lower id among equals.
    ``train_labels [N, L]``: each point's label ids padded with -1 (`istjax.data.extreme.pack_labels`)."""
    labels = np.asarray(train_labels, np.int64)
    ids = labels[labels >= 0]
    counts = np.bincount(ids, minlength=int(num_labels or 0))
    if k > len(counts):
        raise ArgError("k", k, f"k={k} but the training labels name only {len(counts)} label ids;",
                       f"pass k<={len(counts)} (or num_labels).")
    return np.argsort(-counts, kind="stable")[:k]


def constant_predictor_scores(train_labels: Any, test_labels: Any, propensity: Optional[Any] = None,
                              ks: Sequence[int] = KS, num_labels: Optional[int] = None) -> dict[str, float]:
    """The constant predictor's scores on ``test_labels [M, L]`` (module docstring): P@k for each of ``ks``, nDCG
    at the largest, PSP@k with ``propensity`` (``[num_labels]`` propensities of the training labels,
    `istjax.xmc.metrics.propensities`)."""
    top = most_frequent_labels(train_labels, max(ks), num_labels)
    test = np.asarray(test_labels, np.int64)
    top_ids = np.broadcast_to(top, (len(test), len(top)))
    out = {"test_accuracy": precision_at_k(top_ids, test, 1)}
    out.update({f"test_precision_at_{k}": precision_at_k(top_ids, test, k) for k in ks})
    out[f"test_ndcg_at_{max(ks)}"] = ndcg_at_k(top_ids, test, max(ks))
    if propensity is not None:
        out.update({f"test_psp_at_{k}": psp_at_k(top_ids, test, propensity, k) for k in ks})
    return out


def constant_baseline(data: Any, ks: Sequence[int] = KS) -> dict[str, Any]:
    """`constant_predictor_scores` of a sparse multi-label `istjax.data.Dataset` (its training label sets, its
    evaluated ones, PSP@k from its ``label_weights``: the inverse propensities), with what it is."""
    if getattr(data, "num_feature_ids", None) is None:
        raise ArgError("data", getattr(data, "name", data), "the most-frequent-labels predictor is a baseline of "
                                                            "multi-label data;", "use an extreme data set "
                                                                                "(data.name='xmc_debian_deps', "
                                                                                "'xmc_synthetic' or 'xmc').")
    weights = getattr(data, "label_weights", None)
    propensity = None if weights is None else 1.0 / np.asarray(weights, np.float64)
    scores = constant_predictor_scores(data.train_y, data.test_y, propensity, ks, int(data.num_classes))
    return {"what": f"the {max(ks)} most frequent training labels for every point (reads no feature)", **scores}
