"""Multi-label losses and on-device ranking scores for extreme classification, on label sets padded with -1.

``labels [B, L] int32`` holds each point's true label ids, then -1 (`istjax.data.extreme.pack_labels`); ``logits
[B, C]`` one score per label. Two losses, the researcher's choice (``SparseMLP.loss``):

* ``"softmax"``: cross-entropy of the softmax over all labels against the point's labels as a uniform target
  (``1 / y_i`` on each of its ``y_i`` labels): ``-(1/y_i) sum_{l in Y_i} log softmax(z)_l``. The IST paper's
  Amazon-670k network and most XMC networks (e.g. DeepXML's, SLIDE's) train this way.
* ``"bce"``: binary cross-entropy of every label, averaged over labels: ``mean_l [softplus(z_l) - t_l z_l]``.

`scores` returns the loss and, per batch, P@1, P@3, P@5 and nDCG@5 from ``lax.top_k`` of the batch's logits (the
definitions of `istjax.xmc.metrics`, which the tests hold these to); ``accuracy`` is P@1 (the top label is a true
one), the number the training loop, ``compare`` and time-to-target read. Only one batch's logits ever exist.

Given each true label's weight (``weights [B, L]``: its inverse propensity, `LabelWeights.of`), the scores also hold
PSP@k as a ratio of two means over points (pyxclib's normalisation, `istjax.xmc.metrics.psp_at_k`):
``psp_at_k_numerator`` (the weights of the top k's hits) and ``psp_at_k_denominator`` (the best any ranking reaches:
the ``min(k, y_i)`` largest weights of the point's labels). An evaluation over many batches divides their
example-weighted means (`istjax.core.contract.ratios`), so PSP@k is exact over the whole split.
"""

from __future__ import annotations

import hashlib
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from istjax.core import contract
from istjax.core.errors import ArgError

__all__ = ["LOSSES", "KS", "LabelWeights", "multilabel_loss", "ranking_scores", "scores"]

LOSSES = ("softmax", "bce")
KS = (1, 3, 5)


class LabelWeights:
    """One weight per label (PSP@k's inverse propensities, `istjax.xmc.metrics.propensities`), a model field that
    hashes and compares by content and prints short; ``of(labels)`` reads the weight of every true label of a
    batch (0 on the -1 padding)."""

    def __init__(self, values: Any):
        w = np.asarray(values, np.float32)
        if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or w.min() <= 0:
            raise ArgError("label_weights", f"{w.dtype} {w.shape}", "label_weights must be a non-empty [L] array "
                           "of finite positive values;", "pass 1 / istjax.xmc.metrics.propensities(counts, N).")
        w.setflags(write=False)
        self.values = w
        self._digest = hashlib.sha256(w.tobytes()).hexdigest()[:16]

    def __len__(self) -> int:
        return int(self.values.size)

    def __hash__(self) -> int:
        return hash(self._digest)

    def __eq__(self, other) -> bool:
        return isinstance(other, LabelWeights) and other._digest == self._digest

    def __repr__(self) -> str:
        return f"LabelWeights(L={self.values.size}, mean={float(self.values.mean()):.4g}, sha256={self._digest})"

    def of(self, labels_BxL: jax.Array) -> jax.Array:
        """``[B, L] float32``: each true label's weight, 0 where ``labels`` is the -1 padding."""
        ids, mask = _targets(labels_BxL)
        return jnp.asarray(self.values)[ids] * mask


