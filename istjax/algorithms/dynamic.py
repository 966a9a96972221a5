"""Dynamic model averaging (Kamp et al. 2018, "Efficient Decentralized Deep Learning by Dynamic Model Averaging"):
replicas that talk only when their models have drifted apart.

Every worker keeps its own model, model state and optimizer state from round to round (the global ``opt_state`` is
`DynamicState`, its ``workers`` leaves `[W, ...]`) and trains it ``b = local_steps`` steps a round. Then each checks
its *local condition* against the reference model ``r``, the average at the last full synchronisation:
``||w_i - r||^2 <= delta`` (the squared distance over every parameter). A worker that keeps it sends nothing but a
flag. When some violate it, the coordinator *balances* (`balance`): it starts from the violators ``B``; while ``B``
is less than half the workers and the average of ``B``'s models is further than ``delta`` from ``r``, it doubles
``B`` with workers drawn at random (the round's key orders them); the models of ``B`` are then replaced by their
average, and once half the workers or more are involved all W are averaged and ``r`` becomes that average. A model
crosses only for the workers in ``B``: to the coordinator and back (their model states, BatchNorm statistics, are
averaged with them; optimizer states never move).

``delta = 0`` is periodic averaging every ``b`` steps (every worker violates, so all are averaged each round: local
SGD with each worker's optimizer state its own; with plain SGD, local SGD exactly); ``delta = inf`` never averages.

What a round moved is data-dependent, so it is counted, not predicted: the state keeps each worker's running count
of models sent (``transfers``; it receives as many back) and of violations and synchronisations, and every round
reports, per worker, ``measured_bytes_sent`` (its flag, `FLAG_BYTES`, plus its model if it was in ``B``) and
``measured_bytes_received``, with ``model_transfers`` (models moved this round, to the coordinator and back, all
workers), ``violations``, ``synced_workers`` and ``full_sync`` (`round_metrics`). ``algorithm.comm`` is the most a
round can move (a full synchronisation: local SGD's bytes, plus the flag).

The global ``params`` and ``model_state`` of the state are the mean of the workers' current models, the model a
synchronisation now would give every worker: what an evaluation reads (it moves nothing; under a real deployment
it is the final average).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Union

import jax
import jax.numpy as jnp
import optax

from istjax.algorithms.base import Algorithm, Subsets, bind, check_common, local_train, loss_split
from istjax.core.comm import CommBytes, Exchange, tree_bytes
from istjax.core.errors import ArgError
from istjax.core.schedule import at_round
from istjax.core.state import WORKERS, RoundPlan, TrainState, WorkerState, broadcast_workers, round_keys, worker_mean
from istjax.core.task import Task

__all__ = ["FLAG_BYTES", "Balance", "Dynamic", "DynamicState", "balance", "decide", "dynamic_averaging", "flags",
           "level_members", "round_metrics", "settle", "squared_distance", "subset_close"]

#: The bytes of a worker's flag, sent every round whatever it decides (its squared distance, a float32).
FLAG_BYTES = 4


class Dynamic(NamedTuple):
    """Dynamic averaging's declaration (`istjax.Algorithm.protocol`): its threshold ``delta``; the reference loop
    reads it."""

    delta: float


class DynamicState(NamedTuple):
    """Dynamic averaging's global ``opt_state``.

    Attributes:
      workers: every worker's own `WorkerState` (params, model state, optimizer state), leaves `[W, ...]`.
      reference: ``r``, the parameters of the last full synchronisation.
      transfers: `[W]` float32, the models each worker has sent to the coordinator so far (it received as many).
      violations: `[]` int32, local conditions violated so far (all workers).
      syncs: `[2]` int32, partial and full synchronisations so far.
    """

    workers: WorkerState
    reference: Any
    transfers: jax.Array
    violations: jax.Array
    syncs: jax.Array


class Balance(NamedTuple):
    """One round's balancing (`balance`): ``violators`` `[W]` bool, ``synced`` `[W]` bool (the workers ``B`` whose
    models are averaged: none, a subset, or all), ``full`` `[]` bool (all were, and ``r`` moves)."""

    violators: jax.Array
    synced: jax.Array
    full: jax.Array


def squared_distance(a: Any, b: Any) -> jax.Array:
    """``||a - b||^2`` over every leaf of two trees of one structure, in float32."""
    return sum(jnp.sum(jnp.square((x - y).astype(jnp.float32))) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _masked_mean(tree_W: Any, mask: jax.Array) -> Any:
    weights = mask.astype(jnp.float32) / jnp.maximum(jnp.sum(mask.astype(jnp.float32)), 1.0)
    return jax.tree.map(lambda v: jnp.tensordot(weights, v.astype(jnp.float32), axes=1).astype(v.dtype), tree_W)


def flags(reference: Any, params_n: Any) -> jax.Array:
    """Each worker's flag, `[n]` float32: its squared distance to the reference model, ``||w_i - r||^2``."""
    return jax.vmap(squared_distance, in_axes=(0, None))(params_n, reference)


