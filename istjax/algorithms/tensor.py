"""Tensor (model) parallelism: every layer split across the P shards, activations exchanged every step.

The baseline a user would otherwise pick for a model too large for one rank (Megatron-LM, arXiv 1909.08053). The
split comes from the model (`istjax.core.contract`): its ``tensor_axes()`` name the logical axes cut into a block
per shard, and its ``tensor_logits`` is a shard's forward pass, its own ``__call__`` with its layers run on their
blocks (`istjax.models.tensor_forward`: an `istjax.models.MLP` of any depth in Megatron's column-then-row pairs, the
sparse `istjax.models.SparseMLP` with its labels in blocks too; `istjax.models.Transformer`: every layer's heads and
feed-forward units, one all-reduce after each attention and feed-forward branch). This module keeps what every model
shares:

* the cut: shard ``p`` holds block ``p`` of the last cut axis of every parameter and of the optimizer state built
  from it (`cut`, `join`; `istjax.models.tensor_forward.cut_axes`), the rest whole;
* the loss: every shard computes the same loss, through the collectives' adjoints
  (`istjax.core.collectives.differentiable`); when the model cuts its output units (``"classes"``), each shard holds a
  label block of the logits and the loss is Megatron's vocabulary-parallel cross-entropy: a max and a sum of
  exponentials over the label shards (``[B]`` each) and each point's true-label logits from the shards that own
  them (`sharded_multilabel_loss`); else the model's own scores of the whole logits;
* the round: K steps, every shard on the same examples, a round's `[W, K, B, ...]` batches, all W rows in each of
  the K steps (so ``W * B`` examples a step, as data parallel with W workers, to which it is equal). The optimizer
  (any elementwise optax transformation: SGD, Adam, ...) updates each shard's blocks, which is exact.

What a shard hands the collectives in a step is read from the traced step (`traced_step_bytes`); for the
one-hidden-layer `SparseMLP`, ``2 * B * H`` activations plus ``3 * B`` loss scalars (`step_bytes`).

The shard's step is written once against `Collectives`; the MPI runtime supplies mpi4jax ones
(`istjax.runtimes.mpi`), `lax_collectives` the named-axis ones of a ``vmap`` over shards (the single-process
oracle of the tests).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
import optax

from istjax.algorithms.base import Algorithm, apply_update, bind, init_state
from istjax.core import contract, precision, tiled_init
from istjax.core.collectives import Collectives, Differentiable, differentiable, lax_collectives
from istjax.core.comm import CommBytes, Exchange
from istjax.core.errors import ArgError, Code
from istjax.core.shard import Layout
from istjax.core.spec import path_str
from istjax.core.state import WORKERS, RoundPlan, TrainState, WorkerState, round_keys
from istjax.core.task import Task, scores as default_scores
from istjax.core.weights import example_weights
from istjax.models import tensor_forward
from istjax.xmc import loss as xmc_loss

__all__ = ["Collectives", "Differentiable", "TensorPieces", "cut", "differentiable", "from_owner_layout", "join",
           "lax_collectives", "owner_evaluate", "sharded_multilabel_loss", "sharded_scores", "step_bytes",
           "tensor_parallel", "tensor_parallel_pieces", "traced_step_bytes"]

PyTree = Any
WHOLE = tensor_forward.WHOLE
CLASSES = "classes"  # the logical axis of the output units: cut, the logits come in label blocks


def _join_columns(parts_PxBxh: jax.Array) -> jax.Array:
    """``[P, B, h] -> [B, P * h]``: shard p's columns at ``p * h .. (p + 1) * h - 1``."""
    p, b, h = parts_PxBxh.shape
    return jnp.transpose(parts_PxBxh, (1, 0, 2)).reshape(b, p * h)


# ----------------------------------------------------------------------------------------------------------------
# The loss and the scores of a label block.


def _owned(labels_BxL: jax.Array, first: jax.Array, width: int) -> tuple[jax.Array, jax.Array]:
    """``(local ids [B, L], mask [B, L])``: the labels in this shard's block ``first .. first + width - 1``."""
    local = labels_BxL - first
    mask = (labels_BxL >= 0) & (local >= 0) & (local < width)
    return jnp.where(mask, local, 0), mask.astype(jnp.float32)


