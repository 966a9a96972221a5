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
the run's runtime measured, and the table says which (`istjax.launch.plot.wall_time_text`): under
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
import csv
import dataclasses
import json
import math
import os
import pathlib
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Optional

from istjax.launch.metrics import format_bytes
from istjax.launch.plot import (BANDS, PlotError, Run, bytes_per_worker, group_runs,
                                   load_run, plot_runs, read_json_object, varying_fields, wall_time_text)
from istjax.launch.study import Planned, flat, mean_std, run_study
from istjax.launch.study import Cell as StudyCell

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


class Row(NamedTuple):
    """One run's line of the comparison table (None: not reached / unknown).

    Bytes are counted per worker, each way (`istjax.launch.plot.bytes_per_worker`), as ``summary.json`` counts
    them: ``bytes_per_round`` is what one worker sends (= receives) in a round, ``bytes_to_target`` what one worker
    sent (= received) until the target; where a runtime measured the two ways apart, their mean, with each way in
    ``bytes_sent_per_round`` / ``bytes_received_per_round`` (``summary.json``'s ``bytes_sent_per_worker_per_round``,
    ``bytes_received_per_worker_per_round``). ``bytes_total`` is all workers, both ways (``summary.json``'s).
    """

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
    bytes_sent_per_round: Optional[float] = None
    bytes_received_per_round: Optional[float] = None


# The numbers a cell averages over its seeds; the "to target" ones only over the seeds that reached the target.
STATS = ("final_accuracy", "best_accuracy", "rounds_to_target", "samples_to_target", "time_to_target_s",
         "bytes_to_target", "time_per_round_s", "bytes_per_round", "bytes_sent_per_round",
         "bytes_received_per_round", "bytes_total")
TO_TARGET = ("rounds_to_target", "samples_to_target", "time_to_target_s", "bytes_to_target")


class Stat(NamedTuple):
    """Mean, sample standard deviation (None below two values) and count of the known values of one column."""

    mean: Optional[float]
    std: Optional[float]
    n: int


def stat(values: Sequence[Optional[float]]) -> Stat:
    """`Stat` of ``values``, skipping None (a seed that did not reach the target, an unknown time): the study
    runner's `istjax.launch.study.mean_std` and the count."""
    xs = [float(v) for v in values if v is not None]
    return Stat(*mean_std(xs), len(xs))


@dataclasses.dataclass
class Cell:
    """One (algorithm, W, ...) cell of the table: the runs of one config that differ only in ``seed``.

    Fields:
      rows: the runs its numbers come from (`Row` per seed).
      excluded: failed seeds left out of the numbers (a cell keeps its failed runs only when none finished).
      variant: ``field=value`` of the config fields besides algorithm, W, K and seed in which the table's cells
        differ (`istjax.launch.plot.varying_fields`; empty when they differ in none).
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
    for every run that raised `istjax.launch.driver.TrainingError` (its metrics up to the failure are among ``runs`` when it
    evaluated at least once), and the ``budget`` every run trained (`plan_budget`)."""

    runs: list[Run]
    failed: dict[str, str]
    budget: Optional["Budget"] = None


def _num(rec: dict[str, Any], field: str) -> Optional[float]:
    v = rec.get(field)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _trained(run: Run) -> list[dict[str, Any]]:
    """Records of training evaluations (a record without ``wall_time_s`` is a re-evaluation of a finished run)."""
    recs = [r for r in run.records if "wall_time_s" in r]
    return recs or run.records


def _step_down(accuracy: float) -> float:
    """``accuracy`` rounded down to the 0.01 grid (``0.937 -> 0.93``; ``0.29`` stays ``0.29``)."""
    return math.floor(round(accuracy * 100, 6)) / 100


def _accuracies(run: Run) -> list[float]:
    return [a for a in (_num(r, "test_accuracy") for r in _trained(run)) if a is not None]


def _unseparated(runs: Sequence[Run], target: float) -> Optional[str]:
    """Why ``target`` says nothing about ``runs`` ("to target" columns all alike), or None when it separates them:
    some run reaches it and some run is below it at its first evaluation."""
    accs = [_accuracies(r) for r in runs]
    if not any(a and max(a) >= target for a in accs):
        return "is reached by no run"
    if all(a and a[0] >= target for a in accs):
        return "is reached at the first evaluation by every run"
    return None


