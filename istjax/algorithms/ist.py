"""Independent Subnetwork Training as a composition of the core pieces: sample, extract, train locally, merge.

IST is stated once, as `SubnetPieces` (`ist_pieces`: its plan, the tree it holds with its spec, how a worker
starts, how a round finishes); its round over the whole model and its round over the N owners of a sharded model
are both derived from them (`istjax.algorithms.exchange`). IST on federated clients
(`istjax.algorithms.federated.fedist`) is the same pieces with the clients' weights in the plan and a server step
in ``finish`` (`ist_algorithm`).

Yuan, Wolfe, Dun, Tang, Kyrillidis, Jermaine, "Distributed Learning of Deep Neural Networks using Independent Subnet
Training", arXiv 1910.02120.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, Union

import jax
import optax

from istjax.algorithms.base import (Algorithm, OptimizerStatePolicy, SubnetPieces, bind, check_common, finish_round,
                                    init_state, local_train, loss_split, with_outer)
from istjax.algorithms.exchange import subnet_algorithm
from istjax.algorithms.replicated import outer_step
from istjax.core import contract, precision
from istjax.core.errors import ArgError, Code
from istjax.core import partition as partition_lib
from istjax.core.schedule import at_round
from istjax.core.spec import SubnetSpec, spec_like_params
from istjax.core.state import WORKERS, RoundPlan, WorkerState, round_keys, worker_init
from istjax.core.task import Task, scaled_for_test

__all__ = ["ist", "ist_algorithm", "ist_pieces", "held_spec"]


def ist(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
        sampler: Optional[partition_lib.Sampler] = None, optimizer_state: str = "reset",
        model_state: str = "carry", recompute_batches: int = 1, exchange_dtype: str = "float32",
        exchange_values: str = "delta", backend: Union[str, Any] = "simulate", **backend_options: Any) -> Algorithm:
    """Independent Subnetwork Training.

    Each round: split the round key, sample a partition of every neuron group among ``num_workers`` workers, extract
    each worker's sub-network (and its slice of the model state), train it for ``local_steps`` steps on the worker's
    batches, merge the sub-networks back (partitioned weights written in place, or averaged by count where the
    sampler overlaps; shared weights averaged).

    Args:
      task: the network (`istjax.classifier` builds one from a Flax module).
      optimizer: any optax transformation, applied by every worker to its sub-network.
      num_workers: W.
      local_steps: K, optimizer steps per round.
      sampler: the partition strategy (default `istjax.uniform()`; `istjax.per_group` for one per neuron group).
      optimizer_state: ``"reset"`` (each worker starts every round from ``optimizer.init``) or ``"carry"`` (the
        global optimizer state is extracted and merged with the parameters).
      model_state: ``"carry"`` (running statistics extracted and merged like the parameters they belong to) or
        ``"recompute"`` (recomputed on the merged model after every round).
      recompute_batches: with ``model_state="recompute"``, the statistics come from each worker's first this many
        batches of the round (W x this many batches; default 1).
      exchange_dtype: what crosses between the server and the workers, ``"float32"`` or ``"bfloat16"`` (half the
        bytes; `istjax.core.precision`).
      exchange_values: under a bfloat16 exchange, what a worker sends back: ``"delta"`` (its change, added to the
        float32 master) or ``"params"`` (its values, written over the master); `istjax.core.precision.Wire`.
      backend: a runtime name (``"simulate"``, ``"devices"``, ``"mpi"``) or an `istjax.runtimes.Runtime`.
      **backend_options: passed to the runtime (e.g. ``mode="sharded"`` for ``"mpi"``).
    """
    check_common(task, num_workers, local_steps, optimizer_state, model_state, recompute_batches)
    algorithm = ist_algorithm(task, optimizer, num_workers=num_workers, local_steps=local_steps, sampler=sampler,
                              carry=optimizer_state == OptimizerStatePolicy.CARRY, model_state=model_state,
                              recompute_batches=recompute_batches, wire=precision.wire(exchange_dtype, exchange_values))
    return bind(algorithm, backend, **backend_options)


def ist_algorithm(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
                  sampler: Optional[partition_lib.Sampler], carry: bool, model_state: str, recompute_batches: int,
                  wire: precision.Wire, name: str = "ist", clients: Any = None,
                  server: Optional[optax.GradientTransformation] = None) -> Algorithm:
    """IST's `Algorithm`, not yet bound to a runtime, its common arguments checked by the caller
    (`istjax.algorithms.base.check_common`): `ist`'s; with ``clients`` (a federated client sampler,
    `istjax.data.client_batches.ClientSampler`) IST on the round's sampled clients
    (`istjax.algorithms.federated.fedist`): the plan carries ``clients.weights(round)``, so the merge weighs each
    client by its example count where several hold an element, and ``server`` (None: the merged model is the new
    one) steps the global model along the pseudo-gradient ``global - merged``, its state the global ``opt_state``.
    Such a plan has no owner side: the owners' merge of the sharded mode (`istjax.core.shard.owner_collect`) does
    not weigh."""
    sampler = sampler or partition_lib.uniform()
    _check_groups(task)
    try:
        slots = sampler.slots(task.spec.group_sizes, num_workers)  # validates sizes vs W before any tracing
    except partition_lib.GroupSizeError as e:  # the model's own fix when its fields constrain the size
        raise contract.group_size_refusal(task.module, e) from None
    task = scaled_for_test(task, slots)  # a module that scales its partitioned branches at test time
    loss = task.train_loss(slots)

    def local(worker, batches_K, shared=None, axis_name=WORKERS, reduce=None):  # workers never talk locally
        del axis_name, reduce
        return local_train(loss, optimizer, worker, batches_K, shared)

    pieces = ist_pieces(task, optimizer, sampler, num_workers, carry=carry, model_state=model_state, wire=wire,
                        weights_of=None if clients is None else clients.weights, server=server)
    return subnet_algorithm(task, pieces, init=with_outer(init_state(task, optimizer, carry), server),
                            num_workers=num_workers, sharded=clients is None, local=local, name=name,
                            local_steps=local_steps, optimizer=optimizer, carries_optimizer_state=carry,
                            model_state_policy=model_state, split=loss_split(task, loss),
                            recompute_batches=recompute_batches, clients=clients, outer_optimizer=server)


def _check_groups(task: Task) -> None:
    """An `istjax.ArgError` naming the fix when the task's spec has no neuron group to deal."""
    if not task.spec.group_sizes:
        why = task.no_groups_reason or ("Map a logical axis to a group in the rules (e.g. {'hidden_0': "
                                        "'hidden_0'}).")
        raise ArgError("task", type(task.module).__name__,
                       f"the model has no neuron group, so every weight is shared and IST would train it as local "
                       f"SGD. {why}", ("Or use", Code("istjax.local_sgd", {"algorithm": "local_sgd"}), "."))


