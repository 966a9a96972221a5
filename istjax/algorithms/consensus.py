"""Consensus ADMM: replicas held to one model by a penalty and a dual per worker, not by averaging alone.

The problem is ``min sum_i f_i(x_i)`` subject to ``x_i = z`` for every worker ``i`` (Boyd et al. 2011,
"Distributed Optimization and Statistical Learning via the Alternating Direction Method of Multipliers", section 7.1;
the consensus form the survey "Parallel and Distributed Deep Learning" lists). In its scaled form a round is

    ``x_i  <- argmin_x f_i(x) + rho / 2 * ||x - z + u_i||^2``   (every worker, on its own data)
    ``z    <- mean_i (x_i + u_i)``                             (the server)
    ``u_i  <- u_i + x_i - z``                                  (every worker)

Here the ``argmin`` is approximate: ``K`` steps of the worker's ``optimizer`` from ``z`` (a fresh optimizer state
every round), each step's loss the task's plus FedProx's term (`istjax.algorithms.federated.prox_loss`) around the
anchor ``z - u_i``; the round's ``train_prox`` metric is that term. Each worker sends ``s_i = x_i + u_i``, the server
sends ``z`` back, and since ``u_i`` then equals ``s_i - z`` a worker updates its dual from what it sent and what it
received: a round moves the model to each worker and back, local SGD's bytes. With ``rho = 0`` the penalty is gone
and, the duals summing to zero after every round, ``z`` is the mean of the ``x_i``: local SGD with its optimizer
state reset (to float rounding).

At a fixed point every ``x_i = z``, ``sum_i u_i = 0`` and ``nabla f_i(z) + rho u_i = 0``; summed over workers,
``sum_i nabla f_i(z) = 0``: ``z`` minimises the sum, whatever ``K``, the step size and how different the workers'
data are. Local SGD's fixed point is biased away from it on heterogeneous data (`istjax.theory.consensus` computes
both on quadratics, where the tests check them).

The duals are state: the global ``opt_state`` is `Duals`, each leaf the parameter's shape with a leading `[W]`
axis, checkpointed and restored with the rest. The simulate and devices runtimes hold every worker's; under MPI each
process holds its own workers' rows only (`istjax.algorithms.base.Resident`, the pieces the MPI replicas exchange
runs: what a worker sends, the server's merge of their mean, and the rows a worker keeps). Model state (BatchNorm
statistics) travels as local SGD's does: averaged.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Union

import jax
import jax.numpy as jnp
import optax

from istjax.algorithms.base import (Algorithm, Resident, bind, check_common, finish_round, local_train, loss_split,
                                    recompute_from)
from istjax.algorithms.federated import prox_loss
from istjax.algorithms.replicated import replicas_mean, replicas_of
from istjax.core import precision
from istjax.core.comm import Exchange, replicated_bytes
from istjax.core.errors import ArgError
from istjax.core.state import WORKERS, RoundPlan, TrainState, WorkerState, round_keys, worker_init
from istjax.core.task import Task

__all__ = ["Consensus", "Duals", "admm", "check_rho"]


class Consensus(NamedTuple):
    """ADMM's declaration (`istjax.Algorithm.protocol`): its penalty ``rho``; the reference loop reads it."""

    rho: float


class Duals(NamedTuple):
    """ADMM's global ``opt_state``: ``duals``, every worker's scaled dual ``u_i``, leaves `[W, *param.shape]`."""

    duals: Any


def check_rho(rho: Any) -> None:
    """``rho`` must be a number >= 0 (0: no penalty, local SGD)."""
    if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not rho >= 0:
        raise ArgError("rho", rho, f"rho={rho!r}: ADMM's penalty needs a number >= 0 (0: no penalty, local SGD);",
                       ("e.g.", {"rho": 0.1}, "; tune it with the learning rate."))