def sharded_multilabel_loss(logits_Bxc: jax.Array, labels_BxL: jax.Array, first: jax.Array, d: Differentiable,
                            num_classes: int, loss: str = "softmax") -> jax.Array:
    """`istjax.xmc.loss.multilabel_loss` of the whole logits from this shard's block ``[B, c]`` (labels ``first ..
    first + c - 1``) without forming them: for softmax, ``log Z = m + log sum_p sum_l exp(z_l - m)`` with ``m`` the
    max over shards, and the true labels' logits summed from the shards that own them."""
    ids, mask = _owned(labels_BxL, first, logits_Bxc.shape[1])
    picked_B = jnp.sum(jnp.take_along_axis(logits_Bxc, ids, axis=1) * mask, axis=1)
    count = jnp.sum(labels_BxL >= 0, axis=1).astype(jnp.float32)  # every shard sees all labels: no exchange
    if loss == "softmax":
        m_B = d.max(jnp.max(logits_Bxc, axis=1))
        sums = d.replicated_sum(jnp.stack([jnp.sum(jnp.exp(logits_Bxc - m_B[:, None]), axis=1), picked_B]))
        per_point = jnp.where(count > 0, m_B + jnp.log(sums[0]) - sums[1] / jnp.maximum(count, 1.0), 0.0)
        return jnp.mean(per_point)
    if loss == "bce":
        sums = d.replicated_sum(jnp.stack([jnp.sum(jax.nn.softplus(logits_Bxc), axis=1), picked_B]))
        return jnp.mean((sums[0] - sums[1]) / num_classes)
    raise ArgError("loss", loss, f"loss={loss!r}:", f"choose one of {list(xmc_loss.LOSSES)}.")


def sharded_scores(logits_Bxc: jax.Array, labels_BxL: jax.Array, first: jax.Array, c: Collectives,
                   num_classes: int, loss: str = "softmax",
                   label_weights: Optional[xmc_loss.LabelWeights] = None) -> tuple[jax.Array, dict]:
    """`istjax.xmc.loss.scores` of the whole logits from this shard's block: the loss (`sharded_multilabel_loss`)
    and P@1/3/5, nDCG@5 (and PSP@k's parts with ``label_weights``) from each shard's top k, all-gathered (``P * k``
    candidates a point), of which the top k are the whole logits' (exact, ties to the lower label id as
    ``lax.top_k``)."""
    d = differentiable(c)
    value = sharded_multilabel_loss(logits_Bxc, labels_BxL, first, d, num_classes, loss)
    k = min(max(xmc_loss.KS), logits_Bxc.shape[1])
    top_v, top_i = jax.lax.top_k(logits_Bxc, k)
    cand_v = _join_columns(c.all_gather(top_v))  # [B, P * k], shard order: ties resolve to the lower id
    cand_i = _join_columns(c.all_gather(top_i + first))
    # ranking_scores on the candidates, each true label renamed to its candidate position (or to a position past
    # the candidates when it is none of them; padding stays -1): the same hits, the same label counts.
    match = labels_BxL[:, :, None] == cand_i[:, None, :]  # [B, L, P * k]
    absent = cand_i.shape[1] + jnp.arange(labels_BxL.shape[1])[None, :]
    position = jnp.where(jnp.any(match, axis=2), jnp.argmax(match, axis=2), absent)
    weights = None if label_weights is None else label_weights.of(labels_BxL)  # each true label's, renamed alike
    ranking = xmc_loss.ranking_scores(cand_v, jnp.where(labels_BxL >= 0, position, -1), weights_BxL=weights)
    return value, {"accuracy": ranking["precision_at_1"], **ranking}


# ----------------------------------------------------------------------------------------------------------------
# A shard's pass: the model's own, scored whole or by label blocks.


