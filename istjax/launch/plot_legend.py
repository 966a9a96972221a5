"""The legends of `istjax.launch.plot` (and the cells of `istjax.launch.compare`): which runs are one seed group,
and the config fields that tell the groups apart.

A run's fields (`run_fields`) are its config without run-control fields. A legend label (`legend_labels`) is the
algorithm (``W=..`` and ``K=..`` where they differ), then every field in which the group differs from the others
(`shown_fields`) that applies to its run (`applies`): an algorithm's option only to runs of an algorithm that takes it
(``algorithm.outer_learning_rate`` names DiLoCo runs, never IST's), a sampler's fields only to runs whose algorithm
deals with that sampler (``sampler.min_units`` only under ``sampler.name="overlapping"``), a model's fields only
between runs of the same model (`NAMED_SECTIONS`: a transformer's ``model.scaling`` is never an MLP's difference).
Whether a field applies is asked of the registries (`istjax.algorithms.ALGORITHMS`,
`istjax.core.partition.SAMPLERS`: the options each entry declares), so an algorithm or sampler registered later is
read the same way.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Protocol

from istjax.launch.config import RUN_CONTROL_FIELDS, flat_dict

__all__ = ["NAMED_SECTIONS", "NOISY_FIELDS", "applies", "group_runs", "label", "legend_labels", "run_fields",
           "shown_fields", "varying_fields"]

class Run(Protocol):
    """What a legend reads of a run: `istjax.launch.plot.Run` (its directory, config and what it trained)."""

    @property
    def path(self) -> pathlib.Path: ...

    @property
    def config(self) -> dict[str, Any]: ...

    @property
    def algorithm(self) -> str: ...

    @property
    def num_workers(self) -> Optional[int]: ...

    @property
    def local_steps(self) -> Optional[int]: ...

    @property
    def seed(self) -> Optional[int]: ...


# Config fields that never name a curve: how a run is driven, not what it computes.
NOISY_FIELDS = frozenset(RUN_CONTROL_FIELDS) | {"workdir"}
_BASE_FIELDS = ("algorithm", "num_workers", "local_steps")  # in the base label: ``algorithm`` (``W=.. K=..``)

def label(run: Run, *, workers: bool = True, steps: bool = True) -> str:
    """``"ist W=4 K=10"`` (parts that are unknown, or turned off with ``workers`` / ``steps``, are left out)."""
    parts = [run.algorithm]
    if workers and run.num_workers is not None:
        parts.append(f"W={run.num_workers}")
    if steps and run.local_steps is not None:
        parts.append(f"K={run.local_steps}")
    return " ".join(parts)


def _common(runs: Sequence[Run], attr: str) -> Optional[int]:
    """The value of ``attr`` (``num_workers``, ``local_steps``) every run shares, or None when they differ or it is
    unknown."""
    values = {getattr(r, attr) for r in runs}
    return values.pop() if len(values) == 1 else None


# ----------------------------------------------------------------------------------------------- groups and labels

def run_fields(run: Run) -> dict[str, Any]:
    """What a run computes: its config as dotted fields (`istjax.launch.config.flat_dict`) without the
    run-control fields (`NOISY_FIELDS`), with ``algorithm``, ``num_workers`` and ``local_steps`` as `Run` reads them
    (so runs without ``config.json`` still tell apart)."""
    out = {k: v for k, v in flat_dict(run.config).items()
           if k not in NOISY_FIELDS and k.split(".")[0] not in NOISY_FIELDS and k != "algorithm.name"}
    out.update(algorithm=run.algorithm, num_workers=run.num_workers, local_steps=run.local_steps)
    return out


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def group_runs(runs: Sequence[Run]) -> list[list[Run]]:
    """Runs grouped into seed groups: runs whose `run_fields` are equal except ``seed``, in first-seen order.

    A run without a ``seed`` in its config is a group of its own, and so is a run whose seed is already in the
    group it would join (the same run twice, or runs that differ only in run-control fields).
    """
    groups: list[list[Run]] = []
    keys: list[Optional[str]] = []
    for run in runs:
        fields = run_fields(run)
        if fields.get("seed") is None:
            groups.append([run])
            keys.append(None)
            continue
        seed = fields.pop("seed")
        key = _key(fields)
        for group, k in zip(groups, keys):
            if k == key and all(r.seed != seed for r in group):
                group.append(run)
                break
        else:
            groups.append([run])
            keys.append(key)
    return groups


def _show(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_show(v)}" for k, v in value.items()) + "}"
    return str(value)


# Open sections whose fields depend on a name: a field of one is compared only between runs of the same name (an MLP's
# ``model.hidden`` means nothing to a CNN), so a field another model lacks is not a difference between the runs.
NAMED_SECTIONS = {"model": "model.name", "data.kwargs": "data.name"}
# Fields that say where a run's code lives, not what it computes: never a legend's difference.
_UNSHOWN_FIELDS = frozenset({"model.module"})


def _group_fields(group: Sequence[Run], show_seed: bool) -> dict[str, Any]:
    fields = run_fields(group[0])
    if len(group) > 1 or not show_seed:
        fields.pop("seed", None)
    return fields


def _set_fields(group: Sequence[Run], show_seed: bool) -> dict[str, Any]:
    """`_group_fields` without those a legend never names: `_UNSHOWN_FIELDS`, and fields left empty (None, ``""``),
    which read as absent, as in a run of a version that did not have the field."""
    return {k: v for k, v in _group_fields(group, show_seed).items()
            if k not in _UNSHOWN_FIELDS and v is not None and v != ""}


def _config_order(keys: Sequence[str]) -> list[str]:
    """``keys`` (the union of the groups' fields, in first-seen order) with every section's fields together, each
    `NAMED_SECTIONS` name field ahead of its section's other fields (``model.name`` before ``model.hidden``), so a
    label names the model before its fields."""
    sections = list(dict.fromkeys(k.split(".")[0] for k in keys))
    out = sorted((k for k in keys if k not in NAMED_SECTIONS.values()), key=lambda k: sections.index(k.split(".")[0]))
    for name in NAMED_SECTIONS.values():
        if name in keys:
            section = name.rsplit(".", 1)[0]
            first = next((i for i, k in enumerate(out) if k.startswith(section + ".")), None)
            out.insert(len(out) if first is None else first, name)
    return out


def _name_of(field: str) -> Optional[str]:
    """The field naming ``field``'s section when that section is one of `NAMED_SECTIONS` (``"model.hidden"`` ->
    ``"model.name"``); None for every other field, and for the naming field itself."""
    for section, name in NAMED_SECTIONS.items():
        if field.startswith(section + ".") and field != name:
            return name
    return None


def applies(field: str, fields: Mapping[str, Any]) -> bool:
    """Whether ``field`` can change what a run with these `run_fields` computes, as the registries declare it:
    ``algorithm.X`` when the run's algorithm takes the option X (`istjax.algorithms.AlgorithmEntry.options`);
    ``sampler.*`` when it deals with a sampler (the option ``sampler``; ``sampler.num_owners`` also when it takes
    ``num_owners``, as ResIST does), a sampler's own options (``min_units``, ``weights``, ...) only when its sampler,
    or one of ``sampler.groups``, takes them (`istjax.core.partition.SamplerEntry.options`). Every other field
    applies, and so does every field of an algorithm or sampler no registry of this process knows."""
    from istjax.algorithms import ALGORITHMS
    from istjax.core.partition import SAMPLERS

    section, _, option = field.partition(".")
    if section not in ("algorithm", "sampler") or not option or fields.get("algorithm") not in ALGORITHMS:
        return True
    takes = ALGORITHMS.get(fields["algorithm"]).options
    if section == "algorithm" or option in takes:
        return option in takes
    if "sampler" not in takes:
        return False
    samplers = {fields.get("sampler.name")} | {v for k, v in fields.items() if k.startswith("sampler.groups.")}
    if option == "name" or option.startswith("groups.") or not all(s in SAMPLERS for s in samplers):
        return True
    return any(option in SAMPLERS.get(s).options for s in samplers)


def _differs_on(field: str, fields: Sequence[dict[str, Any]]) -> list[bool]:
    """Per group, whether ``field`` tells it apart: the field applies to its run (`applies`), it has the field, and
    another group it applies to, of the same section name (`NAMED_SECTIONS`; all groups for other fields), has another
    value or lacks the field."""
    name = _name_of(field)
    relevant = [applies(field, f) for f in fields]
    out = []
    for f, mine in zip(fields, relevant):
        peers = [g for g, theirs in zip(fields, relevant)
                 if theirs and (name is None or _key(g.get(name)) == _key(f.get(name)))]
        out.append(mine and field in f and len({_key(g[field]) if field in g else None for g in peers}) > 1)
    return out


def shown_fields(groups: Sequence[Sequence[Run]], *, show_seed: bool = False) -> list[dict[str, Any]]:
    """Per group, the fields (`run_fields`, besides algorithm, W and K) that tell it apart from the others, in config
    order: a field whose value is not the same in all groups is shown on every group that has it; a group that lacks
    a field (or leaves it empty: None, ``""``) shows nothing for it. Fields of a section named by another field
    (`NAMED_SECTIONS`: ``model.*`` by ``model.name``) are compared only between groups of the same name, so runs of
    different models differ in ``model.name``, not in every field one of the models lacks. ``seed`` only with
    ``show_seed``."""
    fields = [_set_fields(g, show_seed) for g in groups]
    order: dict[str, None] = {}
    for f in fields:
        order.update(dict.fromkeys(k for k in f if k not in _BASE_FIELDS))
    shown: list[dict[str, Any]] = [{} for _ in fields]
    for k in _config_order(list(order)):
        for out, f, differs in zip(shown, fields, _differs_on(k, fields)):
            if differs:
                out[k] = f[k]
    return shown


def _field_text(field: str, value: Any) -> str:
    """``learning_rate=0.1``; a section's name field reads as the section: ``model=cnn``, not ``model.name=cnn``."""
    name = field[: -len(".name")] if field.endswith(".name") else field
    return f"{name}={_show(value)}"