def admm(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
         rho: float = 0.1, recompute_batches: int = 1, model_state: str = "carry", exchange_dtype: str = "float32",
         exchange_values: str = "delta", backend: Union[str, Any] = "simulate", **backend_options: Any) -> Algorithm:
    """Consensus ADMM (module docstring): ``num_workers`` replicas, each ``local_steps`` steps of ``optimizer`` a
    round on its loss plus ``rho / 2 * ||x - z + u_i||^2``; the server's ``z`` the mean of ``x_i + u_i``; the duals
    ``u_i`` the global ``opt_state`` (`Duals`). Under a bfloat16 exchange (``exchange_dtype``) workers start from
    ``z`` rounded and the server reads each ``s_i`` as local SGD reads a replica (`replicas_mean`); a worker's dual
    is what it sent minus what the server computed, exact."""
    check_common(task, num_workers, local_steps, "reset", model_state, recompute_batches)
    check_rho(rho)
    wire = precision.wire(exchange_dtype, exchange_values)
    loss = task.train_loss(None)

    def init(key):
        key, init_key = jax.random.split(key)
        params = task.init(init_key)
        duals = Duals(jax.tree.map(lambda p: jnp.zeros((num_workers, *jnp.shape(p)), p.dtype), params))
        return TrainState(params, task.init_state(init_key), duals, key, jnp.zeros((), jnp.int32))

    def distribute(state):  # one worker per row of duals the state holds: all W, or an MPI process's L
        n = jax.tree.leaves(state.opt_state.duals)[0].shape[0]
        params = replicas_of(wire, state.params, n)
        inner = worker_init(optimizer, params, state.round)
        workers = WorkerState(params, replicas_of(wire, state.model_state, n), (inner, state.opt_state.duals))
        return workers, RoundPlan(round_keys(state.key)[0], None)

    def local(worker, batches_K, shared=None, axis_name=WORKERS, reduce=None):  # workers never talk locally
        del axis_name, reduce
        inner, dual = worker.opt_state
        anchor = jax.tree.map(lambda z, u: z - u, worker.params, dual)
        trained, metrics = local_train(prox_loss(loss, rho, anchor), optimizer, worker._replace(opt_state=inner),
                                       batches_K, shared)
        return trained._replace(opt_state=(trained.opt_state, dual)), metrics

    def outgoing(workers):  # s_i = x_i + u_i, and the model state
        return WorkerState(jax.tree.map(jnp.add, workers.params, workers.opt_state[1]), workers.model_state, ())

    def merge(state, sent_W, plan, batches=None, shared=None, *, sent=False):  # z = mean_i s_i
        z = replicas_mean(wire, sent_W.params, state.params, sent)
        model_state = replicas_mean(wire, sent_W.model_state, state.model_state, sent)
        return finish_round(policy, state, z, model_state, state.opt_state, plan.key,
                            recompute_from(task, batches, shared, recompute_batches))

    def keep(new, sent_W):  # u_i = s_i - z
        return Duals(jax.tree.map(lambda s, z: s - z[None], sent_W.params, new.params))

    resident = Resident(rows=lambda state: state.opt_state,
                        with_rows=lambda state, rows: state._replace(opt_state=rows),
                        outgoing=outgoing, merge=merge, keep=keep)

    def collect(state, workers, plan, batches=None, shared=None, *, sent=False):
        out = outgoing(workers)
        new = merge(state, out, plan, batches, shared, sent=sent)
        return new._replace(opt_state=keep(new, out))

    policy = model_state
    abstract_params = jax.eval_shape(task.init, jax.random.key(0))
    abstract_state = jax.eval_shape(task.init_state, jax.random.key(0))
    comm = replicated_bytes(wire.shapes((abstract_params, abstract_state)), times=1)
    algorithm = Algorithm(init=init, round=None, distribute=distribute, local=local, collect=collect, name="admm",
                          num_workers=num_workers, local_steps=local_steps, comm=comm, task=task, optimizer=optimizer,
                          exchange=Exchange.REPLICAS, wire=wire, carries_optimizer_state=False,
                          model_state_policy=model_state, split=loss_split(task, loss),
                          recompute_batches=recompute_batches, whole_init=init, protocol=Consensus(float(rho)),
                          resident=resident)
    return bind(algorithm, backend, **backend_options)
