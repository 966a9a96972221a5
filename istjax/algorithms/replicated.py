"""The baselines every worker trains the whole model in: data parallel and local SGD.

Rounds of all algorithms consume the same `[W, K, B]` batches, so budgets compare directly.
"""

from __future__ import annotations

from typing import Any, Union

import jax
import jax.numpy as jnp
import optax

from istjax.algorithms.base import (Algorithm, apply_update, bind, check_common, finish_round, init_state, local_train,
                                    recompute_from)
from istjax.core.comm import replicated_bytes
from istjax.core.schedule import at_round
from istjax.core.state import (WORKERS, RoundPlan, WorkerState, broadcast_workers, first_worker, round_keys,
                               worker_init, worker_mean)
from istjax.core.task import Task

__all__ = ["data_parallel", "local_sgd"]


def _next_key(state):
    return round_keys(state.key)[0]  # the key schedule of every algorithm


def data_parallel(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
                  model_state: str = "carry", backend: Union[str, Any] = "simulate",
                  **backend_options: Any) -> Algorithm:
    """Synchronous data-parallel training: every step, workers average their gradients and apply one update.

    A round is ``local_steps`` such steps. Every worker holds a replica of the model and of the optimizer state; the
    replicas stay identical. Model state (BatchNorm running statistics, updated on each worker's own batches) is
    averaged at the end of the round.
    """
    check_common(task, num_workers, local_steps, "carry", model_state)
    loss = task.train_loss(None)

    def distribute(state):
        replica = WorkerState(state.params, state.model_state, at_round(state.opt_state, state.round))
        return broadcast_workers(replica, num_workers), RoundPlan(_next_key(state), None)

    def local(worker, batches_K, shared=None, axis_name=WORKERS, reduce=None):
        mean = reduce or (lambda g, name: jax.lax.pmean(g, name))
        return local_train(loss, optimizer, worker, batches_K, shared, grad_reduce=lambda g: mean(g, axis_name))

    def local_fused(workers, batches, shared=None):  # all W workers on one device: one replica, the mean loss
        first = first_worker(workers)  # replicas agree; each worker keeps its own model state (its batches' stats)

        def mean_loss(params, states_W, batch_W):
            losses, (aux, states_W) = jax.vmap(loss, in_axes=(None, 0, 0, None))(params, states_W, batch_W, shared)
            return jnp.mean(losses), ({"loss": losses, **aux}, states_W)

        def step(carry: WorkerState, k):
            batch_W = jax.tree.map(lambda b: jax.lax.dynamic_index_in_dim(b, k, axis=1, keepdims=False), batches)
            (_, (metrics_W, states_W)), grads = jax.value_and_grad(mean_loss, has_aux=True)(
                carry.params, carry.model_state, batch_W)
            return apply_update(optimizer, grads, carry)._replace(model_state=states_W), metrics_W

        start = first._replace(model_state=workers.model_state)
        last, metrics_KW = jax.lax.scan(step, start, jnp.arange(local_steps, dtype=jnp.int32))
        replicas = broadcast_workers(WorkerState(last.params, {}, last.opt_state), num_workers)
        return replicas._replace(model_state=last.model_state), jax.tree.map(lambda m: jnp.swapaxes(m, 0, 1),
                                                                            metrics_KW)

    def collect(state, workers, plan, batches=None, shared=None):
        first = first_worker(workers)  # params and optimizer states agree by construction
        model_state = worker_mean(workers.model_state, like=state.model_state)
        return finish_round(model_state_policy, state, first.params, model_state, first.opt_state, plan.key,
                            recompute_from(task, batches, shared))

    model_state_policy = model_state
    abstract_params = jax.eval_shape(task.init, jax.random.key(0))
    abstract_state = jax.eval_shape(task.init_state, jax.random.key(0))
    comm = replicated_bytes(abstract_params, times=local_steps, once=abstract_state)
    algorithm = Algorithm(init=init_state(task, optimizer, True), round=None, distribute=distribute, local=local,
                          collect=collect, name="data_parallel", num_workers=num_workers, local_steps=local_steps,
                          comm=comm, task=task, optimizer=optimizer, local_fused=local_fused,
                          exchange="gradients", carries_optimizer_state=True, model_state_policy=model_state)
    return bind(algorithm, backend, **backend_options)


def local_sgd(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
              optimizer_state: str = "reset", model_state: str = "carry", backend: Union[str, Any] = "simulate",
              **backend_options: Any) -> Algorithm:
    """Local SGD: every worker trains the full model for K steps, then the models (their model states and, with
    ``optimizer_state="carry"``, the optimizer states) are averaged."""
    check_common(task, num_workers, local_steps, optimizer_state, model_state)
    loss = task.train_loss(None)
    carry = optimizer_state == "carry"

    def distribute(state):
        params = broadcast_workers(state.params, num_workers)
        opt = (at_round(broadcast_workers(state.opt_state, num_workers), state.round) if carry
               else worker_init(optimizer, params, state.round))
        return (WorkerState(params, broadcast_workers(state.model_state, num_workers), opt),
                RoundPlan(_next_key(state), None))

    def local(worker, batches_K, shared=None, axis_name=WORKERS, reduce=None):  # workers never talk locally
        del axis_name, reduce
        return local_train(loss, optimizer, worker, batches_K, shared)

    def collect(state, workers, plan, batches=None, shared=None):
        opt_state = worker_mean(workers.opt_state, like=state.opt_state) if carry else ()
        return finish_round(model_state_policy, state, worker_mean(workers.params, like=state.params),
                            worker_mean(workers.model_state, like=state.model_state), opt_state, plan.key,
                            recompute_from(task, batches, shared))

    model_state_policy = model_state
    abstract_params = jax.eval_shape(task.init, jax.random.key(0))
    abstract_opt = jax.eval_shape(optimizer.init, abstract_params) if carry else ()
    abstract_state = jax.eval_shape(task.init_state, jax.random.key(0))
    comm = replicated_bytes((abstract_params, abstract_state, abstract_opt), times=1)
    algorithm = Algorithm(init=init_state(task, optimizer, carry), round=None, distribute=distribute, local=local,
                          collect=collect, name="local_sgd", num_workers=num_workers, local_steps=local_steps,
                          comm=comm, task=task, optimizer=optimizer, exchange="replicas",
                          carries_optimizer_state=carry, model_state_policy=model_state)
    return bind(algorithm, backend, **backend_options)
