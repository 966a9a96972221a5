"""The state a round carries, and the few tree helpers every algorithm and runtime shares.

A round is ``distribute -> local (per worker) -> collect`` (see `istjax.algorithms`); these are the values that flow
between those pieces. Stacks of workers carry a leading `[W]` axis.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp

from istjax.core.partition import Partition
from istjax.core.schedule import at_round

__all__ = [
    "WORKERS",
    "round_keys",
    "worker_init",
    "TrainState",
    "WorkerState",
    "RoundPlan",
    "summarize",
    "worker_mean",
    "broadcast_workers",
    "first_worker",
]

PyTree = Any

# The axis name a runtime binds to the workers it maps over (data parallel's `lax.pmean` reduces over it).
WORKERS = "workers"


class TrainState(NamedTuple):
    """The whole training state; a pytree, so it jits, checkpoints and moves between devices as one value.

    Attributes:
      params: global parameters.
      model_state: global non-parameter model state: Flax collections other than ``params`` (e.g. BatchNorm's
        ``batch_stats``); ``{}`` for a model without any.
      opt_state: global optimizer state; ``()`` when the optimizer state is reset every round.
      key: PRNG key; each round splits it into the next state's key and the round's key.
      round: `[]` int32, rounds completed.
    """

    params: PyTree
    model_state: PyTree
    opt_state: PyTree
    key: jax.Array
    round: jax.Array


class WorkerState(NamedTuple):
    """What a worker trains: its (sub-)parameters, (sub-)model state and optimizer state. Stacked on `[W]`."""

    params: PyTree
    model_state: PyTree
    opt_state: PyTree


class RoundPlan(NamedTuple):
    """What ``distribute`` decided and ``collect`` needs: the next key and (IST) the round's partition."""

    key: jax.Array
    partition: Optional[Partition]


def round_keys(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(next state's key, this round's key)``: the one key schedule of every algorithm, runtime and reference
    loop (the round's key samples the partition; algorithms that sample nothing still advance the key alike, so a
    resumed run of any of them sees the same keys)."""
    key, round_key = jax.random.split(key)
    return key, round_key


def worker_init(optimizer, params_W: PyTree, round_index) -> PyTree:
    """The optimizer state `[W, ...]` workers start a round from when it is not carried: ``optimizer.init`` of each
    worker's parameters, stamped with the round (so a round-counted schedule reads the right step). The one place
    this is written: algorithms call it in ``distribute``, runtimes that rebuild it on a worker instead of sending it
    (`istjax.runtimes.mpi`) call it there."""
    return at_round(jax.vmap(optimizer.init)(params_W), round_index)


def summarize(metrics_WxK: dict) -> dict:
    """Round metrics from per-worker, per-step ones (leaves `[W, K]`).

    Returns ``train_loss`` (mean over workers and steps), ``worker_loss`` `[W]` (each worker's mean over its K
    steps) and ``train_<name>`` (the mean) for every other metric.
    """
    out = {"train_loss": jnp.mean(metrics_WxK["loss"]), "worker_loss": jnp.mean(metrics_WxK["loss"], axis=1)}
    for k, v in metrics_WxK.items():
        if k != "loss":
            out[f"train_{k}"] = jnp.mean(v)
    return out


def worker_mean(tree_W: PyTree, like: PyTree = None) -> PyTree:
    """The mean over the leading `[W]` axis of every leaf, in the dtype of ``like`` (default: the leaf's own).

    Integer leaves (e.g. an optimizer's step count) are rounded back to integers.
    """

    def mean(x, ref):
        dtype = jnp.asarray(ref).dtype
        m = jnp.mean(x, axis=0)
        return jnp.round(m).astype(dtype) if jnp.issubdtype(dtype, jnp.integer) else m.astype(dtype)

    if like is None:
        return jax.tree.map(lambda x: mean(x, x), tree_W)
    return jax.tree.map(mean, tree_W, like)


def broadcast_workers(tree: PyTree, num_workers: int) -> PyTree:
    """Every leaf ``[...]`` as ``[W, ...]`` copies (a broadcast, not a materialised copy, until XLA needs one)."""
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_workers,) + jnp.shape(x)), tree)


def first_worker(tree_W: PyTree) -> PyTree:
    """Worker 0's slice of every leaf (replicas that agree by construction)."""
    return jax.tree.map(lambda x: x[0], tree_W)
