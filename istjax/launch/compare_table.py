"""The table of ``istjax compare``: a run's row, seeds grouped into cells (mean, sample standard deviation and count,
`istjax.launch.study.mean_std`), the target every run counts to and how it was chosen, and the table written as
markdown, CSV, JSON and a figure. `istjax.launch.compare` documents the columns and trains the runs.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import pathlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Optional

from istjax.launch.metrics import format_bytes
from istjax.launch.plot import Run, bytes_per_worker, group_runs, plot_runs, read_json_object, varying_fields
from istjax.launch.study import mean_std

__all__ = ["Cell", "Row", "Stat", "TargetChoice", "cells", "choose_target", "default_target", "derive_target",
           "format_table", "row", "rows", "run_target", "run_targets", "stat", "trained_records", "used_runs",
           "write_outputs"]


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


def _num(rec: dict[str, Any], field: str) -> Optional[float]:
    v = rec.get(field)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def trained_records(run: Run) -> list[dict[str, Any]]:
    """Records of training evaluations (a record without ``wall_time_s`` is a re-evaluation of a finished run)."""
    recs = [r for r in run.records if "wall_time_s" in r]
    return recs or run.records


def _step_down(accuracy: float) -> float:
    """``accuracy`` rounded down to the 0.01 grid (``0.937 -> 0.93``; ``0.29`` stays ``0.29``)."""
    return math.floor(round(accuracy * 100, 6)) / 100


def _accuracies(run: Run) -> list[float]:
    return [a for a in (_num(r, "test_accuracy") for r in trained_records(run)) if a is not None]


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
    recs = trained_records(run)
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

    ``failed`` maps a run directory to its error (`istjax.launch.compare.run_comparison`): such a run is left out of
    its cell's numbers when another seed of the cell is not failed (the note names it); a cell whose runs all failed
    keeps them (their evaluations before the failure), noted ``failed: ...``.
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


def _spread_text(cell: Cell, column: str) -> str:
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
    ``header``: lines above the table (`istjax.launch.compare.main`'s: the budget, the target and how it was chosen,
    the wall time).
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
        value = _spread_text if multi else _single
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
