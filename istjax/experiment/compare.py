"""``istjax compare``: IST, data parallel and local SGD under one budget, over seeds, as a table and a figure.

::

    istjax compare [--config=FILE] [--config.FIELD=VALUE ...] [--algorithms ist,data_parallel,local_sgd[,resist]]
                   [--workers 2,4] [--seeds 0,1,2] [--target 0.9] --workdir DIR [--overwrite] [--no-bands]
    istjax compare --runs RUN_DIR ... [--target 0.9] [--workdir DIR]     (tabulate finished runs, no training;
                                                                          default target: the runs' own)

Every (algorithm, W) pair trains the same config with only ``algorithm.name`` and ``num_workers`` changed, so all runs
see the same budget: the same rounds, local steps K and batch size B, hence the same ``rounds * W * K * B``
samples at equal W. Runs go to ``DIR/<algorithm>_W<W>`` (`istjax.experiment.driver.train_and_evaluate`; a finished run there
with the same config is reused, not retrained). With ``--seeds 0,1,2`` every (algorithm, W) cell trains once per
seed (``config.seed`` changed, nothing else) into ``DIR/<algorithm>_W<W>_s<seed>``. Then, from each run's
``metrics.jsonl``:

==================  ============================================================================================
column              meaning
==================  ============================================================================================
final acc           test accuracy at the last evaluation
rounds to target    first evaluated round with test accuracy >= target
samples to target   training examples seen by all workers up to that round (``samples_seen``)
time to target (s)  training wall time (compilation and evaluation excluded) at that round
bytes to target     bytes moved by all workers, both directions, up to that round (``bytes_total``)
time/round (ms)     training wall time / rounds
bytes/round         bytes moved by all workers per round
==================  ============================================================================================

With several seeds per cell (`cells`) the table reads ``mean ± std (n)`` in every column: the mean over the cell's
seeds, their sample standard deviation (``-`` for one seed) and how many seeds the numbers come from; the "to target"
columns average the seeds that reached the target and a ``reached`` column says how many did (``2/3``). Runs are
grouped into cells by their config without ``seed`` and run-control fields (`istjax.experiment.plot.group_runs`),
so ``--runs`` tabulates seeds of finished studies the same way.

The target is ``--target`` when given. Otherwise it is the runs' own ``target_accuracy`` (`run_target`: from
their ``config.json``, else ``summary.json``; when training, ``config.target_accuracy``), so "rounds to target"
reads what each run's ``summary.json`` says; runs whose targets differ are each measured against their own, and the
table gets a ``target`` column and a line under it saying so. Runs without one use the target the others share, or,
when none has one, the lowest final accuracy among the runs rounded down to a hundredth (so every run reaches it and
the columns compare how fast). The table is printed and written as
``DIR/comparison.md``, ``DIR/comparison.csv`` and ``DIR/comparison.json`` (per cell the mean, ``_std`` and ``_n``
of each number; JSON also lists every seed's own row under ``runs``), and the curves
(`istjax.experiment.plot.plot_runs`: one mean curve per cell with a min..max band across seeds) as
``DIR/comparison.png``. Evaluations happen every ``eval_every`` rounds, so "to target" is resolved to that grid.

A run that fails (`istjax.experiment.driver.TrainingError`, e.g. a non-finite loss) does not stop the comparison:
the error is reported, the other runs still train, and ``istjax compare`` exits 1 after writing the outputs. The
failure is named in the cell's ``note`` column. A failed seed is left out of its cell's numbers when another seed of
the cell finished (n says how many were used); when none did (or with one seed), the failed runs' evaluations before
the failure make the row, as the note says.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import pathlib
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Optional

from istjax.experiment.metrics import format_bytes
from istjax.experiment.plot import (BANDS, PlotError, Run, group_runs, load_run, plot_runs, read_json_object,
                                   varying_fields)

__all__ = ["Cell", "Comparison", "Row", "Stat", "cells", "default_target", "format_table", "main", "rows",
           "run_comparison", "run_target", "run_targets", "stat", "write_outputs"]

DEFAULT_ALGORITHMS = ("ist", "data_parallel", "local_sgd")  # what a comparison trains unless --algorithms says


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
    seed: Optional[int] = None
    samples_to_target: Optional[int] = None


# The numbers a cell averages over its seeds; the "to target" ones only over the seeds that reached the target.
STATS = ("final_accuracy", "best_accuracy", "rounds_to_target", "samples_to_target", "time_to_target_s",
         "bytes_to_target", "time_per_round_s", "bytes_per_round", "bytes_total")
TO_TARGET = ("rounds_to_target", "samples_to_target", "time_to_target_s", "bytes_to_target")


class Stat(NamedTuple):
    """Mean, sample standard deviation (None below two values) and count of the known values of one column."""

    mean: Optional[float]
    std: Optional[float]
    n: int


def stat(values: Sequence[Optional[float]]) -> Stat:
    """`Stat` of ``values``, skipping None (a seed that did not reach the target, an unknown time)."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return Stat(None, None, 0)
    mean = math.fsum(xs) / len(xs)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else None
    return Stat(mean, std, len(xs))


