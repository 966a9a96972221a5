"""Construction-time checks of a model, on the written contract (`istjax.core.contract`): traced, never run.

`istjax.classifier` runs these checks once per task it builds. It traces (`jax.eval_shape`,
`jax.make_jaxpr`: shapes only, nothing is computed or compiled):

1. the full network on the example input: a failure is rewritten as a `ModelCheckError` naming the example input's
   shape, not a Flax/JAX traceback;
2. its test-time output: it must be ``[N, num_classes]`` logits (rank, batch size, and the data's classes when
   known); an output made by softmax or sigmoid is warned about (the loss applies softmax itself);
3. one sub-network (``subnet(units)``, when the module has it) at widths that differ from group to group: a failure
   names your ``subnet()``, the widths it was given and the full widths you wrote; a parameter whose shape is not
   the full one cut to those widths is named with its axes (the usual cause: an axis with no logical name, so IST
   does not split it); and an addition of tensors of two different neuron groups (a residual whose two sides are
   different groups, declared in ``tied_axes()`` or not) shows up as a shape clash between two groups' widths.

`no_groups_reason` says why a module's spec has no neuron group at all (no logical axis names, or names the rules
do not map).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import numpy as np
from flax.core import meta

from istjax.core.registry import close_matches
from istjax.core.spec import SubnetSpec, path_str

__all__ = ["ModelCheckError", "OutputWarning", "forward_failed", "check_output", "warn_if_normalised",
           "check_subnet", "no_groups_reason", "distinct_units"]


class ModelCheckError(ValueError):
    """A model that fails a construction-time check, named in the user's terms with the fix."""


class OutputWarning(UserWarning):
    """A model output that is probably not logits (a softmax or sigmoid at the end)."""


def _first_lines(e: BaseException, limit: int = 400) -> str:
    text = " ".join(str(e).strip().split("\n")[:3])
    text = re.sub(r"\s*\(https://flax\.readthedocs\.io[^)]*\)", "", text)
    return f"{type(e).__name__}: {text[:limit]}{'...' if len(text) > limit else ''}"


def _unbatched(example_x: Any) -> str:
    """The hint for a one-dimensional example input that is one example's features rather than a batch."""
    shape = tuple(np.shape(jax.tree.leaves(example_x)[0]))
    return (f"an example input of shape {shape} is one unbatched example ({shape[0]} features), not a batch: pass "
            f"a batch of examples, x[:2] (shape (2, {shape[0]})), or the data set itself, "
            f"istjax.classifier(model, data)")


def forward_failed(model: nn.Module, example_x: Any, error: BaseException) -> ModelCheckError:
    """The error for a full network whose forward pass fails on the example input."""
    name = type(model).__name__
    shapes = jax.tree.map(lambda v: tuple(np.shape(v)), example_x)
    one_d = np.ndim(jax.tree.leaves(example_x)[0]) == 1
    return ModelCheckError(
        f"{name}: the forward pass on your example input (shape {shapes}, dtype "
        f"{jax.tree.leaves(example_x)[0].dtype}) failed: {_first_lines(error)}. The example input must be a batch "
        f"shaped like your data, [B, ...] (istjax.classifier(model, data), or an example batch train_x[:2] with "
        f"num_classes=); " + (f"if it holds one example's features, {_unbatched(example_x)}." if one_d else
                              "check the model's first layer against it."))


def check_output(model: nn.Module, out: Any, example_x: Any, num_classes: Optional[int]) -> None:
    """``out`` (abstract) must be ``[batch, num_classes]`` logits, ``batch`` the example input's leading axis; a model
    that scores its own logits (a ``scores`` method: a language model's per-position logits) may return
    ``[batch, ..., num_classes]``."""
    name = type(model).__name__
    leaves = jax.tree.leaves(out)
    if len(leaves) != 1:
        raise ModelCheckError(f"{name} returns {jax.tree.structure(out)} ({len(leaves)} arrays); a classifier returns "
                              f"one [N, num_classes] array of logits.")
    shape = tuple(leaves[0].shape)
    example_shape = tuple(np.shape(jax.tree.leaves(example_x)[0]))
    batch = example_shape[0]
    want = f"[{batch}, {num_classes if num_classes is not None else 'num_classes'}]"
    per_position = len(shape) > 2 and shape[0] == batch and callable(getattr(model, "scores", None))
    if (len(shape) != 2 and not per_position) or shape[0] != batch:
        if len(example_shape) == 1 and len(shape) < 2:  # the leading axis was read as features, not examples
            raise ModelCheckError(f"{name} returns shape {shape} for your example input: {_unbatched(example_x)}.")
        raise ModelCheckError(
            f"{name} returns shape {shape} for an example batch of {batch}; it must return logits of shape {want}: "
            f"one row per example, one column per class (flatten or pool spatial axes before the last Dense, and "
            f"do not squeeze the class axis).")
    if num_classes is not None and shape[-1] != num_classes:  # [batch, ..., classes]: a model scoring its own logits
        raise ModelCheckError(
            f"{name} returns {shape[-1]} logits per example but the data has {num_classes} classes; give it "
            f"num_classes={num_classes} (istjax fills the num_classes field from the data; a model that hard-codes "
            f"its output width must match it). Labels outside [0, {shape[-1]}) give a NaN loss.")


