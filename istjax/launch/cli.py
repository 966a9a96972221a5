"""The ``istjax`` command.

::

    istjax [train] [--config=FILE[:ARG]] [--workdir=DIR] [--config.FIELD=VALUE ...] [--resume | --overwrite]
    istjax eval --workdir=DIR [--checkpoint=N]
    istjax plot RUN_DIR ...          (istjax.launch.plot.main)
    istjax compare ...               (istjax.launch.compare.main)
    istjax configs [--format=text|markdown]   (istjax.launch.catalog.main)

``train`` (the default subcommand) runs `istjax.launch.driver.train_and_evaluate`. ``--config`` names a Python file with
``get_config()`` (Flax-examples style, ml_collections ``config_flags``); without it the default study runs
(`istjax.launch.config.default_config`, IST on scikit-learn's digits, which ships with the install). Any field can be
overridden: ``--config.num_workers=2 --config.model.hidden='(256,256)'``, after ``--config=FILE`` when one is given;
``data.kwargs`` and ``sampler.groups`` also take keys the config does not set (a loader's argument, a neuron
group: ``--config.sampler.groups.hidden_0=overlapping``). The config has sections (``algorithm``, ``sampler``,
``model``, ``data``, ``runtime``), each with a ``name`` and its options: ``--config.algorithm.name=resist``; the
flat names of earlier versions (``--config.backend=mpi``) are refused with the new one
(``--config.runtime.name=mpi``). A model of your own: ``--config.model.name=NAME
--config.model.module=path/to/file.py:Class`` (no PYTHONPATH; the run records it for ``--resume`` and ``eval``);
switching ``model.name`` drops the previous model's fields and takes the new one's
(``--config.model.FIELD=VALUE``). A config file may import modules beside it. Without ``--workdir`` results go to ``./runs/<name>-<timestamp>``. A run directory has one writer: a second ``train`` on a workdir another live run
holds is refused (``run.lock``, istjax.launch.lock); ``eval`` and ``plot`` only read, and may.

``--resume`` continues the run in ``--workdir`` with that run's own config (its ``config.json``); overrides given
with it may change run-control fields only (``num_rounds``, ``eval_every``, ...), anything else is refused with the
list of differences. ``eval`` evaluates a saved run's newest verified checkpoint (or ``--checkpoint=N``) without
training.

Exit codes: 0 success; 2 a config, flag or workdir error, a damaged data file, a workdir another run is writing
(reported before anything compiles); 1 a training failure (e.g. a non-finite loss); 3 an environment failure (a
workdir that cannot be written, a full disk: the last good checkpoint is intact); 130 / 143 interrupted by SIGINT /
SIGTERM (after checkpointing; rerun the same command, or add ``--resume``, to continue). Under ``mpiexec`` an error
every rank meets is printed once, by rank 0.
"""

from __future__ import annotations

import ast
import datetime
import importlib
import os
import re
import sys
from typing import Optional, Sequence

__all__ = ["main", "parse_train_args", "EXIT_OK", "EXIT_FAILURE", "EXIT_CONFIG", "EXIT_ENVIRONMENT"]

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG, EXIT_ENVIRONMENT = 0, 1, 2, 3
_SUBCOMMANDS = {"plot": "istjax.launch.plot", "compare": "istjax.launch.compare",
                "configs": "istjax.launch.catalog"}
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

    argv = list(argv)
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


def _usage() -> str:
    return __doc__.split("::", 1)[1].split("Exit codes")[0].strip("\n") + "\n\nExit codes" + \
        __doc__.split("Exit codes", 1)[1]


