"""Federated averaging and its server optimizers: FedSGD, FedAvg, FedAvgM, FedAdam, with FedProx's proximal term.

A federated round is a replicated round (`istjax.algorithms.replicated`) whose W workers are the round's *sampled
clients* (client slots, `istjax.data.client_batches.ClientSampler`): each starts from the global model with a fresh
client optimizer, runs its own data's local steps (``batches`` `[W, K, B, ...]` from
`istjax.data.client_batches.make_client_batch_fn`: a client's ``E * ceil(n_c / B)`` steps, then zero-weight steps,
which change nothing, up to the run's K), and sends its model back. The server takes the mean of the clients' models
weighted by their example counts (McMahan et al. 2017, eq. 1; ``plan.weights``; a sampler's *pad slots*, those
past its M clients when W was rounded up to fit the processes, weigh 0 and train nothing, so they change nothing),
and applies the *pseudo-gradient* ``global - weighted mean`` through a server optimizer (`server_optimizer_of`;
Reddi et al. 2021, "Adaptive Federated Optimization"):

* ``server_optimizer="sgd"``, ``server_learning_rate=1``, ``server_momentum=0``: the new model is the weighted mean
  (FedAvg, McMahan et al. 2017);
* ``"sgd"`` with ``server_momentum > 0``: heavy-ball momentum on the pseudo-gradient (FedAvgM, Hsu et al. 2019);
* ``"adam"``: Adam on it (FedAdam; ``b1 = 0.9``, ``b2 = 0.99``, ``eps = 1e-3``: Reddi et al.'s settings).

``prox_mu > 0`` adds FedProx's ``mu / 2 * ||w - w_global||^2`` to every local step's loss (Li et al. 2020); the
round's ``train_prox`` metric is that term, and ``train_loss`` includes it.

`fedsgd` is the paper's baseline: one full-batch gradient per sampled client (``local_steps=1``; the batches of
``batch_size="all"``, one epoch), the weighted mean applied by the server: with a client optimizer ``optax.sgd(lr)``
and the plain server, one step of data parallel over the sampled clients' data.

The server's optimizer state is the global state's ``opt_state`` (it travels as DiLoCo's does); the clients'
optimizer state never leaves them. Which clients a round trains is a pure function of the sampler's seed and the
round (nothing to checkpoint beyond the round), so a resumed run trains the same clients.

`fedist` is IST on the sampled clients: IST's partition drawn over the round's client slots, each client training
its sub-network on its own data, the merge weighted by example counts where several clients hold an element, then
the same server optimizers (`istjax.algorithms.ist.ist_algorithm`).
"""

from __future__ import annotations

from typing import Any, Union

import jax
import jax.numpy as jnp
import optax

from istjax.algorithms.base import (Algorithm, OptimizerStatePolicy, bind, check_common, finish_round, init_state,
                                    local_train, loss_split, recompute_from, with_outer)
from istjax.algorithms.ist import ist_algorithm
from istjax.algorithms.replicated import outer_step, replicas_mean, replicas_of
from istjax.core import precision
from istjax.core.comm import Exchange, replicated_bytes
from istjax.core.errors import ArgError, Code
from istjax.core.state import WORKERS, RoundPlan, WorkerState, round_keys, worker_init
from istjax.core.task import Task

__all__ = ["SERVER_OPTIMIZERS", "fedavg", "fedist", "fedsgd", "prox_loss", "server_optimizer_of"]

#: The server optimizers by name (`server_optimizer`).
SERVER_OPTIMIZERS = ("sgd", "adam")
#: FedAdam's moments and adaptivity (Reddi et al. 2021: beta1 0.9, beta2 0.99, tau 1e-3).
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.99, 1e-3


