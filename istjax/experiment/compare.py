"""``istjax compare``: IST, data parallel and local SGD under one budget, as a table and a figure.

::

    istjax compare [--config=FILE] [--config.FIELD=VALUE ...] [--algorithms ist,data_parallel,local_sgd]
                   [--workers 2,4] [--target 0.9] --workdir DIR [--overwrite]
    istjax compare --runs RUN_DIR ... [--target 0.9] [--workdir DIR]     (tabulate finished runs, no training)

Every (algorithm, W) pair trains the same config with only ``algorithm`` and ``num_workers`` changed, so all runs
see the same budget: the same rounds, local steps K and batch size B, hence the same ``rounds * W * K * B``
samples at equal W. Runs go to ``DIR/<algorithm>_W<W>`` (`istjax.experiment.driver.train_and_evaluate`; a finished run there
with the same config is reused, not retrained). Then, from each run's ``metrics.jsonl``:

==================  ============================================================================================
column              meaning
==================  ============================================================================================
final acc           test accuracy at the last evaluation
rounds to target    first evaluated round with test accuracy >= target
time to target (s)  training wall time (compilation and evaluation excluded) at that round
bytes to target     bytes moved by all workers, both directions, up to that round (``bytes_total``)
time/round (ms)     training wall time / rounds
bytes/round         bytes moved by all workers per round
==================  ============================================================================================

The target defaults to ``config.target_accuracy``, else to the lowest final accuracy among the runs rounded down
to a hundredth (so every run reaches it and the columns compare how fast). The table is printed and written as
``DIR/comparison.md`` and ``DIR/comparison.json``, and the curves (`istjax.experiment.plot.plot_runs`) as
``DIR/comparison.png``. Evaluations happen every ``eval_every`` rounds, so "to target" is resolved to that grid.

A run that fails (`istjax.experiment.driver.TrainingError`, e.g. a non-finite loss) does not stop the comparison: the error is
reported, the other runs still train, the failed run's evaluations before the failure stay in the table with the
reason in its ``note`` column, and ``istjax compare`` exits 1 after writing the outputs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple, Optional

from istjax.experiment.metrics import format_bytes
from istjax.experiment.plot import PlotError, Run, load_run, plot_runs

__all__ = ["Row", "Comparison", "default_target", "format_table", "main", "rows", "run_comparison"]

ALGORITHMS = ("ist", "data_parallel", "local_sgd")


class Row(NamedTuple):
    """One run's line of the comparison table (None: not reached / unknown)."""

    algorithm: str
    num_workers: Optional[int]
    local_steps: Optional[int]
    rounds: int
    samples_seen: Optional[int]
    final_accuracy: float
    best_accuracy: float
    target: Optional[float]
    rounds_to_target: Optional[int]
    time_to_target_s: Optional[float]
    bytes_to_target: Optional[float]
    time_per_round_s: Optional[float]
    bytes_per_round: Optional[float]
    bytes_total: Optional[float]
    run_dir: str
    note: Optional[str] = None


class Comparison(NamedTuple):
    """What `run_comparison` trained: the runs with metrics, and ``failed``: run directory -> the error's message
    for every run that raised `istjax.experiment.driver.TrainingError` (its metrics up to the failure are among ``runs`` when it
    evaluated at least once)."""

    runs: list[Run]
    failed: dict[str, str]


def _num(rec: dict[str, Any], field: str) -> Optional[float]:
    v = rec.get(field)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _trained(run: Run) -> list[dict[str, Any]]:
    """Records of training evaluations (a record without ``wall_time_s`` is a re-evaluation of a finished run)."""
    recs = [r for r in run.records if "wall_time_s" in r]
    return recs or run.records


def default_target(runs: Sequence[Run]) -> float:
    """The lowest final test accuracy among ``runs``, rounded down to 0.01: an accuracy every run reaches."""
    finals = [float(_trained(r)[-1]["test_accuracy"]) for r in runs]
    return math.floor(min(finals) * 100) / 100


def row(run: Run, target: Optional[float], note: Optional[str] = None) -> Row:
    """The table row of one run (pure function of its records)."""
    recs = _trained(run)
    last = recs[-1]
    accs = [_num(r, "test_accuracy") for r in recs]
    hit = None
    if target is not None:
        hit = next((r for r, a in zip(recs, accs) if a is not None and a >= target), None)
    rounds = int(last["round"])
    wall, total = _num(last, "wall_time_s"), _num(last, "bytes_total")
    return Row(
        algorithm=run.algorithm, num_workers=run.num_workers, local_steps=run.local_steps, rounds=rounds,
        samples_seen=last.get("samples_seen"), final_accuracy=float(last["test_accuracy"]),
        best_accuracy=max(a for a in accs if a is not None), target=target,
        rounds_to_target=None if hit is None else int(hit["round"]),
        time_to_target_s=None if hit is None else _num(hit, "wall_time_s"),
        bytes_to_target=None if hit is None else _num(hit, "bytes_total"),
        time_per_round_s=wall / rounds if wall is not None and rounds else None,
        bytes_per_round=total / rounds if total is not None and rounds else None,
        bytes_total=total, run_dir=str(run.path), note=note)