def _normalised(jaxpr) -> Optional[str]:
    """``"softmax"`` or ``"sigmoid"`` when the (first) output of ``jaxpr`` is made by one, else None."""
    out = jaxpr.outvars[0]
    for eqn in reversed(jaxpr.eqns):
        if out not in eqn.outvars:
            continue
        prim = eqn.primitive.name
        if prim == "logistic":
            return "sigmoid"
        inner = eqn.params.get("call_jaxpr") or eqn.params.get("jaxpr")
        inner = getattr(inner, "jaxpr", inner)
        if prim == "div" and _made_by(jaxpr, eqn.invars[0], "exp"):
            return "softmax"
        if inner is not None and hasattr(inner, "eqns"):
            return _normalised(inner)
        return None
    return None


def _made_by(jaxpr, var, name: str) -> bool:
    for eqn in jaxpr.eqns:
        if var in eqn.outvars:
            return eqn.primitive.name == name
    return False


def warn_if_normalised(model: nn.Module, jaxpr) -> None:
    kind = _normalised(jaxpr.jaxpr)
    if kind:
        warnings.warn(
            f"{type(model).__name__} ends in a {kind}: its output looks like probabilities, but istjax's loss "
            f"(softmax cross-entropy) expects logits and applies the softmax itself, so training would work on "
            f"squashed outputs. Return the last layer's output before the {kind}.", OutputWarning, stacklevel=4)