def varying_fields(groups: Sequence[Sequence[Run]], *, show_seed: bool = False) -> list[str]:
    """Per group, ``"field=value ..."`` for its `shown_fields` (the fields in which it differs from the other groups),
    in config order; ``""`` when there are none. A field a group lacks is left out of its text, never written as
    unset; a model's name reads ``model=cnn``."""
    return [" ".join(_field_text(k, v) for k, v in f.items()) for f in shown_fields(groups, show_seed=show_seed)]


def legend_labels(groups: Sequence[Sequence[Run]], *, show_seed: bool = False,
                  shared_in_title: bool = True) -> list[str]:
    """One legend label per group: `label` of its first run, then ``field=value`` for every field in which it differs
    from the other groups (`varying_fields`); a group of several seeds ends with ``(mean of N seeds)``.

    ``seed`` is named only with ``show_seed`` (seeds drawn as separate lines). Groups whose labels would still be
    equal (runs that differ only in run-control fields) get their run directory's name appended.

    ``W=`` and ``K=`` are named only when the runs differ in them (shared, `figure_title` names them); with
    ``shared_in_title=False`` (a title of the caller's own) always.

    Example: two IST runs at W=2, K=2 that differ only in ``learning_rate`` give ``["ist learning_rate=0.1",
    "ist learning_rate=0.05"]``; an MLP run beside a run of a registered model ``["ist model=mlp",
    "ist model=residual_mlp"]``; IST at W=2 beside IST at W=4 ``["ist W=2", "ist W=4"]``.
    """
    runs = [r for g in groups for r in g]
    # W and K are named where they differ; shared by all, they are in the title (`figure_title`).
    workers = not shared_in_title or _common(runs, "num_workers") is None
    steps = not shared_in_title or _common(runs, "local_steps") is None
    out = []
    for group, extra in zip(groups, varying_fields(groups, show_seed=show_seed)):
        parts = [label(group[0], workers=workers, steps=steps)] + ([extra] if extra else [])
        if len(group) > 1:
            parts.append(f"(mean of {len(group)} seeds)")
        out.append(" ".join(parts))
    seen: dict[str, int] = {}
    for text in out:
        seen[text] = seen.get(text, 0) + 1
    return [f"{text} [{group[0].path.name}]" if seen[text] > 1 else text for text, group in zip(out, groups)]
