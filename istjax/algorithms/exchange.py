"""An algorithm that exchanges sub-networks, written once: what every runtime runs, derived from its pieces.

The algorithm states `SubnetPieces` (``plan``, ``held`` with its ``spec``, ``start``, ``finish``; IST's are
`istjax.algorithms.ist.ist_pieces`). How a held tree is cut into workers' pieces and joined back is core's, for the
whole model or for N owners, and this module composes the two:

``distribute(state) -> (workers, plan)`` and ``collect(state, workers, plan, batches=None, shared=None)``
    the whole model (the simulate and devices runtimes, the MPI parameter server): ``start`` of
    `istjax.core.subnet.extract` of the held tree, and ``finish`` of `istjax.core.subnet.merge` of it, weighted by
    the plan's ``weights`` where it has them (IST on federated clients, `istjax.algorithms.ist.fedist`).
`OwnerSide`
    N owners each holding a part of the model (the MPI sharded mode): `istjax.core.shard.owner_distribute` of an
    owner's held part, and ``finish`` of `istjax.core.shard.owner_collect` of it. Workers start with the same
    ``start``.

Both read the same plan and spec, so a round over the whole model and its round over N owners agree
(`tests/test_shard.py` checks it on every family).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Optional

import jax

from istjax.algorithms.tensor import owner_evaluate as by_label_blocks
from istjax.algorithms.base import Algorithm, OwnerSide, SubnetPieces, recompute_from
from istjax.core import partition as partition_lib
from istjax.core import shard
from istjax.core.collectives import Collectives
from istjax.core.comm import Exchange, subnet_bytes
from istjax.core.precision import ExchangeValues
from istjax.core.subnet import extract, merge
from istjax.core.task import Task

__all__ = ["whole_round", "owner_evaluate", "owner_side", "subnet_algorithm"]


def whole_round(task: Task, pieces: SubnetPieces, recompute_batches: int = 1):
    """``(distribute, collect)``, the `Algorithm` pieces of a round over the whole model (module docstring);
    ``recompute_batches``: how many of each worker's batches a ``"recompute"`` policy reads (`recompute_from`).

    Under a rounding wire (``pieces.wire``) workers start from their pieces rounded, and ``collect`` reads each
    worker's trained tree as what it would send (`istjax.core.precision.Wire.up`), or, with ``sent=True``, takes
    the workers' held trees to be what they sent already (the MPI parameter server receives only that)."""
    spec, wire = pieces.spec, pieces.wire
    disjoint = partition_lib.disjoint_groups(pieces.sampler, spec.group_sizes)

    def distribute(state):
        round_plan = pieces.plan(state)
        tree = wire.round(extract(pieces.held(state), round_plan.partition, spec))  # what arrives
        return pieces.start(tree, state.round), round_plan

    def collect(state, workers, round_plan, batches=None, shared=None, *, sent=False):
        held, returned = pieces.held(state), pieces.held(workers)
        if not wire.exact:  # read what each worker sent against the exact pieces it was given
            exact = extract(held, round_plan.partition, spec)
            returned = wire.back(returned, exact) if sent else wire.returned(returned, exact)
        tree = merge(held, returned, round_plan.partition, spec, disjoint=disjoint, weights=round_plan.weights)
        return pieces.finish(state, tree, round_plan, recompute_from(task, batches, shared, recompute_batches))

    return distribute, collect