def decide(flags_W: jax.Array, key: jax.Array, delta: Any) -> tuple[jax.Array, jax.Array]:
    """``(violators, position)`` from every worker's flag: who violates ``||w_i - r||^2 <= delta``, and each worker's
    place in the order ``B`` grows in (the violators first, then the others in a random order drawn from ``key``)."""
    w = flags_W.shape[0]
    violators = flags_W > delta
    place = jnp.argsort(jax.random.permutation(key, w))  # each worker's place in the round's random order
    order = jnp.argsort(jnp.where(violators, -1, place), stable=True)  # violators first, then the random order
    return violators, jnp.argsort(order)


def level_members(position: Any, count: Any, level: int, w: int) -> tuple[Any, Any]:
    """``(members, half)`` of ``B`` at doubling ``level`` (0: the ``count`` violators): the workers in it and
    whether it holds half the workers or more (then all are averaged)."""
    size = jnp.minimum(w, count * 2 ** level)
    return position < size, 2 * size >= w


def subset_close(params_W: Any, members: jax.Array, reference: Any, delta: Any) -> jax.Array:
    """Whether the average of ``members``' parameters is within ``delta`` of ``r`` (the other rows weigh zero)."""
    return squared_distance(_masked_mean(params_W, members), reference) <= delta


def balance(params_W, reference, key, delta) -> Balance:
    """The coordinator's decision (module docstring): the violators of ``||w_i - r||^2 <= delta``, then ``B`` grown
    from them by doubling, in a random order of the others drawn from ``key``, until its average is within
    ``delta`` of ``r`` (a partial synchronisation) or it holds half the workers or more (a full one)."""
    w = jax.tree.leaves(params_W)[0].shape[0]
    violators, position = decide(flags(reference, params_W), key, delta)
    count = jnp.sum(violators.astype(jnp.int32))
    synced, full, done = jnp.zeros(w, bool), jnp.zeros((), bool), count == 0
    for level in range(w.bit_length() + 1):  # B doubles each level; by the last it holds every worker
        members, half = level_members(position, count, level, w)
        close = subset_close(params_W, members, reference, delta)
        take_all, take_some = ~done & half, ~done & ~half & close
        synced = jnp.where(take_all, True, jnp.where(take_some, members, synced))
        full, done = full | take_all, done | half | close
    return Balance(violators, synced, full)


def settle(state: TrainState, rows: WorkerState, synced_n: jax.Array, synced_W: jax.Array, violators_W: jax.Array,
           full: jax.Array, model: Any) -> TrainState:
    """The state after a round's balancing (`istjax.algorithms.base.Subsets.settle`): the synchronised rows take
    ``model`` (the subset's average ``(params, model_state)``; optimizer states stay), ``r`` moves on a full
    synchronisation, the counters add this round's; the global fields are the mean of the rows held."""
    old = state.opt_state
    params_n, model_state_n = jax.tree.map(
        lambda avg, own: jnp.where(synced_n.reshape((-1,) + (1,) * (own.ndim - 1)), avg[None], own),
        model, (rows.params, rows.model_state))
    dynamic = DynamicState(
        WorkerState(params_n, model_state_n, rows.opt_state),
        jax.tree.map(lambda m, r: jnp.where(full, m, r), model[0], old.reference),
        old.transfers + synced_W.astype(jnp.float32),
        old.violations + jnp.sum(violators_W.astype(jnp.int32)),
        old.syncs + jnp.stack([jnp.any(synced_W) & ~full, full]).astype(jnp.int32))
    return TrainState(worker_mean(params_n, like=state.params), worker_mean(model_state_n, like=state.model_state),
                      dynamic, round_keys(state.key)[0], state.round + 1)


def _whole(state: TrainState) -> TrainState:
    rows = state.opt_state.workers
    return state._replace(params=worker_mean(rows.params, like=state.params),
                          model_state=worker_mean(rows.model_state, like=state.model_state))


