"""Tensor (model) parallelism: every layer split across the P shards, activations exchanged every step.

The baseline a user would otherwise pick for a model too large for one rank (Megatron-LM, arXiv 1909.08053), on
the extreme classifier `istjax.models.SparseMLP` with one hidden layer, ``x -> relu(bag(x) @ W1 + b1) @ W2 + b2``
(and the dense `istjax.models.MLP` with one hidden layer and no BatchNorm: its first layer is split as the bag is,
its integer labels are label sets of one):

* shard ``p`` holds columns ``p`` of the embedding bag (``W1 [F, H/P]``, ``b1 [H/P]``) and the rows of its label
  block (``W2 [H, C/P]``, ``b2 [C/P]``): every leaf is cut along its last axis, ``(F + C) * H / P`` weights a shard;
* forward: each shard computes its hidden units ``h_p [B, H/P]``; an all-gather gives every shard ``h [B, H]``; the
  shard's logits are local, ``[B, C/P]`` on its label block (the whole logits never exist);
* the loss is Megatron's vocabulary-parallel cross-entropy: a max and a sum of exponentials over the label shards
  (``[B]`` each) and each point's true-label logits from the shards that own them (`sharded_multilabel_loss`);
* backward: the gradient w.r.t. ``h`` is summed over shards and each keeps its columns (a reduce-scatter, done as an
  all-to-all plus a local sum), the adjoint of the all-gather (`differentiable`).

Per step a shard moves ``2 * B * H`` activations (``B * H / P`` out and ``B * H`` in forward, ``B * H`` each way
backward) plus ``3 * B`` loss scalars, whatever the model's size (`step_bytes`). Every shard trains on the same
examples: a round's `[W, K, B, ...]` batches, all W rows in each of the K steps (so ``W * B`` examples a step, as
data parallel with W workers, to which it is equal). The optimizer (any elementwise optax transformation: SGD,
Adam, ...) updates each shard's slice, which is exact.

The shard's step is written once against `Collectives`; the MPI runtime supplies mpi4jax ones
(`istjax.runtimes.mpi`), `lax_collectives` the named-axis ones of a ``vmap`` over shards (the single-process
oracle of the tests).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import optax

from istjax.algorithms.base import Algorithm, apply_update, bind, init_state
from istjax.core import precision, tiled_init
from istjax.core.collectives import Collectives, lax_collectives
from istjax.core.comm import CommBytes
from istjax.core.errors import ArgError
from istjax.core.state import WORKERS, RoundPlan, TrainState, WorkerState, round_keys
from istjax.core.task import Task
from istjax.models.embedding_bag import bag
from istjax.xmc import loss as xmc_loss

__all__ = ["Collectives", "TensorPieces", "cut", "differentiable", "from_owner_rows", "join", "lax_collectives",
           "owner_evaluate", "shard_logits", "sharded_multilabel_loss", "sharded_scores", "step_bytes",
           "tensor_parallel", "tensor_parallel_pieces"]

PyTree = Any
# The first layer of a one-hidden-layer network, by its parameters' name: SparseMLP's embedding bag on (id, value)
# pairs, or MLP's dense layer on flattened inputs. The output layer is "dense_out" in both.
FIRST_LAYERS = {"bag": bag, "dense_0": lambda x, kernel: x.reshape(x.shape[0], -1) @ kernel}
OUT = "dense_out"


class Differentiable(NamedTuple):
    """The collectives as a shard's loss uses them, with the adjoints of "every shard computes the same loss".

    Attributes:
      gather_columns: ``[B, h] -> [B, P * h]`` (all-gather); its gradient is summed over shards, each keeping its
        own columns (a reduce-scatter: all-to-all and a local sum).
      replicated_sum: ``x -> sum over shards``; the result feeds a computation every shard repeats, so its cotangent
        is already the same everywhere and passes back unchanged (a plain ``psum``'s adjoint would multiply it by P).
      max: ``x -> max over shards``, without gradient (the log-sum-exp's shift).
    """

    gather_columns: Callable
    replicated_sum: Callable
    max: Callable


def differentiable(c: Collectives) -> Differentiable:
    """The gradients of `Collectives` a shard's loss needs (`Differentiable`), as `jax.custom_vjp`."""

    @jax.custom_vjp
    def gather_columns(h_Bxh):
        return _join_columns(c.all_gather(h_Bxh))

    def gather_bwd(_, ct_BxH):
        b, width = ct_BxH.shape
        parts_PxBxh = jnp.transpose(ct_BxH.reshape(b, c.size, width // c.size), (1, 0, 2))
        return (jnp.sum(c.all_to_all(parts_PxBxh), axis=0),)

    gather_columns.defvjp(lambda h: (gather_columns(h), None), gather_bwd)

    @jax.custom_vjp
    def replicated_sum(x):
        return c.all_sum(x)

    replicated_sum.defvjp(lambda x: (c.all_sum(x), None), lambda _, ct: (ct,))
    return Differentiable(gather_columns, replicated_sum, lambda x: c.all_max(jax.lax.stop_gradient(x)))


def _join_columns(parts_PxBxh: jax.Array) -> jax.Array:
    """``[P, B, h] -> [B, P * h]``: shard p's columns at ``p * h .. (p + 1) * h - 1``."""
    p, b, h = parts_PxBxh.shape
    return jnp.transpose(parts_PxBxh, (1, 0, 2)).reshape(b, p * h)


# ----------------------------------------------------------------------------------------------------------------
# The forward pass and the loss of one shard.


def shard_logits(params: PyTree, x: jax.Array, d: Differentiable) -> jax.Array:
    """``[B, C / P]``: this shard's label block of the logits (module docstring); ``params`` its slice, whose first
    layer is one of `FIRST_LAYERS` (``x``: `[B, nnz, 2]` pairs for the bag, `[B, ...]` for a dense layer)."""
    (name,) = set(params) - {OUT}
    first, out = params[name], params[OUT]
    h = FIRST_LAYERS[name](x, first["kernel"]) + (first["bias"][None, :] if "bias" in first else 0.0)
    hidden_BxH = d.gather_columns(jax.nn.relu(h))
    return hidden_BxH @ out["kernel"] + (out["bias"][None, :] if "bias" in out else 0.0)


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


def _shard_evaluate(task: Task, classes: int, loss_name: Optional[str], num_shards: int) -> Callable:
    """``(c, params, model_state, batch, shared=None) -> (loss, aux)``: `istjax.core.task.Task.evaluate` of the whole
    network from shard ``c.index()`` of its parameters (every shard gets the same result); ``loss_name`` None:
    integer labels, a label set of one."""
    width, multi = classes // num_shards, loss_name is not None

    def evaluate(c: Collectives, params, model_state, batch, shared=None):
        del model_state, shared
        labels = batch["y"] if multi else batch["y"][:, None]
        logits = shard_logits(params, batch["x"], differentiable(c))
        value, aux = sharded_scores(logits, labels, c.index() * width, c, classes, loss_name or "softmax",
                                    getattr(task.module, "label_weights", None))
        return value, (aux if multi else {"accuracy": aux["accuracy"]})  # `istjax.core.task.scores`' keys

    return evaluate


def from_owner_rows(params: PyTree, c: Collectives) -> PyTree:
    """Shard ``c.index()`` of tensor parallel's split from the same rank's part of IST's sharded split
    (`istjax.core.shard.Layout`: owner p holds hidden units block p, i.e. the first layer's columns p, as here, and
    the output layer's rows p, ``[H / P, C]``, with its bias whole): the output layer's label block ``[H, C / P]``
    from one all-to-all (a rank sends ``(P - 1) / P`` of its rows, receives as many), its bias's block sliced."""
    out, p = params[OUT], c.size
    rows, classes = out["kernel"].shape
    width = classes // p
    blocks_Pxhxc = jnp.transpose(out["kernel"].reshape(rows, p, width), (1, 0, 2))  # block q goes to rank q
    mine = {"kernel": c.all_to_all(blocks_Pxhxc).reshape(p * rows, width)}  # owner q's rows at q * h .. (q+1) h - 1
    if "bias" in out:
        mine["bias"] = jax.lax.dynamic_slice_in_dim(out["bias"], c.index() * width, width)
    return {**params, OUT: mine}


def owner_evaluate(task: Task, num_owners: int) -> Optional[Callable]:
    """``(c, params, model_state, batch, shared=None) -> (loss, aux)``: the evaluation of a `istjax.models.SparseMLP`
    with one hidden layer held by ``num_owners`` IST owners (every hidden unit in shards), by label blocks: its
    parameters moved into tensor parallel's split (`from_owner_rows`, in every call: once per evaluated chunk;
    fewer floats than the chunk's ``[B, C]`` logits whenever ``B > H / P``), then the hidden units
    all-gathered (``[B, H]``) and each rank's top k merged, as tensor parallel evaluates (`sharded_scores`): no
    ``[B, C]`` logits cross the link, where reducing every owner's partial logits moves ``B x C`` floats a batch.
    None for any other model, or labels that ``num_owners`` does not divide."""
    abstract = jax.eval_shape(task.init, jax.random.key(0))
    if "bag" not in abstract:
        return None
    try:
        _, classes, loss_name = _check(task, abstract, num_owners, 1, 1)
    except ArgError:
        return None
    evaluate = _shard_evaluate(task, classes, loss_name, num_owners)

    def by_labels(c: Collectives, params, model_state, batch, shared=None):
        return evaluate(c, from_owner_rows(params, c), model_state, batch, shared)

    return by_labels


# ----------------------------------------------------------------------------------------------------------------
# Cutting and joining trees: every leaf of a shard is a block of the last axis.


def cut(tree: PyTree, index, num_shards: int) -> PyTree:
    """Shard ``index``'s part of ``tree`` (parameters, an elementwise optimizer's state): block ``index`` of every
    leaf's last axis; scalars (a step count) whole. Inside `istjax.core.tiled_init.deferred`, a leaf drawn by a
    `istjax.core.tiled_init.Tiled` initialiser is redrawn as the block alone."""
    def one(x):
        if jnp.ndim(x) == 0:
            return x
        width = x.shape[-1] // num_shards
        return tiled_init.block(x, x.ndim - 1, index * width, width)

    return jax.tree.map(one, tree)


def join(shards_P: PyTree) -> PyTree:
    """The whole tree from every shard's part stacked on a leading `[P]` axis (`cut`'s inverse)."""
    def one(x):
        return x[0] if x.ndim == 1 else jnp.concatenate(list(x), axis=-1)

    return jax.tree.map(one, shards_P)


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
      step_bytes: ``examples -> CommBytes``: what a shard hands the collectives in one step (`step_bytes`).
    """

    num_shards: int
    init: Callable
    cut: Callable
    join: Callable
    train: Callable
    evaluate: Callable
    step_bytes: Callable[[int], CommBytes]


def step_bytes(examples: int, hidden: int, num_shards: int, itemsize: int = 4) -> CommBytes:
    """A shard's bytes in one step of ``examples`` points: the all-gather of the hidden units (``B * H / P`` sent,
    ``B * H`` received), its adjoint all-to-all (``B * H`` each way), the max (``B``) and the two sums (``2 B``)."""
    scalars = 3 * examples
    sent = examples * hidden // num_shards + examples * hidden + scalars
    received = 2 * examples * hidden + scalars
    return CommBytes(received * itemsize, sent * itemsize)


def _check(task: Task, params: PyTree, num_workers, local_steps, batch_size) -> tuple[int, int, str | None]:
    """``(H, C, loss)`` of a model tensor parallel can split (``loss`` None: single-label softmax cross-entropy);
    an `ArgError` naming the fix otherwise."""
    for name, value in (("num_workers", num_workers), ("local_steps", local_steps), ("batch_size", batch_size)):
        if not isinstance(value, int) or value < 1:
            raise ArgError(name, value, f"{name}={value!r}: need a positive integer.", "")
    module = task.module
    loss = getattr(module, "loss", None)
    first = set(params) - {OUT}
    batch_norm = getattr(module, "batch_norm", False) or getattr(module, "output_batch_norm", False)
    if (OUT not in params or len(first) != 1 or not first <= set(FIRST_LAYERS) or batch_norm or task.has_state
            or ("bag" in first) != (loss in xmc_loss.LOSSES)):
        raise ArgError("task", type(module).__name__, f"tensor_parallel needs a one-hidden-layer SparseMLP (params "
                       f"{{'bag', 'dense_out'}}, a multi-label loss) or MLP without BatchNorm (params {{'dense_0', "
                       f"'dense_out'}}); got {type(module).__name__} with params {sorted(params)}"
                       f"{' and BatchNorm' if batch_norm else ''}.",
                       "Use istjax.models.SparseMLP(hidden=(H,), ...) or MLP(hidden=(H,), batch_norm=False, "
                       "output_batch_norm=False).", "Use --config.model.name=sparse_mlp with --config.model.hidden="
                       "'(H,)' (or model.name=mlp with model.batch_norm=False, model.output_batch_norm=False).")
    hidden, classes = params[OUT]["kernel"].shape
    for what, size in (("hidden units", hidden), ("labels", classes)):
        if size % num_workers:
            raise ArgError("num_workers", num_workers, f"tensor_parallel splits the {size} {what} into "
                           f"num_workers={num_workers} equal blocks, but {size} % {num_workers} != 0.",
                           f"Use num_workers dividing {size}.", f"Use --config.num_workers dividing {size}.")
    return hidden, classes, loss


def tensor_parallel(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
                    batch_size: int, exchange_dtype: str = "float32", backend: Union[str, Any] = "mpi",
                    **backend_options: Any) -> Algorithm:
    """Tensor parallelism over ``num_workers`` shards, one per MPI process (module docstring).

    Args:
      task: a `SparseMLP` with one hidden layer (`istjax.classifier`), or an `MLP` with one hidden layer and no
        BatchNorm (its first layer split by columns as the bag's); H and C divisible by ``num_workers``.
      optimizer: an elementwise optax transformation (SGD, Adam, ...), applied to each shard's slice.
      num_workers: P, the shards (``mpiexec -n P``).
      local_steps: K steps a round; each reads all W rows of the round's `[W, K, B, ...]` batches.
      batch_size: B, for the analytic bytes (``algorithm.comm``: ``K * step_bytes(W * B)``).
      exchange_dtype: ``"float32"`` only: the activations and their gradients cross in float32 (mpi4jax has no
        bfloat16 collective, and a sum of activations needs float32 arithmetic); bfloat16 is refused, as is a
        model computing in bfloat16 (a shard's forward pass is its own float32 code).
      backend: ``"mpi"`` (the only runtime that runs it).
    """
    _check_float32(task, exchange_dtype)
    if getattr(backend, "name", backend) != "mpi":
        raise ArgError("backend", backend, f"tensor_parallel splits every layer across processes and exchanges "
                       f"activations every step; it runs on the mpi runtime only, not {backend!r}.",
                       "Use backend='mpi' under mpiexec -n W.", "Use --config.runtime.name=mpi under mpiexec -n W.")
    algorithm = tensor_parallel_pieces(task, optimizer, num_workers=num_workers, local_steps=local_steps,
                                       batch_size=batch_size)
    return bind(algorithm, backend, **backend_options)


def _check_float32(task: Task, exchange_dtype: Any) -> None:
    """Tensor parallel runs in float32 (`tensor_parallel`): a bfloat16 exchange or compute dtype is refused."""
    if precision.check_dtype(exchange_dtype, "exchange_dtype") != precision.FLOAT32:
        raise ArgError("exchange_dtype", exchange_dtype,
                       f"tensor_parallel(exchange_dtype={exchange_dtype!r}): its activations and their gradients are "
                       f"all-gathered and summed inside every step in float32 (mpi4jax has no bfloat16 collective);",
                       "use exchange_dtype='float32'.", "Use --config.exchange_dtype=float32.")
    dtype = getattr(task.module, "dtype", precision.FLOAT32)
    if dtype != precision.FLOAT32:
        raise ArgError("compute_dtype", dtype,
                       f"tensor_parallel with a model computing in {dtype}: a shard's forward pass is its own float32 "
                       f"code (shard_logits), which does not read the model's dtype;",
                       "build the model with compute_dtype='float32'.", "Use --config.compute_dtype=float32.")


def tensor_parallel_pieces(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int,
                           local_steps: int, batch_size: int) -> Algorithm:
    """`tensor_parallel` before it is bound to a runtime: ``init`` the whole state, ``distribute`` / ``collect``
    cut it into shards and join them, ``local`` one shard's round under a ``vmap`` over shards (the single-process
    oracle) and ``tensor`` the pieces the MPI runtime runs."""
    abstract = jax.eval_shape(task.init, jax.random.key(0))
    hidden, classes, loss_name = _check(task, abstract, num_workers, local_steps, batch_size)
    p, width = num_workers, classes // num_workers
    multi = loss_name is not None  # else integer labels [B]: a label set of one, softmax cross-entropy

    def label_sets(y):
        return y if multi else y[:, None]

    def shard_loss(d, index, params, batch):
        logits = shard_logits(params, batch["x"], d)
        return sharded_multilabel_loss(logits, label_sets(batch["y"]), index * width, d, classes,
                                       loss_name or "softmax")

    def train(c: Collectives, state: TrainState, batches: PyTree):
        d = differentiable(c)
        grad = jax.value_and_grad(lambda params, batch: shard_loss(d, c.index(), params, batch))

        def step(carry: WorkerState, batch):
            value, grads = grad(carry.params, batch)
            return apply_update(optimizer, grads, carry), {"loss": value}

        start = WorkerState(state.params, state.model_state, state.opt_state)
        last, metrics_K = jax.lax.scan(step, start, _round_batch(batches))
        return TrainState(last.params, last.model_state, last.opt_state, round_keys(state.key)[0],
                          state.round + 1), metrics_K

    evaluate = _shard_evaluate(task, classes, loss_name, p)

    def cut_state(state: TrainState, index) -> TrainState:
        return state._replace(params=cut(state.params, index, p), opt_state=cut(state.opt_state, index, p))

    def join_state(stacked: TrainState) -> TrainState:
        return stacked._replace(params=join(stacked.params), opt_state=join(stacked.opt_state))

    def init_shard(key, index) -> TrainState:  # = cut_state(init_state(task, optimizer, True)(key), index)
        key, init_key = jax.random.split(key)
        with tiled_init.deferred():  # a tiled leaf's block drawn alone: the whole model is never made
            params = cut(task.init(init_key), index, p)
        return TrainState(params, task.init_state(init_key), optimizer.init(params), key, jnp.zeros((), jnp.int32))

    per_step = step_bytes(num_workers * batch_size, hidden, p)
    pieces = TensorPieces(p, init_shard, cut_state, join_state, train, evaluate, lambda n: step_bytes(n, hidden, p))

    def distribute(state):  # every shard's part, stacked [P]: the oracle's and the whole-state view
        shards = jax.vmap(lambda i: cut_state(state, i))(jnp.arange(p))
        return WorkerState(shards.params, shards.model_state, shards.opt_state), RoundPlan(round_keys(state.key)[0],
                                                                                           None)

    def local(worker, batches, shared=None, axis_name=WORKERS, reduce=None):
        """One shard's round under a vmap over shards named ``axis_name`` (or ``reduce``'s `Collectives`)."""
        del shared
        c = reduce if isinstance(reduce, Collectives) else lax_collectives(p, axis_name)
        state = TrainState(worker.params, worker.model_state, worker.opt_state, jax.random.key(0), jnp.int32(0))
        out, metrics = train(c, state, batches)
        return WorkerState(out.params, out.model_state, out.opt_state), metrics

    def collect(state, workers, plan, batches=None, shared=None):
        whole = join_state(TrainState(workers.params, workers.model_state, workers.opt_state, state.key, state.round))
        return TrainState(whole.params, state.model_state, whole.opt_state, plan.key, state.round + 1)

    comm = CommBytes(per_step.received * local_steps, per_step.sent * local_steps)
    return Algorithm(init=init_state(task, optimizer, True), round=None, distribute=distribute, local=local,
                     collect=collect, name="tensor_parallel", num_workers=num_workers, local_steps=local_steps,
                     comm=comm, task=task, optimizer=optimizer, exchange="activations", carries_optimizer_state=True,
                     tensor=pieces)
