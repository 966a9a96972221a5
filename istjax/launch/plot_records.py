"""A run directory as `istjax plot` and `istjax compare` read it: `load_run` gives its evaluation records
(``metrics.jsonl``) and its config (``config.json``, upgraded from an earlier version) as a `Run`, refusing a
directory it cannot read with a `PlotError` naming the file and line; `wall_time_text` says what the runs' training
wall time measures, from the runtime each recorded.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Sequence
from typing import Any, NamedTuple, Optional

from istjax.launch.config import upgrade_dict

__all__ = ["PlotError", "Run", "load_run", "read_json_object", "wall_time_text"]


class PlotError(ValueError):
    """A run directory that cannot be plotted (missing, empty or malformed ``metrics.jsonl``)."""


class Run(NamedTuple):
    """One run's records.

    Fields:
      path: the run directory.
      records: the ``metrics.jsonl`` objects, in file order (one per evaluation).
      config: ``config.json`` as a dict (empty when the file is absent).
    """

    path: pathlib.Path
    records: list[dict[str, Any]]
    config: dict[str, Any]

    @property
    def algorithm(self) -> str:
        return str(self.records[-1].get("algorithm") or self.config.get("algorithm", {}).get("name") or "?")

    @property
    def num_workers(self) -> Optional[int]:
        w = self.records[-1].get("num_workers", self.config.get("num_workers"))
        return None if w is None else int(w)

    @property
    def local_steps(self) -> Optional[int]:
        """K from ``config.json``, else ``step / round`` of the last record (``step = round * K``)."""
        if "local_steps" in self.config:
            return int(self.config["local_steps"])
        last = self.records[-1]
        if last.get("round") and last.get("step") is not None:
            return int(last["step"]) // int(last["round"])
        return None

    @property
    def seed(self) -> Optional[int]:
        """``seed`` from ``config.json`` (None when the file or the field is absent)."""
        s = self.config.get("seed")
        return None if s is None else int(s)


def load_run(run_dir: str | os.PathLike) -> Run:
    """Reads ``RUN_DIR/metrics.jsonl`` (and ``config.json`` if present).

    A half-written *last* line (a run killed mid-write) is skipped; any other unparsable line is an error.

    Raises:
      PlotError: the directory or its metrics file is missing, empty, malformed, or lacks ``round`` /
        ``test_accuracy``; the message names the file and line.
    """
    path = pathlib.Path(run_dir)
    if not path.is_dir():
        raise PlotError(f"run directory {str(path)!r} does not exist; pass the --workdir of an `istjax train` run.")
    metrics = path / "metrics.jsonl"
    if not metrics.exists():
        raise PlotError(f"{str(metrics)!r} not found: {str(path)!r} is not a run directory (or the run has not "
                        f"evaluated yet; it writes a line every eval_every rounds).")
    lines = [(i + 1, line) for i, line in enumerate(metrics.read_text().splitlines()) if line.strip()]
    records = []
    for n, (lineno, line) in enumerate(lines):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if n == len(lines) - 1 and records:
                break  # a half-written last line: the run was interrupted while writing it
            raise PlotError(f"{metrics}:{lineno}: not a JSON object ({e.msg}); each line must be one record.") from e
        if not isinstance(rec, dict):
            raise PlotError(f"{metrics}:{lineno}: expected a JSON object, got {type(rec).__name__}.")
        for field in ("round", "test_accuracy"):
            if field not in rec:
                raise PlotError(f"{metrics}:{lineno}: the record has no {field!r} field (fields: {sorted(rec)}); "
                                f"metrics.jsonl must follow the schema in istjax.launch.metrics.")
        records.append(rec)
    if not records:
        raise PlotError(f"{str(metrics)!r} is empty: the run has not evaluated yet (it writes a line every "
                        f"eval_every rounds). Plot it again once it has.")
    config = read_json_object(path / "config.json")
    if config:
        config = upgrade_dict(config)  # a run of an earlier, flat config version
    return Run(path, records, config)


def read_json_object(path: pathlib.Path, fix: str = "") -> dict:
    """The JSON object in ``path`` (``{}`` when there is no such file); a `PlotError` naming the file otherwise."""
    if not path.exists():
        return {}
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise PlotError(f"{path}: not valid JSON ({e.msg}){fix}.") from e
    if not isinstance(value, dict):
        raise PlotError(f"{path}: expected a JSON object, got {type(value).__name__}.")
    return value


def _runtime_of(run: Run) -> tuple[Optional[str], Optional[str], Optional[int]]:
    """``(runtime, mode, processes)`` a run recorded: ``runtime.name`` of its ``config.json`` (else
    ``summary.json``'s ``runtime``), ``summary.json``'s ``runtime_mode`` where it names one (``"sharded"``), and its
    process count (``summary.json``'s ``num_processes``, else the length of its ``peak_rss_mib_per_process``). None:
    not recorded."""
    try:
        summary = read_json_object(run.path / "summary.json")
    except PlotError:
        summary = {}
    runtime = run.config.get("runtime")
    name = runtime.get("name") if isinstance(runtime, dict) else None
    name = summary.get("runtime") if name is None else name
    mode = summary.get("runtime_mode") or None
    processes = summary.get("num_processes")
    if not isinstance(processes, int) or isinstance(processes, bool):
        per = summary.get("peak_rss_mib_per_process")
        processes = len(per) if isinstance(per, list) and per else None
    return (None if name is None else str(name)), (None if mode is None else str(mode)), processes


def _declared_wall_time(name: str) -> str:
    """What a training wall time measures under the runtime called ``name``, as that runtime declares it
    (`istjax.runtimes.Runtime.wall_time`); ``""`` when it declares nothing or is not registered in this process."""
    from istjax.runtimes import RUNTIMES

    return RUNTIMES[name].wall_time if name in RUNTIMES else ""


def wall_time_text(runs: Sequence[Run]) -> str:
    """What the runs' training wall time measures, from the runtime each recorded (`_runtime_of`): the runtime's
    own words where it declares them (`istjax.runtimes.Runtime.wall_time`), ``"one process computes every worker, no
    communication (runtime=simulate)"``, else its name, mode and process count, ``"runtime=mpi (sharded), 4
    processes"``; several kinds joined by ``"; "``; ``""`` when no run records its runtime."""
    recorded = [_runtime_of(r) for r in runs]
    parts = []
    for name, mode, processes in recorded:
        if name is None:
            continue
        if declared := _declared_wall_time(name):
            parts.append(f"{declared} (runtime={name})")
        else:
            parts.append(f"runtime={name}" + (f" ({mode})" if mode else "")
                         + (f", {processes} process{'es' if processes != 1 else ''}" if processes else ""))
    if parts and any(name is None for name, _, _ in recorded):
        parts.append("runtime not recorded")
    return "; ".join(dict.fromkeys(parts))
