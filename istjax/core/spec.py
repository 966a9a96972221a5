"""Subnet specs: which axis of which parameter is indexed by which neuron group.

Independent Subnetwork Training (IST; Yuan et al., arXiv 1910.02120) splits the *neurons* of every partitioned
layer among workers. A neuron group is a set of interchangeable units (hidden units of a dense layer, channels of
a conv, attention heads, residual blocks, GCN features). Every parameter leaf says, per axis, whether that axis is
indexed by a neuron group; a leaf with no such axis is *shared* (every worker holds all of it; merge averages it).

A spec is derived from metadata ordinary Flax code already carries: logical axis names
(`nn.with_logical_partitioning(init, ("input", "hidden_0"))`) mapped to neuron groups by a small rules table::

    spec = spec_from_logical(variables["params"], rules={"input": None, "hidden_0": "hidden_0", "classes": None})

or from an explicit table of path patterns::

    spec = spec_from_table(params, {"Dense_0/kernel": (None, "h"), "Dense_1/kernel": ("h", None)})

An axis may hold a concatenation of ``tiles`` copies of a group (GraphSAGE's ``[self, neighbour]`` input): unit ``i``
of group ``g`` (size ``H``) then sits at positions ``i, i + H, ..., i + (tiles - 1) H`` of that axis. Write it as
``GroupAxis("h", tiles=2)`` or the shorthand ``"h*2"``.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Mapping
from typing import Any, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

from istjax.core.errors import ArgError
from istjax.core.registry import close_matches

__all__ = [
    "GroupAxis",
    "LeafSpec",
    "SubnetSpec",
    "spec_from_logical",
    "spec_from_table",
    "spec_for_state",
    "spec_like_params",
    "tile_positions",
    "path_str",
]

PyTree = Any


@dataclasses.dataclass(frozen=True)
class GroupAxis:
    """One axis indexed by neuron group ``group``, holding ``tiles`` concatenated copies of it."""

    group: str
    tiles: int = 1

    @staticmethod
    def parse(value: Union[str, "GroupAxis", tuple, None], *, where: str) -> Optional["GroupAxis"]:
        """Turns ``None``, ``"h"``, ``"h*2"``, ``("h", 2)`` or a GroupAxis into ``Optional[GroupAxis]``."""
        if value is None or isinstance(value, GroupAxis):
            return value
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], int):
            return GroupAxis(value[0], value[1])
        if isinstance(value, str):
            m = re.fullmatch(r"\s*([^*\s]+)\s*(?:\*\s*(\d+))?\s*", value)
            if m:
                return GroupAxis(m.group(1), int(m.group(2) or 1))
        raise ArgError(where.split("[")[0], value, f"{where}: cannot read {value!r} as a neuron group.",
                       "Use None (axis not partitioned), a group name such as 'hidden', 'hidden*2' for a [self, "
                       "neighbour] concatenation, or GroupAxis('hidden', tiles=2).")


@dataclasses.dataclass(frozen=True)
class LeafSpec:
    """Per-axis neuron groups of one parameter leaf: ``axes[i]`` is the GroupAxis indexing axis ``i`` or None.

    A LeafSpec is a pytree *leaf* (it is not registered as a node), so a spec tree has exactly the structure of
    the parameter tree it describes and ``jax.tree.map(f, spec.leaves, params)`` pairs them.
    """

    axes: tuple[Optional[GroupAxis], ...]

    @property
    def shared(self) -> bool:
        """True when no axis is partitioned: every worker holds the whole leaf."""
        return all(a is None for a in self.axes)

    @property
    def partitioned_axes(self) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(self.axes) if a is not None)


@dataclasses.dataclass(frozen=True)
class SubnetSpec:
    """A parameter tree's partition layout.

    Attributes:
      leaves: a pytree with the parameters' structure whose leaves are `LeafSpec` objects.
      group_sizes: neuron group name -> number of units in the full network.
    """

    leaves: PyTree
    group_sizes: Mapping[str, int]

    def __hash__(self):  # usable as a static argument
        return hash((jax.tree.structure(self.leaves), tuple(jax.tree.leaves(self.leaves)),
                     tuple(sorted(self.group_sizes.items()))))

    def describe(self) -> str:
        """One line per leaf: path, shape-free axis groups; for error messages and docs."""
        rows = []
        for path, leaf in jax.tree_util.tree_flatten_with_path(self.leaves)[0]:
            axes = ", ".join("-" if a is None else (a.group if a.tiles == 1 else f"{a.group}*{a.tiles}")
                             for a in leaf.axes)
            rows.append(f"{path_str(path)}: ({axes})")
        return "\n".join(rows)


def tile_positions(units: Any, size: int, tiles: int) -> Any:
    """Positions along an axis holding ``tiles`` concatenated copies of a group of ``size`` units.

    Unit ``i`` sits at ``i, i + size, ..., i + (tiles - 1) * size``. ``units: [..., n]`` (numpy or jax integers)
    -> ``[..., n * tiles]``, tile-major (all of tile 0, then tile 1, ...). The one place this formula is written.
    """
    if tiles == 1:
        return units
    parts = [units + t * size for t in range(tiles)]
    return np.concatenate(parts, axis=-1) if isinstance(units, np.ndarray) else jnp.concatenate(parts, axis=-1)


def path_str(path) -> str:
    """``('params', 'Dense_0', 'kernel')``-style key path -> ``"params/Dense_0/kernel"``."""
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def _infer_group_sizes(leaves_with_paths, shapes) -> dict[str, int]:
    sizes: dict[str, tuple[int, str]] = {}
    for (path, leaf), shape in zip(leaves_with_paths, shapes):
        if len(leaf.axes) != len(shape):
            raise ValueError(
                f"parameter {path_str(path)!r} has shape {tuple(shape)} (rank {len(shape)}) but its spec names "
                f"{len(leaf.axes)} axes {leaf.axes}; give one entry per axis (None for an axis that is not partitioned)."
            )
        for axis, a in enumerate(leaf.axes):
            if a is None:
                continue
            if a.tiles < 1 or shape[axis] % a.tiles:
                raise ValueError(
                    f"parameter {path_str(path)!r} axis {axis} has size {shape[axis]}, which is not {a.tiles} tiles of "
                    f"group {a.group!r}; fix the tiles count or the axis name."
                )
            n = shape[axis] // a.tiles
            if a.group in sizes and sizes[a.group][0] != n:
                raise ValueError(
                    f"neuron group {a.group!r} has {sizes[a.group][0]} units at {sizes[a.group][1]!r} but {n} at "
                    f"{path_str(path)!r} axis {axis}; axes of one group must have one size (map them to different "
                    f"groups if the layers really differ)."
                )
            sizes[a.group] = (n, path_str(path))
    return {g: n for g, (n, _) in sizes.items()}


def _finish(leaves_with_paths, shapes, treedef) -> SubnetSpec:
    sizes = _infer_group_sizes(leaves_with_paths, shapes)
    return SubnetSpec(jax.tree.unflatten(treedef, [leaf for _, leaf in leaves_with_paths]), sizes)


def spec_from_logical(params: PyTree, rules: Mapping[str, Any]) -> SubnetSpec:
    """Derives a spec from Flax logical axis names.

    Args:
      params: a parameter tree whose annotated leaves are boxed (`nn.LogicallyPartitioned`, as returned by
        `Module.init` when initialisers are wrapped in `nn.with_logical_partitioning`). Unannotated leaves are shared.
      rules: logical axis name -> neuron group (``"h"``, ``"h*2"``, `GroupAxis`) or None (not partitioned). Every
        logical name that occurs must appear here, so a typo cannot silently leave a layer unpartitioned.

    Returns:
      A `SubnetSpec` over the *unboxed* tree (``flax.linen.unbox(params)``).
    """
    import flax.linen as nn  # local: keep spec importable without flax for theory users

    names_tree = nn.get_partition_spec(params)
    unboxed = nn.unbox(params)
    flat_names, treedef = jax.tree_util.tree_flatten_with_path(
        names_tree, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
    flat_params = jax.tree.leaves(unboxed)
    if len(flat_names) != len(flat_params):
        raise ArgError("params", None, "params and their logical names disagree in structure;",
                       "pass the boxed tree from Module.init.")
    unknown = {}
    leaves = []
    for path, pspec in flat_names:
        axes = []
        for name in tuple(pspec):
            if name is None:
                axes.append(None)
            elif isinstance(name, str) and name in rules:
                axes.append(GroupAxis.parse(rules[name], where=f"rules[{name!r}]"))
            else:
                unknown.setdefault(str(name), path_str(path))
                axes.append(None)
        leaves.append((path, LeafSpec(tuple(axes))))
    if unknown:
        used = {str(n) for _, pspec in flat_names for n in tuple(pspec) if n is not None}
        raise ArgError("rules", sorted(unknown), *_unknown_names(unknown, rules, used))
    shapes = [np.shape(p) for p in flat_params]
    # A PartitionSpec shorter than the rank leaves trailing axes unpartitioned.
    leaves = [(path, LeafSpec(leaf.axes + (None,) * (len(s) - len(leaf.axes)))) if len(leaf.axes) < len(s)
              else (path, leaf) for (path, leaf), s in zip(leaves, shapes)]
    return _finish(leaves, shapes, jax.tree.structure(unboxed))


def _unknown_names(unknown: Mapping[str, str], rules: Mapping[str, Any], used: set) -> tuple[str, str]:
    """``(problem, fix)``: the error for logical axis names the rules do not map (``unknown``: name -> where), with the rules keys no
    parameter carries as "did you mean" (a typo in the rules) and an example that keeps the axis's intent."""
    listed = ", ".join(f"{n!r} (at {p})" for n, p in unknown.items())
    unused = sorted(k for k in rules if k not in used)
    typos = [f"the rules key {k!r} is no logical axis name of the model{close_matches(k, unknown)}" for k in unused
             if close_matches(k, unknown)]
    first = next(iter(unknown))
    near = [k for k in unused if close_matches(k, [first])]
    example = (f"{{{first!r}: {rules[near[0]]!r}}} (the value your rules give {near[0]!r})" if near else
               f"{{{first!r}: None}} to keep that axis whole (an input or a class/output axis), or "
               f"{{{first!r}: {first!r}}} to split it among workers (a hidden axis)")
    return (f"unknown logical axis name(s) {listed}; known: {sorted(rules)}" + "".join(f"; {t}" for t in typos) + ".",
            f"Add each to the rules table, e.g. {example}.")


