"""The ``istjax`` command.

::

    istjax [train] [--config=FILE[:ARG]] [--workdir=DIR] [--config.FIELD=VALUE ...] [--resume | --overwrite]
    istjax plot RUN_DIR ...          (istjax.experiment.plot.main)
    istjax compare ...               (istjax.experiment.compare.main)

``train`` (the default subcommand) runs `istjax.experiment.driver.train_and_evaluate`. ``--config`` names a Python file with
``get_config()`` (Flax-examples style, ml_collections ``config_flags``); without it the default study runs
(`istjax.experiment.config.default_config`, IST on scikit-learn's digits, which ships with the install). Any field can be
overridden: ``--config.num_workers=2 --config.model.hidden='(256,256)'``. Without ``--workdir`` results go to
``./runs/<name>-<timestamp>``.

Exit codes: 0 success; 2 a config, flag or workdir error (reported before anything compiles); 1 a training failure
(e.g. a non-finite loss); 130 / 143 interrupted by SIGINT / SIGTERM (after checkpointing; rerun the same command,
or add ``--resume``, to continue).
"""

from __future__ import annotations

import ast
import datetime
import importlib
import os
import re
import sys
from typing import Optional, Sequence

__all__ = ["main", "parse_train_args", "EXIT_OK", "EXIT_FAILURE", "EXIT_CONFIG"]

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG = 0, 1, 2
_SUBCOMMANDS = {"plot": "istjax.experiment.plot", "compare": "istjax.experiment.compare"}
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
      istjax.experiment.config.ConfigError: unknown flags, unknown config fields (named, with close matches), values that do
        not parse, or a config file that does not load.
    """
    from absl import flags

    import istjax.experiment.config as config_lib

    argv = list(argv)
    default_file = os.path.abspath(config_lib.__file__)
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
        raise config_lib.ConfigError([str(e)]) from e
    except Exception as e:  # noqa: BLE001 - a config file can fail in any way; report it as a config error
        raise config_lib.ConfigError([f"--config: could not load the config ({type(e).__name__}: {e})"]) from e
    # New dataset_kwargs keys (loader arguments the config file does not set) are literals set after parsing;
    # istjax.experiment.config.validate checks them against the loader.
    # ``--config.FIELD=None`` unsets a field (ml_collections' flag parser cannot parse None into a typed field, e.g.
    # the float ``target_accuracy``); it is set after parsing and checked by istjax.experiment.config.validate like any value.
    extra_kwargs, kept, unset = {}, [], []
    for arg in argv:
        m = _OVERRIDE.match(arg)
        name = m.group(1) if m else ""
        if m and "=" in arg and arg.split("=", 1)[1] in ("None", "none") and _resolves(base, name):
            unset.append(name)
        elif name.startswith("dataset_kwargs.") and name.count(".") == 1 and not _resolves(base, name):
            extra_kwargs[name.split(".", 1)[1]] = _literal(arg.split("=", 1)[1] if "=" in arg else "True")
        else:
            kept.append(arg)
    argv = kept
    overrides = [m.group(1) for m in map(_OVERRIDE.match, argv[1:]) if m]
    unknown = [o for o in overrides if not _resolves(base, o)]
    if unknown:
        raise config_lib.ConfigError([
            f"--config.{o}: unknown config field{config_lib.close_matches(o, known)}. Known fields: "
            f"{', '.join(known)}." for o in unknown])

    try:
        fv = flags.FlagValues()
        _define(fv, argv, default_file)
        fv(argv)
        config = fv.config
        if extra_kwargs:
            with config.dataset_kwargs.unlocked():
                for k, v in extra_kwargs.items():
                    config.dataset_kwargs[k] = v
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
    return config, fv.workdir, fv.resume, fv.overwrite


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
    import istjax.experiment.config as config_lib

    if any(a in ("-h", "--help", "--helpfull") for a in argv[1:]):
        print("usage:\n" + _usage())
        import inspect

        print("config fields, defaults and meaning (istjax.experiment.config.default_config):")
        for line in inspect.getsource(config_lib.default_config).splitlines():
            if line.strip().startswith(("c.", "# ")):
                print("  " + line.strip().removeprefix("c."))
        return EXIT_OK
    try:
        config, workdir, resume, overwrite = parse_train_args(argv)
    except config_lib.ConfigError as e:
        print(f"istjax train: {e}", file=sys.stderr)
        return EXIT_CONFIG

    from absl import logging as absl_logging

    from istjax.experiment.metrics import is_primary

    # orbax logs every save at INFO, and read-only checkpoint managers (non-primary MPI ranks) at WARNING.
    absl_logging.set_verbosity(absl_logging.WARNING if is_primary() else absl_logging.ERROR)
    import istjax.experiment.driver as train

    if workdir is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        workdir = os.path.join("runs", f"{config.name}-{stamp}")
    try:
        train.train_and_evaluate(config, workdir, resume=resume, overwrite=overwrite)
    except config_lib.ConfigError as e:
        print(f"istjax train: {e}", file=sys.stderr)
        return EXIT_CONFIG
    except train.TrainingError as e:
        print(f"istjax train: training failed: {e}", file=sys.stderr)
        return EXIT_FAILURE
    except train.Interrupted as e:
        print(f"istjax train: interrupted: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("istjax train: aborted.", file=sys.stderr)
        return 130
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
    if rest and rest[0] == "train":
        rest = rest[1:]
    elif rest and not rest[0].startswith("-"):
        print(f"{prog}: unknown command {rest[0]!r}; commands: train (default), "
              f"{', '.join(_SUBCOMMANDS)}.\n\nusage:\n{_usage()}", file=sys.stderr)
        return EXIT_CONFIG
    return train_main([f"{prog} train", *rest])


if __name__ == "__main__":
    sys.exit(main())