def _targets(labels_BxL: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(ids [B, L], mask [B, L])``: the label ids with padding sent to 0 (a -1 index wraps) and where they are."""
    mask = labels_BxL >= 0
    return jnp.where(mask, labels_BxL, 0), mask.astype(jnp.float32)


def multilabel_loss(logits_BxC: jax.Array, labels_BxL: jax.Array, loss: str = "softmax") -> jax.Array:
    """The batch's mean ``loss`` (module docstring); a point with no label adds 0 to the softmax loss."""
    ids, mask = _targets(labels_BxL)
    picked = jnp.take_along_axis(logits_BxC, ids, axis=1) * mask  # [B, L] each true label's logit
    if loss == "softmax":
        count = jnp.sum(mask, axis=1)
        log_z = jax.nn.logsumexp(logits_BxC, axis=1)
        per_point = jnp.where(count > 0, log_z - jnp.sum(picked, axis=1) / jnp.maximum(count, 1.0), 0.0)
        return jnp.mean(per_point)
    if loss == "bce":
        # sum_l softplus(z_l) - sum_{l in Y} z_l, over C labels (a label listed twice is not: ids are distinct)
        return jnp.mean((jnp.sum(jax.nn.softplus(logits_BxC), axis=1) - jnp.sum(picked, axis=1))
                        / logits_BxC.shape[1])
    raise ArgError("loss", loss, f"loss={loss!r}:", f"choose one of {list(LOSSES)}.")


def ranking_scores(logits_BxC: jax.Array, labels_BxL: jax.Array, ks=KS,
                   weights_BxL: Optional[jax.Array] = None) -> dict[str, jax.Array]:
    """``{"precision_at_k": ..., "ndcg_at_<max k>": ...}`` over the batch (means over its points), and with
    ``weights`` (each true label's, 0 on padding) the two parts of ``psp_at_k`` (module docstring)."""
    k_max = min(max(ks), logits_BxC.shape[1])
    _, top_BxK = jax.lax.top_k(logits_BxC, k_max)
    match = top_BxK[:, :, None] == labels_BxL[:, None, :]  # [B, K, L]; -1 never matches
    hits = jnp.any(match, axis=2).astype(jnp.float32)
    out = {f"precision_at_{k}": jnp.mean(jnp.sum(hits[:, :k], axis=1) / k) for k in ks if k <= k_max}
    discount = 1.0 / jnp.log2(jnp.arange(k_max, dtype=jnp.float32) + 2.0)
    count = jnp.sum(labels_BxL >= 0, axis=1)
    ideal = jnp.sum(jnp.where(jnp.arange(k_max)[None, :] < count[:, None], discount[None, :], 0.0), axis=1)
    dcg = jnp.sum(hits * discount[None, :], axis=1)
    out[f"ndcg_at_{k_max}"] = jnp.mean(jnp.where(ideal > 0, dcg / jnp.maximum(ideal, 1e-12), 0.0))
    if weights_BxL is not None:
        gained = jnp.sum(jnp.where(match, weights_BxL[:, None, :], 0.0), axis=2)  # [B, K] the weight of each hit
        best = -jnp.sort(-weights_BxL, axis=1)  # [B, L] a point's weights, largest first (padding's 0 last)
        for k in ks:
            if k <= k_max:
                out[f"psp_at_{k}{contract.RATIO_PARTS[0]}"] = jnp.mean(jnp.sum(gained[:, :k], axis=1))
                out[f"psp_at_{k}{contract.RATIO_PARTS[1]}"] = jnp.mean(jnp.sum(best[:, :k], axis=1))
    return out


def scores(logits_BxC: jax.Array, labels_BxL: jax.Array, loss: str = "softmax",
           label_weights: Optional[LabelWeights] = None) -> tuple[jax.Array, dict]:
    """``(loss, {"accuracy": P@1, "precision_at_1/3/5": ..., "ndcg_at_5": ...})`` of one batch (module docstring),
    with the parts of ``psp_at_1/3/5`` when ``label_weights`` are given; float32 whatever the compute dtype."""
    logits_BxC = logits_BxC.astype(jnp.float32)
    weights = None if label_weights is None else label_weights.of(labels_BxL)
    ranking = ranking_scores(logits_BxC, labels_BxL, weights_BxL=weights)
    return multilabel_loss(logits_BxC, labels_BxL, loss), {"accuracy": ranking["precision_at_1"], **ranking}
