"""A `Task` tells an algorithm how to initialise a network and the loss of any of its sub-networks.

Algorithms never see a Flax module: they see ``init(key) -> params`` and ``loss_fn(units)``, which returns the loss
of the network narrowed to ``units`` slots per neuron group (``units=None``: the full network). `classifier` builds
a Task from an ordinary Flax module whose parameters carry logical axis names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from istjax.core.spec import SubnetSpec, spec_from_logical

__all__ = ["Task", "classifier"]

PyTree = Any
Batch = Mapping[str, jax.Array]
LossFn = Callable[[PyTree, Batch], tuple[jax.Array, dict[str, jax.Array]]]


class Task(NamedTuple):
    """What an algorithm needs to know about a network.

    Attributes:
      init: ``key -> params``, the full-width parameters (plain arrays).
      loss_fn: ``units -> (params, batch) -> (loss, aux)``; ``units`` maps each neuron group to the slots a worker
        holds (None: full width). ``aux`` is a dict of scalar metrics (e.g. ``accuracy``).
      spec: the parameters' `SubnetSpec`.
    """

    init: Callable[[jax.Array], PyTree]
    loss_fn: Callable[[Optional[Mapping[str, int]]], LossFn]
    spec: SubnetSpec


def classifier(model: nn.Module, example_x: jax.Array, rules: Mapping[str, Any]) -> Task:
    """A classification Task (softmax cross-entropy on integer labels) for a Flax module.

    Args:
      model: a Flax module with a ``subnet(units) -> module`` method giving the module at a worker's widths.
      example_x: `[B, ...]` an input batch (only its shape and dtype matter).
      rules: logical axis name -> neuron group, see `istjax.spec_from_logical`.
    """
    abstract = jax.eval_shape(lambda k: model.init(k, example_x)["params"], jax.random.key(0))
    spec = spec_from_logical(abstract, rules)

    def init(key):
        return nn.unbox(model.init(key, example_x)["params"])

    def loss_fn(units):
        module = model if units is None else model.subnet(units)

        def loss(params, batch):
            logits = module.apply({"params": params}, batch["x"])
            labels = batch["y"]
            loss = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))
            accuracy = jnp.mean((jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32))
            return loss, {"accuracy": accuracy}

        return loss

    return Task(init, loss_fn, spec)