class _Split(NamedTuple):
    """What tensor parallel reads of a task: the cut axis of every parameter, the label blocks' width (0: the logits
    come whole), the multi-label loss (None: integer labels, softmax cross-entropy) and the whole logits' scores."""
    axes: PyTree
    classes: int
    block: int
    loss: Optional[str]
    score: Callable


def _split(task: Task, num_shards: int) -> _Split:
    module = task.module
    axes = tensor_forward.cut_axes(module, task.example_x)
    cut_classes = CLASSES in contract.tensor_axes(module)
    loss = getattr(module, "loss", None)
    return _Split(axes, task.num_classes, task.num_classes // num_shards if cut_classes else 0,
                  loss if loss in xmc_loss.LOSSES else None, contract.scores(module) or default_scores)


def _logits(task: Task, d: Differentiable, params: PyTree, x: jax.Array) -> jax.Array:
    return contract.tensor_logits(task.module)({"params": params}, x, ops=d)


def _shard_loss(task: Task, split: _Split) -> Callable:
    """``(d, params, batch) -> loss``: the whole network's training loss from shard ``d.index()``'s blocks."""
    def loss(d: Differentiable, params, batch):
        if example_weights(batch) is not None:  # static: refused before anything is traced further
            raise ArgError("batch", "weight", "tensor_parallel scores a batch as one mean over its examples; it does "
                           "not read per-example weights (batch['weight'], istjax.core.weights);",
                           "train weighted (client) batches with a replicated algorithm.")
        logits = _logits(task, d, params, batch["x"])
        if not split.block:
            return split.score(logits, batch["y"])[0]
        labels = batch["y"] if split.loss else batch["y"][:, None]
        return sharded_multilabel_loss(logits, labels, d.index() * split.block, d, split.classes,
                                       split.loss or "softmax")

    return loss


def _shard_evaluate(task: Task, split: _Split) -> Callable:
    """``(c, params, model_state, batch, shared=None) -> (loss, aux)``: `istjax.core.task.Task.evaluate` of the whole
    network from shard ``c.index()`` of its parameters (every shard gets the same result)."""
    def evaluate(c: Collectives, params, model_state, batch, shared=None):
        del model_state, shared
        d = differentiable(c)
        logits = _logits(task, d, params, batch["x"])
        if not split.block:
            return split.score(logits, batch["y"])
        labels = batch["y"] if split.loss else batch["y"][:, None]
        value, aux = sharded_scores(logits, labels, c.index() * split.block, c, split.classes,
                                    split.loss or "softmax", getattr(task.module, "label_weights", None))
        return value, (aux if split.loss else {"accuracy": aux["accuracy"]})  # `istjax.core.task.scores`' keys

    return evaluate


# ----------------------------------------------------------------------------------------------------------------
# IST's sharded owners evaluated as tensor parallel shards.


def from_owner_layout(params: PyTree, owner_axes: PyTree, shard_axes: PyTree, c: Collectives) -> PyTree:
    """Shard ``c.index()`` of tensor parallel's split from the same rank's part of IST's sharded split: each leaf's
    owner block (along ``owner_axes``, `istjax.core.shard.Layout.axis`) moved to its tensor block (along
    ``shard_axes``): as it is where the axes agree, sliced where the owner holds the leaf whole, all-gathered where
    the shard holds it whole, and one all-to-all where they differ (a rank sends ``(P - 1) / P`` of the leaf's part,
    receives as much)."""
    p = c.size

    def move(x, o, t):
        if o == t:
            return x
        if o == WHOLE:
            width = x.shape[t] // p
            return jax.lax.dynamic_slice_in_dim(x, c.index() * width, width, axis=t)
        if t == WHOLE:
            return jnp.concatenate(list(c.all_gather(x)), axis=o)
        blocks = jnp.stack(jnp.split(x, p, axis=t))  # block q of the tensor axis goes to rank q
        return jnp.concatenate(list(c.all_to_all(blocks)), axis=o)  # owner q's part at q's place along o

    return jax.tree.map(move, params, owner_axes, shard_axes)