def held_spec(task: Task, optimizer: optax.GradientTransformation, carry: bool) -> SubnetSpec:
    """The spec of the tree IST holds: the parameters', the model state's and, when it is carried, the optimizer
    state's (its parameter-shaped parts cut like the parameters, `istjax.core.spec.spec_like_params`)."""
    leaves = {"params": task.spec.leaves, "model_state": task.state_spec.leaves}
    if carry:
        abstract_opt = jax.eval_shape(optimizer.init, jax.eval_shape(task.init, jax.random.key(0)))
        leaves["opt_state"] = spec_like_params(abstract_opt, task.spec)
    return SubnetSpec(leaves, dict(task.spec.group_sizes))


def ist_pieces(task: Task, optimizer: optax.GradientTransformation, sampler: partition_lib.Sampler,
               num_workers: int, *, carry: bool, model_state: str, wire: precision.Wire = precision.Wire(),
               weights_of: Optional[Callable[[jax.Array], jax.Array]] = None,
               server: Optional[optax.GradientTransformation] = None) -> SubnetPieces:
    """IST as `SubnetPieces`: a fresh partition of every neuron group each round; the parameters, the model state
    and a carried optimizer state dealt with it; a worker's optimizer state reset (``optimizer.init``) or carried,
    stamped with the round either way; the model-state policy at the end of the round. ``weights_of(round)``: the
    workers' `[W]` merge weights in the plan (federated clients); ``server``: an optimizer the merged parameters'
    pseudo-gradient goes through (`istjax.algorithms.replicated.outer_step`; its state the global ``opt_state``)."""
    fields = ("params", "model_state") + (("opt_state",) if carry else ())

    def held(x):  # a TrainState or a WorkerState
        return {f: getattr(x, f) for f in fields}

    def plan(state):
        key, round_key = round_keys(state.key)
        weights = None if weights_of is None else weights_of(state.round)
        return RoundPlan(key, sampler.sample(round_key, task.spec.group_sizes, num_workers), weights)

    def start(tree, round_index):
        opt = (at_round(tree["opt_state"], round_index) if carry
               else worker_init(optimizer, tree["params"], round_index))
        return WorkerState(tree["params"], tree["model_state"], opt)

    def finish(state, tree, round_plan, recompute=None):
        params, opt_state = tree["params"], tree.get("opt_state", ())
        if server is not None:  # the pseudo-gradient, global - merged, through the server's optimizer
            params, opt_state = outer_step(server, state.params, params, state.opt_state)
        return finish_round(model_state, state, params, tree["model_state"], opt_state, round_plan.key, recompute)

    return SubnetPieces(sampler, held_spec(task, optimizer, carry), held, plan, start, finish, wire)
