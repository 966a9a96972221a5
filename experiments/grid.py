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
import math
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
    found = {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    try:
        import jax

        device = jax.devices()[0]
        found.update(backend=device.platform, device=device.device_kind, jax=jax.__version__)
    except Exception:  # noqa: BLE001 -- what the numbers ran on is a note; never fail a study over it
        pass
    return found


def commit() -> str:
    """The repository's HEAD, with ``+dirty`` when tracked files differ from it."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    if os.environ.get("ISTJAX_COMMIT"):  # a copy of the tree run elsewhere (a GPU machine): the commit it was
        return os.environ["ISTJAX_COMMIT"]
    head = git("rev-parse", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def _config(cell: Cell, seed: int):
    import istjax.launch.cli as cli

    config = cli.parse_train_args(["grid", f"--config={REPO / cell.config}", *cell.overrides])[0]
    config.seed = int(seed)
    config.progress = False
    return config


def _finished(config, run_dir: pathlib.Path) -> bool:
    """Whether ``run_dir`` holds a finished run of exactly ``config`` (then it is not opened again: resuming a
    finished run would recompile and re-evaluate it)."""
    from istjax.launch.config import to_dict

    try:
        done = json.loads((run_dir / "summary.json").read_text())
        same = json.loads((run_dir / "config.json").read_text()) == to_dict(config)
    except (OSError, ValueError):
        return False
    return same and done.get("rounds") == int(config.num_rounds)


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
             command: str, only: Sequence[str] = (), jobs: int = 1) -> int:
    """Trains every cell (or those in ``only``) once per seed, seed-major so that a partial study already has every
    cell's first seed; rewrites ``out`` after each run. ``jobs`` > 1 trains that many runs at once in separate
    processes (on a GPU, small runs leave it mostly idle one at a time). Returns 1 if a run failed, else 0."""
    labels = [c.label for c in cells]
    if len(set(labels)) != len(labels):
        raise ValueError(f"{study}: cell labels repeat: {labels}")
    unknown = sorted(set(only) - set(labels))
    if unknown:
        raise SystemExit(f"{study}: no cell named {unknown}; cells: {labels}")
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    todo = [(c, s) for s in seeds for c in cells if not only or c.label in only]
    configs = {(c.label, s): _config(c, s) for c, s in todo}  # every config parsed and checked before any run
    todo = [(c, s) for c, s in todo if not _finished(configs[c.label, s], workdir / c.label / f"s{s}")]
    print(f"== {study}: {len(todo)} run(s) to train, {jobs} at a time", file=sys.stderr, flush=True)
    failed = 0
    if jobs <= 1:
        for i, (cell, seed) in enumerate(todo, 1):
            print(f"== [{i}/{len(todo)}] {study}: {cell.label} seed {seed}", file=sys.stderr, flush=True)
            failed |= _train_one(configs[cell.label, seed], workdir / cell.label / f"s{seed}", workdir / ".jax_cache")
            _collect_and_write(study, cells, seeds, workdir, out, command, started)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_train_one, configs[c.label, s], workdir / c.label / f"s{s}",
                                   workdir / ".jax_cache") for c, s in todo]
            for done in as_completed(futures):
                failed |= done.result()
                _collect_and_write(study, cells, seeds, workdir, out, command, started)
    _collect_and_write(study, cells, seeds, workdir, out, command, started)
    return failed


def _train_one(config, run_dir: pathlib.Path, cache: pathlib.Path) -> int:
    """Trains one run (in this process or a pool's); 1 if it failed, else 0."""
    import jax

    from istjax.launch import driver

    jax.config.update("jax_compilation_cache_dir", str(cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    t0 = time.perf_counter()
    print(f"== {config.seed} -> {run_dir}", file=sys.stderr, flush=True)
    from istjax.launch.config import ConfigError

    try:
        driver.train_and_evaluate(config, run_dir)
    except (driver.TrainingError, ConfigError) as e:  # one refused or diverged cell does not end the study
        print(f"== {run_dir} failed: {e}", file=sys.stderr, flush=True)
        return 1
    print(f"== {run_dir} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return 0


def _collect_and_write(study, cells, seeds, workdir, out, command, started) -> None:
    """Every finished run of the study's cells and seeds, written to ``out`` (`write`)."""
    runs = [r for s in seeds for c in cells if (r := _run_record(c, s, workdir / c.label / f"s{s}")) is not None]
    write(out, study, command, cells, runs, started)


def plot(results: pathlib.Path, out: pathlib.Path, title: str, reference: str | None = None) -> pathlib.Path:
    """A horizontal bar per row of ``results``: the mean test accuracy over seeds, each seed a dot, the mean of the
    ``reference`` row (a label, e.g. data parallel) as a dashed line. Rendered from the file alone, so the figure
    in the docs is regenerated with the table (``--plot``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doc = json.loads(results.read_text())
    rows = doc["rows"]
    fig, ax = plt.subplots(figsize=(8, 0.38 * len(rows) + 1.2))
    y = list(range(len(rows)))[::-1]
    ax.barh(y, [r["test_accuracy_mean"] for r in rows], color="#9ecae1", height=0.6)
    for yi, r in zip(y, rows):
        accs = [run["test_accuracy"] for run in doc["runs"] if run["label"] == r["label"]]
        ax.plot(accs, [yi] * len(accs), "o", color="#08519c", markersize=3)
    ref = next((r for r in rows if r["label"] == reference), None)
    if ref is not None:
        ax.axvline(ref["test_accuracy_mean"], color="k", linestyle="--", linewidth=1)
    ax.set_yticks(y, [r["label"] for r in rows])
    ax.set_xlabel("test accuracy (bar: mean over seeds; dots: seeds" + (f"; dashed: {reference}" if ref else "") + ")")
    low = min(run["test_accuracy"] for run in doc["runs"])
    ax.set_xlim(0 if low < 0.6 else math.floor(10 * low - 0.5) / 10, 1)  # close results: an axis that shows them
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