def owner_evaluate(task: Task, layout: Layout) -> Optional[Callable]:
    """``(c, params, model_state, batch, shared=None) -> (loss, aux)``: the evaluation of a model held by IST's
    ``layout.num_owners`` owners (every group in shards) as tensor parallel evaluates it, when the model cuts its
    labels into blocks (`istjax.models.SparseMLP`): its parameters moved into tensor parallel's split
    (`from_owner_layout`, in every call: once per evaluated chunk), then the shard pass and each rank's top k merged
    (`sharded_scores`): no ``[B, C]`` logits cross the link, where reducing every owner's partial logits moves
    ``B x C`` floats a batch. None for a model that does not, or when the split does not fit."""
    module, p = task.module, layout.num_owners
    if task.example_x is None or contract.tensor_logits(module) is None:
        return None
    try:  # a model whose tensor split is refused for these fields (a transformer by depth) has none to use
        if CLASSES not in contract.tensor_axes(module):
            return None
        _check_sizes(task, p)
    except ArgError:
        return None
    split = _split(task, p)
    owner_axes = jax.tree.map(lambda leaf: WHOLE if layout.axis(leaf) is None else layout.axis(leaf),
                              task.spec.leaves)
    evaluate = _shard_evaluate(task, split)

    def by_labels(c: Collectives, params, model_state, batch, shared=None):
        return evaluate(c, from_owner_layout(params, owner_axes, split.axes, c), model_state, batch, shared)

    return by_labels


# ----------------------------------------------------------------------------------------------------------------
# Cutting and joining trees: every leaf of a shard is a block of its cut axis.


def _cut_leaf(x, axis: int, index, num_shards: int):
    if axis == WHOLE or jnp.ndim(x) == 0:
        return x
    width = x.shape[axis] // num_shards
    return tiled_init.block(x, axis, index * width, width)


def cut(tree: PyTree, axes: PyTree, index, num_shards: int) -> PyTree:
    """Shard ``index``'s part of a params-shaped ``tree``: block ``index`` of every leaf along its axis in ``axes``
    (`istjax.models.tensor_forward.cut_axes`; `WHOLE`: the leaf itself). Inside `istjax.core.tiled_init.deferred`, a
    leaf drawn by a `istjax.core.tiled_init.Tiled` initialiser is redrawn as the block alone."""
    return jax.tree.map(lambda x, a: _cut_leaf(x, a, index, num_shards), tree, axes)


def _join_leaf(x, axis: int):
    return x[0] if axis == WHOLE else jnp.concatenate(list(x), axis=axis)


def join(shards_P: PyTree, axes: PyTree) -> PyTree:
    """The whole params-shaped tree from every shard's part stacked on a leading `[P]` axis (`cut`'s inverse; a
    leaf held whole is shard 0's copy)."""
    return jax.tree.map(_join_leaf, shards_P, axes)


def _cut_opt(optimizer, opt_state, axes, index, num_shards: int):
    """`cut` of an optimizer state: its params-shaped trees by ``axes``, the rest (step counts) whole."""
    return optax.tree_map_params(optimizer, lambda x, a: _cut_leaf(x, a, index, num_shards), opt_state, axes)


def _join_opt(optimizer, stacked, axes):
    return optax.tree_map_params(optimizer, _join_leaf, stacked, axes,
                                 transform_non_params=lambda v: jax.tree.map(lambda x: x[0], v))


def _round_batch(batches: PyTree) -> PyTree:
    """``[W, K, B, ...] -> [K, W * B, ...]``: every step reads all W workers' rows (worker-major)."""
    def one(x):
        x = jnp.swapaxes(x, 0, 1)
        return x.reshape((x.shape[0], x.shape[1] * x.shape[2]) + x.shape[3:])

    return jax.tree.map(one, batches)