def rows(runs: Sequence[Run], target: Optional[float] = None, notes: Optional[dict[str, str]] = None) -> list[Row]:
    """Rows of ``runs`` against ``target`` (default: `default_target`), sorted by W, then algorithm order.

    ``notes`` maps a run directory to a remark for its row (`run_comparison` notes failed runs).
    """
    if target is None:
        target = default_target(runs)
    notes = {str(pathlib.Path(k)): v for k, v in (notes or {}).items()}
    order = {a: i for i, a in enumerate(ALGORITHMS)}
    out = [row(r, target, notes.get(str(pathlib.Path(r.path)))) for r in runs]
    return sorted(out, key=lambda r: (r.num_workers or 0, order.get(r.algorithm, len(order)), r.algorithm))


def format_table(table: Sequence[Row], failed: Optional[dict[str, str]] = None) -> str:
    """A markdown table of ``table`` (not-reached cells read ``not reached``; a ``note`` column when a row has one).

    ``failed`` (run directory -> message) lists, under the table, failed runs that have no row (no evaluation).
    """
    target = table[0].target if table else None
    notes = any(r.note for r in table)
    head = ["algorithm", "W", "K", "rounds", "final acc", "best acc",
            f"rounds to {target:.2%}" if target is not None else "rounds to target",
            "time to target (s)", "bytes to target", "time/round (ms)", "bytes/round"] + (["note"] if notes else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in table:
        reached = r.rounds_to_target is not None
        cells = [r.algorithm, str(r.num_workers or "-"), str(r.local_steps or "-"), str(r.rounds),
                 f"{r.final_accuracy:.4f}", f"{r.best_accuracy:.4f}",
                 str(r.rounds_to_target) if reached else "not reached",
                 f"{r.time_to_target_s:.2f}" if reached and r.time_to_target_s is not None else
                 ("not reached" if not reached else "-"),
                 format_bytes(r.bytes_to_target) if reached else "not reached",
                 f"{1000 * r.time_per_round_s:.1f}" if r.time_per_round_s is not None else "-",
                 format_bytes(r.bytes_per_round)] + ([r.note or ""] if notes else [])
        lines.append("| " + " | ".join(cells) + " |")
    shown = {str(pathlib.Path(r.run_dir)) for r in table}
    for run_dir, message in (failed or {}).items():
        if str(pathlib.Path(run_dir)) not in shown:
            lines.append(f"\nfailed before its first evaluation: {run_dir}: {message}")
    return "\n".join(lines)


def write_outputs(runs: Sequence[Run], table: Sequence[Row], workdir: str | os.PathLike,
                  title: Optional[str] = None, failed: Optional[dict[str, str]] = None) -> dict[str, pathlib.Path]:
    """Writes ``comparison.md``, ``comparison.json`` and ``comparison.png`` into ``workdir``; returns the paths."""
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    md = workdir / "comparison.md"
    md.write_text((f"{title}\n\n" if title else "") + format_table(table, failed) + "\n")
    js = workdir / "comparison.json"
    js.write_text(json.dumps([r._asdict() for r in table], indent=2) + "\n")
    png = plot_runs([r.path for r in runs], workdir / "comparison.png", title=title,
                    target=table[0].target if table else None)
    return {"markdown": md, "json": js, "png": png}


def run_comparison(config, workdir: str | os.PathLike, *, algorithms: Sequence[str] = ALGORITHMS,
                   workers: Sequence[int] = (2, 4), overwrite: bool = False) -> Comparison:
    """Trains ``config`` once per (algorithm, W) into ``workdir/<algorithm>_W<W>``; returns the runs.

    Every config is validated (`istjax.experiment.config.validate`) before the first run starts, so a width that does not
    split over some W fails at once, not after an hour of the other runs. A run that raises
    `istjax.experiment.driver.TrainingError` is reported on stderr and recorded in ``Comparison.failed``; the others still run.
    """
    import istjax.experiment.config as config_lib
    import istjax.experiment.driver as train

    workdir = pathlib.Path(workdir)
    configs = []
    problems = []
    for w in workers:
        for algo in algorithms:
            c = config.copy_and_resolve_references()
            c.algorithm, c.num_workers = algo, int(w)
            c.name = f"{config.name}-{algo}-W{w}"
            c.progress = False
            try:
                config_lib.validate(c, load_data=False)
            except config_lib.ConfigError as e:
                problems += [f"[algorithm={algo}, num_workers={w}] {p}" for p in e.problems]
            configs.append((workdir / f"{algo}_W{w}", c))
    if problems:
        raise config_lib.ConfigError(problems)
    failed: dict[str, str] = {}
    for run_dir, c in configs:
        print(f"== {c.algorithm} W={c.num_workers}: {run_dir}", file=sys.stderr, flush=True)
        try:
            train.train_and_evaluate(c, run_dir, overwrite=overwrite)
        except train.TrainingError as e:
            failed[str(run_dir)] = str(e)
            print(f"== {c.algorithm} W={c.num_workers} failed: {e}\n   (continuing with the other runs)",
                  file=sys.stderr, flush=True)
    runs = []
    for d, _ in configs:
        try:
            runs.append(load_run(d))
        except PlotError:
            if str(d) not in failed:  # a failed run may have no evaluation yet; anything else is a real problem
                raise
    return Comparison(runs, failed)


def _csv(kind, values: str, allowed=None):
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
        raise argparse.ArgumentTypeError(f"--{kind}={values!r}: give positive integers, e.g. 2,4.") from None
    if any(i < 1 for i in ints):
        raise argparse.ArgumentTypeError(f"--{kind}={values!r}: worker counts must be >= 1.")
    return ints


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="istjax compare", description=__doc__.split("::")[0].strip(),
        epilog="Any other --config.FIELD=VALUE flag overrides that field of the config (as for `istjax train`).")
    p.add_argument("--algorithms", type=lambda s: _csv("algorithms", s, ALGORITHMS), default=list(ALGORITHMS),
                   help="comma-separated algorithms (default: ist,data_parallel,local_sgd)")
    p.add_argument("--workers", type=lambda s: _csv("workers", s), default=[2, 4],
                   help="comma-separated worker counts W (default: 2,4)")
    p.add_argument("--target", type=float, default=None,
                   help="target test accuracy (default: config.target_accuracy, else the lowest final accuracy)")
    p.add_argument("--workdir", default=None, help="where the runs and the table go (required unless --runs)")
    p.add_argument("--runs", nargs="+", default=None, metavar="RUN_DIR",
                   help="tabulate these finished run directories instead of training")
    p.add_argument("--overwrite", action="store_true", help="retrain runs already in the workdir")
    p.add_argument("--title", default=None, help="title of the table and figure")
    return p


