"""Independent Subnetwork Training as a composition of the core pieces: sample, extract, train locally, merge.

Yuan, Wolfe, Dun, Tang, Kyrillidis, Jermaine, "Distributed Learning of Deep Neural Networks using Independent Subnet
Training", arXiv 1910.02120.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import jax
import optax

from istjax.algorithms.base import (Algorithm, OwnerSide, bind, check_common, finish_round, init_state,
                                    local_train)
from istjax.core import partition as partition_lib
from istjax.core import shard
from istjax.core.comm import ist_bytes
from istjax.core.schedule import at_round
from istjax.core.spec import LeafSpec
from istjax.core.state import WORKERS, RoundPlan, WorkerState, round_keys, worker_init
from istjax.core.subnet import extract, extract_tree, merge, merge_tree
from istjax.core.task import Task

__all__ = ["ist"]


def ist(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
        sampler: Optional[partition_lib.Sampler] = None, optimizer_state: str = "reset",
        model_state: str = "carry", backend: Union[str, Any] = "simulate", **backend_options: Any) -> Algorithm:
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
      backend: a runtime name (``"simulate"``, ``"devices"``, ``"mpi"``) or an `istjax.runtimes.Runtime`.
      **backend_options: passed to the runtime (e.g. ``mode="sharded"`` for ``"mpi"``).
    """
    check_common(task, num_workers, local_steps, optimizer_state, model_state)
    sampler = sampler or partition_lib.uniform()
    spec, state_spec = task.spec, task.state_spec
    if not spec.group_sizes:
        why = task.no_groups_reason or ("Map a logical axis to a group in the rules (e.g. {'hidden_0': "
                                        "'hidden_0'}).")
        raise ValueError(f"ist(): the task's spec has no neuron group, so every weight is shared and IST would be "
                         f"local SGD. {why} Or use istjax.local_sgd.")
    slots = sampler.slots(spec.group_sizes, num_workers)  # validates sizes vs W before any tracing
    disjoint = partition_lib.disjoint_groups(sampler, spec.group_sizes)
    loss = task.train_loss(slots)
    abstract_params = jax.eval_shape(task.init, jax.random.key(0))
    params_treedef = jax.tree.structure(abstract_params)
    carry = optimizer_state == "carry"

    def plan(state):
        key, round_key = round_keys(state.key)
        return RoundPlan(key, sampler.sample(round_key, spec.group_sizes, num_workers))

    def distribute(state):
        key, p = plan(state)
        sub = extract(state.params, p, spec)
        sub_state = extract(state.model_state, p, state_spec)
        opt = (at_round(extract_tree(state.opt_state, params_treedef, p, spec), state.round) if carry
               else worker_init(optimizer, sub, state.round))
        return WorkerState(sub, sub_state, opt), RoundPlan(key, p)

    def local(worker, batches_K, shared=None, axis_name=WORKERS, reduce=None):  # workers never talk locally
        del axis_name, reduce
        return local_train(loss, optimizer, worker, batches_K, shared)

    def collect(state, workers, plan, batches=None, shared=None):
        p = plan.partition
        params = merge(state.params, workers.params, p, spec, disjoint=disjoint)
        model_state = merge(state.model_state, workers.model_state, p, state_spec, disjoint=disjoint)
        opt_state = (merge_tree(state.opt_state, workers.opt_state, params_treedef, p, spec, disjoint=disjoint)
                     if carry else ())
        return finish_round(task, model_state_policy, state, params, model_state, opt_state, plan.key, batches, shared)

    model_state_policy = model_state
    abstract_opt = jax.eval_shape(optimizer.init, abstract_params) if carry else ()
    abstract_state = jax.eval_shape(task.init_state, jax.random.key(0))
    comm = ist_bytes(abstract_params, abstract_opt, params_treedef, spec, slots, abstract_state, state_spec)
    owner_side = _owner_side(task, optimizer, sampler, plan, disjoint, abstract_opt, params_treedef, carry,
                             model_state)
    algorithm = Algorithm(init=init_state(task, optimizer, carry), round=None, distribute=distribute, local=local,
                          collect=collect, name="ist", num_workers=num_workers, local_steps=local_steps, comm=comm,
                          task=task, optimizer=optimizer, sampler=sampler, exchange="subnetworks",
                          carries_optimizer_state=carry, model_state_policy=model_state, owner_side=owner_side)
    return bind(algorithm, backend, **backend_options)


def _owner_side(task, optimizer, sampler, plan, disjoint, abstract_opt, params_treedef, carry, policy) -> OwnerSide:
    """IST's round as the owners of a sharded model run it: the same plan, extract and merge, on each owner's part
    (`istjax.core.shard`); a carried optimizer state is held and dealt like the parameters it belongs to."""

    def params_like(t):
        return jax.tree.structure(t) == params_treedef

    opt_spec = jax.tree.map(lambda t: task.spec.leaves if params_like(t) else LeafSpec((None,) * len(t.shape)),
                            abstract_opt, is_leaf=params_like)
    spec_tree = {"params": task.spec.leaves, "model_state": task.state_spec.leaves,
                 **({"opt_state": opt_spec} if carry else {})}

    def held(state):
        return {"params": state.params, "model_state": state.model_state,
                **({"opt_state": state.opt_state} if carry else {})}

    def distribute(layout, tree, round_plan):
        return shard.owner_distribute(layout, spec_tree, tree, round_plan.partition)

    def start(tree, round_index):
        opt = (at_round(tree["opt_state"], round_index) if carry
               else worker_init(optimizer, tree["params"], round_index))
        return WorkerState(tree["params"], tree["model_state"], opt)

    def collect(layout, state, round_plan, returned, gathered, sums, first=None, shared=None, reduce=None):
        tree = shard.owner_collect(layout, spec_tree, held(state), round_plan.partition, returned, gathered, sums,
                                   disjoint)
        model_state = tree["model_state"]
        if policy == "recompute" and first is not None and jax.tree.leaves(model_state):
            model_state = task.owner.recompute_state(tree["params"], model_state, first, shared, owner=layout.owner,
                                                     num_owners=layout.num_owners, reduce=reduce)
        return finish_round(task, policy, state, tree["params"], model_state, tree.get("opt_state", ()),
                            round_plan.key)

    return OwnerSide(sampler, spec_tree, held, plan, distribute, start, collect)