class TensorPieces(NamedTuple):
    """What a runtime needs to run tensor parallel on P shards (`Algorithm.tensor`).

    Attributes:
      num_shards: P (= W).
      init: ``(key, index) -> TrainState``: shard ``index``'s part of the fresh state ``Algorithm.init(key)``,
        its optimizer state made from the shard's parameters (no rank ever holds the whole optimizer state).
      cut: ``(state, index) -> TrainState``: shard ``index``'s part of a whole state.
      join: ``TrainState -> TrainState``: the whole state from one whose params and optimizer state are every
        shard's stacked on a leading `[P]` axis (`join`).
      train: ``(collectives, state, batches [W, K, B, ...]) -> (state, metrics [K])``: a shard's round.
      evaluate: ``(collectives, params, model_state, batch, shared=None) -> (loss, aux)``: the whole model's
        `istjax.Task.evaluate` from a shard (the same on every shard).
      step_bytes: ``examples -> CommBytes``: what a shard hands the collectives in one step (`traced_step_bytes`).
    """

    num_shards: int
    init: Callable
    cut: Callable
    join: Callable
    train: Callable
    evaluate: Callable
    step_bytes: Callable[[int], CommBytes]


def step_bytes(examples: int, hidden: int, num_shards: int, itemsize: int = 4) -> CommBytes:
    """A one-hidden-layer `istjax.models.SparseMLP` shard's bytes in one step of ``examples`` points: the all-gather
    of the hidden units (``B * H / P`` sent, ``B * H`` received), its adjoint all-to-all (``B * H`` each way), the max
    (``B``) and the two sums (``2 B``). `traced_step_bytes` reads any model's from its step."""
    scalars = 3 * examples
    sent = examples * hidden // num_shards + examples * hidden + scalars
    received = 2 * examples * hidden + scalars
    return CommBytes(received * itemsize, sent * itemsize)


def _counting(size: int, counted: list) -> Collectives:
    """`Collectives` of the right shapes (every shard's value taken as this one's) that record, as they are traced,
    the bytes each hands in and gets back, as the MPI runtime counts its buffers (`istjax.runtimes.mpi.mpi_bytes`)."""
    def record(x, out):
        counted.append((int(np.prod(out.shape)) * out.dtype.itemsize, int(np.prod(x.shape)) * x.dtype.itemsize))
        return out

    return Collectives(index=lambda: jnp.int32(0), size=size,
                       all_gather=lambda x: record(x, jnp.broadcast_to(x, (size,) + x.shape)),
                       all_sum=lambda x: record(x, x), all_max=lambda x: record(x, x),
                       all_to_all=lambda x: record(x, x))


def traced_step_bytes(task: Task, num_shards: int, examples: int) -> CommBytes:
    """``(received, sent)`` bytes one shard hands the collectives in one training step of ``examples`` points:
    its loss and gradient traced once (shapes only) with counting collectives."""
    split = _split(task, num_shards)
    counted: list = []
    d = differentiable(_counting(num_shards, counted))
    params = jax.eval_shape(lambda: cut(task.init(jax.random.key(0)), split.axes, 0, num_shards))
    x = jax.ShapeDtypeStruct((examples,) + tuple(task.example_x.shape[1:]), task.example_x.dtype)
    logits = jax.eval_shape(lambda prm, v: _logits(task, differentiable(_counting(num_shards, [])), prm, v), params, x)
    labels = jax.ShapeDtypeStruct((examples, 8) if split.loss else logits.shape[:-1], jnp.int32)  # 8: any label set
    loss = _shard_loss(task, split)
    jax.eval_shape(jax.grad(lambda prm, b: loss(d, prm, b)), params, {"x": x, "y": labels})
    return CommBytes(sum(r for r, _ in counted), sum(s for _, s in counted))


# ----------------------------------------------------------------------------------------------------------------
# The checks and the algorithm.


def _check_sizes(task: Task, num_shards: int) -> None:
    """Every cut axis divides into ``num_shards`` equal blocks; an `ArgError` naming the leaf and the fix."""
    axes = tensor_forward.cut_axes(task.module, task.example_x)
    shapes = jax.eval_shape(task.init, jax.random.key(0))
    for (path, leaf), axis in zip(jax.tree_util.tree_flatten_with_path(shapes)[0], jax.tree.leaves(axes)):
        if axis == WHOLE or leaf.shape[axis] % num_shards == 0:
            continue
        size, name = leaf.shape[axis], path_str(path)
        raise ArgError("num_workers", num_shards, f"tensor_parallel cuts the {size} units of {name} (axis {axis}) "
                       f"into num_workers={num_shards} equal blocks, but {size} % {num_shards} != 0.",
                       ("Use", {"num_workers": ...}, f"dividing {size}."))