def server_optimizer_of(name: str, learning_rate: float, momentum: float = 0.0) -> optax.GradientTransformation:
    """The server's optimizer of the pseudo-gradient: ``"sgd"`` (heavy-ball ``momentum``; none at 0) or ``"adam"``
    (`ADAM_B1`, `ADAM_B2`, `ADAM_EPS`; ``momentum`` must be 0: Adam's first moment is its momentum)."""
    if name not in SERVER_OPTIMIZERS:
        raise ArgError("server_optimizer", name, f"server_optimizer={name!r}: unknown;",
                       f"choose one of {list(SERVER_OPTIMIZERS)} (sgd with server_momentum > 0 is FedAvgM, adam is "
                       f"FedAdam).")
    if not _number(learning_rate) or learning_rate <= 0:
        raise ArgError("server_learning_rate", learning_rate,
                       f"server_learning_rate={learning_rate!r}: need a number > 0;",
                       use={"server_learning_rate": 1.0})
    if not _number(momentum) or not 0 <= momentum < 1:
        raise ArgError("server_momentum", momentum, f"server_momentum={momentum!r}: need a number in [0, 1);",
                       ("Hsu et al. use", {"server_momentum": 0.9}, "."))
    if name == "adam":
        if momentum:
            raise ArgError("server_momentum", momentum, f"server_optimizer='adam' with server_momentum={momentum}: "
                           f"Adam's first moment (beta1 = {ADAM_B1}) is its momentum;", use={"server_momentum": 0.0})
        return optax.adam(learning_rate, b1=ADAM_B1, b2=ADAM_B2, eps=ADAM_EPS)
    return optax.sgd(learning_rate, momentum=momentum or None)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def prox_loss(loss, mu: float, anchor: Any):
    """``loss`` plus FedProx's ``mu / 2 * ||params - anchor||^2``, the term also returned as the ``prox`` metric;
    ``loss`` itself for ``mu == 0``."""
    if not mu:
        return loss

    def with_prox(params, model_state, batch, shared=None):
        value, (aux, new_state) = loss(params, model_state, batch, shared)
        sq = sum(jnp.sum(jnp.square((p - a).astype(jnp.float32)))
                 for p, a in zip(jax.tree.leaves(params), jax.tree.leaves(anchor)))
        prox = 0.5 * mu * sq
        return value + prox, ({**aux, "prox": prox}, new_state)

    return with_prox


def _check_clients(clients: Any, num_workers: int) -> None:
    """``num_workers`` must be the sampler's client slots S (its M clients drawn a round, then its pads)."""
    per_round, slots = getattr(clients, "clients_per_round", None), getattr(clients, "slots", None)
    if per_round is None or slots is None or not callable(getattr(clients, "weights", None)):
        raise ArgError("clients", clients, f"clients={clients!r}: need the run's client sampler;",
                       "build it with istjax.data.client_sampler(split, fraction=..., seed=...).")
    if slots != num_workers:
        # Or the sampler refitted: num_workers clients a round (a config: the fraction that draws them), or, with
        # num_workers slots to spare, the same clients in num_workers slots (a config derives its slots).
        fits: list = [{"num_workers": slots}]
        refit = ({"fraction": round(num_workers / clients.num_clients, 6)}
                 if getattr(clients, "fraction", None) is not None else {"clients_per_round": num_workers})
        padded = f"client_sampler(split, ..., slots={num_workers})"
        if num_workers < per_round:
            fits.append(refit)
        elif num_workers > per_round:
            fits.append(Code(padded, refit))
        else:
            fits = [Code(f"num_workers={slots} or {padded}", {"num_workers": slots})]
        pads = f" in {slots} slots" if slots != per_round else ""
        raise ArgError("num_workers", num_workers, f"num_workers={num_workers}, but the sampler draws "
                       f"{per_round} clients a round{pads}: a worker here is a client's slot;", use=fits)


def _check_prox(mu: Any) -> None:
    if not _number(mu) or mu < 0:
        raise ArgError("prox_mu", mu, f"prox_mu={mu!r}: need a number >= 0 (0: no proximal term);",
                       ("Li et al. try", {"prox_mu": 0.01}, "."))


def fedavg(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int, clients: Any,
           server_optimizer: str = "sgd", server_learning_rate: float = 1.0, server_momentum: float = 0.0,
           prox_mu: float = 0.0, recompute_batches: int = 1, model_state: str = "carry",
           exchange_dtype: str = "float32", exchange_values: str = "delta", backend: Union[str, Any] = "simulate",
           name: str = "fedavg", **backend_options: Any) -> Algorithm:
    """Federated averaging over ``clients`` (module docstring): ``num_workers`` is the sampler's client slots
    (``clients.slots``: its clients drawn a round, then any pads), ``local_steps`` the batches' K; the client
    ``optimizer`` starts fresh every round; the server applies ``server_optimizer`` at ``server_learning_rate``
    (``server_momentum`` for ``"sgd"``) to the pseudo-gradient; ``prox_mu`` is FedProx's mu."""
    check_common(task, num_workers, local_steps, "reset", model_state, recompute_batches)
    _check_clients(clients, num_workers)
    _check_prox(prox_mu)
    server = server_optimizer_of(server_optimizer, server_learning_rate, server_momentum)
    wire = precision.wire(exchange_dtype, exchange_values)
    loss = task.train_loss(None)

    def distribute(state):
        params = replicas_of(wire, state.params, num_workers)
        workers = WorkerState(params, replicas_of(wire, state.model_state, num_workers),
                              worker_init(optimizer, params, state.round))
        return workers, RoundPlan(round_keys(state.key)[0], None, clients.weights(state.round))

    def local(worker, batches_K, shared=None, axis_name=WORKERS, reduce=None):  # clients never talk locally
        del axis_name, reduce
        return local_train(prox_loss(loss, prox_mu, worker.params), optimizer, worker, batches_K, shared)

    def collect(state, workers, plan, batches=None, shared=None, *, sent=False):
        mean = replicas_mean(wire, workers.params, state.params, sent, plan.weights)
        params, server_state = outer_step(server, state.params, mean, state.opt_state)
        model_state_mean = replicas_mean(wire, workers.model_state, state.model_state, sent, plan.weights)
        return finish_round(model_state, state, params, model_state_mean, server_state, plan.key,
                            recompute_from(task, batches, shared, recompute_batches))

    abstract_params = jax.eval_shape(task.init, jax.random.key(0))
    abstract_state = jax.eval_shape(task.init_state, jax.random.key(0))
    comm = replicated_bytes(wire.shapes((abstract_params, abstract_state)), times=1)
    algorithm = Algorithm(init=with_outer(init_state(task, optimizer, False), server), round=None,
                          distribute=distribute, local=local, collect=collect, name=name, wire=wire,
                          num_workers=num_workers, local_steps=local_steps, comm=comm, task=task, optimizer=optimizer,
                          exchange=Exchange.REPLICAS, carries_optimizer_state=False, model_state_policy=model_state,
                          outer_optimizer=server, split=loss_split(task, loss), recompute_batches=recompute_batches,
                          clients=clients, prox_mu=float(prox_mu))
    return bind(algorithm, backend, **backend_options)


