"""The model contract: what a Flax module provides so that IST can split it, written down and checked once.

A module trained by istjax is an ordinary ``flax.linen.Module`` whose parameters carry logical axis names
(``nn.with_logical_partitioning``) and which returns ``[N, num_classes]`` logits. `Partitionable` lists what it must
add; `OPTIONAL` lists what it may add. `check_module` checks both when a task is built (`istjax.classifier`), before
anything is traced, and names what is missing or malformed; the rest of the library reads the optional parts only
through the functions here (`eval_module`, `tied_axes`, `batch_statistics_at_test`, ...), never with ``getattr``.

Required (`Partitionable`):

``partition_rules() -> {logical axis name: neuron group or None}``
    which logical axes are split among workers (a group name) and which every worker holds whole (None).
``subnet(units: {group: slots}) -> Module``
    the same module at a worker's widths (``units[g]`` slots of group ``g``); IST and ResIST call it, the
    replicated baselines never do.

Optional (`OPTIONAL`):

``tied_axes() -> ((name, name, ...), ...)``
    the logical axis names a residual addition joins (their channels are added together, so the rules must map
    them to one group, or all to None).
``eval_module() -> Module``
    the module evaluated at test time when it differs (ResIST's scaled residual branches).
``test_batch_statistics() -> bool``
    True when the module normalises with the statistics of the batch it is given at test time (evaluation then
    needs batches of at least `istjax.core.task.MIN_BATCH_STATISTICS_EVAL`).
``without_batch_statistics() -> {field: value}``
    the field values that make such a module evaluate without batch statistics (named in the refusal of a split
    too small to evaluate).
``bn_momentum`` (a field)
    present on modules whose BatchNorm running statistics can be recomputed (``model_state="recompute"``).
``dropout`` (a field)
    a dropout rate; above 0, every step receives its own key (``batch["rng"]``).
``block_groups()``, ``first_block_groups()``
    a depth-split ResNet's residual-block groups (ResIST; `istjax.models.DepthResNet`).
``owner_logits(variables, x, shared=None, *, owner, num_owners, reduce) -> logits``
    the full network's test-time logits computed by ``num_owners`` processes that each hold slice ``owner`` of every
    neuron group (`istjax.core.shard.Layout`, every group owned), exchanging only activations: ``reduce`` sums a
    partial result across them (a partitioned sum's partial sums). The MPI runtime's sharded mode then evaluates
    without gathering the model (``shared`` is the round's shared input, a graph model's graph). Every model istjax
    ships provides it: `istjax.models.MLP`, `GCN`, `GraphSAGE`, `CNN`, `ResNet`, `PreActResNet` and `VGG` through
    `istjax.models.owner_forward` (their own ``__call__``, each dense and conv layer's partial sums over input units
    reduced), `DepthResNet` by running each owner's residual blocks in turn.
``tensor_axes() -> frozenset of logical axis names``, ``tensor_logits(variables, x, shared=None, *, ops) -> logits``
    tensor parallelism's split (`istjax.tensor_parallel`): every parameter axis named in ``tensor_axes`` is cut
    into P equal blocks, shard ``p`` holding block ``p`` of the last such axis of each leaf (the others whole), and
    ``tensor_logits`` is the forward pass of shard ``ops.index()`` on its blocks, exchanging activations through
    ``ops`` (`istjax.core.collectives.Differentiable`): the whole network's logits on every shard, or, when
    ``"classes"`` is among the axes, the shard's block of them. `istjax.models.MLP` and `SparseMLP` give Megatron's
    layout through `istjax.models.tensor_forward` (their own ``__call__``, each dense layer cut by columns or rows),
    `istjax.models.Transformer` its heads and feed-forward units.
``owner_statistics(variables, x, shared=None, *, owner, num_owners, reduce) -> {collection: tree}``
    this owner's slice of the statistics a training-mode pass over ``x`` leaves (``batch_stats``), computed like
    ``owner_logits``; with it, the sharded mode recomputes statistics (``model_state="recompute"``) in place
    (the channel-partitioned image models provide it).
``scores(logits, y) -> (loss, {metric: value})``
    the training loss and the test metrics of the module's output against a batch's labels (a scalar each), in
    place of softmax cross-entropy on integer labels and ``accuracy``; ``accuracy`` must be among the metrics (the
    number training records and targets read). `istjax.models.SparseMLP`: a multi-label loss, ``accuracy`` = P@1.
    A metric that is a ratio of sums over the whole split (PSP@k) is returned as its two parts' batch means,
    ``<name>_numerator`` and ``<name>_denominator``; an evaluation reports ``<name>``, the ratio of their means
    over its batches (`ratios`).
``owner_whole_groups() -> (group, ...)``
    the neuron groups ``owner_logits`` accepts held whole by every owner rather than sharded (ResIST's dealt first
    blocks); without it, every group must be held in shards for the sharded mode to evaluate in place.
``summary_metrics() -> ((key, label), ...)``
    what a run's summary prints, in order, in place of test accuracy, test loss and train loss
    (`istjax.launch.metrics.METRIC_LABELS`): ``key`` names a metric of the evaluation record (``test_<metric>``
    or ``train_<metric>`` of ``scores``' metrics, ``test_loss``, ``train_loss``), ``label`` what the summary calls
    it. `istjax.models.SparseMLP`: P@1, P@5, PSP@1, PSP@5.
``group_size_fix(group, num_workers) -> fix or None``
    the fix for a neuron group the sampler cannot deal evenly among W workers, when the module's fields constrain
    what sizes the group may have (`istjax.models.Transformer`: a head count must divide its width), as data: the
    pieces of `istjax.core.errors.ArgError`'s fix, the module's fields by their names (``("Use", {"num_heads": 3},
    ...)``). None: any multiple of W will do, as the sampler says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional, Protocol, runtime_checkable

from istjax.core.errors import ArgError

__all__ = ["Partitionable", "OPTIONAL", "ContractError", "check_module", "require_subnet", "has_subnet", "eval_module", "tied_axes",
           "batch_statistics_at_test", "batch_statistics_fix", "recomputable", "dropout_rate", "block_groups", "first_block_groups",
           "owner_logits", "owner_statistics", "owner_whole_groups", "tensor_axes", "tensor_logits", "scores", "RATIO_PARTS", "ratios",
           "summary_metrics", "group_size_refusal"]


@runtime_checkable
class Partitionable(Protocol):
    """A Flax module IST can split (see the module docstring for the optional parts)."""

    def partition_rules(self) -> Mapping[str, Optional[str]]: ...

    def subnet(self, units: Mapping[str, int]) -> Any: ...


# name -> what it is, for messages and docs; every optional part is read through a function below.
OPTIONAL = {
    "tied_axes": "method: the logical axis names each residual addition joins",
    "eval_module": "method: the module evaluated at test time",
    "test_batch_statistics": "method: True when test time normalises with batch statistics",
    "without_batch_statistics": "method: the field values that make the module evaluate without batch statistics",
    "bn_momentum": "field: BatchNorm momentum (statistics can be recomputed)",
    "dropout": "field: dropout rate (a step key per step when > 0)",
    "block_groups": "method: ResIST's residual-block groups",
    "first_block_groups": "method: ResIST's one-block groups of a stage's first block",
    "owner_logits": "method: the test-time logits from every owner's slice, partial sums reduced (sharded eval)",
    "owner_statistics": "method: a training pass's statistics from every owner's slice (sharded recompute)",
    "owner_whole_groups": "method: the groups owner_logits accepts held whole instead of sharded",
    "tensor_axes": "method: the logical axes tensor parallelism cuts into a block per shard",
    "tensor_logits": "method: a tensor-parallel shard's forward pass on its blocks, activations exchanged",
    "scores": "method: (logits, labels) -> (loss, metrics with 'accuracy'), replacing softmax cross-entropy",
    "summary_metrics": "method: ((record key, label), ...) a run's summary prints, in place of accuracy and losses",
    "group_size_fix": "method: the fix (ArgError's pieces) for a group W workers cannot share, when fields "
                      "constrain its size",
}


class ContractError(TypeError):
    """A module that does not provide what the model contract asks, named with the fix."""


def _method(model, name: str):
    attr = getattr(type(model), name, None)
    return getattr(model, name) if callable(attr) else None


def check_module(model, rules: Optional[Mapping[str, Any]] = None) -> Mapping:
    """The partition rules of ``model`` (``rules`` when given), after checking the contract; raises
    `ContractError` naming the missing or malformed part and the fix. ``subnet`` is checked where it is needed
    (`require_subnet`, when a task builds a worker's network): the replicated baselines never call it."""
    import flax.linen as nn

    name = type(model).__name__
    if not isinstance(model, nn.Module):
        raise ContractError(f"classifier(model={model!r}): need a flax.linen Module instance.")
    if rules is None:
        if _method(model, "partition_rules") is None:
            raise ContractError(f"{name} has no partition_rules() method and no rules= were given. Pass rules="
                                f"{{logical axis name: neuron group or None}}, or give the module a "
                                f"partition_rules(self) method (see istjax.models.MLP and istjax.core.contract).")
        rules = model.partition_rules()
    if not isinstance(rules, Mapping) or not all(isinstance(k, str) for k in rules):
        raise ContractError(f"{name}.partition_rules() returned {rules!r}; it must return a dict mapping each "
                            f"logical axis name (str) to a neuron group name or None.")
    _check_tied(model, rules)
    if _method(model, "eval_module") is not None and not isinstance(model.eval_module(), nn.Module):
        raise ContractError(f"{name}.eval_module() returned {type(model.eval_module()).__name__}; it must return the "
                            f"flax Module evaluated at test time.")
    summary_metrics(model)
    return rules


def require_subnet(model) -> None:
    """A `ContractError` with the fix unless ``model`` has ``subnet(units)`` (IST and ResIST build workers with it)."""
    if _method(model, "subnet") is None:
        raise ContractError(f"{type(model).__name__} has no subnet(units) method, which IST needs to build a worker's "
                            f"narrower network: add `def subnet(self, units): return self.clone(<width fields from "
                            f"units>)` (see istjax.models.MLP.subnet).")


def has_subnet(model) -> bool:
    """Whether ``model`` has ``subnet(units)``."""
    return _method(model, "subnet") is not None


def _check_tied(model, rules: Mapping[str, Any]) -> None:
    """A residual addition joins tensors whose channels must be one neuron group."""
    name = type(model).__name__
    for names in tied_axes(model):
        if isinstance(names, str) or not all(isinstance(n, str) for n in names):
            raise ContractError(f"{name}.tied_axes() holds {names!r}; it must return a sequence of tuples of logical "
                                f"axis names, e.g. (('embed', 'stage0_out'),).")
        groups = {n: rules.get(n) for n in names}
        if len({None if g is None else str(g) for g in groups.values()}) > 1:
            raise ArgError("rules", groups, f"{name}: a residual connection adds the channels of logical axes "
                                            f"{tuple(names)}, but the rules map them to different neuron groups "
                                            f"{groups}; every worker would add mismatched channels.",
                           "Map them to one group (or all to None).")


def tied_axes(model) -> tuple:
    """The module's ``tied_axes()``, or ``()``."""
    method = _method(model, "tied_axes")
    return tuple(method()) if method is not None else ()


def eval_module(model):
    """The module evaluated at test time: ``model.eval_module()`` when declared, else ``model``."""
    method = _method(model, "eval_module")
    return method() if method is not None else model


def batch_statistics_at_test(model) -> bool:
    """Whether the module declares that it normalises with batch statistics at test time."""
    method = _method(model, "test_batch_statistics")
    return bool(method()) if method is not None else False


def batch_statistics_fix(model) -> dict:
    """The field values that make ``model`` evaluate without batch statistics (``{"batch_norm": "running"}``), from
    its optional ``without_batch_statistics()``; ``{}`` when it declares none."""
    method = _method(model, "without_batch_statistics")
    return dict(method()) if method is not None else {}


def recomputable(model) -> bool:
    """Whether the module's BatchNorm statistics can be recomputed (it has a ``bn_momentum`` field)."""
    return hasattr(model, "bn_momentum")


def dropout_rate(model) -> float:
    """The module's ``dropout`` field (0 when it has none)."""
    return float(getattr(model, "dropout", 0) or 0)


def block_groups(model) -> Optional[dict]:
    """A depth-split ResNet's residual-block groups, or None for a module that is not depth-split."""
    method = _method(model, "block_groups")
    return method() if method is not None else None


def owner_logits(model):
    """The module's ``owner_logits`` (bound), or None: evaluation from owners' slices without a gather."""
    return _method(model, "owner_logits")


def owner_statistics(model):
    """The module's ``owner_statistics`` (bound), or None: recomputed statistics from owners' slices."""
    return _method(model, "owner_statistics")


def scaled_for_test(model):
    """The module's ``scaled_for_test(fractions)`` (bound), or None: its test-time network given the fraction of each
    neuron group a worker trains (`istjax.models.Transformer` with ``scaling="test"``)."""
    return _method(model, "scaled_for_test")


def first_block_groups(model) -> dict:
    """A depth-split ResNet's one-block groups (``{}`` when it declares none)."""
    method = _method(model, "first_block_groups")
    return method() if method is not None else {}


RATIO_PARTS = ("_numerator", "_denominator")


def ratios(means: Mapping[str, float]) -> dict[str, float]:
    """``means`` with each ``<name>_numerator`` / ``<name>_denominator`` pair replaced by ``<name>``, their ratio
    (0 when the denominator is 0): how an evaluation (`istjax.launch.evaluator.Evaluator`) turns the means over its
    batches into PSP@k over the split."""
    num, den = RATIO_PARTS
    out = {}
    for name, value in means.items():
        if name.endswith(num) and name[:-len(num)] + den in means:
            base = name[:-len(num)]
            d = float(means[base + den])
            out[base] = float(value) / d if d > 0 else 0.0
        elif not (name.endswith(den) and name[:-len(den)] + num in means):
            out[name] = value
    return out


def scores(model):
    """The module's ``scores(logits, y) -> (loss, metrics)`` (bound), or None: softmax cross-entropy and accuracy."""
    return _method(model, "scores")


def tensor_axes(model) -> Optional[frozenset]:
    """The module's ``tensor_axes()`` as a frozenset of logical axis names, or None when it gives no tensor split."""
    method = _method(model, "tensor_axes")
    return None if method is None else frozenset(method())


def tensor_logits(model):
    """The module's ``tensor_logits`` (bound), or None: the module cannot be split by tensor parallelism."""
    return _method(model, "tensor_logits") if _method(model, "tensor_axes") is not None else None


def owner_whole_groups(model) -> tuple:
    """The module's ``owner_whole_groups()``, or ``()``."""
    method = _method(model, "owner_whole_groups")
    return tuple(method()) if method is not None else ()


def summary_metrics(model) -> tuple[tuple[str, str], ...]:
    """The module's ``summary_metrics()`` as a tuple of ``(key, label)`` string pairs, or ``()`` when it declares
    none; a `ContractError` naming the fix when it returns anything else."""
    method = _method(model, "summary_metrics")
    if method is None:
        return ()
    pairs = method()
    if (not isinstance(pairs, (tuple, list)) or not pairs
            or not all(isinstance(p, (tuple, list)) and len(p) == 2 and all(isinstance(s, str) and s for s in p)
                       for p in pairs)):
        raise ContractError(f"{type(model).__name__}.summary_metrics() returned {pairs!r}; it must return a non-empty "
                            f"tuple of (metric key, label) string pairs, e.g. (('test_accuracy', 'test accuracy'),).")
    return tuple((str(k), str(label)) for k, label in pairs)


def group_size_refusal(model, error):
    """``error`` (an `istjax.core.partition.GroupSizeError`) with the module's own fix when it gives one
    (``group_size_fix``): a suggested size then passes the module's checks as well as the sampler's."""
    method = _method(model, "group_size_fix")
    fix = method(error.group, error.num_workers) if method is not None else None
    if fix is None:
        return error
    return ArgError(error.arg, error.value, error.problem, fix)
