"""Training algorithms as factories of pure functions: IST, data parallel, local SGD.

Independent Subnetwork Training: Yuan, Wolfe, Dun, Tang, Kyrillidis, Jermaine, "Distributed Learning of Deep Neural
Networks using Independent Subnet Training", arXiv 1910.02120.

Every factory returns an `Algorithm`, whose ``init(key) -> TrainState`` and ``round(state, batches) -> (state,
metrics)`` are all a user needs (as optax returns ``(init, update)``). A round is always the same three pure pieces:

``distribute(state) -> (workers, plan)``
    the per-worker starting points, stacked on a leading `[W]` axis (IST: sample a partition and extract
    sub-networks; local SGD and data parallel: copies of the global model).
``local(worker, batches_K, axis_name=WORKERS) -> (worker, metrics_K)``
    one worker's K optimizer steps in `lax.scan` (all K reach the result; none is dropped). Data parallel averages
    gradients across workers inside it with ``lax.pmean(..., axis_name)``, so a backend runs ``local`` under a
    mapping that binds that axis name (or a tuple of names, e.g. workers-per-device inside devices).
``collect(state, workers, plan) -> state``
    back to one global model (IST: merge; local SGD: average; data parallel: the replicas agree, take one).

An algorithm may also give ``local_fused(workers, batches) -> (workers, metrics)``: the local phase of all W workers
as one function on `[W, ...]` stacks, equal to ``vmap(local, axis_name=WORKERS)``, which a backend holding every
worker on one device uses instead. Data parallel has one: under `vmap`, ``lax.pmean`` becomes a reduction over the
leading `[W]` axis of every gradient and a broadcast back, every step, which XLA's CPU backend runs several times
slower than the matmuls (measured in ``docs/benchmarks.md``); the fused form differentiates the mean of the W
workers' losses with respect to the one shared replica instead, so the sum over workers happens inside the weight
gradient's matmul and one update is applied.

Backends (`istjax.backends`) decide where the W copies of ``local`` run; the algorithm does not know which.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

import istjax.core.partition as partition_lib
from istjax.core.comm import CommBytes, ist_bytes, replicated_bytes
from istjax.core.subnet import extract, extract_tree, merge, merge_tree
from istjax.core.task import Task

__all__ = [
    "WORKERS",
    "TrainState",
    "WorkerState",
    "RoundPlan",
    "Algorithm",
    "ist",
    "data_parallel",
    "local_sgd",
    "local_train",
    "OPTIMIZER_STATE_POLICIES",
]

PyTree = Any
WORKERS = "workers"
OPTIMIZER_STATE_POLICIES = ("reset", "carry")


class TrainState(NamedTuple):
    """The whole training state; a pytree, so it jits, checkpoints and moves between devices as one value.

    Attributes:
      params: global parameters.
      opt_state: global optimizer state; ``()`` when the optimizer state is reset every round.
      key: PRNG key; each round splits it into the next state's key and the round's key.
      round: `[]` int32, rounds completed.
    """

    params: PyTree
    opt_state: PyTree
    key: jax.Array
    round: jax.Array


class WorkerState(NamedTuple):
    """What a worker trains: its (sub-)parameters and optimizer state. Stacked on `[W]` between stages."""

    params: PyTree
    opt_state: PyTree


class RoundPlan(NamedTuple):
    """What `distribute` decided and `collect` needs: the next key and (IST) the round's partition."""

    key: jax.Array
    partition: Optional[partition_lib.Partition]


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """An algorithm: ``init`` and ``round`` for users; the pieces and facts for backends, drivers and accounting.

    Attributes:
      init: ``key -> TrainState``.
      round: ``(state, batches) -> (state, metrics)``; ``batches`` leaves are `[W, K, B, ...]`. Compiled once by the
        chosen backend; metrics hold ``train_loss``, ``train_accuracy`` (means over workers and steps) and
        ``worker_loss`` `[W]` (each worker's mean over its K steps).
      distribute, local, collect: the pure pieces ``round`` is made of (see the module docstring).
      name: ``"ist"``, ``"data_parallel"`` or ``"local_sgd"``.
      num_workers, local_steps: W and K.
      comm: bytes each worker receives and sends per round, computed from shapes (see `istjax.comm`).
      task, optimizer, sampler: what it was built from.
      local_fused: optional ``(workers [W], batches [W, K, ...]) -> (workers [W], metrics [W, K])``, equal to
        ``vmap(local, axis_name=WORKERS)``; single-device backends use it when given.
    """

    init: Callable[[jax.Array], TrainState]
    round: Callable[[TrainState, PyTree], tuple[TrainState, dict]]
    distribute: Callable[[TrainState], tuple[WorkerState, RoundPlan]]
    local: Callable[[WorkerState, PyTree], tuple[WorkerState, dict]]
    collect: Callable[[TrainState, WorkerState, RoundPlan], TrainState]
    name: str
    num_workers: int
    local_steps: int
    comm: CommBytes
    task: Task
    optimizer: optax.GradientTransformation
    sampler: Optional[partition_lib.Sampler] = None
    local_fused: Optional[Callable[[WorkerState, PyTree], tuple[WorkerState, dict]]] = None


