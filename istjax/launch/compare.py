"""``istjax compare``: IST, data parallel and local SGD under one budget, over seeds, as a table and a figure.

::

    istjax compare [--config=FILE] [--config.FIELD=VALUE ...] [--algorithms ist,data_parallel,local_sgd[,resist]]
                   [--workers 2,4] [--seeds 0,1,2] [--budget samples|rounds] [--target 0.9] --workdir DIR
                   [--overwrite] [--no-bands]
    istjax compare --runs RUN_DIR ... [--target 0.9] [--workdir DIR]     (tabulate finished runs, no training)

Every (algorithm, W) pair trains the same config with only ``algorithm.name`` and ``num_workers`` changed (and the
rounds the budget gives that W), once per seed (``--seeds``, default 0,1,2: ``config.seed`` changed, nothing else),
into ``DIR/<algorithm>_W<W>_s<seed>`` (`istjax.launch.driver.train_and_evaluate`; a finished run there with the
same config is reused, not retrained). The budget (``--budget``, `plan_budget`) is what every run gets the same of:

* ``samples`` (default): the config's ``num_rounds * num_workers * K * B`` training samples, so W trains
  ``num_rounds * num_workers / W`` rounds (with the default config, 76,800 samples: W=2 runs 120 rounds, W=4 60);
  ``eval_every`` (and ``lr_schedule_rounds`` / ``warmup_rounds`` when set) scale alike, so every W evaluates at
  the same samples seen;
* ``rounds``: the config's ``num_rounds`` at every W, so W=2 sees half the samples of W=4.

The budget is printed when training starts and above the table. Then, from each run's ``metrics.jsonl``:

============================================  =====================================================================
column                                        meaning
============================================  =====================================================================
final acc                                     test accuracy at the last evaluation
rounds to target                              first evaluated round with test accuracy >= target
samples to target                             training examples seen by all workers up to that round
                                              (``samples_seen``)
time to target (s)                            training wall time (compilation and evaluation excluded) at that
                                              round
bytes to target (per worker, each way)        bytes one worker sent (= received) up to that round:
                                              ``bytes_total / (2 W)``
time/round (ms)                               training wall time / rounds
bytes per worker per round, each way          what one worker sends (= receives) in a round: ``summary.json``'s
                                              ``bytes_sent_per_worker_per_round``
============================================  =====================================================================

Bytes follow one convention in the table, ``summary.json`` and the figure: per worker, each way (where a runtime
measured sent and received apart, the table shows both per round, and "to target" their mean). Wall times are what
the run's runtime measured, and the table says which (`istjax.launch.plot_records.wall_time_text`): under
``runtime=simulate`` one process computes every worker and nothing is communicated.

With several seeds per cell (`cells`) the table reads ``mean ± std (n)`` in every column: the mean over the cell's
seeds, their sample standard deviation (``-`` for one seed) and how many seeds the numbers come from; the "to target"
columns average the seeds that reached the target and a ``reached`` column says how many did (``2/3``). Runs are
grouped into cells by their config without ``seed`` and run-control fields (`istjax.launch.plot.group_runs`),
so ``--runs`` tabulates seeds of finished studies the same way.

The target (`choose_target`) is ``--target`` when given. Otherwise the runs' own ``target_accuracy`` (`run_target`:
from their ``config.json``, else ``summary.json``) when it separates them: some run reaches it, and not every run at
its first evaluation (then "rounds to target" reads what each run's ``summary.json`` says). When it does not (a target every
run reaches at its first evaluation says nothing about how fast they learn), or no run has one, the target is derived
from the runs (`derive_target`): the highest 0.01 step that every run reaches. The line above the table says which
target and how it was chosen (``target 93.00%: derived from the runs, ...``). Runs whose own targets differ are each
measured against their own; the table then gets a ``target`` column and a line under it saying so. The table is
printed and written as ``DIR/comparison.md``, ``DIR/comparison.csv`` and ``DIR/comparison.json`` (per cell the
mean, ``_std`` and ``_n`` of each number; JSON also lists every seed's own row under ``runs``), and the curves
(`istjax.launch.plot.plot_runs`: one mean curve per cell with a min..max band across seeds) as
``DIR/comparison.png``. Evaluations happen every ``eval_every`` rounds, so "to target" is resolved to that grid.

A run that fails (`istjax.launch.driver.TrainingError`, e.g. a non-finite loss) does not stop the comparison:
the error is reported, the other runs still train, and ``istjax compare`` exits 1 after writing the outputs. The
failure is named in the cell's ``note`` column. A failed seed is left out of its cell's numbers when another seed of
the cell finished (n says how many were used); when none did (or with one seed), the failed runs' evaluations before
the failure make the row, as the note says.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple, Optional

from istjax.launch.compare_table import (Cell, Row, Stat, TargetChoice, cells, choose_target, default_target,
                                         derive_target, format_table, rows, run_target, run_targets, stat,
                                         trained_records, used_runs, write_outputs)
from istjax.launch.plot import BANDS, PlotError, Run, load_run, wall_time_text
from istjax.launch.study import Cell as StudyCell
from istjax.launch.study import Planned, flat, run_study

__all__ = ["Budget", "Cell", "Comparison", "Row", "Stat", "TargetChoice", "cells", "choose_target", "default_target",
           "derive_target", "format_table", "main", "plan_budget", "rows", "run_comparison", "run_target",
           "run_targets", "runs_budget", "stat", "used_runs", "write_outputs"]

DEFAULT_ALGORITHMS = ("ist", "data_parallel", "local_sgd")  # what a comparison trains unless --algorithms says
DEFAULT_SEEDS = (0, 1, 2)  # every (algorithm, W) cell trains once per seed unless --seeds says
# --budget: what every run of a comparison gets the same of (`plan_budget`).
BUDGETS = {"samples": "equal training samples: W trains num_rounds * num_workers / W rounds",
           "rounds": "the config's num_rounds at every W (W = 2 sees half the samples of W = 4)"}
# Config fields counted in rounds that shape training, scaled with W under the samples budget (0: unset).
_ROUND_FIELDS = ("num_rounds", "lr_schedule_rounds", "warmup_rounds")


class Comparison(NamedTuple):
    """What `run_comparison` trained: the runs with metrics, and ``failed``: run directory -> the error's message
    for every run that raised `istjax.launch.driver.TrainingError` (its metrics up to the failure are among ``runs`` when it
    evaluated at least once), and the ``budget`` every run trained (`plan_budget`)."""

    runs: list[Run]
    failed: dict[str, str]
    budget: Optional["Budget"] = None


class Budget(NamedTuple):
    """What every run of a comparison trains (`plan_budget`).

    Fields:
      kind: ``"samples"`` (equal samples seen: every W trains the config's ``num_rounds * num_workers``
        worker-rounds) or ``"rounds"`` (the config's ``num_rounds`` at every W: W = 2 sees half the samples of W = 4).
      fields: W -> the config fields set for that W (``num_rounds``; under ``"samples"`` also ``eval_every``, and
        ``lr_schedule_rounds`` and ``warmup_rounds``, scaled alike, so every W evaluates and follows its
        learning-rate schedule at the same samples seen).
      samples: W -> the training samples one run sees (``num_rounds * W * K * B``).
    """

    kind: str
    fields: dict[int, dict[str, int]]
    samples: dict[int, int]

    @property
    def line(self) -> str:
        """``"budget: equal samples, 76,800 per run: W=2 runs 120 rounds, W=4 runs 60 rounds"``."""
        ws = sorted(self.fields)
        if self.kind == "samples":
            per = ", ".join(f"W={w} runs {self.fields[w]['num_rounds']} rounds" for w in ws)
            return f"budget: equal samples, {self.samples[ws[0]]:,} per run: {per}"
        per = ", ".join(f"W={w} sees {self.samples[w]:,}" for w in ws)
        unequal = len(set(self.samples.values())) > 1
        return (f"budget: equal rounds, {self.fields[ws[0]]['num_rounds']} per run: training samples {per}"
                + (" (unequal; --budget=samples gives every W the same samples)" if unequal else ""))


def plan_budget(config, workers: Sequence[int], budget: str = "samples") -> Budget:
    """The rounds (and round-counted fields) each W trains under ``budget`` (a key of `BUDGETS`).

    ``"samples"``: the config's budget, ``num_rounds * num_workers * K * B`` samples, for every W: W trains
    ``num_rounds * num_workers / W`` rounds (``eval_every``, and ``lr_schedule_rounds`` / ``warmup_rounds`` when set,
    scaled alike; ``eval_every`` rounded down, at least 1). ``"rounds"``: ``num_rounds`` at every W.

    Raises:
      ConfigError: under ``"samples"``, a W that does not divide the worker-rounds of a round-counted field (with the
        multiple to set, or ``--budget=rounds``); an unknown ``budget``.
    """
    from istjax.launch.config import ConfigError
    from istjax.launch.summary import step_examples

    if budget not in BUDGETS:
        raise ConfigError([f"--budget={budget!r}: choose one of {sorted(BUDGETS)}."])
    base = int(config.num_workers)
    if budget == "rounds" or base < 1:  # num_workers < 1: config validation names it
        fields = {int(w): {"num_rounds": int(config.num_rounds)} for w in workers}
    else:
        fields = {int(w): {name: int(config.get(name, 0)) * base // int(w) for name in _ROUND_FIELDS}
                  for w in workers}
        for w in fields:
            fields[w]["eval_every"] = max(1, int(config.eval_every) * base // w)
        problems = _budget_problems(config, base, list(fields))
        if problems:
            raise ConfigError(problems)
    per_round = int(config.local_steps) * step_examples(config)
    return Budget(budget, fields, {w: f["num_rounds"] * w * per_round for w, f in fields.items()})


def _budget_problems(config, base: int, workers: Sequence[int]) -> list[str]:
    """The round-counted fields (`_ROUND_FIELDS`) whose worker-rounds at the config's ``num_workers`` (``base``)
    some W does not divide, each with the multiple that splits over every W."""
    step = math.lcm(*(w // math.gcd(base, w) for w in workers))
    out = []
    for name in _ROUND_FIELDS:
        value = int(config.get(name, 0))
        for w in workers:
            if value * base % w:
                out.append(f"--budget=samples: {name}={value} at the config's num_workers={base} does not split "
                           f"over W={w} ({value * base / w:g} rounds); set --config.{name} to a multiple of {step} "
                           f"(e.g. {math.ceil(value / step) * step}), --config.num_workers to one of the --workers, "
                           f"or pass --budget=rounds.")
    return out


def _cell_config(config, algo: str, w: int, budget: Budget, seed: Optional[int]):
    """``config`` as the (``algo``, ``w``) cell trains it with ``seed`` (None: the config's own)."""
    c = config.copy_and_resolve_references()
    c.algorithm.name, c.num_workers = algo, int(w)
    for field, value in budget.fields[int(w)].items():
        c[field] = value
    c.name = f"{config.name}-{algo}-W{w}" + ("" if seed is None else f"-s{seed}")
    if seed is not None:
        c.seed = int(seed)
    c.progress = False
    return c


def _cells(config, algorithms: Sequence[str], workers: Sequence[int], budget: Budget) -> list[StudyCell]:
    """One study cell (`istjax.launch.study.Cell`) per (algorithm, W), labelled ``<algorithm>_W<W>``, each config
    validated (`istjax.launch.config.validate`) before anything trains.

    Raises:
      ConfigError: every problem of every config, each prefixed by the algorithm and W it comes from.
    """
    import functools

    import istjax.launch.config as config_lib

    cells = []
    problems: dict[str, None] = {}
    for w in workers:
        for algo in algorithms:
            try:
                config_lib.validate(_cell_config(config, algo, w, budget, None), load_data=False)
            except config_lib.ConfigError as e:
                problems.update(dict.fromkeys(f"[algorithm.name={algo}, num_workers={w}] {p}" for p in e.problems))
            cells.append(StudyCell(f"{algo}_W{w}", functools.partial(_cell_config, config, algo, w, budget),
                                   info={"algorithm": algo, "num_workers": int(w)}))
    if problems:
        raise config_lib.ConfigError(list(problems))
    return cells


def _trainer(overwrite: bool):
    """Trains a run in this process; a `istjax.launch.driver.TrainingError` is the run's failure (the others still
    train), a config error ends the comparison (`main` exits 2)."""
    def train(p: Planned) -> Optional[str]:
        from istjax.launch import driver

        try:
            driver.train_and_evaluate(p.config, p.run_dir, overwrite=overwrite)
        except driver.TrainingError as e:
            return str(e)
        return None
    return train


def _describe(p: Planned) -> str:
    """``ist W=2 seed=0``: a run in the progress lines."""
    return (f"{p.cell.info['algorithm']} W={p.cell.info['num_workers']}"
            + ("" if p.seed is None else f" seed={p.seed}"))


def run_comparison(config, workdir: str | os.PathLike, *, algorithms: Sequence[str] = DEFAULT_ALGORITHMS,
                   workers: Sequence[int] = (2, 4), seeds: Optional[Sequence[int]] = DEFAULT_SEEDS,
                   overwrite: bool = False, budget: str = "samples") -> Comparison:
    """Trains ``config`` once per (algorithm, W, seed) into ``workdir/<algorithm>_W<W>_s<seed>``, ``config.seed``
    set to the seed (seed by seed: after the first one, a whole single-seed comparison is on disk); returns the runs.
    ``seeds=None``: once per (algorithm, W) with the config's seed, into ``workdir/<algorithm>_W<W>``.

    ``budget`` (`plan_budget`): ``"samples"`` gives every W the config's samples (W = 2 trains twice the rounds of
    W = 4), ``"rounds"`` the config's rounds. Every config is validated (`istjax.launch.config.validate`) before
    the first run starts, so a width that does not split over some W fails at once, not after an hour of the other
    runs. A run that raises `istjax.launch.driver.TrainingError` is reported on stderr and recorded in
    ``Comparison.failed``; the others still run.
    """
    plan = plan_budget(config, workers, budget)
    cells = _cells(config, algorithms, workers, plan)
    print(f"== {plan.line}", file=sys.stderr, flush=True)
    outcome = run_study("compare", cells, [None] if seeds is None else list(seeds), workdir, layout=flat,
                        overwrite=overwrite, train=_trainer(overwrite), describe=_describe, record=lambda p: None)
    runs = []
    for p in outcome.planned:
        try:
            runs.append(load_run(p.run_dir))
        except PlotError:
            if str(p.run_dir) not in outcome.failed:  # a failed run may have no evaluation yet; else a real problem
                raise
    return Comparison(runs, outcome.failed, plan)


def _algorithm_names() -> list[str]:
    from istjax.algorithms import ALGORITHMS

    return list(ALGORITHMS)


def _csv(kind, values: str, allowed=None, minimum: int = 1):
    out = [v.strip() for v in values.split(",") if v.strip()]
    if not out:
        raise argparse.ArgumentTypeError(f"--{kind}: give a comma-separated list.")
    if allowed is not None:
        bad = [v for v in out if v not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(f"--{kind}: unknown {bad}; choose from {list(allowed)}.")
        return out
    try:
        ints = [int(v) for v in out]
    except ValueError:
        example = "2,4" if kind == "workers" else "0,1,2"
        raise argparse.ArgumentTypeError(f"--{kind}={values!r}: give {'positive' if minimum else 'non-negative'} "
                                         f"integers, e.g. {example}.") from None
    if any(i < minimum for i in ints):
        what = "worker counts" if kind == "workers" else kind
        raise argparse.ArgumentTypeError(f"--{kind}={values!r}: {what} must be >= {minimum}.")
    if len(set(ints)) < len(ints):
        raise argparse.ArgumentTypeError(f"--{kind}={values!r}: a value is given twice.")
    return ints


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="istjax compare", description=__doc__.split("::")[0].strip(),
        epilog="Any other --config.FIELD=VALUE flag overrides that field of the config (as for `istjax train`).")
    p.add_argument("--algorithms", type=lambda s: _csv("algorithms", s, _algorithm_names()),
                   default=list(DEFAULT_ALGORITHMS),
                   help="comma-separated algorithms from ist,data_parallel,local_sgd,resist "
                        "(default: ist,data_parallel,local_sgd)")
    p.add_argument("--workers", type=lambda s: _csv("workers", s), default=[2, 4],
                   help="comma-separated worker counts W (default: 2,4)")
    p.add_argument("--seeds", type=lambda s: _csv("seeds", s, minimum=0), default=None,
                   help="comma-separated seeds: every (algorithm, W) trains once per seed into "
                        "<algorithm>_W<W>_s<seed>, and the table reports mean ± std (n) (default: 0,1,2)")
    p.add_argument("--budget", choices=sorted(BUDGETS), default=None,
                   help="what every run gets the same of: samples (default: equal training samples, the config's "
                        "num_rounds * num_workers * K * B; W trains num_rounds * num_workers / W rounds, so W=2 runs "
                        "twice the rounds of W=4) or rounds (the config's num_rounds at every W: W=2 sees half the "
                        "samples of W=4); printed with the table")
    p.add_argument("--target", type=float, default=None,
                   help="target test accuracy for every run (default: the config's target_accuracy when it "
                        "separates the runs: some run reaches it, not every run at its first evaluation; else "
                        "derived from the runs: the highest 0.01 step every run reaches. With --runs each run's own "
                        "when they differ. The table says which target and why)")
    p.add_argument("--workdir", default=None, help="where the runs and the table go (required unless --runs)")
    p.add_argument("--runs", nargs="+", default=None, metavar="RUN_DIR",
                   help="tabulate these finished run directories instead of training (seeds of one config are "
                        "one cell)")
    p.add_argument("--overwrite", action="store_true", help="retrain runs already in the workdir")
    p.add_argument("--title", default=None, help="title of the table and figure")
    p.add_argument("--band", choices=sorted(BANDS), default="minmax",
                   help="band around each cell's mean curve in the figure: minmax (default) or std")
    p.add_argument("--no-bands", action="store_true", help="draw every seed as its own line in the figure")
    return p


def _finished(args, rest: Sequence[str]) -> tuple[list[Run], dict[str, str], str]:
    """``--runs``: the runs, no failures, and the budget line read from them (`runs_budget`).

    Raises:
      SystemExit(2) after printing the problem: a flag that trains (config flags, --seeds, --budget).
    """
    if rest:
        _refuse(f"{rest}: config flags are not used with --runs.")
    if args.seeds is not None:
        _refuse("--seeds trains; with --runs the seeds of the given runs are grouped from their config.json.")
    if args.budget is not None:
        _refuse(f"--budget={args.budget} trains; with --runs the budget is read from the runs' metrics.jsonl (and "
                f"printed with the table).")
    runs = [load_run(d) for d in args.runs]
    return runs, {}, runs_budget(runs)


def _trained_runs(args, rest: Sequence[str]) -> tuple[list[Run], dict[str, str], str]:
    """Training: the runs `run_comparison` trained, its failures, and the budget line.

    Raises:
      SystemExit(2) after printing the problem: no --workdir, or a config error.
    """
    if args.workdir is None:
        _refuse("--workdir is required (the runs and the table are written there).")
    import istjax.launch.config as config_lib
    from istjax.launch.args import parse_train_args

    try:
        config, _, _, _ = parse_train_args(["istjax compare", *rest])
        runs, failed, budget = run_comparison(
            config, args.workdir, algorithms=args.algorithms, workers=args.workers,
            seeds=DEFAULT_SEEDS if args.seeds is None else args.seeds, overwrite=args.overwrite,
            budget=args.budget or "samples")
    except config_lib.ConfigError as e:
        _refuse(str(e))
    return runs, failed, budget.line


def _refuse(message: str) -> None:
    print(f"istjax compare: {message}", file=sys.stderr)
    raise SystemExit(2)


def runs_budget(runs: Sequence[Run]) -> str:
    """The budget line of finished runs, from their last training records: ``"budget: equal samples, 76,800 per
    run: W=2 ran 120 rounds, W=4 ran 60 rounds"``, ``"budget: equal rounds, 60 per run: W=2 saw 38,400 samples, W=4
    saw 76,800 samples"``, or each W's rounds and samples when neither is the same for every run."""
    by_w: dict[int, tuple[dict[int, None], dict[Any, None]]] = {}
    for r in runs:
        last = trained_records(r)[-1]
        rounds, samples = by_w.setdefault(r.num_workers or 0, ({}, {}))
        rounds[int(last["round"])] = None
        samples[last.get("samples_seen")] = None
    per_w = sorted(by_w.items())
    all_rounds = {n for rounds, _ in by_w.values() for n in rounds}
    all_samples = {n for _, samples in by_w.values() for n in samples}

    def listed(values) -> str:
        return "/".join("?" if v is None else f"{v:,}" for v in values)

    if len(all_samples) == 1 and None not in all_samples:
        return (f"budget: equal samples, {all_samples.pop():,} per run: "
                + ", ".join(f"W={w or '?'} ran {listed(rounds)} rounds" for w, (rounds, _) in per_w))
    if len(all_rounds) == 1:
        return (f"budget: equal rounds, {all_rounds.pop()} per run: "
                + ", ".join(f"W={w or '?'} saw {listed(samples)} samples" for w, (_, samples) in per_w))
    return ("budget: neither rounds nor samples are the same for every run: "
            + "; ".join(f"W={w or '?'} ran {listed(rounds)} rounds, {listed(samples)} samples"
                        for w, (rounds, samples) in per_w))


def main(argv: Sequence[str]) -> int:
    """``istjax compare`` (``argv`` without the program and subcommand names); returns the exit code."""
    parser = _parser()
    try:
        args, rest = parser.parse_known_args(list(argv))
        if args.target is not None and not 0 < args.target <= 1:
            _refuse(f"--target={args.target}: give a test accuracy in (0, 1], e.g. 0.9.")
        runs, failed, budget = (_finished if args.runs else _trained_runs)(args, rest)
    except SystemExit as e:
        return int(e.code or 0)
    except PlotError as e:
        print(f"istjax compare: {e}", file=sys.stderr)
        return 2
    if not runs:
        print("istjax compare: every run failed before its first evaluation:\n"
              + "\n".join(f"  {d}: {m}" for d, m in failed.items()), file=sys.stderr)
        return 1
    try:
        used = used_runs(runs, failed)  # the target is chosen from the finished runs when there are any
        choice = choose_target([r for r in used if str(r.path) not in failed] or used, args.target)
        table = cells(runs, choice.target, failed)
    except PlotError as e:
        print(f"istjax compare: {e}", file=sys.stderr)
        return 2
    header = [budget, choice.line] + ([f"wall time: {wall}"] if (wall := wall_time_text(runs)) else [])
    text = format_table(table, failed, header)
    if args.title:
        text = f"{args.title}\n\n{text}"
    print(text)
    if args.workdir is not None:
        paths = write_outputs(runs, table, args.workdir, title=args.title, failed=failed,
                              band=None if args.no_bands else args.band, header=header)
        print(f"wrote {paths['markdown']}, {paths['csv']}, {paths['json']}, {paths['png']}")
    if failed:
        print(f"istjax compare: {len(failed)} of the runs failed (see the note column); exit 1.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