def spec_from_table(params: PyTree, table: Mapping[str, tuple], *, strict: bool = True) -> SubnetSpec:
    """Derives a spec from an explicit table of path patterns.

    Args:
      params: the (unboxed) parameter tree.
      table: ``fnmatch`` pattern over ``"/"``-joined paths (e.g. ``"*Dense_0/kernel"``) -> per-axis groups (None,
        ``"h"``, ``"h*2"`` or `GroupAxis`). The first matching pattern wins; unmatched leaves are shared.
      strict: raise if a pattern matches no leaf (catches typos).
    """
    flat, treedef = jax.tree_util.tree_flatten_with_path(params)
    used = set()
    leaves, shapes = [], []
    for path, value in flat:
        p = path_str(path)
        axes = (None,) * np.ndim(value)
        for pattern, entry in table.items():
            if fnmatch.fnmatchcase(p, pattern):
                axes = tuple(GroupAxis.parse(a, where=f"table[{pattern!r}]") for a in entry)
                used.add(pattern)
                break
        leaves.append((path, LeafSpec(axes)))
        shapes.append(np.shape(value))
    missing = [pt for pt in table if pt not in used]
    if strict and missing:
        paths = [path_str(pth) for pth, _ in flat]
        raise ArgError("table", missing, f"table pattern(s) {missing} match no parameter; the parameters are {paths}.",
                       "Fix the pattern (fnmatch syntax, '/'-joined path) or pass strict=False.")
    return _finish(leaves, shapes, treedef)