def local_train(loss_fn, optimizer: optax.GradientTransformation, worker: WorkerState, batches_K: PyTree,
                grad_reduce: Callable[[PyTree], PyTree] = lambda g: g) -> tuple[WorkerState, dict]:
    """K optimizer steps of one worker, in `lax.scan`; returns the state after the K-th step and per-step metrics.

    Args:
      loss_fn: ``(params, batch) -> (loss, aux)``.
      optimizer: any optax transformation.
      worker: the worker's starting params and optimizer state.
      batches_K: a pytree whose leaves are `[K, B, ...]`.
      grad_reduce: applied to every step's gradients (data parallel averages them across workers here).
    """

    num_steps = jax.tree.leaves(batches_K)[0].shape[0]

    def step(carry: WorkerState, k):
        # Scanning over the step index and slicing the batch in place (rather than scanning over ``batches_K``)
        # keeps a vmapped `[W, K, ...]` batch where it is: scanning over it makes XLA first transpose the whole
        # batch to `[K, W, ...]`, 10 % of the 2-layer speech model's local phase (benchmarks study 1).
        batch = jax.tree.map(lambda b: jax.lax.dynamic_index_in_dim(b, k, keepdims=False), batches_K)
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(carry.params, batch)
        return _apply(optimizer, grad_reduce(grads), carry), {"loss": loss, **aux}

    return jax.lax.scan(step, worker, jnp.arange(num_steps, dtype=jnp.int32))


def _apply(optimizer: optax.GradientTransformation, grads: PyTree, worker: WorkerState) -> WorkerState:
    """One optimizer update of ``worker`` with ``grads``."""
    # optax internals (e.g. Adam's ``decay ** count``) mix Python floats with int32 counts; let them promote as optax
    # expects even when the user runs JAX with strict dtype promotion. Our own code stays strict.
    with jax.numpy_dtype_promotion("standard"):
        updates, opt_state = optimizer.update(grads, worker.opt_state, worker.params)
    return WorkerState(optax.apply_updates(worker.params, updates), opt_state)


def _summarize(metrics_WxK: dict) -> dict:
    out = {"train_loss": jnp.mean(metrics_WxK["loss"]), "worker_loss": jnp.mean(metrics_WxK["loss"], axis=1)}
    for k, v in metrics_WxK.items():
        if k != "loss":
            out[f"train_{k}"] = jnp.mean(v)
    return out


def _check_common(num_workers, local_steps, optimizer_state):
    if not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"num_workers={num_workers!r}: need a positive integer.")
    if not isinstance(local_steps, int) or local_steps < 1:
        raise ValueError(f"local_steps={local_steps!r}: need a positive integer (optimizer steps per round).")
    if optimizer_state not in OPTIMIZER_STATE_POLICIES:
        raise ValueError(f"optimizer_state={optimizer_state!r}: choose one of {OPTIMIZER_STATE_POLICIES} (reset: "
                         f"fresh optimizer state every round; carry: it travels with the parameters).")


