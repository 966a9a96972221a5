"""A run's config from ``istjax train``'s arguments: ``--config=FILE[:ARG]``, ``--config.FIELD=VALUE`` overrides,
``--workdir``, ``--resume``, ``--overwrite`` (ml_collections ``config_flags``).

`parse_train_args` is what ``istjax train`` parses its command line with, and what a study
(`istjax.launch.study`) loads a cell's config file and overrides with, so that a cell means exactly what the same
flags mean to ``istjax train``.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from typing import Optional, Sequence

__all__ = ["parse_train_args", "load_config"]

_OVERRIDE = re.compile(r"^--?(?:no)?config\.([^=]+)")


def _define(fv, argv, default_config_file):
    from absl import flags
    from ml_collections import config_flags

    config_flags.DEFINE_config_file(
        "config", default_config_file, "Python file whose get_config() returns the run's ConfigDict "
        "(default: the built-in default study). Override fields with --config.FIELD=VALUE.",
        flag_values=fv, sys_argv=list(argv))
    flags.DEFINE_string("workdir", None, "Run directory (default: ./runs/<config.name>-<timestamp>).",
                        flag_values=fv)
    flags.DEFINE_bool("resume", False, "Continue the run in --workdir from its newest good checkpoint (new "
                      "run-control values such as a larger num_rounds are allowed).", flag_values=fv)
    flags.DEFINE_bool("overwrite", False, "Delete the run in --workdir and start over.", flag_values=fv)


def parse_train_args(argv: Sequence[str]):
    """Parses ``istjax train`` arguments (``argv[0]`` is the program name).

    Returns:
      ``(config, workdir, resume, overwrite)``; ``workdir`` is None when not given.

    Raises:
      istjax.launch.config.ConfigError: unknown flags, unknown config fields (named, with close matches), values that do
        not parse, or a config file that does not load.
    """
    from absl import flags

    import istjax.launch.config as config_lib
    from istjax.launch.workdir import named

    argv = list(argv)
    workdir = _flag_value(argv, "workdir")
    if workdir is not None:
        named(workdir)  # --workdir= (empty) would train into the current folder
    config_file = _check_config_file(argv)
    folder = os.path.dirname(os.path.abspath(config_file)) if config_file else None
    if folder and folder not in sys.path:  # as Python runs a script: it may import modules beside it, no PYTHONPATH
        sys.path.insert(0, folder)
    default_file = _resume_config_file(argv) or os.path.abspath(config_lib.__file__)
    overrides = [m.group(1) for m in map(_OVERRIDE.match, argv[1:]) if m]

    # First the config without overrides, to name unknown override fields ourselves (ml_collections would raise a
    # bare AttributeError naming only the last path component).
    base_argv = [a for a in argv if not _OVERRIDE.match(a)]
    try:
        fv = flags.FlagValues()
        _define(fv, base_argv, default_file)
        fv(base_argv)
        base = fv.config
        known = sorted(config_lib.flat_dict(config_lib.to_dict(base)))
    except flags.Error as e:
        last = str(e).strip().splitlines()[-1]
        raise config_lib.ConfigError([f"--config: could not load the config ({last}){_load_hint(e)}"
                                      if _load_hint(e) else str(e)]) from e
    except Exception as e:  # noqa: BLE001 - a config file can fail in any way; report it as a config error
        raise config_lib.ConfigError([f"--config: could not load the config ({type(e).__name__}: {e})"
                                      f"{_load_hint(e)}"]) from e
    # New keys of the open sections (data.kwargs, sampler.groups) the config file does not set are literals set
    # after parsing; istjax.launch.config.validate checks them against the loader and the model's groups.
    # ``--config.FIELD=None`` unsets a field (ml_collections' flag parser cannot parse None into a typed field, e.g.
    # the float ``target_accuracy``); it is set after parsing and checked by istjax.launch.config.validate like any value.
    argv, new_keys, unset = _sort_overrides(base, argv, overrides)
    overrides = [m.group(1) for m in map(_OVERRIDE.match, argv[1:]) if m]
    _refuse_overrides(base, argv, known)

    try:
        fv = flags.FlagValues()
        _define(fv, argv, default_file)
        fv(argv)
        config = fv.config
        for name, value in new_keys.items():
            section, key = name.rsplit(".", 1)
            with config_lib.get_field(config, section).unlocked():
                config_lib.get_field(config, section)[key] = value
        for name in unset:
            *parents, leaf = name.split(".")
            node = config
            for part in parents:
                node = node[part]
            node[leaf] = None
    except flags.Error as e:
        raise config_lib.ConfigError([str(e)]) from e
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise config_lib.ConfigError([f"bad --config override in {overrides}: {type(e).__name__}: {e}"]) from e
    _switch_model(base, config, overrides + list(new_keys))
    _locate_user_files(config, config_file)
    return config, fv.workdir, fv.resume, fv.overwrite


def _sort_overrides(base, argv: Sequence[str], overrides: Sequence[str]) -> tuple[list[str], dict, list[str]]:
    """``(argv for absl, new keys of open sections -> literal, fields to unset)``. A model switched on the command
    line (model.name or model.module) takes its own fields there too: the model section is then open, its fields
    checked against the new model's class (`istjax.models.build_model`)."""
    import istjax.launch.config as config_lib

    open_sections = config_lib.OPEN_SECTIONS + (("model",) if {"model.name", "model.module"} & set(overrides)
                                                else ())
    new_keys, kept, unset = {}, [], []
    for arg in argv:
        m = _OVERRIDE.match(arg)
        name = m.group(1) if m else ""
        if m and "=" in arg and arg.split("=", 1)[1] in ("None", "none") and _resolves(base, name):
            unset.append(name)
        elif name.rsplit(".", 1)[0] in open_sections and not _resolves(base, name):
            new_keys[name] = _literal(arg.split("=", 1)[1] if "=" in arg else "True")
        else:
            kept.append(arg)
    return kept, new_keys, unset