@dataclasses.dataclass
class Cell:
    """One (algorithm, W, ...) cell of the table: the runs of one config that differ only in ``seed``.

    Fields:
      rows: the runs its numbers come from (`Row` per seed).
      excluded: failed seeds left out of the numbers (a cell keeps its failed runs only when none finished).
      variant: ``field=value`` of the config fields besides algorithm, W, K and seed in which the table's cells
        differ (`istjax.experiment.plot.varying_fields`; empty when they differ in none).
      note: failures, as in the table's ``note`` column.
      target: the test accuracy its "to target" columns count to (None when its seeds' own targets differ; each
        `Row` carries its own).
    """

    algorithm: str
    num_workers: Optional[int]
    local_steps: Optional[int]
    target: Optional[float]
    rows: list[Row]
    excluded: list[Row] = dataclasses.field(default_factory=list)
    variant: str = ""
    note: Optional[str] = None

    @property
    def n(self) -> int:
        """How many runs the numbers come from."""
        return len(self.rows)

    @property
    def seeds(self) -> list[Optional[int]]:
        return [r.seed for r in self.rows]

    @property
    def rounds(self) -> int:
        return max(r.rounds for r in self.rows)

    @property
    def samples_seen(self) -> Optional[int]:
        known = [r.samples_seen for r in self.rows if r.samples_seen is not None]
        return max(known) if known else None

    @property
    def reached(self) -> int:
        """How many of ``rows`` reached the target."""
        return sum(r.rounds_to_target is not None for r in self.rows)

    def stat(self, column: str) -> Stat:
        """`Stat` of a `Row` column over the cell's runs (e.g. ``"final_accuracy"``, ``"bytes_to_target"``)."""
        return stat([getattr(r, column) for r in self.rows])

    def as_dict(self, *, runs: bool = False) -> dict[str, Any]:
        """A flat record: the cell's fields, and per number in `STATS` its mean (the column's name), ``_std`` and
        ``_n``; with ``runs``, every seed's own row under ``runs`` (and the left-out ones under ``excluded``)."""
        out: dict[str, Any] = {"algorithm": self.algorithm, "num_workers": self.num_workers,
                               "local_steps": self.local_steps, "config": self.variant, "rounds": self.rounds,
                               "samples_seen": self.samples_seen, "target": self.target, "n": self.n,
                               "seeds": self.seeds, "reached": self.reached}
        for column in STATS:
            st = self.stat(column)
            mean = st.mean
            if st.n == 1:  # one value: as it was recorded (an int stays an int)
                mean = next(getattr(r, column) for r in self.rows if getattr(r, column) is not None)
            out.update({column: mean, f"{column}_std": st.std, f"{column}_n": st.n})
        out["run_dirs"] = [r.run_dir for r in self.rows]
        out["note"] = self.note
        if runs:
            out["runs"] = [r._asdict() for r in self.rows]
            out["excluded"] = [r._asdict() for r in self.excluded]
        return out


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


def run_target(run: Run) -> Optional[float]:
    """The run's own target test accuracy: ``target_accuracy`` of its ``config.json``, else of its ``summary.json``
    (what `istjax.experiment.driver` measured ``round_to_target`` against); None when neither names one.

    Raises:
      PlotError: ``summary.json`` is needed and is not a JSON object.
    """
    if "target_accuracy" in run.config:
        value = run.config["target_accuracy"]
        return None if value is None else float(value)
    summary = read_json_object(run.path / "summary.json", "; rewrite or delete it, or pass --target")
    value = summary.get("target_accuracy")
    return None if value is None else float(value)


