"""Ranking metrics of extreme multi-label classification (P@k, nDCG@k, PSP@k) and a blockwise top-k over labels.

The metrics run on the host in numpy (float64) from two small integer arrays:

* ``top_ids [N, K]``: each point's predicted label ids, best first, distinct within a row (only the first ``k``
  are read for a metric "@k");
* ``labels [N, L]``: each point's true label ids, padded with -1 (`istjax.data.extreme.pack_labels`).

With ``hit[i, r] = 1`` when ``top_ids[i, r]`` is a true label of point ``i`` and ``y_i`` its number of true labels:

* ``P@k = mean_i (1/k) sum_{r<k} hit[i, r]``;
* ``nDCG@k = mean_i DCG_i / IDCG_i`` with ``DCG_i = sum_{r<k} hit[i, r] / log2(r + 2)`` (rank ``r + 1`` discounted by
  ``1 / log2(rank + 1)``) and ``IDCG_i`` the same sum over the first ``min(k, y_i)`` ranks;
* ``PSP@k`` (Jain, Prabhu and Varma, KDD 2016), normalised as pyxclib's ``psprecision``: with inverse propensities
  ``w_l = 1 / p_l`` (:func:`propensities`),
  ``PSP@k = [sum_i sum_{r<k} hit[i, r] w_{top_ids[i, r]}] / [sum_i (sum of the min(k, y_i) largest w_l of i's true
  labels)]``: the propensity-weighted hits of the top k over the best value any ranking reaches on the same points
  (pyxclib's ratio of two means over points; the 1/k and 1/N cancel). 1 for a perfect ranking.

A point with no true label scores 0 in P@k and nDCG@k (its IDCG is 0) and adds 0 to both sums of PSP@k; every point
counts in the means, as in pyxclib.

:func:`blockwise_top_k` and :func:`dense_top_k` run on the device: the top k labels of every row without ever holding
more than ``[B, block_size]`` logits, for label spaces whose full logits do not fit (Amazon-670k: 128 x 670,091
float32 logits are 327 MiB per batch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from istjax.core.errors import ArgError
from istjax.core.streams import check_positive

__all__ = [
    "blockwise_top_k",
    "dense_top_k",
    "ndcg_at_k",
    "precision_at_k",
    "propensities",
    "psp_at_k",
    "ranking_metrics",
]


# --------------------------------------------------------------------------
# Propensities
# --------------------------------------------------------------------------


def propensities(label_counts: Any, num_points: int, *, a: float = 0.55, b: float = 1.5) -> np.ndarray:
    """Jain et al. (2016) label propensities ``p_l = 1 / (1 + C (N_l + B)^-A)``, ``C = (ln N - 1) (B + 1)^A``.

    Args:
      label_counts: ``[L]`` training points per label ``N_l`` (`istjax.data.extreme.XMCData.label_counts`).
      num_points: ``N``, the training points the counts are over.
      a, b: ``A`` and ``B``: 0.55 and 1.5 by default (the paper's for most sets; 0.6 and 2.6 for Amazon, 0.5 and
        0.4 for Wikipedia).

    Returns:
      ``[L] float64`` propensities in ``(0, 1)``; PSP@k weighs a hit on label ``l`` by ``1 / p_l`` (pyxclib's
      ``compute_inv_propesity`` returns those inverses).
    """
    counts = np.asarray(label_counts, np.float64)
    if counts.ndim != 1 or counts.size == 0 or not np.all(np.isfinite(counts)) or counts.min() < 0:
        raise ArgError("label_counts", f"{counts.dtype} {counts.shape}", "label_counts must be a non-empty [L] array "
                       "of non-negative counts;", "pass XMCData.label_counts() of the training split.")
    num_points = check_positive("num_points", num_points, 2)
    c = (np.log(num_points) - 1.0) * (b + 1.0) ** a
    return 1.0 / (1.0 + c * (counts + b) ** -a)


# --------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------


def _checked(top_ids: Any, labels: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(top_ids[:, :k] int64, labels int64)``, refusing shapes, ranges and repeats the metrics would miscount."""
    top, true = np.asarray(top_ids), np.asarray(labels)
    if top.ndim != 2 or true.ndim != 2 or top.dtype.kind not in "iu" or true.dtype.kind not in "iu" \
            or top.shape[0] != true.shape[0]:
        raise ArgError(("top_ids", "labels"), (f"{top.dtype} {top.shape}", f"{true.dtype} {true.shape}"),
                       "top_ids [N, K] and labels [N, L] must be integer arrays over the same N points;",
                       "pass the predicted ids and istjax.data.extreme.pack_labels(data, rows).")
    k = check_positive("k", k)
    if k > top.shape[1]:
        raise ArgError("k", k, f"k={k} but top_ids holds {top.shape[1]} predictions per point;",
                       f"predict at least {k}, or pass k<={top.shape[1]}.")
    top, true = top[:, :k].astype(np.int64), true.astype(np.int64)
    if top.size and top.min() < 0:
        raise ArgError("top_ids", int(top.min()), "top_ids holds a negative id;", "predicted ids are label ids >= 0.")
    if true.size and true.min() < -1:
        raise ArgError("labels", int(true.min()), "labels holds an id below -1;", "pad label sets with -1 only.")
    for name, arr in (("top_ids", top), ("labels", true)):
        s = np.sort(arr, axis=1)
        if np.any((s[:, 1:] == s[:, :-1]) & (s[:, 1:] >= 0)):
            raise ArgError(name, f"{arr.dtype} {arr.shape}", f"a row of {name} repeats a label id;",
                           "each point's ids must be distinct (a repeat would count twice).")
    return top, true