def _switch_model(base, config, overrides: Sequence[str]) -> None:
    """``--config.model.name=OTHER`` replaces the model: the fields the config file gave its own model are dropped
    (those given on the command line stay), so switching models takes one flag, not one run per stale field."""
    import istjax.launch.config as config_lib

    if "model.name" not in overrides or base.model.name == config.model.name:
        return
    given = {o.split(".", 1)[1] for o in overrides if o.startswith("model.")}
    with config.model.unlocked():
        for key in [k for k in config.model if k not in config_lib.MODEL_KEYS and k not in given]:
            del config.model[key]
        if "model.module" not in overrides and "module" in config.model:
            config.model.module = ""


def _locate_user_files(config, config_file: Optional[str]) -> None:
    """A relative ``model.module`` or ``data.module`` file path is read from the current folder, or else from the
    config file's."""
    from istjax.core import user_code

    for section in (config.model, config.data):
        spec = section.get("module", "") or ""
        if not isinstance(spec, str) or not spec or not user_code.is_file_spec(spec) or os.path.isabs(spec) \
                or config_file is None:
            continue
        here = user_code.absolute(spec)
        beside = user_code.absolute(spec, base=os.path.dirname(os.path.abspath(config_file)))
        if not os.path.isfile(here.rsplit(":", 1)[0]) and os.path.isfile(beside.rsplit(":", 1)[0]):
            section.module = beside


def _load_hint(error: Exception) -> str:
    """The fix for a config file that imports a module Python cannot find, or that assigns the flat fields of an
    earlier version: ``c.algorithm = "resist"`` (a section given a plain value) or ``c.backend = "mpi"`` (a field
    that no longer exists)."""
    import istjax.launch.config as config_lib
    from istjax.core.user_code import searched

    text = str(error)
    missing = re.search(r"No module named '([\w.]+)'", text)
    if missing:
        return (f". Python searched the config file's folder and {searched()} for {missing.group(1)!r}. Put the "
                f"module beside the config file, or name your model's file instead of importing it: c.model.module = "
                f"'path/to/file.py:ClassName' (docs/custom_models.md), or your data's: c.data.module = "
                f"'path/to/file.py:function' (docs/your_data.md)")
    field = re.search(r"override field '(\w+)'", text) or re.search(r"(?:key|attribute) '?(\w+)'?", text)
    new = config_lib.renamed(field.group(1)) if field else None
    if not new:
        return ""
    return (f". The flat field {field.group(1)!r} is now {new!r}: write config.{new} = ... in the config file "
            f"(istjax.launch.config.RENAMED lists every renamed field).")