def run_targets(runs: Sequence[Run], target: Optional[float] = None) -> dict[str, float]:
    """Run directory -> the target its "to target" columns count to.

    ``target`` when given (``--target``: one for all). Otherwise each run's own (`run_target`): runs that share one
    target all use it (a run without a target too); runs whose targets differ each use their own, and a run without
    one the `default_target` of ``runs``; when no run has a target, every run uses the `default_target`.
    """
    if target is not None:
        return {_norm(r.path): float(target) for r in runs}
    own = {_norm(r.path): run_target(r) for r in runs}
    known = set(own.values()) - {None}
    if len(known) == 1:
        return dict.fromkeys(own, known.pop())
    fallback = default_target(runs) if len(known) < len(own) else None
    return {path: fallback if t is None else t for path, t in own.items()}


def _common(targets: Sequence[Optional[float]]) -> Optional[float]:
    """The one target all of ``targets`` share; None when they differ."""
    distinct = set(targets)
    return distinct.pop() if len(distinct) == 1 else None


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
        bytes_total=total, run_dir=str(run.path), note=note, seed=run.seed,
        samples_to_target=None if hit is None else hit.get("samples_seen"))


def _sort_key(r: Row | Cell):
    from istjax.algorithms import ALGORITHMS  # the registry's order: IST first, then its baselines

    order = list(ALGORITHMS)
    return (r.num_workers or 0, order.index(r.algorithm) if r.algorithm in order else len(order), r.algorithm)


def _norm(path: str | os.PathLike) -> str:
    return str(pathlib.Path(path))


def rows(runs: Sequence[Run], target: Optional[float] = None, notes: Optional[dict[str, str]] = None) -> list[Row]:
    """Rows of ``runs`` (one per run) against ``target`` (default: each run's own, `run_targets`), sorted by W, then
    algorithm order (then seed).

    ``notes`` maps a run directory to a remark for its row. `cells` groups the seeds of a config into one line.
    """
    targets = run_targets(runs, target)
    notes = {_norm(k): v for k, v in (notes or {}).items()}
    out = [row(r, targets[_norm(r.path)], notes.get(_norm(r.path))) for r in runs]
    return sorted(out, key=lambda r: (*_sort_key(r), r.seed if r.seed is not None else -1))


def _first_clause(message: str) -> str:
    return message.split(";")[0]


def cells(runs: Sequence[Run], target: Optional[float] = None,
          failed: Optional[dict[str, str]] = None) -> list[Cell]:
    """The table: ``runs`` grouped into cells of seeds (`istjax.experiment.plot.group_runs`: equal configs up to
    ``seed`` and run-control fields), against ``target`` (default: each run's own, `run_targets` of the runs used),
    sorted by W, then algorithm order.

    ``failed`` maps a run directory to its error (`run_comparison`): such a run is left out of its cell's numbers
    when another seed of the cell is not failed (the note names it); a cell whose runs all failed keeps them (their
    evaluations before the failure), noted ``failed: ...``.
    """
    failed = {_norm(k): v for k, v in (failed or {}).items()}
    groups = group_runs(runs)
    variants = varying_fields(groups)
    split = []
    for group in groups:
        ok = [r for r in group if _norm(r.path) not in failed]
        bad = [r for r in group if _norm(r.path) in failed]
        split.append((ok, bad) if ok else (bad, []))
    targets = run_targets([r for used, _ in split for r in used], target)
    out = []
    for group, variant, (used, excluded) in zip(groups, variants, split):
        notes = []
        used_failed = [r for r in used if _norm(r.path) in failed]
        noted = {_norm(r.path) for r in used_failed}
        if used_failed:
            msg = _first_clause(failed[_norm(used_failed[0].path)])
            notes.append(f"failed: {msg}" if len(group) == 1 else
                         f"failed: {msg} (every seed failed: "
                         f"{', '.join(str(r.seed) for r in used_failed)})")
        for r in excluded:
            notes.append(f"seed {r.seed} failed and is left out: {_first_clause(failed[_norm(r.path)])}")
        note = "; ".join(notes) or None
        cell_rows = sorted((row(r, targets[_norm(r.path)], note if _norm(r.path) in noted else None) for r in used),
                           key=lambda x: -1 if x.seed is None else x.seed)
        cell_target = _common([r.target for r in cell_rows])
        first = cell_rows[0]
        out.append(Cell(algorithm=first.algorithm, num_workers=first.num_workers, local_steps=first.local_steps,
                        target=cell_target, rows=cell_rows,
                        excluded=[row(r, _left_out_target(r, target, cell_target),
                                      "failed: " + _first_clause(failed[_norm(r.path)])) for r in excluded],
                        variant=variant, note=note))
    return sorted(out, key=lambda c: (*_sort_key(c), c.variant))


