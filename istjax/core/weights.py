"""Example weights: a training batch that counts some of its examples more than others, or not at all.

A batch may carry ``"weight"`` `[B]` (float32, >= 0) beside ``"x"`` and ``"y"``: how much each example counts. The
federated client batches (`istjax.data.client_batches`) fill each client's `[K, B]` steps to a size fixed for the
whole run with repeats of its own examples at weight 0, so every runtime sees the same shapes while every example
of the client counts exactly once an epoch. Three places read the weights, each once:

* the loss (`istjax.core.task.scored`): the weighted mean of the per-example score, ``sum(w l) / sum(w)``, and of
  every metric, the task's score vmapped over single examples (every score in the library is a mean over them);
* a local step (`istjax.algorithms.base.local_train`): a step whose weights sum to 0 changes nothing: parameters,
  model state and optimizer state (Adam's count included) pass through, and its loss is exactly 0;
* a round's summary (`istjax.core.state.summarize`): each step's metrics weighted by its examples.

A batch without ``"weight"`` runs the unweighted code, unchanged: every example counts once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import jax
import jax.numpy as jnp

__all__ = ["WEIGHT", "example_weights", "weighted_mean"]

#: The batch key of the per-example weights.
WEIGHT = "weight"

# The floor of a weighted mean's denominator: weights summing to 0 give 0 / TINY = 0, not 0 / 0.
TINY = float(jnp.finfo(jnp.float32).tiny)


def example_weights(batch: Any) -> Optional[jax.Array]:
    """The batch's per-example weights (``batch["weight"]``, `[B]` or `[W, K, B]`...), or None: every example counts
    once. Static: a batch either has the key or not, so a traced function picks its code once."""
    return batch.get(WEIGHT) if isinstance(batch, Mapping) else None


def weighted_mean(values: Any, weights: Any, axis: Optional[int] = None) -> jax.Array:
    """``sum(w * v) / max(sum(w), tiny)`` over ``axis`` of the weights (None: all of them), float32.

    ``values`` has the weights' shape, or more trailing axes (a per-example vector metric), broadcast against them.
    A value of weight 0 adds exactly 0 whatever it is (NaN or inf included, in the value and its gradient), so
    weights summing to 0 give exactly 0: finite, and a round's ``finite`` flag is not raised by padding.
    """
    w = jnp.asarray(weights, jnp.float32)
    v = jnp.asarray(values)
    w_v = w.reshape(w.shape + (1,) * (v.ndim - w.ndim))
    counted = jnp.where(w_v != 0, v, 0).astype(jnp.float32) * w_v
    return jnp.sum(counted, axis=axis) / jnp.maximum(jnp.sum(w, axis=axis), TINY)