def _refuse_overrides(base, argv: Sequence[str], known: list[str]) -> None:
    """Refuses, before absl parses them, overrides of fields the config lacks (a flat field of an earlier version
    named with its nested place, anything else with close matches) and plain values given to a whole section
    (``--config.algorithm=resist`` means ``--config.algorithm.name=resist``)."""
    import ml_collections

    import istjax.launch.config as config_lib

    problems = []
    for arg in argv[1:]:
        m = _OVERRIDE.match(arg)
        if not m:
            continue
        name, value = m.group(1), arg.split("=", 1)[1] if "=" in arg else "True"
        new = config_lib.renamed(name)
        if not _resolves(base, name) and new:
            problems.append(f"--config.{name}: the flat field {name!r} is now {new!r}; use --config.{new}={value}.")
        elif not _resolves(base, name):
            problems.append(f"--config.{name}: unknown config field{config_lib.close_matches(name, known)}. Known "
                            f"fields: {', '.join(known)}.")
        elif isinstance(config_lib.get_field(base, name), ml_collections.ConfigDict):
            fix = f"--config.{name}.name={value}" if _resolves(base, f"{name}.name") else f"--config.{name}.FIELD=..."
            problems.append(f"--config.{name}={value}: {name!r} is a section of the config, not a value; set one of "
                            f"its fields, e.g. {fix}.")
    if problems:
        raise config_lib.ConfigError(problems)


def _check_config_file(argv: Sequence[str]) -> Optional[str]:
    """Refuses, with the fix, what ml_collections would refuse in its own words: overrides given before
    ``--config=FILE`` (they apply to that file's config, so it must come first) and a file that does not exist."""
    import istjax.launch.config as config_lib

    at = next((i for i, a in enumerate(argv) if a == "--config" or a.startswith("--config=")), None)
    if at is None:
        return None
    value = _flag_value(argv[at:], "config") or ""
    early = [a for a in argv[1:at] if _OVERRIDE.match(a)]
    problems = []
    if early:
        problems.append(f"{early[0]} comes before --config={value}: overrides change the config the file gives, so "
                        f"put --config=FILE first: istjax train --config={value} {' '.join(early)} ...")
    path = value.split(":", 1)[0]  # FILE[:ARG]
    if not os.path.isfile(path):
        what = "is a directory, not a file" if os.path.isdir(path) else "no such file"
        problems.append(f"--config={value}: {what} ({os.path.abspath(path)}). Give a Python file with get_config(), "
                        f"e.g. --config=experiments/configs/digits_ist.py (`istjax configs` lists them).")
    if problems:
        raise config_lib.ConfigError(problems)
    return path


def _flag_value(argv: Sequence[str], name: str) -> Optional[str]:
    for i, a in enumerate(argv):
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
        if a == f"--{name}" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _resume_config_file(argv: Sequence[str]) -> Optional[str]:
    """With ``--resume`` and no ``--config=FILE``: a config file that loads the run's own ``config.json``, so the
    run continues with the config it was started with (overrides then apply on top of it)."""
    import tempfile

    import istjax.launch.config as config_lib

    if "--resume" not in argv or any(a == "--config" or a.startswith("--config=") for a in argv):
        return None
    workdir = _flag_value(argv, "workdir")
    if workdir is None:
        raise config_lib.ConfigError(["--resume needs --workdir=DIR, the run to continue."])
    config_lib.load_run_config(workdir)  # a clear error when there is no run there
    path = os.path.join(tempfile.mkdtemp(prefix="istjax-resume-"), "run_config.py")
    with open(path, "w") as f:
        f.write("import json\nfrom istjax.launch.config import from_dict\n\n\ndef get_config():\n"
                f"    with open({os.path.join(os.path.abspath(workdir), 'config.json')!r}) as f:\n"
                "        return from_dict(json.load(f))\n")
    return path


def _literal(text: str):
    """A Python literal (``500``, ``(1, 2)``, ``True``), or the text itself (a path, a name)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _resolves(config, dotted: str) -> bool:
    node = config
    for part in dotted.split("."):
        try:
            node = node[part]
        except (KeyError, TypeError, AttributeError):
            return False
    return True


def load_config(config_file: str, overrides: Sequence[str] = ()):
    """The config ``istjax train --config=CONFIG_FILE OVERRIDES...`` would train (no workdir flags).

    Raises:
      istjax.launch.config.ConfigError: as `parse_train_args`.
    """
    return parse_train_args(["istjax", f"--config={config_file}", *overrides])[0]