def _check(task: Task, num_workers, local_steps, batch_size) -> None:
    """What tensor parallel needs of a task and its sizes; an `ArgError` naming the fix, before anything is traced
    for real (the shard pass is traced abstractly, so a layer it cannot cut is named)."""
    for name, value in (("num_workers", num_workers), ("local_steps", local_steps), ("batch_size", batch_size)):
        if not isinstance(value, int) or value < 1:
            raise ArgError(name, value, f"{name}={value!r}: need a positive integer.", "")
    module = task.module
    if module is None or task.example_x is None or contract.tensor_logits(module) is None:
        raise ArgError("task", type(module).__name__, f"tensor_parallel needs a model that gives its tensor split "
                       f"(tensor_axes() and tensor_logits(), istjax.core.contract); {type(module).__name__} gives "
                       f"none.", ("Use", [Code("istjax.models.MLP", {"model": "mlp"}),
                                          Code("SparseMLP", {"model": "sparse_mlp"}),
                                          Code("Transformer", {"model": "transformer"})],
                                  ", or add the two methods (see istjax.models.tensor_forward)."))
    if task.has_state:
        raise ArgError("task", type(module).__name__, f"tensor_parallel with {type(module).__name__}, which keeps "
                       f"running statistics (a model state): each shard would keep its own.",
                       "Use a model without running statistics (MLP's BatchNorm uses batch statistics and is fine).")
    _check_sizes(task, num_workers)
    tensor_forward.check(module, task.example_x, size=num_workers)


def tensor_parallel(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
                    batch_size: int, exchange_dtype: str = "float32", backend: Union[str, Any] = "mpi",
                    **backend_options: Any) -> Algorithm:
    """Tensor parallelism over ``num_workers`` shards, one per MPI process (module docstring).

    Args:
      task: a task whose model gives its tensor split (`istjax.core.contract`: an `MLP` of any depth, a
        `SparseMLP`, a `Transformer` split by width), every cut axis divisible by ``num_workers``. The model may
        compute in bfloat16 (its matmuls accumulate in float32; the activations cross in float32).
      optimizer: an elementwise optax transformation (SGD, Adam, ...), applied to each shard's blocks.
      num_workers: P, the shards (``mpiexec -n P``).
      local_steps: K steps a round; each reads all W rows of the round's `[W, K, B, ...]` batches.
      batch_size: B, for the analytic bytes (``algorithm.comm``: ``K`` steps of ``W * B`` examples,
        `traced_step_bytes`).
      exchange_dtype: ``"float32"`` only: the activations and their gradients cross in float32 (mpi4jax has no
        bfloat16 collective, and a sum of activations needs float32 arithmetic).
      backend: ``"mpi"`` (the only runtime that runs it).
    """
    if precision.check_dtype(exchange_dtype, "exchange_dtype") != precision.FLOAT32:
        raise ArgError("exchange_dtype", exchange_dtype,
                       f"tensor_parallel(exchange_dtype={exchange_dtype!r}): its activations and their gradients are "
                       f"all-gathered and summed inside every step in float32 (mpi4jax has no bfloat16 collective);",
                       use={"exchange_dtype": "float32"})
    import istjax.runtimes as runtimes  # the registry; runtimes never import algorithms

    if not runtimes.get(backend).multi_process:
        spanning = [n for n in runtimes.RUNTIMES.names() if runtimes.get(n).multi_process]
        raise ArgError("backend", backend, f"tensor_parallel splits every layer across processes and exchanges "
                       f"activations every step; it runs on a runtime whose workers span processes "
                       f"({', '.join(spanning)}), not {runtimes.get(backend).name!r}.",
                       ("Use", {"backend": spanning[0]}, "under mpiexec -n W."))
    algorithm = tensor_parallel_pieces(task, optimizer, num_workers=num_workers, local_steps=local_steps,
                                       batch_size=batch_size)
    return bind(algorithm, backend, **backend_options)