def _hits(top: np.ndarray, true: np.ndarray) -> np.ndarray:
    """``[N, k] float64``: 1 where the prediction is a true label of its point (-1 padding never matches)."""
    return (top[:, :, None] == true[:, None, :]).any(-1).astype(np.float64)


def _discounts(k: int) -> np.ndarray:
    return 1.0 / np.log2(np.arange(k) + 2.0)


def precision_at_k(top_ids: Any, labels: Any, k: int) -> float:
    """P@k: the mean over points of the fraction of the top ``k`` predictions that are true labels (module doc)."""
    top, true = _checked(top_ids, labels, k)
    return float(_hits(top, true).sum(1).mean() / k) if len(top) else 0.0


def ndcg_at_k(top_ids: Any, labels: Any, k: int) -> float:
    """nDCG@k: the mean over points of DCG@k over the ideal DCG for ``min(k, y_i)`` true labels (module doc)."""
    top, true = _checked(top_ids, labels, k)
    if not len(top):
        return 0.0
    discount = _discounts(k)
    dcg = _hits(top, true) @ discount
    n_true = np.minimum((true >= 0).sum(1), k)
    ideal = np.concatenate([[0.0], np.cumsum(discount)])[n_true]
    return float(np.mean(np.divide(dcg, ideal, out=np.zeros_like(dcg), where=ideal > 0)))


def psp_at_k(top_ids: Any, labels: Any, propensity: Any, k: int) -> float:
    """PSP@k: propensity-weighted hits of the top ``k`` over the best achievable on the same points, as pyxclib's
    ``psprecision`` (module doc). ``propensity``: ``[L]`` :func:`propensities` of the training labels."""
    top, true = _checked(top_ids, labels, k)
    p = np.asarray(propensity, np.float64)
    used = max(int(top.max(initial=-1)), int(true.max(initial=-1)))
    if p.ndim != 1 or p.size <= used or not np.all((p > 0) & (p <= 1)):
        raise ArgError("propensity", f"{p.dtype} {p.shape}", f"propensity must be [L] values in (0, 1] covering "
                       f"every label id used (up to {used});", "pass propensities(train.label_counts(), N).")
    w = 1.0 / p
    gained = (_hits(top, true) * w[top]).sum()
    true_w = np.where(true >= 0, w[np.maximum(true, 0)], 0.0)
    best = -np.sort(-true_w, axis=1)[:, :k].sum()
    return float(gained / best) if best > 0 else 0.0


def ranking_metrics(top_ids: Any, labels: Any, propensity: Optional[Any] = None,
                    ks: Sequence[int] = (1, 3, 5)) -> dict[str, float]:
    """``{"P@k", "nDCG@k"[, "PSP@k"]}`` for each ``k`` of ``ks`` (PSP@k only with ``propensity``), over all points."""
    out = {}
    for k in ks:
        out[f"P@{k}"] = precision_at_k(top_ids, labels, k)
        out[f"nDCG@{k}"] = ndcg_at_k(top_ids, labels, k)
        if propensity is not None:
            out[f"PSP@{k}"] = psp_at_k(top_ids, labels, propensity, k)
    return out


# --------------------------------------------------------------------------
# Blockwise top-k
# --------------------------------------------------------------------------


