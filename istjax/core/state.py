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
from istjax.core.weights import example_weights, weighted_mean

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
    "last_steps",
    "recompute_batches",
    "NonFiniteLoss",
    "check_finite",
    "worker_mean",
    "weighted_replicas",
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
    """What ``distribute`` decided and ``collect`` needs: the next key, (IST) the round's partition and (federated
    clients) the server's ``weights`` of the W workers, `[W]` summing to 1 (the sampled clients' example counts
    over their sum; None: every worker alike). An exchange that applies the weights itself on the way (the MPI
    replicas' sum) hands ``collect`` a plan without them."""

    key: jax.Array
    partition: Optional[Partition]
    weights: Optional[jax.Array] = None


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


def last_steps(batches: PyTree) -> PyTree:
    """Each worker's last batch of the round, `[W, 1, B, ...]` from leaves `[W, K, B, ...]` (the loss split's):
    step K - 1, or, for batches with example weights (`istjax.core.weights`), each worker's last step whose weights
    are not all 0 (a client's steps past its own end are padding; a worker without any: step K - 1)."""
    weights = example_weights(batches)
    if weights is None:
        return jax.tree.map(lambda b: b[:, -1:], batches)
    has_WxK = jnp.any(jnp.asarray(weights) != 0, axis=tuple(range(2, jnp.ndim(weights))))
    last_W = has_WxK.shape[1] - 1 - jnp.argmax(has_WxK[:, ::-1], axis=1)  # none: argmax 0, step K - 1
    return jax.tree.map(lambda b: jax.vmap(lambda b_w, k: jax.lax.dynamic_slice_in_dim(b_w, k, 1))(b, last_W),
                        batches)


def summarize(metrics_WxK: dict) -> dict:
    """Round metrics from per-worker, per-step ones (leaves `[W, K]`).

    Returns ``train_loss`` (mean over workers and steps), ``worker_loss`` `[W]` (each worker's mean over its K
    steps), ``finite`` (a bool: every step's loss of every worker is finite; `check_finite` reads it) and
    ``train_<name>`` (the mean) for every other metric.

    With ``"examples"`` among the metrics (each step's weight sum: batches with example weights,
    `istjax.core.weights`), every mean is weighted by it instead, so it is the mean over the round's examples and a
    padded step (0 examples) counts nothing; a worker with no example at all has ``worker_loss`` 0 (its steps'
    losses are exactly 0: nothing trained, nothing lost). ``train_examples`` is then their total over workers and
    steps (an example trained in E epochs counts E times), not a mean.
    """
    loss = metrics_WxK["loss"]
    examples = metrics_WxK.get("examples")
    if examples is None:
        out = {"train_loss": jnp.mean(loss), "worker_loss": jnp.mean(loss, axis=1)}
    else:
        out = {"train_loss": weighted_mean(loss, examples), "worker_loss": weighted_mean(loss, examples, 1),
               "train_examples": jnp.sum(jnp.asarray(examples, jnp.float32))}
    out["finite"] = jnp.all(jnp.isfinite(loss))
    for k, v in metrics_WxK.items():
        if k not in ("loss", "examples"):
            out[f"train_{k}"] = jnp.mean(v) if examples is None else weighted_mean(v, examples)
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


def weighted_replicas(tree_L: Any, exact: Any, weights_L: Any, num_workers: int) -> Any:
    """Each worker's tree ``t_w`` as ``exact + W * weights[w] * (t_w - exact)``: trees whose plain mean over all W
    workers is their mean weighted by ``weights`` (summing to 1 over the W), so an exchange that sums or averages
    replicas (an MPI all-reduce included) computes the weighted mean without knowing it. ``tree_L`` and
    ``weights_L`` may be the L rows of the W a process holds. Integer leaves (a step count) are left as they are."""
    scale = jnp.asarray(weights_L, jnp.float32) * num_workers

    def one(t, e):
        if not jnp.issubdtype(t.dtype, jnp.floating):
            return t
        s = scale.reshape((-1,) + (1,) * (t.ndim - 1))
        e = jnp.broadcast_to(e, t.shape)
        return (e + s * (t - e)).astype(t.dtype)

    return jax.tree.map(one, tree_L, exact)


def broadcast_workers(tree: PyTree, num_workers: int) -> PyTree:
    """Every leaf ``[...]`` as ``[W, ...]`` copies (a broadcast, not a materialised copy, until XLA needs one)."""
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_workers,) + jnp.shape(x)), tree)


def first_worker(tree_W: PyTree) -> PyTree:
    """Worker 0's slice of every leaf (replicas that agree by construction)."""
    return jax.tree.map(lambda x: x[0], tree_W)
