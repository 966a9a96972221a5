"""A study as a grid of labelled cells x seeds, written to a committed results file.

A cell is a config file plus ``--config.FIELD=VALUE`` overrides; every cell trains once per seed into
``<workdir>/<label>/s<seed>`` (a finished run with the same config is reused by the driver, so an interrupted study
continues where it stopped), and after every run the results file is rewritten: ``rows`` (one per cell: the mean and
sample standard deviation over its finished seeds) and ``runs`` (one per seed), with the command, the commit and the
machine. `experiments.report` renders the docs' tables from these files.

Seeds of one cell differ only in values, so they compile to the same programs: a persistent compilation cache
(``<workdir>/.jax_cache``) lets seeds 1 and 2 skip the 20 s compilation of seed 0.
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

REPO = pathlib.Path(__file__).resolve().parents[1]


class Cell(NamedTuple):
    """One row of a study: ``label`` (unique in the study), the config file, its overrides, and free-form
    ``info`` copied into the row (what the docs' table shows beside the numbers, e.g. ``{"layout": "inner"}``)."""
    label: str
    config: str
    overrides: tuple[str, ...] = ()
    info: dict[str, Any] = {}


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}


def commit() -> str:
    """The repository's HEAD, with ``+dirty`` when tracked files differ from it."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def _config(cell: Cell, seed: int):
    import istjax.experiment.cli as cli

    config = cli.parse_train_args(["grid", f"--config={REPO / cell.config}", *cell.overrides])[0]
    config.seed = int(seed)
    config.progress = False
    return config


def _run_record(cell: Cell, seed: int, run_dir: pathlib.Path) -> dict[str, Any] | None:
    summary = run_dir / "summary.json"
    if not summary.exists():
        return None
    s = json.loads(summary.read_text())
    return {"label": cell.label, "seed": seed, "test_accuracy": s["test_accuracy"], "test_loss": s["test_loss"],
            "train_loss": s["train_loss"], "rounds": s["rounds"], "samples_seen": s["samples_seen"],
            "time_per_round_s": s["time_per_round_s"], "compile_time_s": s.get("compile_time_s"),
            "bytes_per_worker_per_round": s["bytes_sent_per_worker_per_round"] + s[
                "bytes_received_per_worker_per_round"],
            "algorithm": s["algorithm"], "num_workers": s["num_workers"]}


def _mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def aggregate(cells: Sequence[Cell], runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per cell with finished seeds: mean and sample standard deviation of its seeds' numbers."""
    rows = []
    for cell in cells:
        mine = [r for r in runs if r["label"] == cell.label]
        if not mine:
            continue
        acc_mean, acc_std = _mean_std([r["test_accuracy"] for r in mine])
        loss_mean, loss_std = _mean_std([r["train_loss"] for r in mine])
        rows.append({"label": cell.label, **cell.info, "algorithm": mine[0]["algorithm"],
                     "num_workers": mine[0]["num_workers"], "seeds": [r["seed"] for r in mine],
                     "test_accuracy_mean": acc_mean, "test_accuracy_std": acc_std,
                     "test_accuracy_min": min(r["test_accuracy"] for r in mine),
                     "test_accuracy_max": max(r["test_accuracy"] for r in mine),
                     "train_loss_mean": loss_mean, "train_loss_std": loss_std,
                     "rounds": mine[0]["rounds"], "samples_seen": mine[0]["samples_seen"],
                     "bytes_per_worker_per_round": mine[0]["bytes_per_worker_per_round"],
                     "time_per_round_s_mean": statistics.fmean(r["time_per_round_s"] for r in mine),
                     "config": cell.config, "overrides": list(cell.overrides)})
    return rows


def write(out: pathlib.Path, study: str, command: str, cells: Sequence[Cell], runs: Sequence[dict[str, Any]],
          started: str) -> None:
    """The results file: study, command, commit, machine, rows and runs (rewritten whole, atomically)."""
    doc = {"study": study, "command": command, "commit": commit(), "machine": machine(), "started": started,
           "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rows": aggregate(cells, runs), "runs": list(runs)}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(out)


def run_grid(study: str, cells: Sequence[Cell], seeds: Sequence[int], workdir: pathlib.Path, out: pathlib.Path,
             command: str, only: Sequence[str] = ()) -> int:
    """Trains every cell (or those in ``only``) once per seed, seed-major so that a partial study already has every
    cell's first seed; rewrites ``out`` after each run. Returns 1 if a run failed, else 0."""
    import jax

    from istjax.experiment import driver

    labels = [c.label for c in cells]
    if len(set(labels)) != len(labels):
        raise ValueError(f"{study}: cell labels repeat: {labels}")
    unknown = sorted(set(only) - set(labels))
    if unknown:
        raise SystemExit(f"{study}: no cell named {unknown}; cells: {labels}")
    jax.config.update("jax_compilation_cache_dir", str(workdir / ".jax_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    todo = [(c, s) for s in seeds for c in cells if not only or c.label in only]
    configs = {(c.label, s): _config(c, s) for c, s in todo}  # every config parsed and checked before any run
    failed = 0
    for i, (cell, seed) in enumerate(todo, 1):
        run_dir = workdir / cell.label / f"s{seed}"
        print(f"== [{i}/{len(todo)}] {study}: {cell.label} seed {seed} -> {run_dir}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            driver.train_and_evaluate(configs[cell.label, seed], run_dir)
        except driver.TrainingError as e:
            failed = 1
            print(f"== {cell.label} seed {seed} failed: {e}", file=sys.stderr, flush=True)
        print(f"== done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        runs = [r for c, s in [(c, s) for s in seeds for c in cells]
                if (r := _run_record(c, s, workdir / c.label / f"s{s}")) is not None]
        write(out, study, command, cells, runs, started)
    return failed