def _block_sizes(num_labels: int, k: int, block_size: int) -> tuple[int, int, int]:
    num_labels = check_positive("num_labels", num_labels)
    k = check_positive("k", k)
    block_size = min(check_positive("block_size", block_size), num_labels)
    if k > block_size:
        raise ArgError(("k", "block_size"), k, f"k={k} is more than the block of {block_size} labels;",
                       f"pass block_size>={k} (and k<=num_labels={num_labels}).")
    return num_labels, k, block_size


def blockwise_top_k(logits_fn: Callable[[jax.Array], jax.Array], num_labels: int, k: int,
                    block_size: int) -> tuple[jax.Array, jax.Array]:
    """The top ``k`` labels of each row, computing the logits ``block_size`` labels at a time.

    Equal to ``jax.lax.top_k(full_logits, k)`` for finite logits, ties included: ``lax.top_k`` puts the lower
    index first among equal values, and the merge keeps that order (earlier blocks hold lower ids and come first).

    Args:
      logits_fn: ``start -> [B, block_size]`` logits of labels ``start .. start + block_size - 1``; ``start`` is a
        traced ``int32`` scalar, a multiple of ``block_size`` except for the last block, which starts at
        ``num_labels - block_size`` (it overlaps the one before; the overlap is masked) so no block reads past
        the labels.
      num_labels: ``L``.
      k: how many labels per row (``<= block_size``).
      block_size: labels per block (taken as ``L`` when larger); memory is ``[B, block_size]`` logits plus
        ``[B, 2k]`` for the merge.

    Returns:
      ``(values [B, k], ids [B, k] int32)``, best first.
    """
    num_labels, k, block = _block_sizes(num_labels, k, block_size)

    def block_top(i: jax.Array) -> tuple[jax.Array, jax.Array]:
        start = i * block
        first = jnp.minimum(start, num_labels - block)
        ids = first + jnp.arange(block, dtype=jnp.int32)
        logits = jnp.where(ids >= start, logits_fn(first), -jnp.inf)
        values, j = jax.lax.top_k(logits, k)
        return values, ids[j]

    def merge(best: tuple[jax.Array, jax.Array], i: jax.Array) -> tuple[tuple[jax.Array, jax.Array], None]:
        values, ids = block_top(i)
        both_v = jnp.concatenate([best[0], values], axis=1)
        top_v, j = jax.lax.top_k(both_v, k)
        return (top_v, jnp.take_along_axis(jnp.concatenate([best[1], ids], axis=1), j, axis=1)), None

    num_blocks = -(-num_labels // block)
    best, _ = jax.lax.scan(merge, block_top(jnp.int32(0)), jnp.arange(1, num_blocks, dtype=jnp.int32))
    return best


def dense_top_k(hidden: jax.Array, kernel: jax.Array, bias: Optional[jax.Array], k: int,
                block_size: int) -> tuple[jax.Array, jax.Array]:
    """The top ``k`` of ``hidden @ kernel + bias`` per row, ``block_size`` output columns at a time.

    Args:
      hidden: ``[B, H]`` the last hidden activation.
      kernel: ``[H, L]`` the output layer's kernel; ``bias``: ``[L]`` or None.
      k, block_size: as in :func:`blockwise_top_k`; at most ``[B, block_size]`` logits and a ``[H, block_size]``
        slice of the kernel exist at once.

    Returns:
      ``(values [B, k], ids [B, k] int32)``, equal to ``lax.top_k(hidden @ kernel + bias, k)`` (ties: lower id).
    """
    if hidden.ndim != 2 or kernel.ndim != 2 or hidden.shape[1] != kernel.shape[0] \
            or (bias is not None and bias.shape != (kernel.shape[1],)):
        raise ArgError(("hidden", "kernel", "bias"), (hidden.shape, kernel.shape, None if bias is None else bias.shape),
                       "hidden [B, H], kernel [H, L] and bias [L] (or None) do not fit together;",
                       "pass the last hidden activation and the output layer's kernel and bias.")
    num_labels, _, block = _block_sizes(kernel.shape[1], k, block_size)

    def logits(first: jax.Array) -> jax.Array:
        out = hidden @ jax.lax.dynamic_slice_in_dim(kernel, first, block, axis=1)
        return out if bias is None else out + jax.lax.dynamic_slice_in_dim(bias, first, block)[None, :]

    return blockwise_top_k(logits, num_labels, k, block)