def train_main(argv: Sequence[str]) -> int:
    """``istjax train``: returns the exit code."""
    import istjax.launch.config as config_lib

    if any(a in ("-h", "--help", "--helpfull") for a in argv[1:]):
        print("usage:\n" + _usage())
        import inspect

        print("config fields, defaults and meaning (istjax.launch.config.default_config):")
        from istjax.launch.config.fields import FIELD_BUILDERS

        sources = (config_lib.default_config, *FIELD_BUILDERS)
        for line in "\n".join(inspect.getsource(f) for f in sources).splitlines():
            if line.strip().startswith(("c.", "# ")) and "ConfigDict()" not in line.split("#")[0]:
                print("  " + line.strip().removeprefix("c."))
        return EXIT_OK
    try:
        config, workdir, resume, overwrite = parse_train_args(argv)
    except config_lib.ConfigError as e:
        _error(f"istjax train: {e}")
        return EXIT_CONFIG

    from absl import logging as absl_logging

    from istjax.launch.metrics import is_primary

    # orbax logs every save at INFO, and read-only checkpoint managers (non-primary MPI ranks) at WARNING.
    absl_logging.set_verbosity(absl_logging.WARNING if is_primary() else absl_logging.ERROR)
    import istjax.launch.driver as train

    if workdir is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        workdir = os.path.join("runs", f"{config.name}-{stamp}")
    try:
        train.train_and_evaluate(config, workdir, resume=resume, overwrite=overwrite)
    except config_lib.ConfigError as e:
        _error(f"istjax train: {e}")
        return EXIT_CONFIG
    except train.TrainingError as e:
        _error(f"istjax train: training failed: {e}")
        return EXIT_FAILURE
    except train.EnvironmentFailure as e:
        _error(f"istjax train: environment failure: {e}", every_rank=True)
        return EXIT_ENVIRONMENT
    except OSError as e:  # anything else the machine refused (a metrics file on a full disk, ...)
        _error(f"istjax train: environment failure: {e.strerror or e}"
               + (f" ({e.filename})" if e.filename else "") + "; the last good checkpoint is intact.",
               every_rank=True)
        return EXIT_ENVIRONMENT
    except train.Interrupted as e:
        _error(f"istjax train: interrupted: {e}")
        return e.exit_code
    except KeyboardInterrupt:
        print("istjax train: aborted.", file=sys.stderr)
        return 130
    return EXIT_OK


def _error(message: str, every_rank: bool = False) -> None:
    """Prints an error once: under ``mpiexec`` every rank meets the same config or training error, so rank 0 alone
    prints it (saying how many ranks stopped); ``every_rank`` errors (one process's disk) name the rank."""
    from istjax.launch.metrics import is_primary, process_count, process_index

    n = process_count()
    if n > 1:
        if every_rank:
            message = f"{message} (rank {process_index()} of {n})"
        elif not is_primary():
            return
        else:
            message = f"{message} (every one of the {n} ranks stopped)"
    print(message, file=sys.stderr)


def eval_main(argv: Sequence[str]) -> int:
    """``istjax eval --workdir=DIR [--checkpoint=N]``: evaluates a saved run; returns the exit code."""
    import argparse
    import json

    import istjax.launch.config as config_lib

    parser = argparse.ArgumentParser(prog="istjax eval", description="Evaluate a saved run without training: its "
                                     "own config, its newest checkpoint that verifies (or --checkpoint).")
    parser.add_argument("--workdir", required=True, help="the run directory of an `istjax train` run")
    parser.add_argument("--checkpoint", type=int, default=None, help="the step to evaluate (default: newest good)")
    parser.add_argument("--model-module", default=None, metavar="FILE.py:CLASS",
                        help="where the run's model class lives, for a run whose config.json does not record it "
                             "(runs of earlier versions; a run records model.module itself)")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as e:
        return EXIT_OK if e.code == 0 else EXIT_CONFIG
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.ERROR)
    import istjax.launch.driver as driver

    try:
        result = driver.evaluate_run(args.workdir, checkpoint=args.checkpoint, model_module=args.model_module)
    except config_lib.ConfigError as e:
        _error(f"istjax eval: {e}")
        return EXIT_CONFIG
    print(f"{result['checkpoint']} (round {result['round']}): test accuracy {result['test_accuracy']:.4f}, "
          f"test loss {result['test_loss']:.4f}, train loss {result['train_loss']:.4f}")
    print(json.dumps(result))
    return EXIT_OK


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``istjax`` console script; returns the exit code."""
    argv = list(sys.argv if argv is None else argv)
    prog = os.path.basename(argv[0]) if argv else "istjax"
    rest = argv[1:]
    if rest and rest[0] in _SUBCOMMANDS:
        module_name = _SUBCOMMANDS[rest[0]]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name != module_name:
                raise
            print(f"{prog} {rest[0]}: not available in this install ({module_name} is missing).", file=sys.stderr)
            return EXIT_CONFIG
        return int(module.main(rest[1:]) or 0)
    if rest and rest[0] == "eval":
        return eval_main(rest[1:])
    if rest and rest[0] == "train":
        rest = rest[1:]
    elif rest and not rest[0].startswith("-"):
        print(f"{prog}: unknown command {rest[0]!r}; commands: train (default), eval, "
              f"{', '.join(_SUBCOMMANDS)}.\n\nusage:\n{_usage()}", file=sys.stderr)
        return EXIT_CONFIG
    return train_main([f"{prog} train", *rest])


if __name__ == "__main__":
    sys.exit(main())
