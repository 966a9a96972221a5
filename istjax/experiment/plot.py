"""``istjax plot RUN_DIR... [--out FILE.png]``: test accuracy against rounds, wall time and bytes, one line per run.

Reads each run directory's ``metrics.jsonl`` (one JSON object per evaluation, schema in `istjax.experiment.metrics`) and
``config.json`` and draws three panels side by side into one PNG:

1. test accuracy vs rounds (the optimisation view: same rounds = same samples seen at equal W, K, B),
2. test accuracy vs training wall time in seconds (compilation and evaluation excluded),
3. test accuracy vs bytes communicated by all workers so far (``bytes_total``, log scale).

Lines are coloured by algorithm (IST, data parallel, local SGD keep their colours across figures) and styled by
worker count, and labelled ``algorithm W=.. K=..``, so IST, data parallel and local SGD compare at a glance.

Example::

    istjax train --config.algorithm=ist --workdir=runs/ist
    istjax train --config.algorithm=local_sgd --workdir=runs/local_sgd
    istjax plot runs/ist runs/local_sgd --out runs/comparison.png
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

__all__ = ["PlotError", "Run", "label", "load_run", "main", "plot_runs"]

# Fixed colours per algorithm (matplotlib's tab10), so every figure of a study reads the same way.
ALGORITHM_COLORS = {"ist": "tab:blue", "data_parallel": "tab:red", "local_sgd": "tab:green"}
_OTHER_COLORS = ("tab:purple", "tab:orange", "tab:brown", "tab:pink", "tab:gray", "tab:olive", "tab:cyan")
_LINESTYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "x")


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
        return str(self.records[-1].get("algorithm") or self.config.get("algorithm") or "?")

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
                                f"metrics.jsonl must follow the schema in istjax.experiment.metrics.")
        records.append(rec)
    if not records:
        raise PlotError(f"{str(metrics)!r} is empty: the run has not evaluated yet (it writes a line every "
                        f"eval_every rounds). Plot it again once it has.")
    config = {}
    config_path = path / "config.json"
    if config_path.exists():
        try:
            config = json.loads(config_path.read_text())
        except json.JSONDecodeError as e:
            raise PlotError(f"{config_path}: not valid JSON ({e.msg}).") from e
    return Run(path, records, config)


def label(run: Run) -> str:
    """``"ist W=4 K=10"`` (parts that are unknown are left out)."""
    parts = [run.algorithm]
    if run.num_workers is not None:
        parts.append(f"W={run.num_workers}")
    if run.local_steps is not None:
        parts.append(f"K={run.local_steps}")
    return " ".join(parts)


def _series(run: Run, x_field: str) -> tuple[list[float], list[float]]:
    """Points `(x, test_accuracy)` of records that carry a finite value for both fields."""
    xs, ys = [], []
    for rec in run.records:
        x, y = rec.get(x_field), rec.get("test_accuracy")
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and math.isfinite(x) and math.isfinite(y):
            if x_field == "bytes_total" and x <= 0:
                continue  # nothing communicated yet: no place on a log axis
            xs.append(float(x))
            ys.append(float(y))
    return xs, ys


def _styles(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Colour per algorithm, line style per worker count, marker per local-step count."""
    others = iter(_OTHER_COLORS * 4)
    colors = dict(ALGORITHM_COLORS)
    workers = sorted({r.num_workers or 0 for r in runs})
    steps = sorted({r.local_steps or 0 for r in runs})
    out = []
    for r in runs:
        if r.algorithm not in colors:
            colors[r.algorithm] = next(others)
        style = {"color": colors[r.algorithm],
                 "linestyle": _LINESTYLES[workers.index(r.num_workers or 0) % len(_LINESTYLES)]}
        if len(steps) > 1:
            style.update(marker=_MARKERS[steps.index(r.local_steps or 0) % len(_MARKERS)], markersize=4)
        out.append(style)
    return out


def plot_runs(run_dirs: Sequence[str | os.PathLike], out: str | os.PathLike, *,
              title: Optional[str] = None, target: Optional[float] = None) -> pathlib.Path:
    """Draws the three-panel comparison of ``run_dirs`` into the PNG ``out``; returns its path.

    Args:
      run_dirs: run directories (each with ``metrics.jsonl``).
      out: the PNG to write (parent folders are created).
      title: figure title (default: the dataset(s) the runs trained on).
      target: draw a dotted horizontal line at this test accuracy.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import PercentFormatter

    if not run_dirs:
        raise PlotError("no run directories given; pass at least one RUN_DIR.")
    runs = [load_run(d) for d in run_dirs]
    out = pathlib.Path(out)
    if out.suffix.lower() != ".png":
        raise PlotError(f"--out {str(out)!r}: the figure is written as PNG; give a file name ending in .png.")
    panels = (("round", "rounds", "linear"), ("wall_time_s", "training wall time (s)", "linear"),
              ("bytes_total", "bytes communicated, all workers (log scale)", "log"))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), sharey=True, layout="constrained")
    for run, style in zip(runs, _styles(runs)):
        for ax, (field, _, _) in zip(axes, panels):
            xs, ys = _series(run, field)
            if xs:
                ax.plot(xs, ys, label=label(run), linewidth=1.8, **style)
    for ax, (field, xlabel, scale) in zip(axes, panels):
        ax.set_xlabel(xlabel)
        if scale == "log" and any(_series(r, field)[0] for r in runs):
            ax.set_xscale("log")
        ax.grid(True, which="major", alpha=0.35)
        if target is not None:
            ax.axhline(target, color="black", linestyle=":", linewidth=1, alpha=0.7)
    axes[0].set_ylabel("test accuracy")
    axes[0].yaxis.set_major_formatter(PercentFormatter(1.0))
    if title is None:
        datasets = sorted({str(r.config.get("dataset", "")) for r in runs} - {""})
        title = f"test accuracy on {', '.join(datasets)}" if datasets else "test accuracy"
    fig.suptitle(title)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", frameon=False)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="istjax plot", description="Plot test accuracy against rounds, wall time and bytes communicated for "
        "one or more run directories (one line per run) into a PNG.")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (their metrics.jsonl)")
    p.add_argument("--out", default=None, help="PNG to write (default: RUN_DIR/accuracy.png for one run, "
                   "./comparison.png for several)")
    p.add_argument("--title", default=None, help="figure title")
    p.add_argument("--target", type=float, default=None, help="draw a line at this test accuracy")
    return p


def main(argv: Sequence[str]) -> int:
    """``istjax plot`` (``argv`` without the program and subcommand names); returns the exit code."""
    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as e:  # argparse has printed usage/help
        return int(e.code or 0)
    out = args.out or (os.path.join(args.run_dirs[0], "accuracy.png") if len(args.run_dirs) == 1
                       else "comparison.png")
    try:
        path = plot_runs(args.run_dirs, out, title=args.title, target=args.target)
    except PlotError as e:
        print(f"istjax plot: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