def _subsets(delta: float) -> Subsets:
    """Dynamic averaging's round in the pieces the MPI ``subsets`` exchange runs (`istjax.algorithms.base.Subsets`)."""
    return Subsets(
        rows=lambda state: state.opt_state.workers,
        with_rows=lambda state, rows: state._replace(opt_state=state.opt_state._replace(workers=rows)),
        flags=lambda state, params_n: flags(state.opt_state.reference, params_n),
        decide=lambda state, flags_W: decide(flags_W, round_keys(state.key)[1], delta), grow=level_members,
        close=lambda state, params_W, members: subset_close(params_W, members, state.opt_state.reference, delta),
        mean=_masked_mean, settle=settle, whole=_whole)


def _check_delta(delta: Any) -> None:
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or math.isnan(delta) or delta < 0:
        raise ArgError("delta", delta, f"delta={delta!r}: the divergence threshold needs a number >= 0 (0: average "
                       f"every round, periodic averaging; inf: never);", ("e.g.", {"delta": 0.1}, "."))


def dynamic_averaging(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
                      delta: float = 0.1, backend: Union[str, Any] = "simulate", **backend_options: Any) -> Algorithm:
    """Dynamic model averaging (module docstring): ``num_workers`` replicas each training ``local_steps`` (``b``)
    steps of ``optimizer`` a round from its own model and optimizer state, then the local conditions
    ``||w_i - r||^2 <= delta`` and, on a violation, the coordinator's balancing."""
    check_common(task, num_workers, local_steps, "carry", "carry")
    _check_delta(delta)
    loss = task.train_loss(None)
    abstract_params = jax.eval_shape(task.init, jax.random.key(0))
    model_bytes = tree_bytes((abstract_params, jax.eval_shape(task.init_state, jax.random.key(0))))

    def init(key):
        key, init_key = jax.random.split(key)
        params, model_state = task.init(init_key), task.init_state(init_key)
        workers = broadcast_workers(WorkerState(params, model_state, optimizer.init(params)), num_workers)
        dynamic = DynamicState(workers, params, jnp.zeros(num_workers, jnp.float32), jnp.zeros((), jnp.int32),
                               jnp.zeros(2, jnp.int32))
        return TrainState(params, model_state, dynamic, key, jnp.zeros((), jnp.int32))

    def distribute(state):
        workers = state.opt_state.workers
        return workers._replace(opt_state=at_round(workers.opt_state, state.round)), RoundPlan(
            round_keys(state.key)[0], None)

    def local(worker, batches_K, shared=None, axis_name=WORKERS, reduce=None):  # workers never talk locally
        del axis_name, reduce
        return local_train(loss, optimizer, worker, batches_K, shared)

    def collect(state, workers, plan, batches=None, shared=None):
        del plan, batches, shared
        decided = balance(workers.params, state.opt_state.reference, round_keys(state.key)[1], delta)
        model = _masked_mean((workers.params, workers.model_state), decided.synced)
        return settle(state, workers, decided.synced, decided.synced, decided.violators, decided.full, model)

    def metrics(old, new):
        return round_metrics(old.opt_state, new.opt_state, model_bytes)

    most = CommBytes(received=model_bytes, sent=model_bytes + FLAG_BYTES)
    algorithm = Algorithm(init=init, round=None, distribute=distribute, local=local, collect=collect,
                          name="dynamic_averaging", num_workers=num_workers, local_steps=local_steps, comm=most,
                          task=task, optimizer=optimizer, exchange=Exchange.SUBSETS, carries_optimizer_state=True,
                          split=loss_split(task, loss), whole_init=init, protocol=Dynamic(float(delta)),
                          collect_reads_workers=True, subsets=_subsets(float(delta)), round_metrics=metrics)
    return bind(algorithm, backend, **backend_options)


def round_metrics(old: DynamicState, new: DynamicState, model_bytes: int) -> dict:
    """What a round of dynamic averaging moved and decided, from the counters before (``old``) and after it
    (module docstring): per worker `[W]` bytes sent (its flag and its model if it was synchronised) and received
    (the average back), and the round's model transfers (up and back), violations, synchronised workers and whether
    it was a full synchronisation."""
    sent = new.transfers - old.transfers
    return {"measured_bytes_sent": FLAG_BYTES + model_bytes * sent, "measured_bytes_received": model_bytes * sent,
            "model_transfers": 2 * jnp.sum(sent), "violations": (new.violations - old.violations).astype(jnp.float32),
            "synced_workers": jnp.sum(sent), "full_sync": (new.syncs[1] - old.syncs[1]).astype(jnp.float32)}