def derive_target(runs: Sequence[Run]) -> tuple[float, str]:
    """A target test accuracy that separates ``runs``, and how it was chosen (a phrase for the table).

    The highest 0.01 step that every run reaches (the lowest best accuracy among the runs, rounded down), so every
    run has a "to target" number; when every run is at or above that at its first evaluation (nothing to tell
    apart), the lowest 0.01 step above the lowest first evaluation, which some run reaches later (the others read
    ``not reached``); when none does, the first one, and the phrase says the runs do not separate.
    """
    accs = [_accuracies(r) or [0.0] for r in runs]
    every = _step_down(min(max(a) for a in accs))
    how = "the highest 0.01 step that every run reaches"
    if _unseparated(runs, every) is None:
        return every, how
    above = round(_step_down(min(a[0] for a in accs)) + 0.01, 2)
    if _unseparated(runs, above) is None:
        return above, ("the lowest 0.01 step above the lowest first evaluation (every run is at or above "
                       f"{every:.2%}, the highest step all reach, at its first evaluation)")
    return every, (how + "; every run reaches it at its first evaluation, so the \"to target\" columns do not "
                   "separate them: evaluate more often (--config.eval_every) or pass --target")


def default_target(runs: Sequence[Run]) -> float:
    """The target `derive_target` picks for ``runs``: the highest 0.01 step every run reaches, unless every run
    reaches that at its first evaluation (then one above, that some run reaches later)."""
    return derive_target(runs)[0]


def run_target(run: Run) -> Optional[float]:
    """The run's own target test accuracy: ``target_accuracy`` of its ``config.json``, else of its ``summary.json``
    (what `istjax.launch.driver` measured ``round_to_target`` against); None when neither names one.

    Raises:
      PlotError: ``summary.json`` is needed and is not a JSON object.
    """
    if "target_accuracy" in run.config:
        value = run.config["target_accuracy"]
        return None if value is None else float(value)
    summary = read_json_object(run.path / "summary.json", "; rewrite or delete it, or pass --target")
    value = summary.get("target_accuracy")
    return None if value is None else float(value)


class TargetChoice(NamedTuple):
    """The target of a table and how it was chosen (`choose_target`).

    Fields:
      target: the one target every run counts to; None when each run counts to its own (they differ).
      targets: run directory -> the target its "to target" columns count to.
      how: how it was chosen, a phrase for the table (``"derived from the runs: ..."``).
    """

    target: Optional[float]
    targets: dict[str, float]
    how: str

    @property
    def line(self) -> str:
        """The table's line: ``"target 93.00%: derived from the runs: ..."``."""
        return f"target {'(per run)' if self.target is None else format(self.target, '.2%')}: {self.how}"


def choose_target(runs: Sequence[Run], target: Optional[float] = None) -> TargetChoice:
    """The target each of ``runs`` counts to, and how it was chosen.

    ``target`` when given (``--target``: one for all). Otherwise the runs' own (`run_target`: ``target_accuracy``
    of their config) when they share one and it separates them (some run reaches it, and not every run at its first
    evaluation; a run without a target of its own uses it too); when they share one that does not, or none has
    one, the `derive_target` of ``runs``. Runs whose own targets differ each count to their own (a run without one
    to the `default_target` of ``runs``).
    """
    paths = [_norm(r.path) for r in runs]
    if target is not None:
        return TargetChoice(float(target), dict.fromkeys(paths, float(target)), "given by --target")
    own = dict(zip(paths, (run_target(r) for r in runs)))
    known = set(own.values()) - {None}
    if len(known) > 1:
        fallback = default_target(runs) if None in own.values() else None
        return TargetChoice(None, {p: fallback if t is None else t for p, t in own.items()},
                            "each run's own target_accuracy (they differ: see the target column)")
    if known:
        shared = known.pop()
        problem = _unseparated(runs, shared)
        if problem is None:
            return TargetChoice(shared, dict.fromkeys(paths, shared), "the config's target_accuracy")
        why = f"the config's target_accuracy {shared:.2%} {problem}"
    else:
        why = "no run's config names a target_accuracy"
    derived, how = derive_target(runs)
    return TargetChoice(derived, dict.fromkeys(paths, derived), f"derived from the runs, {how} ({why})")


def run_targets(runs: Sequence[Run], target: Optional[float] = None) -> dict[str, float]:
    """Run directory -> the target its "to target" columns count to (`choose_target`)."""
    return choose_target(runs, target).targets


def _common(targets: Sequence[Optional[float]]) -> Optional[float]:
    """The one target all of ``targets`` share; None when they differ."""
    distinct = set(targets)
    return distinct.pop() if len(distinct) == 1 else None


