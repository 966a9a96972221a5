"""A study's tuning stage: each arm's settings chosen on a tuning split of the training data, before any reported run.

A comparison decides only when every arm runs at its own best settings, and those were chosen without the split it
is reported on. `tune_then_run` does both, in this order:

1. **Tune.** For each arm (a `istjax.launch.study.Cell`), every point of its grid (`grid_points`: the product of a
   few values per config field: the learning rate, an outer optimizer's rate, the optimizer state restarted or
   carried over rounds, a variant such as a model's ``scaling``; `arm_grid` builds the usual one) is trained once,
   at one seed, with ``data.tuning_fraction`` set: the run trains on the head of the training examples and evaluates
   on their tail (`istjax.data.tuning`); the reported split is never read. The runs are ordinary runs under
   ``<workdir>/tuning/<arm>/<grid point>``, so a killed study reuses the finished ones
   (`istjax.launch.study.finished`), and a study that outlives its machine reuses those its results file records
   (`tune`'s ``earlier``: the same config file and overrides; `tune_then_run` writes them there after every tuning
   run), as it keeps its reported runs.
2. **Choose.** Each arm's choice is its grid point with the best `Objective` (the metric of the run's last
   evaluation, or its mean over the run's evaluations, lowest or highest as the study names it; a run that failed
   or ended non-finite is never chosen).
3. **Run.** The reported cells are the arms with their choice applied (`tuned_cells`: ``--config.FIELD=VALUE``
   overrides), trained over every seed by `istjax.launch.study.run_study`; its results file holds a ``tuning``
   section: the objective, the fraction, the seed, each arm's grid, every tuning run (its settings, its metric, the
   commit that trained it) and each arm's choice (`tune` returns it).

The choice is pre-registered in the sense that matters: it is fixed before a reported run exists, and the file says
what it was chosen from.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Optional, Union

from istjax.core.errors import ArgError
from istjax.launch import study as study_lib
from istjax.launch.metrics import read_metrics
from istjax.launch.study import Cell, Outcome, Planned

__all__ = ["Objective", "TuningError", "arm_grid", "grid_points", "point_label", "with_settings", "tune",
           "tuned_cells", "tune_then_run", "recorded_tuning"]

Grid = Mapping[str, Sequence[Any]]  # config field -> the values tried
Grids = Union[Mapping[str, Grid], Callable[[Cell], Grid]]  # per arm label, or a function of the arm


class Objective(NamedTuple):
    """What a tuning run is judged by: ``metric``, a key of its evaluation records (``test_loss``,
    ``test_accuracy``, ``test_precision_at_3``: during tuning the "test" split is the tuning split), ``direction``,
    ``"min"`` (a loss) or ``"max"`` (an accuracy), and ``at``: ``"last"`` (the run's last evaluation: a study that
    reports where its runs end) or ``"mean"`` (the mean over every evaluation of the run, the area under its curve:
    a study that reports how soon a run gets somewhere, rounds to a target, rewards the setting that gets there
    sooner, and reads a curve that swings from round to round, as skewed clients' does, less by its last point)."""
    metric: str = "test_loss"
    direction: str = "min"
    at: str = "last"

    def to_record(self) -> dict[str, str]:
        """The record a results file keeps (``at`` only where it is not the default ``"last"``)."""
        return {"metric": self.metric, "direction": self.direction, **({"at": self.at} if self.at != "last" else {})}


class TuningError(RuntimeError):
    """An arm none of whose grid points trained to a finite metric: nothing to choose."""


def _check_objective(objective: Objective) -> Objective:
    if objective.direction not in ("min", "max"):
        raise ValueError(f"Objective.direction={objective.direction!r}: choose 'min' (a loss) or 'max' (an "
                         f"accuracy).")
    if objective.at not in ("last", "mean"):
        raise ValueError(f"Objective.at={objective.at!r}: choose 'last' (the run's last evaluation) or 'mean' (the "
                         f"mean over its evaluations).")
    return objective


def arm_grid(cell: Cell, learning_rates: Sequence[float], *, outer_learning_rates: Sequence[float] = (),
             optimizer_states: Sequence[str] = ("reset", "carry"), variants: Optional[Grid] = None,
             root: os.PathLike = ".") -> dict[str, tuple]:
    """The usual grid of an arm: ``learning_rate`` over ``learning_rates``; ``algorithm.outer_learning_rate`` over
    ``outer_learning_rates`` where the arm's algorithm has an outer optimizer (DiLoCo); ``algorithm.optimizer_state``
    over ``optimizer_states`` where it runs local steps from a state it may restart or carry (IST, local SGD,
    DiLoCo, ResIST; data parallel carries its state by construction); then ``variants`` (``{"model.scaling":
    ("train", "test")}``), as given. Only fields the arm's algorithm reads are tuned (`istjax.algorithms.ALGORITHMS`
    names them)."""
    from istjax.algorithms import ALGORITHMS

    config = study_lib.plan([cell], [None], ".", root=root)[0].config
    reads = ALGORITHMS.get(config.algorithm.name).options
    grid: dict[str, tuple] = {"learning_rate": tuple(learning_rates)}
    if outer_learning_rates and "outer_learning_rate" in reads:
        grid["algorithm.outer_learning_rate"] = tuple(outer_learning_rates)
    if optimizer_states and "optimizer_state" in reads:
        grid["algorithm.optimizer_state"] = tuple(optimizer_states)
    grid.update({k: tuple(v) for k, v in (variants or {}).items()})
    return grid


def grid_points(grid: Grid) -> list[dict[str, Any]]:
    """Every combination of the grid's values, the first field varying slowest: ``{"a": (1, 2), "b": ("x",)} ->
    [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]``; ``[{}]`` for an empty grid (the arm as it is)."""
    for field, values in grid.items():
        if isinstance(values, (str, bytes)) or not len(values):
            raise ValueError(f"grid field {field!r}: give a non-empty sequence of values, not {values!r}")
    fields = list(grid)
    return [dict(zip(fields, combo)) for combo in itertools.product(*(tuple(grid[f]) for f in fields))]


def _flag(value: Any) -> str:
    """A value as ``--config.FIELD=`` takes it: a string bare, a sequence as a tuple, anything else its repr."""
    if isinstance(value, str):
        return value
    return repr(tuple(value)) if isinstance(value, list) else repr(value)


def point_label(point: Mapping[str, Any]) -> str:
    """A grid point's name, its run directory's: ``learning_rate=0.001,optimizer_state=carry`` (each field's last
    component); ``as_is`` for the empty point."""
    return ",".join(f"{k.rsplit('.', 1)[-1]}={_flag(v)}".replace("/", "_").replace(" ", "")
                    for k, v in point.items()) or "as_is"


def _set(config, point: Mapping[str, Any]):
    for field, value in point.items():
        *parents, leaf = field.split(".")
        node = config
        for part in parents:
            node = node[part]
        with node.unlocked():
            node[leaf] = tuple(value) if isinstance(value, list) else value
    return config


def with_settings(cell: Cell, point: Mapping[str, Any], label: Optional[str] = None,
                  info: Optional[Mapping[str, Any]] = None) -> Cell:
    """``cell`` with the fields of ``point`` set: as ``--config.FIELD=VALUE`` overrides after its own (a config
    file), or on a copy of its ConfigDict (or of what its function gives); named ``label`` (default its own)."""
    label = cell.label if label is None else label
    info = dict(cell.info if info is None else info)
    if isinstance(cell.config, (str, os.PathLike)):
        flags = tuple(f"--config.{k}={_flag(v)}" for k, v in point.items())
        return Cell(label, cell.config, tuple(cell.overrides) + flags, info)
    base = cell.config
    if hasattr(base, "copy_and_resolve_references"):
        return Cell(label, _set(base.copy_and_resolve_references(), point), (), info)
    return Cell(label, lambda seed: _set(base(seed), point), (), info)


def _grid_of(grids: Grids, cell: Cell) -> Grid:
    if callable(grids):
        return grids(cell)
    if cell.label not in grids:
        raise ValueError(f"arm {cell.label!r} has no grid; grids name {sorted(grids)} (give {{}} to run it as it "
                         f"is)")
    return grids[cell.label]


def _metric(run_dir: pathlib.Path, metric: str, at: str = "last") -> Optional[float]:
    """The ``metric`` of the run's last evaluation record that has it (``at="last"``) or its mean over every record
    that has it (``"mean"``); None without one, or where it is not finite (a diverged run, or with ``"mean"`` one
    that diverged on the way, is never chosen)."""
    try:
        records = read_metrics(run_dir)
    except (OSError, ValueError):
        return None
    values = [float(r[metric]) for r in records if r.get(metric) is not None]
    if not values:
        return None
    value = values[-1] if at == "last" else sum(values) / len(values)
    return value if math.isfinite(value) else None


def _reusable(earlier: Optional[Mapping[str, Any]], objective: Objective, fraction: float, seed: int
              ) -> dict[tuple[str, str], dict[str, Any]]:
    """``{(arm, point label): run}``: the runs of an ``earlier`` tuning record (a results file's ``tuning``) that can
    stand for a run trained now: same objective, split and seed, a finite metric, and recording the config file and
    overrides they trained with (compared with the run's own by `tune`; its commit stays in the record, as
    `istjax.launch.study.kept_records` keeps a reported run's)."""
    if not earlier or (earlier.get("objective"), earlier.get("tuning_fraction"), earlier.get("seed")) != (
            objective.to_record(), fraction, seed):
        return {}
    return {(r["arm"], point_label(r["settings"])): r for r in earlier.get("runs", ())
            if r.get(objective.metric) is not None and "overrides" in r and "config" in r}


def tune(cells: Sequence[Cell], grids: Grids, workdir: os.PathLike, *, objective: Objective = Objective(),
         fraction: float = 0.1, seed: int = 0, root: os.PathLike = ".", study: str = "tuning",
         train: Optional[Callable[[Planned], Optional[str]]] = None, earlier: Optional[Mapping[str, Any]] = None,
         progress: Optional[Callable[[dict[str, Any]], None]] = None, **run_kwargs: Any) -> dict[str, Any]:
    """Trains every arm's grid once at ``seed`` on the tuning split (``data.tuning_fraction = fraction``) into
    ``<workdir>/tuning/<arm>/<grid point>``, skipping finished runs, and returns the tuning record (module
    docstring): ``{"objective", "tuning_fraction", "seed", "grids", "runs", "chosen"}``. ``train`` and
    ``run_kwargs`` are `istjax.launch.study.run_study`'s.

    ``earlier``: the tuning record of an earlier run of the study (`recorded_tuning` of its results file). A run
    it records with the same config file and overrides is not trained again when its run
    directory is gone (a study that outlives its machine, as `istjax.launch.study.kept_records` does for reported
    runs): its recorded metric, commit and run directory stand.

    ``progress``: called after every tuning run with the record so far (``chosen`` empty, ``partial`` true: the
    runs reused or finished, each failed one with its error), so that a caller can keep it where it outlives the
    run directories (`tune_then_run` writes it into the results file: a machine lost mid-tuning loses no finished
    run).

    Raises:
      ValueError: a fraction outside (0, 1), an unknown direction, an arm without a grid.
      TuningError: an arm none of whose points trained to a finite metric.
    """
    objective = _check_objective(Objective(*objective))
    if not 0 < fraction < 1:
        raise ValueError(f"fraction={fraction!r}: the tuning split is a fraction in (0, 1) of the training examples "
                         f"(0 would tune on the reported split)")
    grids_used = {c.label: {k: list(v) for k, v in _grid_of(grids, c).items()} for c in cells}
    points = {c.label: grid_points(grids_used[c.label]) for c in cells}
    runs = [with_settings(c, {**p, "data.tuning_fraction": fraction}, f"{c.label}/{point_label(p)}", {})
            for c in cells for p in points[c.label]]
    layout = lambda label, s: label  # noqa: E731 (one run directory a grid point)
    planned = {p.cell.label: p for p in study_lib.plan(runs, [seed], pathlib.Path(workdir) / "tuning", root=root,
                                                       layout=layout)}
    stage = _TuningRuns(planned, _reusable(earlier, objective, fraction, seed), objective)

    def record(runs_now: list[dict[str, Any]], chosen: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {"objective": objective.to_record(), "tuning_fraction": fraction, "seed": seed, "grids": grids_used,
                "runs": runs_now, "chosen": chosen, **extra}

    def after_run(p: Planned, error: Optional[str]) -> None:
        stage.ended(p, error)
        if progress is not None:
            progress(record([r for c in cells for point in points[c.label]
                             if (r := stage.run_of(c.label, point)) is not None], {}, partial=True))

    study_lib.run_study(study, [c for c in runs if c.label not in stage.reused], [seed],
                        pathlib.Path(workdir) / "tuning", root=root, layout=layout, train=train, after_run=after_run,
                        **run_kwargs)
    records, chosen = [], {}
    for c in cells:
        mine = [stage.run_of(c.label, point) or {"arm": c.label, "settings": point, objective.metric: None,
                                                 "error": "not trained"} for point in points[c.label]]
        records += mine
        scored = [(r[objective.metric] * (1 if objective.direction == "min" else -1), i, r["settings"])
                  for i, r in enumerate(mine) if r[objective.metric] is not None]
        if not scored:
            raise TuningError(f"arm {c.label!r}: none of its {len(points[c.label])} grid points trained to a finite "
                              f"{objective.metric} (see the tuning runs under {pathlib.Path(workdir) / 'tuning'})")
        chosen[c.label] = min(scored)[2]  # the first in grid order among equals
    return record(records, chosen)


class _TuningRuns:
    """The runs of one tuning stage (`tune`), by grid point: ``reused`` from an earlier record (`_reusable`'s
    ``previous``: a run whose directory is gone, recorded with the same config file and overrides), or read from
    their run directories once trained (`ended` says which this process attempted, and which failed)."""

    def __init__(self, planned: Mapping[str, Planned], previous: Mapping[tuple[str, str], dict[str, Any]],
                 objective: Objective):
        self.planned, self.objective = planned, objective
        self.reused = {label: r for label, p in planned.items()
                       if (r := previous.get(tuple(label.split("/", 1)))) is not None
                       and not study_lib.finished(p.config, p.run_dir)
                       and (r["config"], r["overrides"]) == (study_lib.config_name(p.cell), list(p.cell.overrides))}
        self.attempted: set[str] = set()
        self.failed: dict[str, str] = {}

    def ended(self, p: Planned, error: Optional[str]) -> None:
        """Notes that ``p`` was trained now, and its error if it failed."""
        self.attempted.add(str(p.run_dir))
        if error is not None:
            self.failed[str(p.run_dir)] = error

    def run_of(self, arm: str, point: dict[str, Any]) -> Optional[dict[str, Any]]:
        """The record of one grid point's run: reused, or read from its run directory (None: not trained yet)."""
        label = f"{arm}/{point_label(point)}"
        if label in self.reused:
            return self.reused[label]
        p = self.planned[label]
        if str(p.run_dir) not in self.attempted and not study_lib.finished(p.config, p.run_dir):
            return None
        done = study_lib.run_record(p) or {}
        return {"arm": arm, "settings": point, "run_dir": str(p.run_dir),
                self.objective.metric: _metric(p.run_dir, self.objective.metric, self.objective.at),
                "error": self.failed.get(str(p.run_dir)), "commit": done.get("commit"), "clean": done.get("clean"),
                "config": study_lib.config_name(p.cell), "overrides": list(p.cell.overrides)}


def _keep_tuning(out: os.PathLike, partial: dict[str, Any]) -> None:
    """Writes a tuning stage's record so far into the results file ``out`` as its ``tuning`` section, the rest of
    the file as it was: a study that outlives its machine mid-tuning keeps the runs it finished (`recorded_tuning`
    reads them back)."""
    try:
        doc = json.loads(pathlib.Path(out).read_text())
    except (OSError, ValueError):
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    study_lib.write_json(out, {**doc, "tuning": partial})


def recorded_tuning(out: Optional[os.PathLike]) -> Optional[dict[str, Any]]:
    """The tuning record of the results file ``out`` (its ``tuning`` section; None where the file has none, does not
    exist or is not given)."""
    if out is None:
        return None
    try:
        return json.loads(pathlib.Path(out).read_text()).get("tuning")
    except (OSError, ValueError, AttributeError):
        return None


def chosen_settings(path: os.PathLike, keys: Sequence[str], *, why: str, fix: str
                    ) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The settings a tuned study chose for each of ``keys`` (``tuning.chosen[key]`` of its results file ``path``)
    and the whole file, for a later study that trains those arms at their choice (a race on shaped links).

    Raises:
      ArgError: (``--tuned``) no such file, or no choice for a key; its message says ``why`` the study needs one and
        ``fix`` how to make it.
    """
    path = pathlib.Path(path)

    def refused(problem: str) -> ArgError:
        return ArgError("--tuned", str(path), f"--tuned {path}: {problem}; {why}.", fix)

    if not path.is_file():
        raise refused("no such file")
    try:
        doc = json.loads(path.read_text())
    except ValueError as e:
        raise refused(f"not JSON ({e})") from None
    chosen = (doc.get("tuning") or {}).get("chosen") or {} if isinstance(doc, dict) else {}
    missing = [k for k in keys if k not in chosen]
    if missing:
        raise refused(f"no tuning.chosen for {', '.join(missing)} (it holds {sorted(chosen) or 'none'})")
    return {k: dict(chosen[k]) for k in keys}, doc


def tuned_cells(cells: Sequence[Cell], tuning: Mapping[str, Any]) -> list[Cell]:
    """The reported cells: each arm with its choice (``tuning["chosen"][label]``) applied (`with_settings`), the
    choice also in its row's ``info`` (``tuned``)."""
    return [with_settings(c, tuning["chosen"][c.label], info={**c.info, "tuned": tuning["chosen"][c.label]})
            for c in cells]


def tune_then_run(study: str, cells: Sequence[Cell], seeds: Sequence[Optional[int]], workdir: os.PathLike, *,
                  grids: Grids, objective: Objective = Objective(), fraction: float = 0.1, tuning_seed: int = 0,
                  root: os.PathLike = ".", train: Optional[Callable[[Planned], Optional[str]]] = None,
                  sections: Optional[Mapping[str, Any]] = None, tuning_cells: Optional[Sequence[Cell]] = None,
                  **run_kwargs: Any) -> Outcome:
    """`tune`, then `istjax.launch.study.run_study` of the `tuned_cells` over ``seeds`` into ``workdir`` (module
    docstring); its results file (``out`` in ``run_kwargs``) holds the tuning record as ``tuning`` (the record so
    far after every tuning run, `tune`'s ``progress``; the whole one when the stage ends), beside any
    other ``sections`` (a study's ``baselines``, `istjax.launch.baselines.baseline_sections`). ``tuning_cells``: the
    arms as the tuning runs train them (the same labels, a smaller budget; default ``cells``)."""
    passed = {k: run_kwargs[k] for k in ("cache", "jobs", "overwrite") if k in run_kwargs}
    out = run_kwargs.get("out")
    record = tune(tuning_cells or cells, grids, workdir, objective=objective, fraction=fraction, seed=tuning_seed,
                  root=root, study=f"{study} tuning", train=train, earlier=recorded_tuning(out),
                  progress=None if out is None else (lambda partial: _keep_tuning(out, partial)), **passed)
    json.dumps(record)  # a record the results file can hold (a value of a grid that is not JSON fails here)
    if out is not None:  # the whole record, its choices included, before the reported runs begin
        _keep_tuning(out, record)
    return study_lib.run_study(study, tuned_cells(cells, record), seeds, workdir, root=root, train=train,
                               sections={"tuning": record, **dict(sections or {})}, **run_kwargs)
