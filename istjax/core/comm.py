"""Communication accounting: bytes each worker receives and sends per round, computed from shapes.

The model is a parameter server: at the start of a round a worker receives what it trains; at the end it sends it
back. For IST that is its sub-network (and its slice of the model state, such as BatchNorm statistics) (between ``1/W^2`` and ``1/W`` of each partitioned weight: a weight
partitioned on one axis moves ``1/W`` of itself, one partitioned on both, like a hidden-to-hidden layer,
``1/W^2``); for local SGD the whole model once per round; for data parallel the whole gradient (sent) and the
averaged result (received) every step, so K times per round. A carried optimizer state travels with the parameters
and is counted. Padding slots (uneven partitions) are counted: they are moved. The MPI backend measures the bytes of
the buffers it actually moves and reports them beside these.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import numpy as np

from istjax.core.choice import Choice
from istjax.core.spec import SubnetSpec
from istjax.core.subnet import subnet_shapes

__all__ = ["EXCHANGES", "Exchange", "CommBytes", "subnet_bytes", "replicated_bytes", "tree_bytes"]

PyTree = Any
class Exchange(Choice):
    """What crosses between workers and the server each round (`istjax.algorithms.base` says what each means); equal
    to its string value, so a config's string compares equal to its member (`istjax.core.choice`)."""

    SUBNETWORKS = "subnetworks"
    REPLICAS = "replicas"
    GRADIENTS = "gradients"
    ACTIVATIONS = "activations"
    SUBSETS = "subsets"
    GROUPS = "groups"


#: What crosses between workers and the server, by name (`Exchange`).
EXCHANGES = Exchange.values()


class CommBytes(NamedTuple):
    """Bytes one worker moves in one round: ``received`` from the server, ``sent`` to it."""

    received: int
    sent: int


def tree_bytes(tree: PyTree) -> int:
    """Total bytes of a tree of arrays or `jax.ShapeDtypeStruct`s."""
    return int(sum(math.prod(np.shape(x)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree)))


def subnet_bytes(tree: PyTree, spec: SubnetSpec, slots) -> CommBytes:
    """Per-worker bytes of one round of an algorithm exchanging sub-networks: one worker's part of ``tree``, the tree
    the algorithm holds and deals (IST: the parameters, the model state such as BatchNorm statistics, a carried
    optimizer state), whose ``spec`` says which axes narrow to ``slots`` units per group; shared leaves whole."""
    shapes = jax.tree.structure(tree).flatten_up_to(subnet_shapes(tree, spec, slots))  # one shape per leaf of tree
    total = int(sum(math.prod(s) * np.dtype(x.dtype).itemsize for s, x in zip(shapes, jax.tree.leaves(tree))))
    return CommBytes(total, total)


def replicated_bytes(tree: PyTree, *, times: int, once: PyTree = ()) -> CommBytes:
    """Per-worker bytes when every worker moves ``tree`` (the whole model, or its gradient) ``times`` times per
    round, and ``once`` (e.g. the model state data parallel averages at the end of a round) once."""
    total = tree_bytes(tree) * times + tree_bytes(once)
    return CommBytes(total, total)