def _mean_workers(tree):
    def mean(x):
        m = jnp.mean(x, axis=0)
        return jnp.round(m).astype(x.dtype) if jnp.issubdtype(x.dtype, jnp.integer) else m.astype(x.dtype)

    return jax.tree.map(mean, tree)


def _broadcast(tree, num_workers):
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_workers,) + jnp.shape(x)), tree)


def _build(name, task, optimizer, num_workers, local_steps, init, distribute, local, collect, comm, sampler,
           backend, local_fused=None) -> Algorithm:
    import istjax.runtimes.base as backends  # late: backends import this module's types

    parts = dict(distribute=distribute, local=local, collect=collect)
    extra = {} if local_fused is None else {"local_fused": local_fused}
    round_fn = backends.get(backend).make_round(num_workers=num_workers, local_steps=local_steps, **parts, **extra)
    return Algorithm(init=init, round=round_fn, name=name, num_workers=num_workers, local_steps=local_steps,
                     comm=comm, task=task, optimizer=optimizer, sampler=sampler, local_fused=local_fused, **parts)


def ist(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
        sampler: Optional[partition_lib.Sampler] = None, optimizer_state: str = "reset",
        backend: str = "simulate") -> Algorithm:
    """Independent Subnetwork Training.

    Each round: split the round key, sample a partition of every neuron group among ``num_workers`` workers, extract
    each worker's sub-network, train it for ``local_steps`` steps on the worker's batches, merge the sub-networks
    back (partitioned weights written in place; shared weights averaged).

    Args:
      task: the network (`istjax.classifier` builds one from a Flax module).
      optimizer: any optax transformation, applied by every worker to its sub-network.
      num_workers: W.
      local_steps: K, optimizer steps per round.
      sampler: the partition strategy (default `istjax.uniform()`).
      optimizer_state: ``"reset"`` (each worker starts every round from ``optimizer.init``) or ``"carry"`` (the
        global optimizer state is extracted and merged with the parameters).
      backend: ``"simulate"`` (every worker on one device, vmapped) or another registered backend.
    """
    _check_common(num_workers, local_steps, optimizer_state)
    sampler = sampler or partition_lib.uniform()
    spec = task.spec
    slots = sampler.slots(spec.group_sizes, num_workers)  # validates sizes vs W before any tracing
    loss_fn = task.loss_fn(slots)
    abstract_params = jax.eval_shape(task.init, jax.random.key(0))
    params_treedef = jax.tree.structure(abstract_params)
    carry = optimizer_state == "carry"

    def init(key):
        key, init_key = jax.random.split(key)
        params = task.init(init_key)
        opt_state = optimizer.init(params) if carry else ()
        return TrainState(params, opt_state, key, jnp.zeros((), jnp.int32))

    def distribute(state):
        key, round_key = jax.random.split(state.key)
        p = sampler.sample(round_key, spec.group_sizes, num_workers)
        sub = extract(state.params, p, spec)
        if carry:
            opt = extract_tree(state.opt_state, params_treedef, p, spec)
        else:
            opt = jax.vmap(optimizer.init)(sub)
        return WorkerState(sub, opt), RoundPlan(key, p)

    def local(worker, batches_K, axis_name=WORKERS):  # workers never talk during local steps
        del axis_name
        return local_train(loss_fn, optimizer, worker, batches_K)

    def collect(state, workers, plan):
        p = plan.partition
        params = merge(state.params, workers.params, p, spec, disjoint=sampler.disjoint)
        opt_state = (merge_tree(state.opt_state, workers.opt_state, params_treedef, p, spec,
                                disjoint=sampler.disjoint) if carry else ())
        return TrainState(params, opt_state, plan.key, state.round + 1)

    abstract_opt = jax.eval_shape(optimizer.init, abstract_params) if carry else ()
    comm = ist_bytes(abstract_params, abstract_opt, params_treedef, spec, slots)
    return _build("ist", task, optimizer, num_workers, local_steps, init, distribute, local, collect, comm, sampler,
                  backend)


