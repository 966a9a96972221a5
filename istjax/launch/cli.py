"""The ``istjax`` command.

::

    istjax [train] [--config=FILE[:ARG]] [--workdir=DIR] [--config.FIELD=VALUE ...] [--resume | --overwrite]
    istjax eval --workdir=DIR [--checkpoint=N]
    istjax sample --workdir=DIR --prompt=TEXT --length=N [--seed=S] [--temperature=T]   (istjax.launch.sample.main)
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
training. ``sample`` prints text from a saved run of a transformer on text: the prompt and exactly ``--length``
characters after it, seeded (``--seed``: the same seed, the same text), from its newest verified checkpoint.

Exit codes: 0 success; 2 a config, flag or workdir error, a damaged data file, a workdir another run is writing
(reported before anything compiles); 1 a training failure (e.g. a non-finite loss); 3 an environment failure (a
workdir that cannot be written, a full disk: the last good checkpoint is intact); 130 / 143 interrupted by SIGINT /
SIGTERM (after checkpointing; rerun the same command, or add ``--resume``, to continue). Under ``mpiexec`` an error
every rank meets is printed once, by rank 0.
"""

from __future__ import annotations

import datetime
import importlib
import os
import sys
from typing import Optional, Sequence

from istjax.launch.args import parse_train_args

__all__ = ["main", "parse_train_args", "EXIT_OK", "EXIT_FAILURE", "EXIT_CONFIG", "EXIT_ENVIRONMENT"]

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG, EXIT_ENVIRONMENT = 0, 1, 2, 3
_SUBCOMMANDS = {"plot": "istjax.launch.plot", "compare": "istjax.launch.compare",
                "configs": "istjax.launch.catalog", "sample": "istjax.launch.sample"}


def _usage() -> str:
    return __doc__.split("::", 1)[1].split("Exit codes")[0].strip("\n") + "\n\nExit codes" + \
        __doc__.split("Exit codes", 1)[1]


def _train_help() -> str:
    """``istjax train --help``: the usage, every config field with its default and meaning (the lines of
    `default_config`'s source), and the names every registry holds when it is printed (`_registered_names`)."""
    import inspect

    import istjax.launch.config as config_lib
    from istjax.launch.config.fields import FIELD_BUILDERS

    lines = ["usage:", _usage(), "config fields, defaults and meaning (istjax.launch.config.default_config):"]
    for line in "\n".join(inspect.getsource(f) for f in (config_lib.default_config, *FIELD_BUILDERS)).splitlines():
        if line.strip().startswith(("c.", "# ")) and "ConfigDict()" not in line.split("#")[0]:
            lines.append("  " + line.strip().removeprefix("c."))
    return "\n".join(lines + _registered_names())


def _registered_names() -> list[str]:
    """The names each ``*.name`` field may take, read from the registries themselves when called: a data set, model
    or algorithm your code registered (``istjax.data.register_dataset``, ``istjax.models.register_model``,
    ``ALGORITHMS.register``) is listed as a shipped one is. Entries that carry a description list it."""
    import textwrap

    from istjax.algorithms import ALGORITHMS
    from istjax.core.partition import SAMPLERS
    from istjax.data import DATASETS
    from istjax.models import MODELS
    from istjax.runtimes import RUNTIMES

    out = ["", "registered names (read from the registries now, with any your code added):"]
    for field, registry, where, more in (
            ("algorithm.name", ALGORITHMS, "istjax.algorithms.ALGORITHMS", ""),
            ("sampler.name", SAMPLERS, "istjax.core.partition.SAMPLERS", ""),
            ("model.name", MODELS, "istjax.models.MODELS", "a class of your own: model.module=path/to/file.py:Class"),
            ("data.name", DATASETS, "istjax.data.DATASETS",
             "tfds:<name>; data of your own: data.module=path/to/file.py:function"),
            ("runtime.name", RUNTIMES, "istjax.runtimes.RUNTIMES", "")):
        names = registry.names()
        said = {n: getattr(registry.get(n), "description", "") for n in names}
        if not any(isinstance(d, str) and d for d in said.values()):
            out += textwrap.wrap(f"{field} ({where}): {', '.join(names)}{'; or ' + more if more else ''}.", 118,
                                 initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False)
            continue
        out.append(f"  {field} ({where}):")
        width = max(map(len, names))
        for n in names:
            text = said[n] if isinstance(said[n], str) else ""
            out += textwrap.wrap(f"{n:<{width}}  {text}", 118, initial_indent="    ",
                                 subsequent_indent=" " * (width + 6)) or [f"    {n}"]
        if more:
            out.append(f"    or {more}")
    return out


def train_main(argv: Sequence[str]) -> int:
    """``istjax train``: returns the exit code."""
    import istjax.launch.config as config_lib

    if any(a in ("-h", "--help", "--helpfull") for a in argv[1:]):
        print(_train_help())
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