def _left_out_target(run: Run, target: Optional[float], cell_target: Optional[float]) -> Optional[float]:
    """The target of a failed seed left out of its cell: ``target``, else its own, else its cell's."""
    if target is not None:
        return target
    own = run_target(run)
    return cell_target if own is None else own


def _as_cell(r: Row | Cell) -> Cell:
    if isinstance(r, Cell):
        return r
    return Cell(algorithm=r.algorithm, num_workers=r.num_workers, local_steps=r.local_steps, target=r.target,
                rows=[r], note=r.note)


def _g(v: float) -> str:
    return f"{v:.4g}"


_FORMATS: dict[str, Callable[[float], str]] = {
    "final_accuracy": lambda v: f"{v:.4f}", "best_accuracy": lambda v: f"{v:.4f}", "rounds_to_target": _g,
    "samples_to_target": lambda v: f"{v:,.0f}", "time_to_target_s": lambda v: f"{v:.2f}",
    "bytes_to_target": format_bytes, "time_per_round_s": lambda v: f"{1000 * v:.1f}",
    "bytes_per_round": format_bytes}


def _mean_std(cell: Cell, column: str) -> str:
    """``mean ± std (n)``; ``mean (1)`` for one value; ``not reached`` / ``-`` for none."""
    st = cell.stat(column)
    if st.n == 0:
        return "not reached" if column in TO_TARGET and not cell.reached else "-"
    fmt = _FORMATS[column]
    return fmt(st.mean) + (f" ± {fmt(st.std)}" if st.std is not None else "") + f" ({st.n})"


def _single(cell: Cell, column: str) -> str:
    """One run's value, as the table always showed it."""
    r = cell.rows[0]
    value = getattr(r, column)
    reached = r.rounds_to_target is not None
    if column in TO_TARGET:
        if not reached:
            return "not reached"
        if value is None:
            return "-"
        return str(value) if column == "rounds_to_target" else _FORMATS[column](value)
    if column in ("bytes_per_round", "bytes_to_target"):
        return format_bytes(value)
    return "-" if value is None else _FORMATS[column](value)


def _percent(target: Optional[float]) -> str:
    return "-" if target is None else f"{target:.2%}"


def _cell_targets(cell: Cell) -> str:
    """The targets of a cell's runs: ``95.00%``, or ``90.00%, 95.00%`` when its seeds' own targets differ."""
    return ", ".join(_percent(t) for t in dict.fromkeys(r.target for r in cell.rows))


def _targets_note(cs: Sequence[Cell]) -> str:
    """The line under a table whose runs count to different targets: which ones, and how to use one."""
    targets = sorted({r.target for c in cs for r in c.rows}, key=lambda t: -1.0 if t is None else t)
    return (f"\ntargets differ ({', '.join(_percent(t) for t in targets)}): each run's \"to target\" columns count "
            f"to its own target_accuracy (config.json, else summary.json; a run without one: the lowest final "
            f"accuracy), shown in the target column; pass --target to measure every run against one.")


