"""A run's config on disk: ``config.json`` read back into a config (`from_dict`, old names upgraded), compared with
another (`differences`), and which fields a resume may change (`run_control_fields`)."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping
from typing import Any

import ml_collections

from istjax.launch.config.fields import RUN_CONTROL_FIELDS, ConfigError, default_config, flat_dict
from istjax.launch.config.migrate import OPEN_SECTIONS, upgrade_dict

__all__ = ["from_dict", "load_run_config", "read_run_config", "differences", "run_control_fields"]


def from_dict(values: Mapping[str, Any]) -> ml_collections.ConfigDict:
    """A config from a plain dict (a run's ``config.json``): the defaults, with every field ``values`` gives.

    The open sections (``model``, ``data.kwargs``, ``sampler.groups``) are taken whole (their fields depend on the
    model and the loader). A ``config.json`` of an earlier, flat version is read through `RENAMED`. JSON's lists
    become the tuples a config holds, so a resumed run's config takes ``--config.model.hidden='(512,)'`` like any
    other (ml_collections cannot override a list field from the command line).
    """
    config = default_config()
    for field, value in _leaves(upgrade_dict(_as_tuples(dict(values)))):
        *parents, leaf = field.split(".")
        node = config
        for part in parents:
            if part not in node:
                with node.unlocked():
                    node[part] = ml_collections.ConfigDict()  # validate() names unknown sections
            node = node[part]
        if field in _WHOLE and isinstance(value, Mapping):
            value = ml_collections.ConfigDict(dict(value))
        if leaf in node and not (isinstance(node[leaf], ml_collections.ConfigDict) and field not in _WHOLE):
            node[leaf] = value
        else:
            with node.unlocked():
                node[leaf] = value  # validate() names unknown fields
    return config


_WHOLE = ("model", *OPEN_SECTIONS)  # sections taken whole from a config.json


def _leaves(tree: Mapping[str, Any], prefix: str = ""):
    """``(dotted field, value)`` of every leaf of ``tree``, the sections in `_WHOLE` as one leaf each."""
    for k, v in tree.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping) and name not in _WHOLE:
            yield from _leaves(v, name + ".")
        else:
            yield name, v




def _as_tuples(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_as_tuples(v) for v in value)
    if isinstance(value, Mapping):
        return {k: _as_tuples(v) for k, v in value.items()}
    return value


def load_run_config(workdir) -> ml_collections.ConfigDict:
    """The config a run directory was started with (its ``config.json``); `ConfigError` when there is none."""
    path = pathlib.Path(workdir) / "config.json"
    if not path.is_file():
        raise ConfigError([f"workdir={str(workdir)!r} holds no run (no config.json); pass the --workdir of an "
                           f"`istjax train` run."])
    values = read_run_config(path)
    try:
        return from_dict(values)
    except (ValueError, TypeError) as e:
        raise ConfigError([f"{path}: not a readable run config ({e}); it was not written by istjax, or was "
                           f"edited by hand."]) from e


def read_run_config(path) -> dict:
    """A run's ``config.json`` as a plain dict; `ConfigError` naming the file and the fix when it does not parse (cut
    short by a full disk or a copy, or edited by hand)."""
    try:
        values = json.loads(pathlib.Path(path).read_text())
        if not isinstance(values, dict):
            raise ValueError(f"a JSON {type(values).__name__}, not an object")
    except ValueError as e:
        raise ConfigError([f"{path}: not a readable run config ({e}); it was cut short or edited by hand. Start the "
                           f"run over with --overwrite, or choose another --workdir."]) from None
    return values




def differences(a: Mapping[str, Any], b: Mapping[str, Any], ignore: tuple[str, ...] = ()) -> list[str]:
    """Fields where two (plain-dict) configs differ, as ``"field: a -> b"`` strings; ``ignore`` skips fields. A
    config of an earlier, flat version is compared under the nested names (`RENAMED`)."""
    fa, fb = flat_dict(upgrade_dict(dict(a))), flat_dict(upgrade_dict(dict(b)))
    out = []
    for k in sorted(set(fa) | set(fb)):
        if k in ignore or k.split(".")[0] in ignore:  # a field ("runtime.memory_limit") or a top-level name
            continue
        if fa.get(k, "<absent>") != fb.get(k, "<absent>"):
            out.append(f"{k}: {fa.get(k, '<absent>')!r} -> {fb.get(k, '<absent>')!r}")
    return out


def run_control_fields(config_dict: Mapping[str, Any]) -> tuple[str, ...]:
    """The fields a resume may change: `RUN_CONTROL_FIELDS`, less ``num_rounds`` when the learning-rate schedule is
    measured in it (then more rounds would change every round's learning rate)."""
    scheduled = config_dict.get("lr_schedule", "constant") != "constant" or int(config_dict.get("warmup_rounds", 0))
    if scheduled and not int(config_dict.get("lr_schedule_rounds", 0)):
        return tuple(f for f in RUN_CONTROL_FIELDS if f != "num_rounds")
    return RUN_CONTROL_FIELDS