def spec_for_state(state: PyTree, params_spec: SubnetSpec, rules: Optional[Mapping[str, Any]] = None) -> SubnetSpec:
    """The spec of a model's non-parameter state (Flax collections such as BatchNorm's ``batch_stats``).

    A state leaf ``<collection>/<module path>/<name>`` is partitioned like the parameter ``<module path>/scale``
    (else ``<module path>/bias``) when that parameter exists and has the leaf's shape: a BatchNorm statistic of a
    channel group is indexed by the same units as its scale, so extract and merge move it with its channels. A
    statistic of a layer no group indexes is shared (merge averages it). Leaves boxed with logical names (as
    `spec_from_logical` reads them) follow ``rules`` instead.

    Args:
      state: the state collections, e.g. ``{"batch_stats": {...}}`` (boxed or plain leaves).
      params_spec: the parameters' spec (its group sizes must cover the state's groups).
      rules: logical axis name -> neuron group, for boxed state leaves.
    """
    import flax.linen as nn

    by_path = {path_str(p): leaf for p, leaf in jax.tree_util.tree_flatten_with_path(params_spec.leaves)[0]}
    boxed = lambda x: isinstance(x, nn.LogicallyPartitioned)  # noqa: E731
    flat, treedef = jax.tree_util.tree_flatten_with_path(state, is_leaf=boxed)
    leaves, shapes = [], []
    for path, value in flat:
        shape = np.shape(nn.unbox(value))
        if boxed(value):
            if rules is None:
                raise ArgError("rules", None, f"model state {path_str(path)!r} carries logical axis names "
                                              f"{value.names};", "pass the rules table that maps them to neuron groups.")
            axes = tuple(None if n is None else GroupAxis.parse(rules[n], where=f"rules[{n!r}]") if n in rules
                         else _unknown_name(n, path, rules) for n in value.names)
            axes = axes + (None,) * (len(shape) - len(axes))
        else:
            module = "/".join(path_str(path).split("/")[1:-1])
            sibling = next((by_path[f"{module}/{name}"] for name in ("scale", "bias")
                            if f"{module}/{name}" in by_path and len(by_path[f"{module}/{name}"].axes) == len(shape)),
                           None)
            axes = sibling.axes if sibling is not None else (None,) * len(shape)
        leaves.append((path, LeafSpec(tuple(axes))))
        shapes.append(shape)
    spec = _finish(leaves, shapes, jax.tree.structure(nn.unbox(state)))
    for g, n in spec.group_sizes.items():
        if params_spec.group_sizes.get(g, n) != n:
            raise ValueError(f"model state indexes neuron group {g!r} with {n} units but the parameters have "
                             f"{params_spec.group_sizes[g]}; name the state's axes after the right group.")
    return SubnetSpec(spec.leaves, dict(params_spec.group_sizes))


def spec_like_params(tree: PyTree, params_spec: SubnetSpec) -> PyTree:
    """The `LeafSpec` tree of ``tree`` (an optimizer state) in which every subtree shaped like the parameters (Adam's
    ``mu`` and ``nu``) is partitioned like them and every other leaf (a step count) is shared: how a carried
    optimizer state is cut and joined with the parameters it belongs to. ``tree``'s leaves may be abstract."""
    params_treedef = jax.tree.structure(params_spec.leaves)

    def params_like(t) -> bool:
        return jax.tree.structure(t) == params_treedef

    return jax.tree.map(lambda t: params_spec.leaves if params_like(t) else LeafSpec((None,) * len(np.shape(t))),
                        tree, is_leaf=params_like)


def _unknown_name(name, path, rules):
    raise ArgError("rules", name, f"unknown logical axis name {name!r} at model state {path_str(path)!r}"
                                  f"{close_matches(name, rules)}; known: {sorted(rules)}.",
                   "Add it to the rules table (mapped to a neuron group or None).")
