"""The state a round carries, and the few tree helpers every algorithm and runtime shares.

A round is ``distribute -> local (per worker) -> collect`` (see `istjax.algorithms`); these are the values that flow
between those pieces. Stacks of workers carry a leading `[W]` axis.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from istjax.core.choice import Choice
from istjax.core.partition import Partition
from istjax.core.schedule import at_round

__all__ = [
    "WORKERS",
    "MODEL_STATE_POLICIES",
    "OPTIMIZER_STATE_POLICIES",
    "ModelStatePolicy",
    "OptimizerStatePolicy",
    "round_keys",
    "worker_init",
    "TrainState",
    "WorkerState",
    "RoundPlan",
    "summarize",
    "recompute_batches",
    "NonFiniteLoss",
    "check_finite",
    "worker_mean",
    "broadcast_workers",
    "first_worker",
]

PyTree = Any

#: The axis name a runtime binds to the workers it maps over (data parallel's `lax.pmean` reduces over it).
WORKERS = "workers"


class OptimizerStatePolicy(Choice):
    """A worker's optimizer state at a round's end: ``reset`` (fresh every round) or ``carry`` (it travels with the
    parameters)."""

    RESET = "reset"
    CARRY = "carry"


class ModelStatePolicy(Choice):
    """The model state (BatchNorm statistics) at a round's end: ``carry`` (it travels with the parameters) or
    ``recompute`` (recomputed on the merged model)."""

    CARRY = "carry"
    RECOMPUTE = "recompute"


OPTIMIZER_STATE_POLICIES = OptimizerStatePolicy.values()
MODEL_STATE_POLICIES = ModelStatePolicy.values()


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


def recompute_batches(batches: PyTree, steps: int = 1) -> PyTree:
    """The batches the ``"recompute"`` policy reads: each worker's first ``steps`` of the round, as N = W x steps
    batches (leaves `[W, K, B, ...]` -> `[W * steps, B, ...]`; ``steps=1``: every worker's first batch)."""
    return jax.tree.map(lambda b: b[:, :steps].reshape((-1,) + b.shape[2:]), batches)


def summarize(metrics_WxK: dict) -> dict:
    """Round metrics from per-worker, per-step ones (leaves `[W, K]`).

    Returns ``train_loss`` (mean over workers and steps), ``worker_loss`` `[W]` (each worker's mean over its K
    steps), ``finite`` (a bool: every step's loss of every worker is finite; `check_finite` reads it) and
    ``train_<name>`` (the mean) for every other metric.
    """
    out = {"train_loss": jnp.mean(metrics_WxK["loss"]), "worker_loss": jnp.mean(metrics_WxK["loss"], axis=1),
           "finite": jnp.all(jnp.isfinite(metrics_WxK["loss"]))}
    for k, v in metrics_WxK.items():
        if k != "loss":
            out[f"train_{k}"] = jnp.mean(v)
    return out


class NonFiniteLoss(FloatingPointError):
    """A round whose loss was not finite at some worker: training diverged (`check_finite`)."""

    def __init__(self, message: str, round_index: Optional[int], workers: list[int]):
        super().__init__(message)
        self.round_index, self.workers = round_index, workers


def check_finite(metrics: dict, round_index: Optional[int] = None) -> dict:
    """``metrics`` (a round's, from ``algorithm.round``) unchanged, or `NonFiniteLoss` naming the round and the
    workers whose loss was NaN or infinite, and what to try. A guard for a Python training loop::

        for r in range(num_rounds):
            state, metrics = alg.round(state, batches(r))
            istjax.check_finite(metrics, r)   # stops at the first round that diverged

    Reading the flag waits for the round to finish (one host transfer of a few numbers a round).
    """
    worker_loss = np.asarray(metrics["worker_loss"], dtype=np.float64).reshape(-1)
    ok = bool(np.asarray(metrics["finite"])) if "finite" in metrics else bool(np.all(np.isfinite(worker_loss)))
    if ok:
        return metrics
    bad = [int(w) for w in np.flatnonzero(~np.isfinite(worker_loss))]
    where = "" if round_index is None else f" in round {int(round_index)}"
    who = f"at worker(s) {bad} of {worker_loss.size}" if bad else "at a step of some worker"
    raise NonFiniteLoss(f"non-finite loss{where} {who} (each worker's mean loss over its steps: "
                        f"{worker_loss.tolist()}): training diverged. Lower the learning rate, check that the model "
                        f"returns logits (not probabilities) with one column per class, and that every label is in "
                        f"[0, num_classes).", None if round_index is None else int(round_index), bad)


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
