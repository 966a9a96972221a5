"""Flax models whose axes carry logical names, so `istjax.spec_from_logical` can partition them."""

from istjax.models.mlp import MLP as MLP
from istjax.models.mlp import batch_norm as batch_norm

__all__ = ["MLP", "batch_norm"]
