"""A study: labelled cells x seeds, every run trained once, the results in one JSON file.

A `Cell` is a config (a file ``path[:arg]`` with ``--config.FIELD=VALUE`` overrides, as ``istjax train`` takes them,
or a ConfigDict) and a label. `run_study` trains every cell once per seed into ``<workdir>/<label>/s<seed>`` (the
``layout`` may name them otherwise), seed-major, so that a study cut short already has every cell's first seed:

* in this process (`train_in_process`: `istjax.launch.driver.train_and_evaluate`), or as a child process
  (`child_trainer`: ``istjax train ...`` behind a launch prefix a caller gives, such as ``mpiexec -n 2`` or a
  network namespace's wrapper);
* a run whose ``summary.json`` exists with the same config (`finished`) is not trained again, so a killed study
  continues where it stopped and a finished one only rewrites its file;
* after every run the results file is rewritten (`results`): the study, the command, each cell's config, one row
  per cell (mean and sample standard deviation over its finished seeds, `mean_std`) and one record per run with
  the commit that trained it, whether that tree was clean, and the machine, all read from the run's own
  ``summary.json`` (`istjax.launch.provenance`), never from the process that writes the file.

`istjax compare`, ``experiments/*/studies.py`` and the time-to-accuracy study are callers of `run_study`. A study
whose arms are compared runs through `istjax.launch.tuning.tune_then_run`: each arm's settings are chosen first on a
tuning split of the training data, and the file gains a ``tuning`` section (and, from `istjax.launch.baselines`,
its trivial ``baselines`` and ``regime``).
"""

from __future__ import annotations

import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Optional

from istjax.launch.metrics import SPLIT, read_metrics

__all__ = ["Cell", "Planned", "Outcome", "mean_std", "nested", "flat", "plan", "finished", "train_in_process",
           "child_command", "child_trainer", "run_record", "aggregate", "results", "write_json", "run_study",
           "config_name", "kept_records"]


class Cell(NamedTuple):
    """One row of a study: ``label`` (unique in the study; names its run directories), ``config`` (a config file
    ``path[:arg]``, relative to the study's root; a ConfigDict; or a function of the seed giving one), its
    ``--config.FIELD=VALUE`` ``overrides`` (file configs only), and free-form ``info`` copied into the row (what a
    table shows beside the numbers)."""
    label: str
    config: Any  # "path[:arg]" | ConfigDict | seed -> ConfigDict
    overrides: tuple[str, ...] = ()
    info: dict[str, Any] = {}


class Planned(NamedTuple):
    """One run of a study: its cell, its seed (None: the config's own), its directory and its config (seed set)."""
    cell: Cell
    seed: Optional[int]
    run_dir: pathlib.Path
    config: Any


class Outcome(NamedTuple):
    """What `run_study` did: every planned run, ``failed`` (run directory -> message) and the run records."""
    planned: list[Planned]
    failed: dict[str, str]
    records: list[dict[str, Any]]


def mean_std(values: Iterable[Optional[float]]) -> tuple[Optional[float], Optional[float]]:
    """The mean and the sample standard deviation (n - 1) of the values that are not None: ``(None, None)`` where
    none are, the standard deviation None where only one is. The one seed statistic of every study."""
    vs = [v for v in values if v is not None]
    if not vs:
        return None, None
    return statistics.fmean(vs), (statistics.stdev(vs) if len(vs) > 1 else None)


def nested(label: str, seed: Optional[int]) -> str:
    """The default layout: ``<label>/s<seed>`` (``<label>`` for the config's own seed)."""
    return label if seed is None else f"{label}/s{seed}"


def flat(label: str, seed: Optional[int]) -> str:
    """``<label>_s<seed>`` (``istjax compare``'s layout)."""
    return label if seed is None else f"{label}_s{seed}"


def _config(cell: Cell, seed: Optional[int], root: pathlib.Path):
    """The cell's config for ``seed``: loaded as ``istjax train`` would (`istjax.launch.args.load_config`), a copy
    of the cell's ConfigDict, or what the cell's function gives for ``seed``; ``seed`` set, progress bars off."""
    if isinstance(cell.config, (str, os.PathLike)):
        from istjax.launch.args import load_config

        path, _, arg = str(cell.config).partition(":")
        config = load_config(str(root / path) + (f":{arg}" if arg else ""), cell.overrides)
    elif cell.overrides:
        raise ValueError(f"cell {cell.label!r}: overrides apply to a config file; set the ConfigDict's fields")
    elif hasattr(cell.config, "copy_and_resolve_references"):
        config = cell.config.copy_and_resolve_references()
    else:
        config = cell.config(seed)
    if seed is not None:
        config.seed = int(seed)
    config.progress = False
    return config