def _pieces(task: Task, optimizer, split: _Split, p: int) -> TensorPieces:
    """The `TensorPieces` of ``task`` on ``p`` shards."""
    loss = _shard_loss(task, split)

    def train(c: Collectives, state: TrainState, batches: PyTree):
        d = differentiable(c)
        grad = jax.value_and_grad(lambda params, batch: loss(d, params, batch))

        def step(carry: WorkerState, batch):
            value, grads = grad(carry.params, batch)
            return apply_update(optimizer, grads, carry), {"loss": value}

        start = WorkerState(state.params, state.model_state, state.opt_state)
        last, metrics_K = jax.lax.scan(step, start, _round_batch(batches))
        return TrainState(last.params, last.model_state, last.opt_state, round_keys(state.key)[0],
                          state.round + 1), metrics_K

    def cut_state(state: TrainState, index) -> TrainState:
        return state._replace(params=cut(state.params, split.axes, index, p),
                              opt_state=_cut_opt(optimizer, state.opt_state, split.axes, index, p))

    def join_state(stacked: TrainState) -> TrainState:
        return stacked._replace(params=join(stacked.params, split.axes),
                                opt_state=_join_opt(optimizer, stacked.opt_state, split.axes))

    def init_shard(key, index) -> TrainState:  # = cut_state(init_state(task, optimizer, True)(key), index)
        key, init_key = jax.random.split(key)
        with tiled_init.deferred():  # a tiled leaf's block drawn alone: the whole model is never made
            params = cut(task.init(init_key), split.axes, index, p)
        return TrainState(params, task.init_state(init_key), optimizer.init(params), key, jnp.zeros((), jnp.int32))

    return TensorPieces(p, init_shard, cut_state, join_state, train, _shard_evaluate(task, split),
                        lambda n: traced_step_bytes(task, p, n))


def tensor_parallel_pieces(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int,
                           local_steps: int, batch_size: int) -> Algorithm:
    """`tensor_parallel` before it is bound to a runtime: ``init`` the whole state, ``distribute`` / ``collect``
    cut it into shards and join them, ``local`` one shard's round under a ``vmap`` over shards (the single-process
    oracle) and ``tensor`` the pieces the MPI runtime runs."""
    _check(task, num_workers, local_steps, batch_size)
    p = num_workers
    pieces = _pieces(task, optimizer, _split(task, p), p)

    def distribute(state):  # every shard's part, stacked [P]: the oracle's and the whole-state view
        shards = jax.vmap(lambda i: pieces.cut(state, i))(jnp.arange(p))
        return WorkerState(shards.params, shards.model_state, shards.opt_state), RoundPlan(round_keys(state.key)[0],
                                                                                           None)

    def local(worker, batches, shared=None, axis_name=WORKERS, reduce=None):
        """One shard's round under a vmap over shards named ``axis_name`` (or ``reduce``'s `Collectives`)."""
        del shared
        c = reduce if isinstance(reduce, Collectives) else lax_collectives(p, axis_name)
        state = TrainState(worker.params, worker.model_state, worker.opt_state, jax.random.key(0), jnp.int32(0))
        out, metrics = pieces.train(c, state, batches)
        return WorkerState(out.params, out.model_state, out.opt_state), metrics

    def collect(state, workers, plan, batches=None, shared=None):
        whole = pieces.join(TrainState(workers.params, workers.model_state, workers.opt_state, state.key,
                                       state.round))
        return TrainState(whole.params, state.model_state, whole.opt_state, plan.key, state.round + 1)

    per_step = traced_step_bytes(task, p, num_workers * batch_size)
    comm = CommBytes(per_step.received * local_steps, per_step.sent * local_steps)
    return Algorithm(init=init_state(task, optimizer, True), round=None, distribute=distribute, local=local,
                     collect=collect, name="tensor_parallel", num_workers=num_workers, local_steps=local_steps,
                     comm=comm, task=task, optimizer=optimizer, exchange=Exchange.ACTIVATIONS,
                     carries_optimizer_state=True, tensor=pieces, reads_every_worker=True)