def distinct_units(group_sizes: Mapping[str, int]) -> dict[str, int]:
    """A sub-network width per group, below the full width where it can be and different for every group (so that
    an operation joining two groups' tensors meets two different widths)."""
    units, used = {}, set()
    for g, size in sorted(group_sizes.items(), key=lambda kv: (kv[1], kv[0])):
        w = max(1, size // 2)
        while w in used and w < size:
            w += 1
        units[g] = w
        used.add(w)
    return units


def _expected_shape(leaf_spec, full_shape, units) -> tuple[int, ...]:
    shape = list(full_shape)
    for a in leaf_spec.partitioned_axes:
        ax = leaf_spec.axes[a]
        shape[a] = ax.tiles * units[ax.group]
    return tuple(shape)


def _clash(error: BaseException, units: Mapping[str, int]) -> Optional[tuple[str, str]]:
    """The two groups whose widths an elementwise shape clash in ``error`` names (the last axis of each shape it
    prints), if it names two."""
    text = str(error)
    if not re.search(r"incompatible shapes|could not be broadcast|broadcast", text):
        return None
    # The feature axis is the last of each shape: the batch and spatial sizes are not read as widths.
    shapes = [re.findall(r"\d+", s) for s in re.findall(r"\(([\d, ]+)\)", text)]
    dims = [int(s[-1]) for s in shapes if s]
    by_width = {}
    for g, w in units.items():
        by_width.setdefault(w, g)
    found = [by_width[d] for d in dict.fromkeys(dims) if d in by_width]
    return (found[0], found[1]) if len(found) >= 2 else None


def _wrong_key(name: str, key: Any, units: Mapping[str, int]) -> ModelCheckError:
    return ModelCheckError(f"{name}.subnet(units) read units[{key!r}]{close_matches(str(key), units)}, which is not a "
                           f"neuron group; units holds the groups {sorted(units)} (the groups partition_rules() maps "
                           f"axes to). Read each width as units[group] with those keys.")


def check_subnet(model: nn.Module, trace: Callable, spec: SubnetSpec, full_params: Any) -> None:
    """Traces ``model.subnet(units)`` at widths that differ per group (``trace(module) -> (output, variables)``,
    abstract); see the module docstring."""
    sizes = dict(spec.group_sizes)
    if not sizes:
        return
    units = distinct_units(sizes)
    name = type(model).__name__
    wrote = {g: sizes[g] for g in units}
    try:
        sub = model.subnet(units)
    except KeyError as e:
        raise _wrong_key(name, e.args[0] if e.args else None, units) from None
    except Exception as e:  # noqa: BLE001 - the user's own code: report it in their terms
        raise ModelCheckError(f"{name}.subnet({units}) failed: {_first_lines(e)}. subnet(units) returns the module "
                              f"at a worker's widths (units[group] of the full {wrote}).") from None
    try:
        _, variables = trace(sub)
    except Exception as e:  # noqa: BLE001
        if isinstance(e, KeyError) and e.args and isinstance(e.args[0], str) and e.args[0] not in units:
            raise _wrong_key(name, e.args[0], units) from None  # units kept by the module and read in __call__
        pair = _clash(e, units)
        if pair:
            raise ModelCheckError(
                f"{name}: an operation joins tensors of two different neuron groups, {pair[0]!r} and {pair[1]!r} "
                f"(traced at widths {units}; full widths {wrote}), most likely a residual addition. IST splits each "
                f"group independently, so a worker would add unrelated channels. Give both sides one group in "
                f"partition_rules() (and declare them in tied_axes()), or do not partition one of them. "
                f"({_first_lines(e, 200)})") from None
        raise ModelCheckError(
            f"{name}: the sub-network subnet({units}) (a worker's widths; you wrote {wrote}) fails its forward pass: "
            f"{_first_lines(e)}. Check that subnet() sets every width field from units and that every layer's "
            f"width follows those fields.") from None
    _compare_params(name, spec, full_params, nn.unbox(variables["params"]), units, wrote, model, sub)


def _borrowed(leaf_spec, got, units) -> set[tuple[str, str]]:
    """``(group, other)`` for each axis of ``group`` that came out at ``other``'s width: one width serves both."""
    pairs = set()
    for a in leaf_spec.partitioned_axes:
        g, t = leaf_spec.axes[a].group, leaf_spec.axes[a].tiles
        for other, w in units.items():
            if other != g and got[a] == t * w and got[a] != t * units[g]:
                pairs.add((g, other))
    return pairs


def _built_widths(leaf_spec, got, built: dict) -> None:
    """Adds to ``built[group]`` the width each of ``leaf_spec``'s partitioned axes came out at in the sub-network
    (``None`` for a size that is no whole number of the axis's tiles)."""
    for a in leaf_spec.partitioned_axes:
        ax = leaf_spec.axes[a]
        built.setdefault(ax.group, set()).add(got[a] // ax.tiles if got[a] % ax.tiles == 0 else None)


def _unfollowed(built: Mapping[str, set], units: Mapping[str, int], sizes: Mapping[str, int]) -> tuple[dict, set]:
    """``(stray, lent)``: the groups that ``subnet()`` built at one width other than the one it was given,
    ``{group: width}``; and ``(group, other)`` for a group built at the width of another group that follows its own
    (one width field serving both), which is not counted as stray."""
    follows = {g for g, ws in built.items() if ws == {units[g]}}
    stray, lent = {}, set()
    for g, ws in sorted(built.items()):
        if len(ws) != 1 or None in ws or ws == {units[g]}:
            continue
        (w,) = ws
        lender = [o for o in sorted(follows) if o != g and units[o] == w]
        if lender and w != sizes[g]:
            lent.add((g, lender[0]))
        else:
            stray[g] = w
    return stray, lent


def _stray_message(name: str, model: nn.Module, sub: Any, stray: Mapping[str, int], units, sizes) -> str:
    """The error for a ``subnet()`` whose widths do not follow the units it was given."""
    unchanged = {f: getattr(sub, f) for f in getattr(type(model), "__dataclass_fields__", {})
                 if f not in ("parent", "name") and getattr(sub, f, None) == getattr(model, f, None)}
    parts = []
    for g, w in stray.items():
        how = ["its full width" if w == sizes[g] else ""] + [f"units[{o!r}]" for o in sorted(units)
                                                               if o != g and units[o] == w]
        fields = sorted(f for f, v in unchanged.items() if isinstance(v, int) and v == w and w == sizes[g])
        parts.append(f"group {g!r} at width {w} ({', '.join(h for h in how if h) or 'no width it was given'}; "
                     f"given units[{g!r}]={units[g]})" + (f", field(s) {fields} left unchanged" if fields else ""))
    return (f"{name}.subnet(units) does not build the widths it is given: given units={dict(units)} (its keys are "
            f"the neuron groups of partition_rules(): {sorted(units)}), the sub-network it returned has "
            f"{'; '.join(parts)}. Set each width field from units[group] with those keys; a key that is not a group "
            f"(units['hidden'] for 'hidden_0', or units.get('wrong', default), which silently keeps the full "
            f"width) leaves that layer at the wrong width.")


def _compare_params(name, spec, full_params, sub_params, units, wrote, model=None, sub=None) -> None:
    bad, built, borrowed = [], {}, set()

    def one(path, leaf_spec, full, sub_leaf):
        _built_widths(leaf_spec, tuple(sub_leaf.shape), built)
        want = _expected_shape(leaf_spec, full.shape, units)
        if tuple(sub_leaf.shape) != want:
            axes = ", ".join("-" if a is None else a.group for a in leaf_spec.axes)
            bad.append(f"{path_str(path)!r}: full {tuple(full.shape)} with axes ({axes}), so a worker's is {want}, "
                       f"but subnet() gives {tuple(sub_leaf.shape)}")
            borrowed.update(_borrowed(leaf_spec, tuple(sub_leaf.shape), units))

    try:
        jax.tree_util.tree_map_with_path(one, spec.leaves, full_params, sub_params)
    except ValueError as e:
        raise ModelCheckError(f"{name}: subnet(units) has other parameters than the full network ({e}); it must be "
                              f"the same module at narrower widths (self.clone(width=...)).") from None
    if not bad:
        return
    stray, lent = _unfollowed(built, units, wrote)
    if stray:
        raise ModelCheckError(_stray_message(name, model, sub, stray, units, wrote))
    borrowed = lent or borrowed
    shared_width = "".join(
        f" Group {g!r} took group {o!r}'s width: one width field serves both groups, so a worker cannot hold "
        f"different units of each; if the network joins them (a residual addition), they must be one group "
        f"(map both axes to it in partition_rules() and declare them in tied_axes()), else give each its own "
        f"width field in subnet()." for g, o in sorted(borrowed)[:1])
    raise ModelCheckError(
        f"{name}: parameters whose sub-network shape is not the full one cut to a worker's widths (traced at "
        f"{units}; full widths {wrote}): " + "; ".join(bad[:4]) + ("; ..." if len(bad) > 4 else "") +
        "." + (shared_width or " An axis that changes with the width needs the logical name of its group "
               "(nn.with_logical_partitioning(init, names) on its kernel, bias and scale); one that does not "
               "must stay the same width in subnet()."))


def no_groups_reason(model: nn.Module, abstract_params: Any, rules: Mapping[str, Any]) -> str:
    """Why ``model``'s spec has no neuron group (for the algorithms that need one)."""
    boxed = [x for x in jax.tree.leaves(abstract_params, is_leaf=lambda v: isinstance(v, meta.AxisMetadata))
             if isinstance(x, nn.Partitioned)]
    name = type(model).__name__
    if not boxed:
        return (f"{name}'s parameters carry no logical axis names, so no rule can reach them: wrap each partitioned "
                f"layer's initialisers with nn.with_logical_partitioning(init, (axis names)) (e.g. a Dense kernel "
                f"('features', 'hidden'), its bias ('hidden',)), and map 'hidden' to a group in partition_rules().")
    names = sorted({n for x in boxed for n in x.names if n is not None})
    # A hidden axis is the output of one layer and the input of the next; an input or class axis is only one.
    ins = {x.names[0] for x in boxed if len(x.names) >= 2}
    outs = {x.names[-1] for x in boxed if len(x.names) >= 2}
    hidden = [n for n in names if n in ins and n in outs] or names
    return (f"{name}'s logical axis names are {names}, but its rules {dict(rules)} map none of them to a group: "
            f"map the hidden axes to split to a group name, e.g. {{{hidden[0]!r}: {hidden[0]!r}}} (input and "
            f"class/output axes stay None).")