def _round_bytes(run: Run, last: dict[str, Any], rounds: int) -> tuple[Optional[float], ...]:
    """Per worker per round ``(each way, sent, received)`` as ``summary.json`` has them: the last record's
    ``bytes_sent_per_worker`` / ``bytes_received_per_worker`` (each way: their mean); a record without them,
    ``bytes_total / (rounds 2 W)``."""
    sent, received = _num(last, "bytes_sent_per_worker"), _num(last, "bytes_received_per_worker")
    if sent is not None and received is not None:
        return (sent + received) / 2, sent, received
    so_far = bytes_per_worker(last, run.num_workers)
    return (so_far / rounds if so_far is not None and rounds else None), sent, received


def row(run: Run, target: Optional[float], note: Optional[str] = None) -> Row:
    """The table row of one run (pure function of its records)."""
    recs = _trained(run)
    last = recs[-1]
    accs = [_num(r, "test_accuracy") for r in recs]
    hit = None
    if target is not None:
        hit = next((r for r, a in zip(recs, accs) if a is not None and a >= target), None)
    rounds = int(last["round"])
    wall = _num(last, "wall_time_s")
    each_way, sent, received = _round_bytes(run, last, rounds)
    return Row(
        algorithm=run.algorithm, num_workers=run.num_workers, local_steps=run.local_steps, rounds=rounds,
        samples_seen=last.get("samples_seen"), final_accuracy=float(last["test_accuracy"]),
        best_accuracy=max(a for a in accs if a is not None), target=target,
        rounds_to_target=None if hit is None else int(hit["round"]),
        time_to_target_s=None if hit is None else _num(hit, "wall_time_s"),
        bytes_to_target=None if hit is None else bytes_per_worker(hit, run.num_workers),
        time_per_round_s=wall / rounds if wall is not None and rounds else None,
        bytes_per_round=each_way, bytes_total=_num(last, "bytes_total"), run_dir=str(run.path), note=note,
        seed=run.seed, samples_to_target=None if hit is None else hit.get("samples_seen"),
        bytes_sent_per_round=sent, bytes_received_per_round=received)


def _sort_key(r: Row | Cell):
    from istjax.algorithms import ALGORITHMS  # the registry's order: IST first, then its baselines

    order = list(ALGORITHMS)
    return (r.num_workers or 0, order.index(r.algorithm) if r.algorithm in order else len(order), r.algorithm)


def _norm(path: str | os.PathLike) -> str:
    return str(pathlib.Path(path))