def format_table(table: Sequence[Row | Cell], failed: Optional[dict[str, str]] = None) -> str:
    """A markdown table of ``table`` (`cells` or `rows`): not-reached cells read ``not reached``, a ``note`` column
    when a line has one, a ``config`` column when cells differ in fields besides algorithm, W, K and seed.

    The "rounds to" column names the target when every run counts to the same one (``rounds to 95.00%``); when the
    runs' targets differ (`run_targets`: each run's own), a ``target`` column gives each line's and a line under
    the table says so.

    When some cell holds several seeds every number reads ``mean ± std (n)`` (n: the seeds it comes from), with
    ``seeds`` and ``reached`` (seeds that reached the target, of those used) columns; otherwise one value per run.
    ``failed`` (run directory -> message) lists, under the table, failed runs that have no line (no evaluation).
    """
    cs = [_as_cell(r) for r in table]
    targets = {r.target for c in cs for r in c.rows}
    target = _common(list(targets))
    per_run = len(targets) > 1
    multi = any(len(c.rows) + len(c.excluded) > 1 for c in cs)
    variants = any(c.variant for c in cs)
    notes = any(c.note for c in cs)
    columns = ["final_accuracy", "best_accuracy", "rounds_to_target", "samples_to_target", "time_to_target_s",
               "bytes_to_target", "time_per_round_s", "bytes_per_round"]
    titles = {"final_accuracy": "final acc", "best_accuracy": "best acc",
              "rounds_to_target": f"rounds to {target:.2%}" if target is not None else "rounds to target",
              "samples_to_target": "samples to target", "time_to_target_s": "time to target (s)",
              "bytes_to_target": "bytes to target", "time_per_round_s": "time/round (ms)",
              "bytes_per_round": "bytes/round"}
    head = ["algorithm", "W", "K"] + (["config"] if variants else []) + ["rounds"] + (["seeds"] if multi else [])
    head += [titles[c] for c in columns[:2]] + (["reached"] if multi else []) + (["target"] if per_run else [])
    head += [titles[c] for c in columns[2:]]
    head += ["note"] if notes else []
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for c in cs:
        value = _mean_std if multi else _single
        cells_ = [c.algorithm, str(c.num_workers or "-"), str(c.local_steps or "-")]
        cells_ += ([c.variant or "-"] if variants else []) + [str(c.rounds)]
        cells_ += [",".join("?" if s is None else str(s) for s in c.seeds)] if multi else []
        cells_ += [value(c, col) for col in columns[:2]]
        cells_ += [f"{c.reached}/{c.n}"] if multi else []
        cells_ += [_cell_targets(c)] if per_run else []
        cells_ += [value(c, col) for col in columns[2:]]
        cells_ += [(c.note or "").replace("|", "/")] if notes else []
        lines.append("| " + " | ".join(cells_) + " |")
    if per_run:
        lines.append(_targets_note(cs))
    shown = {_norm(r.run_dir) for c in cs for r in c.rows + c.excluded}
    for run_dir, message in (failed or {}).items():
        if _norm(run_dir) not in shown:
            lines.append(f"\nfailed before its first evaluation: {run_dir}: {message}")
    return "\n".join(lines)


def _csv_value(v: Any) -> Any:
    if isinstance(v, list):
        return " ".join("" if x is None else str(x) for x in v)
    return "" if v is None else v


def write_outputs(runs: Sequence[Run], table: Sequence[Row | Cell], workdir: str | os.PathLike,
                  title: Optional[str] = None, failed: Optional[dict[str, str]] = None,
                  band: Optional[str] = "minmax") -> dict[str, pathlib.Path]:
    """Writes ``comparison.md``, ``comparison.csv``, ``comparison.json`` and ``comparison.png`` into ``workdir``;
    returns the paths.

    The CSV has one line per cell (`Cell.as_dict`: mean, ``_std`` and ``_n`` columns), the JSON the same records
    with every seed's row under ``runs``. The figure plots the runs the table's numbers come from (failed seeds that
    were left out are not drawn), seeds as one mean curve with a ``band`` (`istjax.experiment.plot.plot_runs`).
    """
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    cs = [_as_cell(r) for r in table]
    md = workdir / "comparison.md"
    md.write_text((f"{title}\n\n" if title else "") + format_table(cs, failed) + "\n")
    js = workdir / "comparison.json"
    js.write_text(json.dumps([c.as_dict(runs=True) for c in cs], indent=2) + "\n")
    records = [c.as_dict() for c in cs]
    csv_path = workdir / "comparison.csv"
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(records[0]) if records else ["algorithm"])
        writer.writeheader()
        for rec in records:
            writer.writerow({k: _csv_value(v) for k, v in rec.items()})
    left_out = {_norm(r.run_dir) for c in cs for r in c.excluded}
    png = plot_runs([r.path for r in runs if _norm(r.path) not in left_out], workdir / "comparison.png",
                    title=title, target=_common([c.target for c in cs]), band=band)
    return {"markdown": md, "csv": csv_path, "json": js, "png": png}