def owner_side(task: Task, pieces: SubnetPieces) -> OwnerSide:
    """The round as the owners of a sharded model run it (`OwnerSide`; module docstring). Under a rounding wire the
    owners round what they deal, and ``collect`` reads what the workers return as what they sent
    (`istjax.core.precision.Wire.up`: their changes, added to the owner's exact pieces, or their values)."""
    leaves, wire = pieces.spec.leaves, pieces.wire
    disjoint = partition_lib.disjoint_groups(pieces.sampler, pieces.spec.group_sizes)

    def distribute(layout, tree, round_plan):
        return shard.owner_distribute(layout, leaves, wire.round(tree), round_plan.partition)

    def collect(layout, state, round_plan, returned, gathered, sums, first=None, shared=None, reduce=None):
        held = pieces.held(state)
        if not wire.exact and wire.values == ExchangeValues.DELTA:  # the workers sent their changes (`Wire.up`)
            returned, gathered, sums = shard.owner_sent(layout, leaves, held, round_plan.partition, returned, gathered,
                                                        sums)
        tree = shard.owner_collect(layout, leaves, held, round_plan.partition, returned, gathered, sums, disjoint)
        return pieces.finish(state, tree, round_plan, _owner_recompute(task, layout, first, shared, reduce))

    return OwnerSide(distribute, collect, functools.partial(owner_evaluate, task))


def owner_evaluate(task: Task, layout: shard.Layout, c: Collectives) -> Optional[Callable]:
    """``(params, model_state, batch, shared=None) -> (loss, aux)``: the whole network's evaluation from this owner's
    part, with no weight gathered to one rank. A model whose tensor split cuts its labels into blocks
    (`istjax.models.SparseMLP`), when the owners divide them, is evaluated by label blocks as tensor parallel
    evaluates it (`istjax.algorithms.tensor.owner_evaluate`: each owner's part moved to its tensor block, then the
    shard pass and each rank's top k, per batch); any other model
    with ``owner_logits`` runs its forward pass from the owner's slice with each layer's partial sums reduced
    (`istjax.core.task.OwnerPass.evaluate`: ``[B, C]`` floats a batch for the output layer). None when neither
    applies (a group held whole that the model's owner pass does not take whole)."""
    if set(layout.group_sizes) <= layout.owned:
        by_labels = by_label_blocks(task, layout)
        if by_labels is not None:
            return functools.partial(by_labels, c)
    owner = task.owner
    if owner is not None and owner.evaluate is not None and set(layout.group_sizes) - layout.owned <= owner.whole:
        return functools.partial(owner.evaluate, owner=layout.owner, num_owners=layout.num_owners, reduce=c.all_sum)
    return None


def _owner_recompute(task: Task, layout: shard.Layout, first: Any, shared: Any, reduce: Any):
    """``(params, model_state) -> model_state``: this owner's slice of the merged model's statistics on ``first``
    (every worker's first batch `[W, B, ...]`), partial sums added by ``reduce``; None without batches or a task
    whose model gives no ``owner_statistics``."""
    if first is None or task.owner is None or task.owner.recompute_state is None:
        return None
    return lambda params, model_state: task.owner.recompute_state(
        params, model_state, first, shared, owner=layout.owner, num_owners=layout.num_owners, reduce=reduce)


def subnet_algorithm(task: Task, pieces: SubnetPieces, *, init, num_workers: int, sharded: bool = True,
                     **fields: Any) -> Algorithm:
    """The `Algorithm` of ``pieces``: ``distribute`` and ``collect`` over the whole model, the `OwnerSide` (none
    without ``sharded``: a plan whose ``weights`` the owners' merge does not read), the bytes a worker moves (its
    share of the held tree, `istjax.core.comm.subnet_bytes`); ``fields`` the rest (``local``, ``name``,
    ``local_steps``, ``optimizer``, the declarations)."""
    distribute, collect = whole_round(task, pieces, fields.get("recompute_batches", 1))
    held = jax.eval_shape(lambda k: pieces.held(init(k)), jax.random.key(0))
    slots = pieces.sampler.slots(pieces.spec.group_sizes, num_workers)
    return Algorithm(init=init, round=None, distribute=distribute, collect=collect, num_workers=num_workers,
                     comm=subnet_bytes(pieces.wire.shapes(held), pieces.spec, slots), task=task, sampler=pieces.sampler,
                     exchange=Exchange.SUBNETWORKS, subnet=pieces,
                     owner_side=owner_side(task, pieces) if sharded else None,
                     wire=pieces.wire, **fields)