def _replicated_init(task, optimizer, carry):
    def init(key):
        key, init_key = jax.random.split(key)
        params = task.init(init_key)
        return TrainState(params, optimizer.init(params) if carry else (), key, jnp.zeros((), jnp.int32))

    return init


def data_parallel(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
                  backend: str = "simulate") -> Algorithm:
    """Synchronous data-parallel training: every step, workers average their gradients and apply one update.

    A round is ``local_steps`` such steps, so rounds of all three algorithms consume the same `[W, K, B]` batches.
    Every worker holds a replica of the model and of the optimizer state; all replicas stay identical.
    """
    _check_common(num_workers, local_steps, "carry")
    loss_fn = task.loss_fn(None)

    def distribute(state):
        key, _ = jax.random.split(state.key)
        return WorkerState(_broadcast(state.params, num_workers),
                           _broadcast(state.opt_state, num_workers)), RoundPlan(key, None)

    def local(worker, batches_K, axis_name=WORKERS):  # a backend may bind several axes, e.g. (WORKERS, "devices")
        return local_train(loss_fn, optimizer, worker, batches_K,
                           grad_reduce=lambda g: jax.lax.pmean(g, axis_name))

    def local_fused(workers, batches):  # all W workers on one device: one replica, the workers' mean loss
        first = jax.tree.map(lambda x: x[0], workers)  # replicas are identical

        def mean_loss(params, batch_W):
            losses, aux = jax.vmap(loss_fn, in_axes=(None, 0))(params, batch_W)
            return jnp.mean(losses), {"loss": losses, **aux}

        def step(carry: WorkerState, k):
            batch_W = jax.tree.map(lambda b: jax.lax.dynamic_index_in_dim(b, k, axis=1, keepdims=False), batches)
            (_, metrics_W), grads = jax.value_and_grad(mean_loss, has_aux=True)(carry.params, batch_W)
            return _apply(optimizer, grads, carry), metrics_W

        last, metrics_KW = jax.lax.scan(step, first, jnp.arange(local_steps, dtype=jnp.int32))
        return _broadcast(last, num_workers), jax.tree.map(lambda m: jnp.swapaxes(m, 0, 1), metrics_KW)

    def collect(state, workers, plan):
        first = jax.tree.map(lambda x: x[0], workers)  # replicas are identical
        return TrainState(first.params, first.opt_state, plan.key, state.round + 1)

    abstract_params = jax.eval_shape(task.init, jax.random.key(0))
    comm = replicated_bytes(abstract_params, (), times=local_steps)
    return _build("data_parallel", task, optimizer, num_workers, local_steps,
                  _replicated_init(task, optimizer, True), distribute, local, collect, comm, None, backend,
                  local_fused=local_fused)


def local_sgd(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
              optimizer_state: str = "reset", backend: str = "simulate") -> Algorithm:
    """Local SGD: every worker trains the full model for K steps, then the models (and, with ``carry``, the
    optimizer states) are averaged."""
    _check_common(num_workers, local_steps, optimizer_state)
    loss_fn = task.loss_fn(None)
    carry = optimizer_state == "carry"

    def distribute(state):
        key, _ = jax.random.split(state.key)
        params = _broadcast(state.params, num_workers)
        opt = _broadcast(state.opt_state, num_workers) if carry else jax.vmap(optimizer.init)(params)
        return WorkerState(params, opt), RoundPlan(key, None)

    def local(worker, batches_K, axis_name=WORKERS):  # workers never talk during local steps
        del axis_name
        return local_train(loss_fn, optimizer, worker, batches_K)

    def collect(state, workers, plan):
        opt_state = _mean_workers(workers.opt_state) if carry else ()
        return TrainState(_mean_workers(workers.params), opt_state, plan.key, state.round + 1)

    abstract_params = jax.eval_shape(task.init, jax.random.key(0))
    abstract_opt = jax.eval_shape(optimizer.init, abstract_params) if carry else ()
    comm = replicated_bytes(abstract_params, abstract_opt, times=1)
    return _build("local_sgd", task, optimizer, num_workers, local_steps, _replicated_init(task, optimizer, carry),
                  distribute, local, collect, comm, None, backend)
