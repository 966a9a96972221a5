"""ResIST: residual networks trained by independent subnetworks of their depth (arXiv 2107.00961).

Dun, Wolfe, Jermaine, Kyrillidis, "ResIST: Layer-Wise Decomposition of ResNets for Distributed Training". Each round
the residual blocks of the partitioned stages are dealt among the workers; every worker trains the shallow sub-ResNet
of its blocks plus all shared layers for K local steps; the blocks are written back (averaged by count where a
minimum depth makes them overlap) and the shared layers are averaged. At test time the residual branch of every
partitioned block is scaled by the fraction of its stage's blocks a worker trains: the paper's 1/S for S
sub-ResNets when the blocks divide evenly (slots / blocks in general: with 2 blocks on 4 workers and a minimum
depth of 1, each worker trains half the stage, and scaling by 1/4 instead of 1/2 cost 0.543 against 0.770 test
accuracy on Fashion-MNIST in a 60-round run; no scale gave 0.197).

This is `istjax.ist` composed with a depth-split model (`istjax.models.resist.DepthResNet`, whose scanned blocks are
neuron groups ``"blocks_i"``), a per-group sampler over those groups and the model's scaled test-time network: no
new training code.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Union

import flax.linen as nn
import optax

from istjax.core.errors import ArgError, Code
from istjax.algorithms.base import Algorithm, ModelStatePolicy
from istjax.algorithms.ist import ist
from istjax.core import contract
from istjax.core import partition as partition_lib
from istjax.core.task import Task, classifier

__all__ = ["resist", "resist_sampler"]


def resist_sampler(block_groups: dict[str, int], num_workers: int, min_depth: int = 0,
                   first_blocks: tuple[str, ...] = (), num_owners: int = 1) -> partition_lib.Sampler:
    """How ResIST deals each stage's blocks: disjoint and even when every worker can get one (``min_depth=0``;
    uneven counts padded), or every worker at least ``min_depth`` blocks, overlapping blocks averaged by count.
    The one-unit groups ``first_blocks`` (a stage's dealt first block, `DepthResNet.first_block_groups`) go to one
    worker each round; the others hold padding, which skips the block's branch. ``num_owners > 1`` deals the blocks
    stratified by that many owners (`istjax.stratified`): the MPI sharded mode on ``num_owners`` processes then holds
    each stage's blocks in shards (the first blocks are held whole by every process).

    Raises ValueError, naming the stage and the fix, for more workers than blocks without overlap, for a minimum
    depth above a stage's blocks, and for owners that cannot get equal shares of a stage.
    """
    if not isinstance(num_owners, int) or num_owners < 1:
        raise ArgError("num_owners", num_owners, f"num_owners={num_owners!r}: need a positive integer",
                       "(1: blocks not stratified by owner).")
    if not isinstance(min_depth, int) or isinstance(min_depth, bool) or min_depth < 0:
        raise ArgError("min_depth", min_depth, f"min_depth={min_depth!r}: need an integer >= 0", "(0: no overlap).")
    if num_owners > 1 and min_depth:
        raise ArgError(("min_depth", "num_owners"), min_depth, "blocks dealt stratified by owner do not overlap.",
                       ("Use", {"min_depth": 0}, "for the sharded mode, or", {"num_owners": 1}, "."))
    for g, n in block_groups.items():
        if min_depth > n:
            raise ArgError(("group_sizes", "min_depth"), min_depth,
                           f"min_depth={min_depth}: stage group {g!r} has only {n} partitioned block(s);",
                           f"use min_depth <= {n}, or deepen the stage.")
        if not min_depth and num_workers > n:
            raise ArgError(("group_sizes", "num_workers", "min_depth"), num_workers,
                           f"num_workers={num_workers} is more than the {n} partitioned block(s) of {g!r}: without "
                           f"overlap some worker would train no block of it.",
                           ("Set", {"min_depth": 1}, f"or more (blocks then overlap and are averaged), use at most "
                                                      f"{n} workers, or deepen the stage."))
    if num_owners > 1:
        per = partition_lib.stratified(num_owners)
        per.slots(block_groups, num_workers)  # equal shares of every owner's blocks, or a ValueError naming the stage
    else:
        per = partition_lib.overlapping(min_depth) if min_depth else partition_lib.uniform(pad=True)
    return partition_lib.per_group({**{g: per for g in block_groups},
                                    **{g: partition_lib.uniform(pad=True, idle=True) for g in first_blocks}})


def resist(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
           min_depth: int = 0, test_scale: bool = True, optimizer_state: str = "reset", model_state: str = "carry",
           num_owners: int = 1, recompute_batches: int = 1, exchange_dtype: str = "float32",
           exchange_values: str = "delta", backend: Union[str, Any] = "simulate", **backend_options: Any) -> Algorithm:
    """ResIST on a depth-split ResNet.

    Args:
      task: ``istjax.classifier(model, data)`` of a `istjax.models.resist.DepthResNet` (or any module with
        ``block_groups()``, ``partition_rules()``, ``subnet()`` and a ``test_branch_scale`` field); every algorithm
        factory takes a task first.
      optimizer: any optax transformation (the paper: SGD with momentum, re-created every round, which is
        ``optimizer_state="reset"``).
      num_workers: S, the number of sub-ResNets per round.
      local_steps: K.
      min_depth: 0 deals each stage's blocks without overlap; otherwise every worker gets at least this many blocks
        of every partitioned stage (overlaps averaged).
      test_scale: scale every partitioned block's residual branch at test time by the fraction of its stage a
        worker trains (slots / blocks; the paper's 1/S when blocks divide evenly); False turns it off (the ablation).
      num_owners: deal each stage's blocks stratified by this many owners (`resist_sampler`), as the MPI runtime's
        sharded mode on that many processes needs (``backend="mpi", mode="sharded"``); 1 (default): not stratified.
      optimizer_state, model_state, recompute_batches, exchange_dtype, exchange_values, backend, backend_options: as
        `istjax.ist`.
    """
    model = _depth_split_module(task)
    if test_scale and model_state == ModelStatePolicy.RECOMPUTE:
        raise ArgError(("model_state", "test_scale"), model_state,
                       "resist(model_state='recompute', test_scale=True): recomputed statistics describe the full, "
                       "unscaled network, but the test-time network scales "
                       "its partitioned branches, so its BatchNorm layers would normalise with the wrong statistics "
                       "(measured: test accuracy 0.148 against 0.304 carried after 12 rounds of fmnist_resist.py).",
                       ("Use", {"model_state": "carry"}, "(the statistics of the shallow sub-networks, as the paper) "
                        "or", {"test_scale": False}, "."))
    groups = model.block_groups()
    if not groups:
        raise ArgError("task", "", "resist(): the model partitions no stage (partitioned_stages is empty);",
                       ("name at least one (", {"partitioned_stages": ...}, ")."))
    first = _first_blocks(model)
    sampler = resist_sampler(groups, num_workers, min_depth, tuple(first), num_owners)
    slots = sampler.slots({**groups, **first}, num_workers)
    scales = tuple(slots[f"blocks_{i}"] / groups[f"blocks_{i}"] if f"blocks_{i}" in groups else 1.0
                   for i in range(len(model.stage_sizes)))
    if test_scale:
        task = classifier(model, task.example_x, num_classes=task.num_classes,
                          eval_model=model.clone(test_branch_scale=scales))
    algorithm = ist(task, optimizer, num_workers=num_workers, local_steps=local_steps, sampler=sampler,
                    optimizer_state=optimizer_state, model_state=model_state, recompute_batches=recompute_batches,
                    exchange_dtype=exchange_dtype, exchange_values=exchange_values, backend=backend,
                    **backend_options)
    return dataclasses.replace(algorithm, name="resist")


def _depth_split_module(task: Any):
    """The depth-split module a ResIST task was built from, or a TypeError / ValueError that says what to pass."""
    if isinstance(task, nn.Module):
        raise TypeError(f"resist(task, optimizer, ...) takes a task, as every algorithm factory does, not the module "
                        f"{type(task).__name__}: pass istjax.classifier(model, data).")
    if not isinstance(task, Task):
        raise TypeError(f"resist(task=...): need an istjax.Task built by istjax.classifier(model, data), not "
                        f"{type(task).__name__}.")
    if task.module is None or contract.block_groups(task.module) is None:
        raise ArgError("task", type(task.module).__name__,
                       "resist() needs a depth-split ResNet: ResIST deals residual blocks, so it needs "
                       "model.name='depth_resnet' in a config, istjax.models.DepthResNet in Python; its residual "
                       "blocks are the neuron groups ResIST deals to workers.",
                       Code("Build the task with istjax.classifier(DepthResNet(...), data).",
                            ("Use", {"model": "depth_resnet"}, ".")))
    return task.module


def _first_blocks(model) -> dict[str, int]:
    return contract.first_block_groups(model)