def fedsgd(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int, clients: Any,
           **options: Any) -> Algorithm:
    """FedSGD (McMahan et al. 2017's baseline): `fedavg` whose every client takes one step, a gradient of all its
    data (the batches of ``batch_size="all"`` and one epoch), so the server applies the weighted mean gradient:
    with ``optimizer=optax.sgd(lr)`` and the plain server, one step of data parallel over the sampled clients'
    examples. ``local_steps`` must be 1."""
    if local_steps != 1:
        raise ArgError("local_steps", local_steps, f"fedsgd takes one full-batch step per client, but "
                       f"local_steps={local_steps};", ("give the clients' batches of one epoch at",
                                                      {"batch_size": "all", "epochs": 1}, "(local_steps=1), or use "
                                                      "fedavg."))
    return fedavg(task, optimizer, num_workers=num_workers, local_steps=local_steps, clients=clients, name="fedsgd",
                  **options)


def fedist(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int, clients: Any,
           sampler: Any = None, server_optimizer: str = "sgd", server_learning_rate: float = 1.0,
           server_momentum: float = 0.0, optimizer_state: str = "reset", model_state: str = "carry",
           recompute_batches: int = 1, exchange_dtype: str = "float32", exchange_values: str = "delta",
           backend: Union[str, Any] = "simulate", **backend_options: Any) -> Algorithm:
    """IST on sampled clients: `istjax.ist` whose W workers are the round's sampled clients (``num_workers`` =
    ``clients.slots``: the clients drawn a round, then any pads; a pad slot weighs 0, so the units it is dealt keep
    their global value, as units no worker holds do). Each round IST's partition of every neuron group
    (``sampler``, default `istjax.uniform`) is drawn over the W client slots; each client trains its sub-network
    on its own batches from a fresh client ``optimizer`` state (padded steps change nothing); the server merges the
    sub-networks, an element held by one client taking its value and one held by several (shared leaves: biases of
    the output layer, LayerNorms; overlapping samplers) their mean weighted by example counts
    (`istjax.core.subnet.merge_leaf`), and steps the global model along the pseudo-gradient ``global - merged``
    with the server optimizer as `fedavg` does (``"sgd"`` at learning rate 1 without momentum: none, the merged
    model is the new one, bit for bit).

    The bytes a client moves a round are IST's (its sub-network, 1/W to 1/W^2 of each partitioned leaf). Runs on
    simulate, devices and the MPI parameter server; not sharded (the owners' merge does not weigh)."""
    check_common(task, num_workers, local_steps, optimizer_state, model_state, recompute_batches)
    if optimizer_state != OptimizerStatePolicy.RESET:
        raise ArgError("optimizer_state", optimizer_state, f"fedist with optimizer_state={optimizer_state!r}: a "
                       f"client's optimizer state starts fresh every round (a sampled client keeps nothing between "
                       f"rounds, and the global opt_state is the server optimizer's);",
                       use={"optimizer_state": "reset"})
    _check_clients(clients, num_workers)
    server = server_optimizer_of(server_optimizer, server_learning_rate, server_momentum)
    plain = server_optimizer == "sgd" and server_learning_rate == 1 and not server_momentum
    algorithm = ist_algorithm(task, optimizer, num_workers=num_workers, local_steps=local_steps, sampler=sampler,
                              carry=False, model_state=model_state, recompute_batches=recompute_batches,
                              wire=precision.wire(exchange_dtype, exchange_values), name="fedist", clients=clients,
                              server=None if plain else server)
    return bind(algorithm, backend, **backend_options)