def run_comparison(config, workdir: str | os.PathLike, *, algorithms: Sequence[str] = DEFAULT_ALGORITHMS,
                   workers: Sequence[int] = (2, 4), seeds: Optional[Sequence[int]] = None,
                   overwrite: bool = False) -> Comparison:
    """Trains ``config`` once per (algorithm, W) into ``workdir/<algorithm>_W<W>``; returns the runs.

    With ``seeds``, once per (algorithm, W, seed) into ``workdir/<algorithm>_W<W>_s<seed>``, ``config.seed`` set
    to the seed (seed by seed: after the first one, a whole single-seed comparison is on disk).

    Every config is validated (`istjax.experiment.config.validate`) before the first run starts, so a width that does not
    split over some W fails at once, not after an hour of the other runs. A run that raises
    `istjax.experiment.driver.TrainingError` is reported on stderr and recorded in ``Comparison.failed``; the others still run.
    """
    import istjax.experiment.config as config_lib
    import istjax.experiment.driver as train

    workdir = pathlib.Path(workdir)
    configs = []
    problems: dict[str, None] = {}
    for seed in ([None] if seeds is None else list(seeds)):
        for w in workers:
            for algo in algorithms:
                c = config.copy_and_resolve_references()
                c.algorithm.name, c.num_workers = algo, int(w)
                c.name = f"{config.name}-{algo}-W{w}"
                suffix = ""
                if seed is not None:
                    c.seed = int(seed)
                    c.name += f"-s{seed}"
                    suffix = f"_s{seed}"
                c.progress = False
                try:
                    config_lib.validate(c, load_data=False)
                except config_lib.ConfigError as e:
                    problems.update(dict.fromkeys(f"[algorithm.name={algo}, num_workers={w}] {p}" for p in e.problems))
                configs.append((workdir / f"{algo}_W{w}{suffix}", c, seed))
    if problems:
        raise config_lib.ConfigError(list(problems))
    failed: dict[str, str] = {}
    for run_dir, c, seed in configs:
        what = f"{c.algorithm.name} W={c.num_workers}" + ("" if seed is None else f" seed={seed}")
        print(f"== {what}: {run_dir}", file=sys.stderr, flush=True)
        try:
            train.train_and_evaluate(c, run_dir, overwrite=overwrite)
        except train.TrainingError as e:
            failed[str(run_dir)] = str(e)
            print(f"== {what} failed: {e}\n   (continuing with the other runs)", file=sys.stderr, flush=True)
    runs = []
    for d, _, _ in configs:
        try:
            runs.append(load_run(d))
        except PlotError:
            if str(d) not in failed:  # a failed run may have no evaluation yet; anything else is a real problem
                raise
    return Comparison(runs, failed)


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
                   help="comma-separated algorithms from ist,data_parallel,local_sgd,resist (default: ist,data_parallel,local_sgd)")
    p.add_argument("--workers", type=lambda s: _csv("workers", s), default=[2, 4],
                   help="comma-separated worker counts W (default: 2,4)")
    p.add_argument("--seeds", type=lambda s: _csv("seeds", s, minimum=0), default=None,
                   help="comma-separated seeds, e.g. 0,1,2: every (algorithm, W) trains once per seed into "
                        "<algorithm>_W<W>_s<seed>, and the table reports mean ± std (n) (default: the config's "
                        "seed, one run per cell in <algorithm>_W<W>)")
    p.add_argument("--target", type=float, default=None,
                   help="target test accuracy for every run (default: the runs' own target_accuracy: with --runs "
                        "from each run's config.json / summary.json, each run its own when they differ; when "
                        "training, config.target_accuracy; else the lowest final accuracy)")
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
            if args.seeds is not None:
                print("istjax compare: --seeds trains; with --runs the seeds of the given runs are grouped "
                      "from their config.json.", file=sys.stderr)
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
                                              workers=args.workers, seeds=args.seeds, overwrite=args.overwrite)
            except config_lib.ConfigError as e:
                print(f"istjax compare: {e}", file=sys.stderr)
                return 2
            target = args.target if args.target is not None else config.target_accuracy
            workdir = args.workdir
        if not runs:
            print("istjax compare: every run failed before its first evaluation:\n"
                  + "\n".join(f"  {d}: {m}" for d, m in failed.items()), file=sys.stderr)
            return 1
        table = cells(runs, target, failed)
    except PlotError as e:
        print(f"istjax compare: {e}", file=sys.stderr)
        return 2
    text = format_table(table, failed)
    if args.title:
        text = f"{args.title}\n\n{text}"
    print(text)
    if workdir is not None:
        paths = write_outputs(runs, table, workdir, title=args.title, failed=failed,
                              band=None if args.no_bands else args.band)
        print(f"wrote {paths['markdown']}, {paths['csv']}, {paths['json']}, {paths['png']}")
    if failed:
        print(f"istjax compare: {len(failed)} of the runs failed (see the note column); exit 1.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
