"""A `Task` tells an algorithm how to initialise a network, its training loss and how to evaluate it.

Algorithms never see a Flax module. They see:

* ``init(key) -> params`` and ``init_state(key) -> model_state`` (Flax collections other than ``params``, such as
  BatchNorm's ``batch_stats``; ``{}`` for a model without any), with a `SubnetSpec` for each;
* ``train_loss(units)``: the training-mode loss of the network narrowed to ``units`` slots per neuron group
  (``units=None``: the full network), ``(params, model_state, batch, shared) -> (loss, (aux, model_state))``; the
  returned model state is the updated one (running statistics after this batch); a batch with example weights
  (``batch["weight"]`` `[B]`, `istjax.core.weights`) scores the weighted mean over its examples (`scored`);
* ``evaluate(params, model_state, batch, shared) -> (loss, aux)``: the full network at test time (``train=False``:
  running statistics, and any test-time transform the model declares, such as ResIST's residual scaling);
* optionally ``recompute_state(params, model_state, batches_NxB, shared) -> model_state``: statistics recomputed
  on the merged model from ``N`` batches (the ``model_state="recompute"`` policy, HeteroFL's static BatchNorm).

``shared`` is the round's shared input (a graph, an adjacency, a lookup table; None when there is none): every
worker reads the same one, passed once.

`classifier` builds a Task from an ordinary Flax module whose parameters carry logical axis names; `Task.from_loss`
wraps a plain ``loss_fn(units) -> (params, batch) -> (loss, aux)`` for stateless models (theory, regression).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from istjax.core import contract, model_checks
from istjax.core.errors import ArgError
from istjax.core.spec import SubnetSpec, spec_for_state, spec_from_logical
from istjax.core.weights import example_weights, weighted_mean

__all__ = ["Task", "OwnerPass", "check_evaluation", "classifier", "example_and_classes", "is_dataset", "scored",
           "stateless",
           "EMPTY_SPEC",
           "MIN_BATCH_STATISTICS_EVAL", "MIN_BATCH_STATISTICS_SPLIT"]

# The smallest evaluation batch for a model that normalises with batch statistics at test time. Measured on the IST
# MLP (512 hidden, W=4, 60 rounds): test accuracy by evaluation batch size on digits (360 test examples)
# 1: 0.100, 7: 0.767, 32: 0.942, 128: 0.978, 256: 0.972, 360 (whole set): 0.972; on MNIST-1D (1000) 1: 0.102,
# 7: 0.369, 32: 0.515, 128: 0.542, 256: 0.546, 1000: 0.550. From 256 on the result is the whole set's within 0.004.
MIN_BATCH_STATISTICS_EVAL = 256
# The smallest batch such a model's ``evaluate`` accepts at all: a split of your own smaller than
# `MIN_BATCH_STATISTICS_EVAL` (a table's 142 test examples) is evaluated as one batch, and a warning says the score
# depends on it (digits above: 32 examples score 0.942 against the whole set's 0.972); below this it is refused.
MIN_BATCH_STATISTICS_SPLIT = 32

PyTree = Any
Batch = Mapping[str, jax.Array]
Units = Optional[Mapping[str, int]]
LossFn = Callable[[PyTree, Batch], tuple[jax.Array, dict[str, jax.Array]]]
TrainLoss = Callable[[PyTree, PyTree, Batch, Any], tuple[jax.Array, tuple[dict, PyTree]]]

EMPTY_SPEC = SubnetSpec({}, {})


def _no_state(key: jax.Array) -> dict:
    del key
    return {}


def stateless(loss: LossFn) -> TrainLoss:
    """A ``(params, batch) -> (loss, aux)`` function as a `TrainLoss` that passes the model state through."""

    def train_loss(params, model_state, batch, shared=None):
        del shared
        value, aux = loss(params, batch)
        return value, (aux, model_state)

    return train_loss


class OwnerPass(NamedTuple):
    """A task's network run by ``num_owners`` processes that each hold slice ``owner`` of it
    (`istjax.core.shard.Layout`), exchanging activations only: ``reduce`` sums a partial result across them.

    Attributes:
      evaluate: ``(params, model_state, batch, shared=None, *, owner, num_owners, reduce) -> (loss, aux)``,
        `Task.evaluate` from this owner's slice of the parameters and model state (every owner gets the same
        result); None when the module gives no ``owner_logits``.
      recompute_state: ``(params, model_state, batches [N, B, ...], shared=None, *, owner, num_owners, reduce) ->
        model_state``, `Task.recompute_state` from this owner's slice, returning that owner's slice; None when the
        module gives no ``owner_statistics``.
      whole: the neuron groups whose leaves ``evaluate`` takes whole on every owner (the module's
        ``owner_whole_groups()``); every other group must be held in shards.
    """

    evaluate: Optional[Callable[..., tuple[jax.Array, dict]]] = None
    recompute_state: Optional[Callable[..., PyTree]] = None
    whole: frozenset = frozenset()


@dataclasses.dataclass(frozen=True)
class Task:
    """What an algorithm needs to know about a network (see the module docstring).

    Attributes:
      init: ``key -> params``, the full-width parameters (plain arrays).
      train_loss: ``units -> (params, model_state, batch, shared) -> (loss, (aux, model_state))``; ``units`` maps
        each neuron group to the slots a worker holds (None: full width); ``aux`` holds scalar metrics.
      evaluate: ``(params, model_state, batch, shared) -> (loss, aux)`` of the full network at test time.
      spec: the parameters' `SubnetSpec`.
      init_state: ``key -> model_state`` (default: no state, ``{}``).
      state_spec: the model state's `SubnetSpec` (same neuron groups as ``spec``).
      recompute_state: optional ``(params, model_state, batches [N, B, ...], shared) -> model_state``.
      module, example_x, num_classes: what `classifier` built the task from (families such as `istjax.resist`
        rebuild it).
      min_eval_batch: the smallest batch to evaluate in: `MIN_BATCH_STATISTICS_EVAL` for a model that
        normalises with the statistics of the batch it is given at test time (a smaller batch, let alone one
        example, gives another and worse model), else 1. Such a model's ``evaluate`` refuses batches under
        `MIN_BATCH_STATISTICS_SPLIT`; a whole split between the two is evaluated as one batch.
      owner: the network run from one owner's slice of it (`OwnerPass`, the MPI runtime's sharded mode), for a
        module with ``owner_logits`` or ``owner_statistics`` (`istjax.core.contract`); None otherwise.
      logits: ``(params, model_state, batch, shared=None, *, train) -> (logits, model_state)``, the full network's
        predictions (``train=True``: the training network, its updated model state; ``False``: the test-time one,
        the state as given), and ``score``: ``(logits, labels) -> (loss, aux)``, what ``train_loss(None)`` makes of
        them (`classifier` gives both; an algorithm that adds a term on the predictions, codistillation, reads
        them); None for a task built otherwise.
      summary_metrics: the metrics a run's summary prints, in order, as ``(record key, label)`` pairs: the
        module's ``summary_metrics()`` (`istjax.core.contract`; P@1, P@5, PSP@1, PSP@5 for `istjax.models.SparseMLP`),
        or ``()``: the classification default, test accuracy, test loss and train loss
        (`istjax.launch.metrics.METRIC_LABELS`). A key the evaluation did not record is left out.
    """

    init: Callable[[jax.Array], PyTree]
    train_loss: Callable[[Units], TrainLoss]
    evaluate: Callable[..., tuple[jax.Array, dict]]
    spec: SubnetSpec
    init_state: Callable[[jax.Array], PyTree] = _no_state
    state_spec: SubnetSpec = EMPTY_SPEC
    recompute_state: Optional[Callable[..., PyTree]] = None
    min_eval_batch: int = 1
    module: Any = None  # the Flax module `classifier` built the task from (None for hand-written tasks)
    example_x: Any = None  # its example input (shape and dtype), so a family can rebuild the task around the module
    num_classes: Optional[int] = None  # the data's classes `classifier` checked the module's output against
    owner: Optional[OwnerPass] = None
    no_groups_reason: str = ""  # why the spec has no neuron group, when it has none (for IST's refusal)
    eval_module: Any = None  # the Flax module `evaluate` runs (the test-time network: scaled branches, say)
    summary_metrics: tuple[tuple[str, str], ...] = ()
    logits: Optional[Callable[..., tuple[jax.Array, PyTree]]] = None
    score: Optional[Callable[..., tuple[jax.Array, dict]]] = None

    @classmethod
    def from_loss(cls, init: Callable[[jax.Array], PyTree], loss_fn: Callable[[Units], LossFn],
                  spec: SubnetSpec) -> "Task":
        """A stateless task from ``loss_fn(units) -> (params, batch) -> (loss, aux)``; it also evaluates."""
        full = loss_fn(None)
        return cls(init=init, train_loss=lambda units: stateless(loss_fn(units)),
                   evaluate=lambda params, model_state, batch, shared=None: full(params, batch), spec=spec)

    @property
    def has_state(self) -> bool:
        return bool(jax.tree.leaves(jax.eval_shape(self.init_state, jax.random.key(0))))

    def loss_fn(self, units: Units) -> LossFn:
        """``(params, batch) -> (loss, aux)``: the training loss of a model without state, for quick checks."""
        if self.has_state:
            raise TypeError("this task's model has state (e.g. BatchNorm statistics): call "
                            "task.train_loss(units)(params, model_state, batch, shared) instead of task.loss_fn.")
        train = self.train_loss(units)
        return lambda params, batch: _drop_state(train(params, {}, batch, None))


def _drop_state(out):
    loss, (aux, _) = out
    return loss, aux


def _takes(fn: Callable, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def scores(logits_NxC: jax.Array, labels_N: jax.Array) -> tuple[jax.Array, dict]:
    """``(mean softmax cross-entropy, {"accuracy": ...})`` of logits against integer labels, in float32 whatever
    the compute dtype (`istjax.core.precision`)."""
    logits_NxC = logits_NxC.astype(jnp.float32)
    loss = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits_NxC, labels_N))
    accuracy = jnp.mean((jnp.argmax(logits_NxC, axis=-1) == labels_N).astype(jnp.float32))
    return loss, {"accuracy": accuracy}


def scored(score: Callable, logits: Any, batch: Batch) -> tuple[jax.Array, dict]:
    """``score(logits, batch["y"])``; for a batch with example weights (``batch["weight"]`` `[B]`,
    `istjax.core.weights`), the weighted mean of each example's score and metrics instead: ``score`` vmapped over
    single examples (``score(logits[i:i+1], y[i:i+1])``; every score is a mean over examples, so weights of 1
    give the unweighted score to float rounding), then ``sum(w l) / sum(w)``, exactly 0 when the weights sum to
    0. Without weights the score itself runs, unchanged."""
    weight = example_weights(batch)
    if weight is None:
        return score(logits, batch["y"])

    def one(logits_i, y_i):  # one example, as a batch of one
        return score(*jax.tree.map(lambda a: a[None], (logits_i, y_i)))

    values, aux = jax.vmap(one)(logits, batch["y"])
    return weighted_mean(values, weight, 0), {k: weighted_mean(v, weight, 0) for k, v in aux.items()}


def _owner_pass(eval_model: nn.Module, fresh: Optional[nn.Module], score: Callable = scores) -> Optional[OwnerPass]:
    """The task's `OwnerPass` from the module's owner methods (`istjax.core.contract`), None when it has neither:
    test-time scores from ``owner_logits`` and statistics recomputed from ``owner_statistics`` of ``fresh`` (the
    module with momentum 0, None when its statistics cannot be recomputed)."""
    owner_logits = contract.owner_logits(eval_model)
    statistics = None if fresh is None else contract.owner_statistics(fresh)
    if owner_logits is None and statistics is None:
        return None

    def evaluate(params, model_state, batch, shared=None, *, owner, num_owners, reduce):
        logits = owner_logits({"params": params, **model_state}, batch["x"], shared, owner=owner,
                              num_owners=num_owners, reduce=reduce)
        return scored(score, logits, batch)

    def recompute_state(params, model_state, batches_NxB, shared=None, *, owner, num_owners, reduce):
        xs = jax.tree.leaves(batches_NxB["x"])
        per_batch = [statistics({"params": params, **model_state}, batches_NxB["x"][i], shared, owner=owner,
                                num_owners=num_owners, reduce=reduce) for i in range(xs[0].shape[0])]
        return jax.tree.map(lambda *s: jnp.mean(jnp.stack(s), axis=0), *per_batch)

    return OwnerPass(evaluate if owner_logits is not None else None,
                     recompute_state if statistics is not None else None,
                     frozenset(contract.owner_whole_groups(eval_model)))


def _forward(module: nn.Module, call: Callable, collections: tuple[str, ...]) -> Callable:
    """``(params, model_state, batch, shared) -> (logits, model_state)``: ``module``'s training forward pass, its
    collections updated (a batch's step key, ``batch["rng"]``, drives its dropout)."""

    def forward(params, model_state, batch, shared=None):
        rngs = {"dropout": batch["rng"]} if "rng" in batch else None  # a step key (istjax.data.with_step_keys)
        if not collections:
            return call(module, {"params": params}, batch["x"], shared, True, rngs=rngs), model_state
        logits, updated = call(module, {"params": params, **model_state}, batch["x"], shared, True,
                               mutable=list(collections), rngs=rngs)
        return logits, {c: updated[c] for c in collections}

    return forward


def _train_loss(model: nn.Module, call: Callable, collections: tuple[str, ...], score: Callable = scores) -> Callable:
    """The task's ``train_loss(units)``: the loss of the sub-network at ``units`` (the full network for None)."""

    def train_loss(units):
        if units is None:
            module = model
        else:
            contract.require_subnet(model)
            module = model.subnet(units)
        forward = _forward(module, call, collections)

        def loss(params, model_state, batch, shared=None):
            logits, model_state = forward(params, model_state, batch, shared)
            value, aux = scored(score, logits, batch)
            return value, (aux, model_state)

        return loss

    return train_loss


def _evaluator(call: Callable, eval_model: nn.Module, min_eval_batch: int, score: Callable = scores) -> Callable:
    """The task's ``evaluate``: test-time scores, refusing a batch too small for batch-statistics normalisation
    (below `MIN_BATCH_STATISTICS_SPLIT` examples for a model that normalises with them)."""
    smallest = min(min_eval_batch, MIN_BATCH_STATISTICS_SPLIT)

    def evaluate(params, model_state, batch, shared=None):
        size = jax.tree.leaves(batch["x"])[0].shape[0]
        if size < smallest:  # static: refused before anything is traced further
            raise ArgError(
                "batch", size,
                f"evaluate: a batch of {size} example(s); {type(eval_model).__name__} normalises with the statistics "
                f"of the batch it is given at test time, so predictions depend on the batch (one example: chance).",
                f"Evaluate batches of at least {min_eval_batch} examples (istjax.core.task.MIN_BATCH_STATISTICS_EVAL; "
                f"{smallest} at the very least), or build the model without test-time batch statistics"
                f"{_fields_text(eval_model)}.")
        logits = call(eval_model, {"params": params, **model_state}, batch["x"], shared, False)
        return scored(score, logits, batch)

    return evaluate


def _fields_text(model: nn.Module) -> str:
    """`` (MLP(..., batch_norm=False))``: the model's own fix (`contract.batch_statistics_fix`), or ``""``."""
    fix = contract.batch_statistics_fix(model)
    return f" ({type(model).__name__}(..., {', '.join(f'{k}={v!r}' for k, v in fix.items())}))" if fix else ""


def _recomputer(call: Callable, fresh: nn.Module, collections: tuple[str, ...]) -> Callable:
    """The task's ``recompute_state``: the mean over batches of each batch's statistics, from ``fresh`` (the model
    with momentum 0, whose "running" statistics after one training pass are that batch's)."""

    def recompute_state(params, model_state, batches_NxB, shared=None):
        def one(x):
            _, updated = call(fresh, {"params": params, **model_state}, x, shared, True, mutable=list(collections))
            return {c: updated[c] for c in collections}

        return jax.tree.map(lambda s: jnp.mean(s, axis=0), jax.vmap(one)(batches_NxB["x"]))

    return recompute_state


def _traced_forward(model: nn.Module, example_x: Any, init_with_output: Callable,
                    num_classes: Optional[int]) -> dict:
    """The module's abstract variables, after its forward pass on ``example_x`` traced and its output checked
    (`istjax.core.model_checks`)."""
    try:
        closed, (out, abstract) = jax.make_jaxpr(lambda k: init_with_output(model, k), return_shape=True)(
            jax.random.key(0))
    except model_checks.ModelCheckError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's module: report it in their terms, not a 40-line trace
        raise model_checks.forward_failed(model, example_x, e) from None
    model_checks.check_output(model, out, example_x, num_classes)
    model_checks.warn_if_normalised(model, closed)
    return abstract


def is_dataset(example: Any) -> bool:
    """Whether ``example`` is a data set (`istjax.data.Dataset`, by what it has: istjax.core does not import
    istjax.data) rather than an example input."""
    return all(hasattr(example, a) for a in ("train_x", "train_y", "num_classes"))


def example_and_classes(example: Any, num_classes: Optional[int], example_shared: Any = None, *,
                        call: str = "istjax.classifier(model, data, ...)") -> tuple[Any, int, Any]:
    """``(example_x, num_classes, example_shared)`` from a data set (its first two training examples, its classes,
    its shared input unless ``example_shared`` is given) or from an example input and ``num_classes``; a TypeError
    naming the fix, before anything is traced, when ``num_classes`` is missing."""
    if is_dataset(example):
        classes = int(example.num_classes)
        if num_classes is not None and int(num_classes) != classes:
            raise ArgError("num_classes", num_classes,
                           f"{call}: num_classes={num_classes} but the data set has {classes} classes;",
                           "leave num_classes out (it is read from the data).")
        shared = getattr(example, "shared", None) if example_shared is None else example_shared
        return jnp.asarray(example.train_x[:2]), classes, shared
    if num_classes is None:
        shapes = jax.tree.map(lambda v: tuple(jnp.shape(v)), example)
        raise TypeError(
            f"{call.split('(')[0]}: an example input (shape {shapes}) needs num_classes=, the data's number of "
            f"classes, so the model's output width is checked against it before training (5 logits for 10 classes "
            f"trains to a NaN loss). Pass the data set itself, {call}, or num_classes=data.num_classes.")
    return example, int(num_classes), example_shared


def classifier(model: nn.Module, example: Any, rules: Optional[Mapping[str, Any]] = None, *,
               num_classes: Optional[int] = None, example_shared: Any = None,
               eval_model: Optional[nn.Module] = None) -> Task:
    """A classification Task (softmax cross-entropy on integer labels, or the module's own ``scores``: a
    multi-label loss for `istjax.models.SparseMLP`) for a Flax module.

    The module is called as ``model.apply(variables, x[, shared], train=...)``: ``train`` is passed when its
    ``__call__`` takes it, and ``shared`` (the round's shared input) as the second argument when one is given.
    Collections other than ``params`` are the model state: updated in training (``mutable``), read at test time.

    Args:
      model: a Flax module providing the model contract (`istjax.core.contract.Partitionable`: partition rules and,
        for IST, ``subnet(units) -> module``, the module at a worker's widths); checked here, before tracing.
      example: the data set (an `istjax.data.Dataset`: its first two training examples are the example input,
        its ``num_classes`` and its ``shared`` input are used), or an example input batch `[B, ...]` (only its
        shape and dtype matter; ``num_classes`` is then required).
      rules: logical axis name -> neuron group, see `istjax.spec_from_logical` (default: ``model.partition_rules()``).
      num_classes: the data's classes: the model's output width is checked against it. Required with an example
        input; read from a data set.
      example_shared: an example of the shared input, when the model reads one (default: the data set's).
      eval_model: the module evaluated at test time (default: ``model.eval_module()`` when the module defines it,
        else the module itself), e.g. a ResNet whose partitioned residual branches are scaled.

    The module is traced here (shapes only, `istjax.core.model_checks`): its forward pass on ``example_x``, its
    output (``[N, num_classes]`` logits; a softmax at the end is warned about) and one sub-network; a failure raises
    `istjax.core.model_checks.ModelCheckError` in the module's terms, before anything is compiled.
    """
    example_x, num_classes, example_shared = example_and_classes(example, num_classes, example_shared)
    rules = contract.check_module(model, rules)
    takes_train = _takes(type(model).__call__, "train")
    if eval_model is None:
        eval_model = contract.eval_module(model)

    def call(module, variables, batch_x, shared, train, mutable=False, rngs=None):
        args = (batch_x,) if shared is None else (batch_x, shared)
        kwargs = {"train": train} if takes_train else {}
        return module.apply(variables, *args, mutable=mutable, rngs=rngs, **kwargs)

    def init_with_output(module, key):
        return module.init_with_output(key, example_x, *(() if example_shared is None else (example_shared,)),
                                       **({"train": False} if takes_train else {}))

    def variables(key):
        return init_with_output(model, key)[1]

    abstract = _traced_forward(model, example_x, init_with_output, num_classes)
    collections = tuple(sorted(c for c in abstract if c != "params"))
    spec = spec_from_logical(abstract["params"], rules)
    if contract.has_subnet(model):
        model_checks.check_subnet(model, lambda m: jax.eval_shape(lambda k: init_with_output(m, k), jax.random.key(0)), spec,
                                  nn.unbox(abstract["params"]))
    state_spec = spec_for_state({c: abstract[c] for c in collections}, spec, rules) if collections else EMPTY_SPEC

    def init(key):
        return nn.unbox(variables(key)["params"])

    def init_state(key):
        v = variables(key)
        return {c: nn.unbox(v[c]) for c in collections}

    score = contract.scores(model) or scores  # the module's own loss and metrics, if it declares them
    train_loss = _train_loss(model, call, collections, score)

    def logits(params, model_state, batch, shared=None, *, train):
        if not train:
            return call(eval_model, {"params": params, **model_state}, batch["x"], shared, False), model_state
        return _forward(model, call, collections)(params, model_state, batch, shared)

    min_eval_batch = MIN_BATCH_STATISTICS_EVAL if contract.batch_statistics_at_test(eval_model) else 1
    evaluate = _evaluator(call, eval_model, min_eval_batch, score)
    fresh = model.clone(bn_momentum=0.0) if collections and contract.recomputable(model) else None
    recompute_state = None if fresh is None else _recomputer(call, fresh, collections)
    return Task(init=init, train_loss=train_loss, evaluate=evaluate, spec=spec, init_state=init_state,
                state_spec=state_spec, recompute_state=recompute_state, min_eval_batch=min_eval_batch, module=model,
                eval_module=eval_model, summary_metrics=contract.summary_metrics(model), logits=logits, score=score,
                example_x=example_x, num_classes=num_classes, owner=_owner_pass(eval_model, fresh, score),
                no_groups_reason="" if spec.group_sizes else model_checks.no_groups_reason(model, abstract["params"],
                                                                                            rules))


def scaled_for_test(task: Task, slots: Mapping[str, int]) -> Task:
    """``task`` with the test-time network its module asks for given the slots a worker holds of each neuron group
    (``scaled_for_test({group: slots / size})``, `istjax.core.contract.scaled_for_test`); ``task`` itself for a module
    that does not scale (the module returns itself, or has no such method)."""
    method = contract.scaled_for_test(task.module) if task.module is not None else None
    if method is None:
        return task
    eval_model = method({g: slots[g] / n for g, n in task.spec.group_sizes.items()})
    if eval_model is task.module:
        return task
    return classifier(task.module, task.example_x, num_classes=task.num_classes, eval_model=eval_model)


def check_evaluation(task: Task, split_sizes: Mapping[str, int], *, batch_size: int, train_examples: int = 0) -> None:
    """Refuses an evaluation whose batches score another model than the one trained, before anything is compiled.

    A task that normalises with the statistics of the batch it is given at test time (`Task.min_eval_batch` > 1)
    needs chunks of at least ``task.min_eval_batch`` examples (``batch_size``), a training-set prefix that large
    (``train_examples``, 0: the whole set), and splits (``split_sizes``: ``{"train": n, "test": n}``) of at least
    `MIN_BATCH_STATISTICS_SPLIT` examples. Raises `istjax.ArgError` naming the argument and the fix.
    """
    least, name = task.min_eval_batch, type(task.module).__name__ if task.module is not None else "the model"
    if int(batch_size) < least:
        raise ArgError("batch_size", batch_size,
                       f"model {name} normalises with the statistics of the evaluation batch at test time, so a small "
                       f"batch evaluates another, worse model (measured on digits: batch 7 -> accuracy 0.77, 256 and "
                       f"up -> 0.97).", f"Use at least {least} (istjax.core.task.MIN_BATCH_STATISTICS_EVAL).")
    if 0 < int(train_examples) < least:
        raise ArgError("train_examples", train_examples,
                       f"model {name} normalises with batch statistics at test time; the training-set evaluation "
                       f"needs at least {least} examples", "(or 0: the whole training set).")
    smallest = min(split_sizes.values())
    if smallest < min(least, MIN_BATCH_STATISTICS_SPLIT):
        fix = contract.batch_statistics_fix(task.module) if task.module is not None else {}
        raise ArgError("dataset", smallest,
                       f"a split of {smallest} examples; model {name} normalises with the statistics of the batch it "
                       f"is given at test time, and a batch under {MIN_BATCH_STATISTICS_SPLIT} examples scores another, "
                       f"worse model.",
                       ("Use more examples, or the model without test-time batch statistics" + (":" if fix else ""),
                        fix or "", "."))