def plan(cells: Sequence[Cell], seeds: Sequence[Optional[int]], workdir: os.PathLike, *, root: os.PathLike = ".",
         only: Sequence[str] = (), layout: Callable[[str, Optional[int]], str] = nested) -> list[Planned]:
    """Every (cell, seed) of the study (the cells in ``only`` when given), seed-major, each config loaded before any
    run trains (`istjax.launch.config.ConfigError` for one that does not load).

    Raises:
      ValueError: labels that repeat, or ``only`` naming no cell.
    """
    labels = [c.label for c in cells]
    if len(set(labels)) != len(labels):
        raise ValueError(f"cell labels repeat: {labels}")
    unknown = sorted(set(only) - set(labels))
    if unknown:
        raise ValueError(f"no cell named {unknown}; cells: {labels}")
    workdir, root = pathlib.Path(workdir), pathlib.Path(root)
    return [Planned(c, s, workdir / layout(c.label, s), _config(c, s, root))
            for s in seeds for c in cells if not only or c.label in only]


def same_config(config, run_dir: pathlib.Path) -> Optional[bool]:
    """Whether ``run_dir``'s ``config.json`` is ``config`` (read through `istjax.launch.config.from_dict`, so a
    field added since, at its default, is what the run did); None where either cannot be read."""
    from istjax.launch.config import from_dict, to_dict

    try:
        recorded = to_dict(from_dict(json.loads((run_dir / "config.json").read_text())))
        return recorded == json.loads(json.dumps(to_dict(config)))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def finished(config, run_dir: pathlib.Path) -> bool:
    """Whether ``run_dir`` holds a finished run of exactly ``config``: its ``summary.json`` exists, its
    ``config.json`` equals ``config`` (`same_config`), and it trained every round (or stopped at its target,
    ``stop_at_target``)."""
    try:
        done = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    if not same_config(config, run_dir):
        return False
    stopped = bool(config.get("stop_at_target")) and done.get("round_to_target") is not None
    return done.get("rounds") == int(config.num_rounds) or stopped


def train_in_process(p: Planned, *, overwrite: bool = False, cache: Optional[os.PathLike] = None) -> Optional[str]:
    """Trains ``p`` here (`istjax.launch.driver.train_and_evaluate`); the error's message when it fails (a refused
    config or a diverged run does not end the study), else None. ``cache``: a persistent compilation cache (seeds of
    one cell compile to the same programs)."""
    import jax

    from istjax.launch import driver
    from istjax.launch.config import ConfigError

    if cache is not None:
        jax.config.update("jax_compilation_cache_dir", str(cache))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    try:
        driver.train_and_evaluate(p.config, p.run_dir, overwrite=overwrite)
    except (driver.TrainingError, ConfigError) as e:
        return str(e)
    return None


def child_command(p: Planned, root: os.PathLike = ".") -> list[str]:
    """The ``istjax train`` line that trains ``p`` in a child process (file configs only)."""
    if not isinstance(p.cell.config, (str, os.PathLike)):
        raise ValueError(f"cell {p.cell.label!r}: a child process trains a config file, not a ConfigDict")
    path, _, arg = str(p.cell.config).partition(":")
    seed = [] if p.seed is None else [f"--config.seed={p.seed}"]
    return [sys.executable, "-m", "istjax.launch.cli", "train",
            f"--config={pathlib.Path(root) / path}" + (f":{arg}" if arg else ""), *p.cell.overrides, *seed,
            "--config.progress=False", f"--workdir={p.run_dir}"]


def child_trainer(prefix: Callable[[Planned], Sequence[str]] | Sequence[str] = (), *, root: os.PathLike = ".",
                  timeout: Optional[float] = None, env: Optional[dict[str, str]] = None
                  ) -> Callable[[Planned], Optional[str]]:
    """A trainer for `run_study` that runs each run's `child_command` behind ``prefix`` (a list, or a function of
    the run giving one: ``["mpiexec", "-n", "2"]``, a network namespace's wrapper); the tail of its output when it
    exits non-zero, else None."""
    def train(p: Planned) -> Optional[str]:
        head = list(prefix(p) if callable(prefix) else prefix)
        try:
            out = subprocess.run([*head, *child_command(p, root)], capture_output=True, text=True, timeout=timeout,
                                 env=env)
        except subprocess.TimeoutExpired:
            return f"killed after {timeout:g} s"
        return None if out.returncode == 0 else f"exit {out.returncode}: {(out.stderr or out.stdout)[-2000:]}"
    return train