def main(argv: Sequence[str]) -> int:
    """``istjax compare`` (``argv`` without the program and subcommand names); returns the exit code."""
    parser = _parser()
    try:
        args, rest = parser.parse_known_args(list(argv))
    except SystemExit as e:
        return int(e.code or 0)
    if args.target is not None and not 0 < args.target <= 1:
        print(f"istjax compare: --target={args.target}: give a test accuracy in (0, 1], e.g. 0.9.", file=sys.stderr)
        return 2
    try:
        if args.runs:
            if rest:
                print(f"istjax compare: {rest}: config flags are not used with --runs.", file=sys.stderr)
                return 2
            runs = [load_run(d) for d in args.runs]
            failed: dict[str, str] = {}
            target = args.target
            workdir = args.workdir
        else:
            if args.workdir is None:
                print("istjax compare: --workdir is required (the runs and the table are written there).",
                      file=sys.stderr)
                return 2
            import istjax.experiment.cli as cli
            import istjax.experiment.config as config_lib

            try:
                config, _, _, _ = cli.parse_train_args(["istjax compare", *rest])
                runs, failed = run_comparison(config, args.workdir, algorithms=args.algorithms,
                                              workers=args.workers, overwrite=args.overwrite)
            except config_lib.ConfigError as e:
                print(f"istjax compare: {e}", file=sys.stderr)
                return 2
            target = args.target if args.target is not None else config.target_accuracy
            workdir = args.workdir
        if not runs:
            print("istjax compare: every run failed before its first evaluation:\n"
                  + "\n".join(f"  {d}: {m}" for d, m in failed.items()), file=sys.stderr)
            return 1
        notes = {d: "failed: " + m.split(";")[0] for d, m in failed.items()}
        table = rows(runs, target, notes)
    except PlotError as e:
        print(f"istjax compare: {e}", file=sys.stderr)
        return 2
    text = format_table(table, failed)
    if args.title:
        text = f"{args.title}\n\n{text}"
    print(text)
    if workdir is not None:
        paths = write_outputs(runs, table, workdir, title=args.title, failed=failed)
        print(f"wrote {paths['markdown']}, {paths['json']}, {paths['png']}")
    if failed:
        print(f"istjax compare: {len(failed)} of the runs failed (see the note column); exit 1.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