def rows(runs: Sequence[Run], target: Optional[float] = None, notes: Optional[dict[str, str]] = None) -> list[Row]:
    """Rows of ``runs`` (one per run) against ``target`` (default: `choose_target`'s), sorted by W, then
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
    """The table: ``runs`` grouped into cells of seeds (`istjax.launch.plot.group_runs`: equal configs up to
    ``seed`` and run-control fields), against ``target`` (default: `choose_target`'s for the runs used),
    sorted by W, then algorithm order.

    ``failed`` maps a run directory to its error (`run_comparison`): such a run is left out of its cell's numbers
    when another seed of the cell is not failed (the note names it); a cell whose runs all failed keeps them (their
    evaluations before the failure), noted ``failed: ...``.
    """
    failed = {_norm(k): v for k, v in (failed or {}).items()}
    groups = group_runs(runs)
    variants = varying_fields(groups)
    split = _split(groups, failed)
    choice = choose_target([r for used, _ in split for r in used], target)
    targets = choice.targets
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
                        excluded=[row(r, _left_out_target(r, choice.target, cell_target),
                                      "failed: " + _first_clause(failed[_norm(r.path)])) for r in excluded],
                        variant=variant, note=note))
    return sorted(out, key=lambda c: (*_sort_key(c), c.variant))


def _split(groups: Sequence[Sequence[Run]], failed: dict[str, str]) -> list[tuple[list[Run], list[Run]]]:
    """Per seed group ``(used, left out)``: the seeds that did not fail and the failed ones; a group whose seeds
    all failed uses them (``(failed, [])``)."""
    out = []
    for group in groups:
        ok = [r for r in group if _norm(r.path) not in failed]
        bad = [r for r in group if _norm(r.path) in failed]
        out.append((ok, bad) if ok else (bad, []))
    return out


def used_runs(runs: Sequence[Run], failed: Optional[dict[str, str]] = None) -> list[Run]:
    """The runs `cells` takes its numbers from: a failed seed is left out when another seed of its cell finished."""
    failed = {_norm(k): v for k, v in (failed or {}).items()}
    return [r for used, _ in _split(group_runs(runs), failed) for r in used]


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
    "bytes_per_round": format_bytes, "bytes_sent_per_round": format_bytes, "bytes_received_per_round": format_bytes}


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
    if column.startswith("bytes_"):
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
            f"to its own target_accuracy (config.json, else summary.json; a run without one: the highest 0.01 "
            f"step every run reaches), shown in the target column; pass --target to measure every run against one.")


def _columns(cs: Sequence[Cell], target: Optional[float]) -> tuple[list[str], dict[str, str]]:
    """The table's number columns and their titles. Bytes are per worker, each way (as ``summary.json``'s
    ``bytes_sent_per_worker_per_round``; `istjax.launch.plot.bytes_per_worker`); where some run's two ways
    differ (a runtime that measured them), sent and received get a column each and "bytes to target" is the mean
    of the two ways."""
    apart = any(r.bytes_sent_per_round != r.bytes_received_per_round for c in cs for r in c.rows
                if r.bytes_sent_per_round is not None and r.bytes_received_per_round is not None)
    per_round = ["bytes_sent_per_round", "bytes_received_per_round"] if apart else ["bytes_per_round"]
    columns = ["final_accuracy", "best_accuracy", "rounds_to_target", "samples_to_target", "time_to_target_s",
               "bytes_to_target", "time_per_round_s", *per_round]
    titles = {"final_accuracy": "final acc", "best_accuracy": "best acc",
              "rounds_to_target": f"rounds to {target:.2%}" if target is not None else "rounds to target",
              "samples_to_target": "samples to target", "time_to_target_s": "time to target (s)",
              "bytes_to_target": "bytes to target (per worker, " + ("mean of both ways)" if apart else "each way)"),
              "time_per_round_s": "time/round (ms)", "bytes_per_round": "bytes per worker per round, each way",
              "bytes_sent_per_round": "bytes sent per worker per round",
              "bytes_received_per_round": "bytes received per worker per round"}
    return columns, titles


def format_table(table: Sequence[Row | Cell], failed: Optional[dict[str, str]] = None,
                 header: Sequence[str] = ()) -> str:
    """A markdown table of ``table`` (`cells` or `rows`): not-reached cells read ``not reached``, a ``note`` column
    when a line has one, a ``config`` column when cells differ in fields besides algorithm, W, K and seed.

    The "rounds to" column names the target when every run counts to the same one (``rounds to 95.00%``); when the
    runs' targets differ (`run_targets`: each run's own), a ``target`` column gives each line's and a line under
    the table says so. Bytes are per worker, each way, as ``summary.json`` counts them (`_columns`).

    When some cell holds several seeds every number reads ``mean ± std (n)`` (n: the seeds it comes from), with
    ``seeds`` and ``reached`` (seeds that reached the target, of those used) columns; otherwise one value per run.
    ``failed`` (run directory -> message) lists, under the table, failed runs that have no line (no evaluation).
    ``header``: lines above the table (`main`'s: the budget, the target and how it was chosen, the wall time).
    """
    cs = [_as_cell(r) for r in table]
    targets = {r.target for c in cs for r in c.rows}
    target = _common(list(targets))
    per_run = len(targets) > 1
    multi = any(len(c.rows) + len(c.excluded) > 1 for c in cs)
    variants = any(c.variant for c in cs)
    notes = any(c.note for c in cs)
    columns, titles = _columns(cs, target)
    head = ["algorithm", "W", "K"] + (["config"] if variants else []) + ["rounds"] + (["seeds"] if multi else [])
    head += [titles[c] for c in columns[:2]] + (["reached"] if multi else []) + (["target"] if per_run else [])
    head += [titles[c] for c in columns[2:]]
    head += ["note"] if notes else []
    lines = [*header, *([""] if header else []), "| " + " | ".join(head) + " |",
             "|" + "|".join("---" for _ in head) + "|"]
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
                  band: Optional[str] = "minmax", header: Sequence[str] = ()) -> dict[str, pathlib.Path]:
    """Writes ``comparison.md``, ``comparison.csv``, ``comparison.json`` and ``comparison.png`` into ``workdir``;
    returns the paths.

    The CSV has one line per cell (`Cell.as_dict`: mean, ``_std`` and ``_n`` columns), the JSON the same records
    with every seed's row under ``runs``. The figure plots the runs the table's numbers come from (failed seeds that
    were left out are not drawn), seeds as one mean curve with a ``band`` (`istjax.launch.plot.plot_runs`).
    ``header`` goes above the table in ``comparison.md`` (`format_table`).
    """
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    cs = [_as_cell(r) for r in table]
    md = workdir / "comparison.md"
    md.write_text((f"{title}\n\n" if title else "") + format_table(cs, failed, header) + "\n")
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
    from istjax.launch.driver import step_examples

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
        last = _trained(r)[-1]
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