def run_record(p: Planned) -> Optional[dict[str, Any]]:
    """One run's record from its ``summary.json`` (None before it finished): its numbers, and the commit, the
    tree's cleanliness and the machine it recorded when it trained (None for a run from before provenance). None
    too where the directory holds a run of another config (one left by an earlier config of the cell, a tuning
    choice that moved): it is not this cell's run."""
    if same_config(p.config, p.run_dir) is False:
        return None
    try:
        s = json.loads((p.run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    code = s.get("code") or {}
    return {"label": p.cell.label, "seed": p.seed, "test_accuracy": s["test_accuracy"], "test_loss": s["test_loss"],
            "train_loss": s["train_loss"], "rounds": s["rounds"], "samples_seen": s["samples_seen"],
            "time_per_round_s": s["time_per_round_s"], "compile_time_s": s.get("compile_time_s"),
            "bytes_per_worker_per_round": s["bytes_sent_per_worker_per_round"] + s[
                "bytes_received_per_worker_per_round"],
            "algorithm": s["algorithm"], "num_workers": s["num_workers"],
            **{k: s[k] for k in SPLIT if k in s},  # the last evaluation window's loss split, where the run had one
            **_first_split(p.run_dir),
            "commit": code.get("commit"), "clean": code.get("clean"), "machine": s.get("machine")}


def _first_split(run_dir: pathlib.Path) -> dict[str, float]:
    """``worker_train_loss_first``: the workers' own train loss of the run's first evaluation window (with the last
    window's, whether they trained at all: finite and falling), where its ``metrics.jsonl`` recorded the split."""
    try:
        records = read_metrics(run_dir)
    except (OSError, ValueError):
        return {}
    first = next((r for r in records if r.get("worker_train_loss") is not None), None)
    return {} if first is None else {"worker_train_loss_first": first["worker_train_loss"]}


def paired_difference(runs_a: Sequence[dict[str, Any]], runs_b: Sequence[dict[str, Any]], key: str,
                      level: float = 0.95) -> Optional[dict[str, Any]]:
    """``a - b`` of ``key`` over the seeds both have (run records with ``seed``): the mean of the per-seed
    differences, their sample standard deviation and Student's t interval at ``level`` (n - 1 degrees of freedom),
    or None with fewer than two common seeds. Pairing by seed removes what the seed does to both (its data order,
    its initialisation) from the comparison."""
    from scipy import stats

    b = {r["seed"]: r[key] for r in runs_b if r.get(key) is not None}
    diffs = [(r["seed"], r[key] - b[r["seed"]]) for r in runs_a if r.get(key) is not None and r["seed"] in b]
    if len(diffs) < 2:
        return None
    values = [d for _, d in diffs]
    mean, std = mean_std(values)
    half = float(stats.t.ppf(0.5 + level / 2, len(values) - 1)) * std / len(values) ** 0.5
    return {"mean": mean, "std": std, "low": mean - half, "high": mean + half, "level": level,
            "seeds": [s for s, _ in diffs], "differences": values}


def _split_means(runs: Sequence[dict[str, Any]]) -> dict[str, Optional[float]]:
    """``<key>_mean`` and ``<key>_std`` over seeds of each loss-split number every run has (`SPLIT`, and the first
    window's workers' loss)."""
    out: dict[str, Optional[float]] = {}
    for k in (*SPLIT, "worker_train_loss_first"):
        if runs and all(r.get(k) is not None for r in runs):
            out[f"{k}_mean"], out[f"{k}_std"] = mean_std(r[k] for r in runs)
    return out


def aggregate(cells: Sequence[Cell], runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per cell with finished seeds: mean and sample standard deviation (`mean_std`) of its seeds' numbers,
    and the commits its runs were trained at."""
    rows = []
    for cell in cells:
        mine = [r for r in runs if r["label"] == cell.label]
        if not mine:
            continue
        accs = [r["test_accuracy"] for r in mine]
        acc_mean, acc_std = mean_std(accs)
        loss_mean, loss_std = mean_std(r["train_loss"] for r in mine)
        first = mine[0]
        rows.append({"label": cell.label, **cell.info, "algorithm": first["algorithm"],
                     "num_workers": first["num_workers"], "seeds": [r["seed"] for r in mine],
                     "test_accuracy_mean": acc_mean, "test_accuracy_std": acc_std,
                     "test_accuracy_min": min(accs), "test_accuracy_max": max(accs),
                     "train_loss_mean": loss_mean, "train_loss_std": loss_std,
                     "rounds": first["rounds"], "samples_seen": first["samples_seen"],
                     "bytes_per_worker_per_round": first["bytes_per_worker_per_round"],
                     "time_per_round_s_mean": mean_std(r["time_per_round_s"] for r in mine)[0],
                     **_split_means(mine),
                     "config": config_name(cell), "overrides": list(cell.overrides),
                     "commits": sorted({str(r.get("commit")) for r in mine})})
    return rows


def config_name(cell: Cell) -> str:
    """How a results file names a cell's config: its file's path, or ``<label>`` for a config built in Python."""
    return str(cell.config) if isinstance(cell.config, (str, os.PathLike)) else f"<{cell.label}>"


def _machines(runs: Sequence[dict[str, Any]]) -> Any:
    """The machine every run recorded (one dict), or the distinct ones (a list) where they differ."""
    found = []
    for r in runs:
        if r.get("machine") not in found:
            found.append(r.get("machine"))
    return found[0] if len(found) == 1 else found


def results(study: str, command: str, planned: Sequence[Planned], runs: Sequence[dict[str, Any]],
            started: str, sections: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The results document: study, command, each cell's config (file, overrides, resolved fields), the machine of
    the runs, rows (`aggregate`) and runs (`run_record`, each with its own commit), then ``sections`` (a study's
    ``tuning`` record, `istjax.launch.tuning`; its ``baselines`` and ``regime``, `istjax.launch.baselines`)."""
    cells = list({p.cell.label: p.cell for p in planned}.values())
    configs = {}
    for p in planned:
        if p.cell.label not in configs:
            configs[p.cell.label] = {"config": config_name(p.cell), "overrides": list(p.cell.overrides),
                                     "resolved": resolved_fields(p.config)}
    return {"study": study, "command": command, "machine": _machines(runs), "started": started,
            "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "configs": configs,
            "rows": aggregate(cells, runs), "runs": list(runs), **dict(sections or {})}


def resolved_fields(config: Any) -> dict[str, Any]:
    """A run's config as the results file records it for its cell (``configs[label]["resolved"]``): every field, as
    JSON, without the seed (a cell's seeds share it)."""
    from istjax.launch.config import to_dict

    resolved = json.loads(json.dumps(to_dict(config)))
    resolved.pop("seed", None)
    return resolved


def _read_resolved(recorded: Any) -> Optional[dict[str, Any]]:
    """A results file's recorded ``resolved`` fields as `resolved_fields` writes them today: read through
    `istjax.launch.config.from_dict`, so a field added since, at its default, is what the run did (as `finished`
    reads a run's ``config.json``); None when there is none."""
    from istjax.launch.config import from_dict

    if not isinstance(recorded, Mapping):
        return None
    return resolved_fields(from_dict(recorded))


def kept_records(out: os.PathLike, cells: Sequence[Cell], resolved: Optional[Mapping[str, dict[str, Any]]] = None
                 ) -> dict[tuple[str, Optional[int]], dict[str, Any]]:
    """``{(label, seed): record}``: the runs an earlier `run_study` wrote into ``out`` for cells whose config file
    is still these ``cells``' and whose overrides are too, or, where they changed, whose resolved fields (``resolved``:
    label -> `resolved_fields` of the cell's config now) equal the ones the file recorded: a cell that pins a value
    its config file no longer defaults to (``--config.learning_rate=0.05`` after the file's default moved) keeps the
    runs that trained at it. A study that outlives its machine (runs trained over several sessions, their run
    directories gone) keeps them: `run_study` neither retrains them nor drops them from the file. Each record
    carries the commit and machine that trained it."""
    try:
        doc = json.loads(pathlib.Path(out).read_text())
    except (OSError, ValueError):
        return {}
    resolved = resolved or {}

    def same(c: Cell) -> bool:
        recorded = doc.get("configs", {}).get(c.label) or {}
        if recorded.get("config") != config_name(c):
            return False
        return (recorded.get("overrides") == list(c.overrides)
                or (c.label in resolved and _read_resolved(recorded.get("resolved")) == resolved[c.label]))

    kept = {c.label for c in cells if same(c)}
    return {(r["label"], r.get("seed")): r for r in doc.get("runs", []) if r.get("label") in kept}


def write_json(out: os.PathLike, doc: Any) -> pathlib.Path:
    """Writes ``doc`` to ``out`` whole, atomically (a reader never sees half a file)."""
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, allow_nan=True) + "\n")
    tmp.replace(out)
    return out


def _say(text: str) -> None:
    print(f"== {text}", file=sys.stderr, flush=True)


def _describe(p: Planned) -> str:
    return p.cell.label + ("" if p.seed is None else f" seed {p.seed}")


def run_study(study: str, cells: Sequence[Cell], seeds: Sequence[Optional[int]], workdir: os.PathLike, *,
              out: Optional[os.PathLike] = None, command: str = "", root: os.PathLike = ".",
              only: Sequence[str] = (), layout: Callable[[str, Optional[int]], str] = nested,
              train: Optional[Callable[[Planned], Optional[str]]] = None,
              record: Callable[[Planned], Optional[dict[str, Any]]] = run_record,
              overwrite: bool = False, cache: Optional[os.PathLike] = None, jobs: int = 1,
              describe: Callable[[Planned], str] = _describe,
              after_run: Optional[Callable[[Planned, Optional[str]], None]] = None,
              sections: Optional[Mapping[str, Any]] = None) -> Outcome:
    """Trains every cell (those in ``only``) once per seed (`plan`), skipping `finished` runs unless ``overwrite``;
    after every run rewrites ``out`` (`results`, with ``sections`` added) when given and calls
    ``after_run(run, error)``.

    ``train`` trains one run and returns its error's message or None (default `train_in_process`; `child_trainer`
    for child processes); ``record`` reads a run's record (default `run_record`). ``jobs`` > 1 trains that many
    runs at once in spawned processes (in-process training only: a GPU is mostly idle under one small run).
    """
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    planned = plan(cells, seeds, workdir, root=root, only=only, layout=layout)
    every = plan(cells, seeds, workdir, root=root, layout=layout) if only else planned
    # every cell's, not only those asked for: the runs of cells outside ``only`` stay in the file too
    resolved = {p.cell.label: resolved_fields(p.config) for p in every}
    kept = {} if overwrite or out is None else kept_records(out, cells, resolved)
    todo = planned if overwrite else [p for p in planned if not finished(p.config, p.run_dir)
                                      and (p.cell.label, p.seed) not in kept]
    _say(f"{study}: {len(planned)} run(s), {len(planned) - len(todo)} finished before"
         f"{f' ({len(kept)} kept from {out})' if kept else ''}, {len(todo)} to train")
    failed: dict[str, str] = {}

    def collect() -> list[dict[str, Any]]:
        records = [r for p in every if (r := record(p) or kept.get((p.cell.label, p.seed))) is not None]
        # the file's runs of seeds not asked for this time stay in it (a study run with --seeds 3,4 keeps 0-2)
        asked = {(p.cell.label, p.seed) for p in every}
        records += [r for key, r in kept.items() if key not in asked]
        records.sort(key=lambda r: -1 if r.get("seed") is None else r["seed"])  # seed-major, as `plan`
        if out is not None:
            write_json(out, results(study, command, every, records, started, sections))
        return records

    def done(p: Planned, error: Optional[str]) -> None:
        if error is not None:
            failed[str(p.run_dir)] = error
            _say(f"{describe(p)} failed: {error}\n   (continuing with the other runs)")
        collect()
        if after_run is not None:
            after_run(p, error)

    if jobs > 1 and train is None:
        _in_pool(todo, jobs, overwrite, cache, done)
    else:
        for p in todo:
            _say(f"{describe(p)}: {p.run_dir}")
            t0 = time.perf_counter()
            error = (train or (lambda q: train_in_process(q, overwrite=overwrite, cache=cache)))(p)
            if error is None:
                _say(f"{describe(p)} done in {time.perf_counter() - t0:.0f} s")
            done(p, error)
    return Outcome(planned, failed, collect())


def _in_pool(todo: Sequence[Planned], jobs: int, overwrite: bool, cache, done) -> None:
    """`train_in_process` of ``todo``, ``jobs`` at a time in spawned processes; ``done(run, error)`` as each ends."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(train_in_process, p, overwrite=overwrite, cache=cache): p for p in todo}
        for future in as_completed(futures):
            done(futures[future], future.result())

