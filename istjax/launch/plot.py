"""``istjax plot RUN_DIR... [--out FILE.png]``: test accuracy against rounds, wall time and bytes, one line per run.

Reads each run directory's ``metrics.jsonl`` (one JSON object per evaluation, schema in `istjax.launch.metrics`) and
``config.json`` and draws three panels side by side into one PNG:

1. test accuracy vs rounds (the optimisation view: same rounds = same samples seen at equal W, K, B),
2. test accuracy vs training wall time in seconds (compilation and evaluation excluded; ``--log-time``: log scale),
   its axis label saying what was timed, from the runtime each run recorded (`wall_time_label`): under
   ``runtime=simulate`` one process computes every worker with no communication, under ``runtime=mpi`` the
   processes (``summary.json``'s count) train and communicate,
3. test accuracy vs bytes one worker moved each way so far (`bytes_per_worker`: ``bytes_total / (2 W)``, log
   scale), the convention of ``summary.json``'s ``bytes_sent_per_worker_per_round`` and of ``istjax compare``.

A language model's runs (a `istjax.models.Transformer` on text: `is_language_model`) plot their validation loss in
nats per character instead of the accuracy, the axis and title saying so (`y_metric`); a language model and a
classifier in one figure are refused (one y axis cannot show both).

Beside it, where the runs recorded the round's loss split (`istjax.algorithms.loss_split`, on by default), a second
PNG, ``<out>_loss_split.png`` (`plot_loss_split`): the workers' own training loss and the merged model's test-mode loss
on the same batches against rounds, and the merge cost.

Log axes are labelled in units (``1 kB``, ``10 MB``; ``10 ms``, ``1 min``), one label per decade; an axis that shows
fewer than two decade ticks also labels its 2x and 5x ticks.

**Seeds.** Runs whose configs differ only in ``seed`` (`group_runs`) are one curve: the mean test accuracy over the
seeds with a shaded band, the min..max across seeds (``--band=std``: mean +- one sample standard deviation), on the
rounds the seeds evaluated. When the seeds evaluated at different rounds, the curve is drawn at the union of their
rounds inside the range every seed covers, each seed's accuracy (and wall time, bytes) linearly interpolated
between its own evaluations. In the time and bytes panels a point sits at the seeds' mean wall time / bytes at that
round. The legend says what the band is. ``--no-bands`` draws every seed as its own line.

**Legends** (`legend_labels`, `istjax.launch.plot_legend`) read ``algorithm`` (``W=..`` and ``K=..`` when the runs
differ in them; shared, they are in the title) followed by every config field in which the plotted runs
(or seed groups) differ and that applies to the run (`istjax.launch.plot_legend.applies`: an algorithm's option
only on runs of an algorithm that takes it), ``learning_rate=0.1`` / ``learning_rate=0.05``; fields equal across all of them and
run-control fields (`istjax.launch.config.RUN_CONTROL_FIELDS`: name, num_rounds, eval_every, ...) are left out,
``seed`` is named only when seeds are drawn as separate lines. A field one run lacks is shown only on the runs that
have it (never as ``unset``); a model's fields are compared only between runs of the same model, so a run of your
own model beside a stock MLP reads ``model=residual_mlp`` / ``model=mlp`` (`shown_fields`). The legend sits below
the panels, as wide as the figure, labels longer than 60 characters wrapped onto several lines, so the panels keep
their width; the title names the models and data sets (`figure_title`). Colours follow the algorithm (IST blue,
data parallel red, local SGD green), line styles the worker count, markers K; when the runs also differ in other
fields, colours follow those fields and line styles the algorithm and W. Every curve gets its own combination.

Example::

    istjax train --config.algorithm.name=ist --workdir=runs/ist
    istjax train --config.algorithm.name=local_sgd --workdir=runs/local_sgd
    istjax plot runs/ist runs/local_sgd --out runs/comparison.png
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import sys
from collections.abc import Callable, Sequence
from typing import Any, Optional

from istjax.launch.metrics import format_bytes
from istjax.launch.plot_curves import BANDS as BANDS
from istjax.launch.plot_curves import BYTES_CONVENTION as BYTES_CONVENTION
from istjax.launch.plot_curves import BYTES_FIELDS, BYTES_PER_WORKER
from istjax.launch.plot_curves import Curve as Curve
from istjax.launch.plot_curves import bytes_per_worker as bytes_per_worker
from istjax.launch.plot_curves import group_curve as group_curve
from istjax.launch.plot_legend import NAMED_SECTIONS as NAMED_SECTIONS
from istjax.launch.plot_legend import NOISY_FIELDS as NOISY_FIELDS
from istjax.launch.plot_legend import _common, _group_fields, _key, shown_fields
from istjax.launch.plot_legend import group_runs as group_runs
from istjax.launch.plot_legend import label as label
from istjax.launch.plot_legend import legend_labels as legend_labels
from istjax.launch.plot_legend import run_fields as run_fields
from istjax.launch.plot_legend import varying_fields as varying_fields
from istjax.launch.plot_records import PlotError as PlotError
from istjax.launch.plot_records import Run as Run
from istjax.launch.plot_records import load_run as load_run
from istjax.launch.plot_records import read_json_object as read_json_object
from istjax.launch.plot_records import wall_time_text as wall_time_text

__all__ = ["PlotError", "Run", "BANDS", "BYTES_CONVENTION", "Curve", "NAMED_SECTIONS", "bytes_per_worker",
           "figure_title", "format_seconds", "group_curve", "group_runs", "label", "legend_labels", "load_run",
           "has_loss_split", "log_unit_formatters", "main", "plot_loss_split", "plot_runs", "read_json_object",
           "run_fields", "shown_fields", "varying_fields", "wall_time_label", "wall_time_text", "wrap_label",
           "is_language_model", "y_metric"]

# Fixed colours per algorithm (matplotlib's tab10), so every figure of a study reads the same way.
ALGORITHM_COLORS = {"ist": "tab:blue", "data_parallel": "tab:red", "local_sgd": "tab:green"}
_OTHER_COLORS = ("tab:purple", "tab:orange", "tab:brown", "tab:pink", "tab:gray", "tab:olive", "tab:cyan")
_PALETTE = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray",
            "tab:olive", "tab:cyan")
_LINESTYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "x", "P", "*")





_WRAP = 60  # legend labels longer than this many characters are wrapped onto several lines


def _styles(groups: Sequence[Sequence[Run]], show_seed: bool = False) -> list[dict[str, Any]]:
    """Colour, line style and marker per group; distinct for every group.

    Colour per algorithm, line style per worker count, marker per local-step count (and per seed when seeds are
    separate lines); when the groups differ in other fields too, colour per value of those fields and line style
    per (algorithm, W).
    """
    fields = [_group_fields(g, show_seed) for g in groups]
    shown = [{k: v for k, v in f.items() if k != "seed"} for f in shown_fields(groups, show_seed=show_seed)]
    extra_fields = any(shown)
    extras = [_key(f) for f in shown]
    reps = [g[0] for g in groups]

    def index_of(values: list) -> list[int]:
        order = list(dict.fromkeys(values))
        return [order.index(v) for v in values]

    if extra_fields:
        colors = [_PALETTE[i % len(_PALETTE)] for i in index_of(extras)]
        lines = index_of([(r.algorithm, r.num_workers or 0) for r in reps])
    else:
        others = iter(_OTHER_COLORS * 4)
        by_algo = dict(ALGORITHM_COLORS)
        for r in reps:
            if r.algorithm not in by_algo:
                by_algo[r.algorithm] = next(others)
        colors = [by_algo[r.algorithm] for r in reps]
        workers = sorted({r.num_workers or 0 for r in reps})
        lines = [workers.index(r.num_workers or 0) for r in reps]
    marks = [(r.local_steps or 0, f.get("seed", -1) if show_seed else -1) for r, f in zip(reps, fields)]
    marker_index = index_of(marks) if len(set(marks)) > 1 else None
    out = []
    for i, (color, line) in enumerate(zip(colors, lines)):
        style = {"color": color, "linestyle": _LINESTYLES[line % len(_LINESTYLES)]}
        if marker_index is not None:
            style.update(marker=_MARKERS[marker_index[i] % len(_MARKERS)], markersize=4)
        out.append(style)
    if len({(s["color"], s["linestyle"], s.get("marker")) for s in out}) < len(out):
        # Still a clash (more variants than the scheme has room for, or the same run twice): one colour and line
        # style per curve.
        out = [{"color": _PALETTE[i % len(_PALETTE)],
                "linestyle": _LINESTYLES[(i // len(_PALETTE)) % len(_LINESTYLES)],
                **({"marker": _MARKERS[(i // 40) % len(_MARKERS)], "markersize": 4} if len(out) > 40 else {})}
               for i in range(len(out))]
    return out



# ----------------------------------------------------------------------------------------------- log axes in units

def format_seconds(s: Optional[float]) -> str:
    """``0.012 -> "12 ms"``, ``90 -> "1.5 min"``, ``7200 -> "2 h"`` (three significant digits); None -> ``"-"``."""
    if s is None:
        return "-"
    for unit, size in (("h", 3600.0), ("min", 60.0), ("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(s) >= size or unit == "µs":
            return f"{s / size:.3g} {unit}"
    return str(s)


def log_unit_formatters(fmt: Callable[[float], str]):
    """``(major, minor)`` matplotlib formatters for a log axis whose values ``fmt`` writes in units
    (`istjax.launch.metrics.format_bytes`, `format_seconds`): every major (decade) tick reads ``fmt(value)``,
    e.g. ``1 kB``, ``10 MB``; minor ticks are unlabelled unless fewer than two decade ticks are in view (then the 2x
    and 5x ticks are labelled too, or every one when the axis spans less than half a decade), so an axis always has
    at least two labels and they do not overlap."""
    from matplotlib.ticker import Formatter

    class Major(Formatter):
        def __call__(self, x, pos=None):
            return fmt(x) if x > 0 else ""

    class Minor(Formatter):
        def __call__(self, x, pos=None):
            if x <= 0 or self.axis is None:
                return ""
            lo, hi = sorted(self.axis.get_view_interval())
            if lo <= 0:
                return ""
            decades = math.floor(math.log10(hi) + 1e-9) - math.ceil(math.log10(lo) - 1e-9) + 1
            if decades >= 2:
                return ""  # two or more labelled decades in view: enough
            mantissa = round(x / 10 ** math.floor(math.log10(x) + 1e-9))
            if math.log10(hi / lo) > 0.5 and mantissa not in (2, 5):
                return ""
            return fmt(x)

    return Major(), Minor()


def _log_units(axis, fmt: Callable[[float], str]) -> None:
    from matplotlib.ticker import LogLocator

    major, minor = log_unit_formatters(fmt)
    # At most 7 labels: every decade while they fit, then every 2nd (3rd, ...) one.
    axis.set_major_locator(LogLocator(base=10, numticks=7))
    axis.set_minor_locator(LogLocator(base=10, subs=tuple(range(2, 10)), numticks=12))
    axis.set_major_formatter(major)
    axis.set_minor_formatter(minor)


# ----------------------------------------------------------------------------------------------- the figure

_FIG_WIDTH, _PANEL_HEIGHT = 15.0, 4.6  # inches: three panels side by side; the legend goes below them
_CHAR_WIDTH, _LINE_HEIGHT = 0.075, 0.21  # inches per legend character / line at matplotlib's default 10 pt
_HANDLE_WIDTH = 0.9  # inches of a legend entry besides its text: the line sample and the gaps


ACCURACY = ("test_accuracy", "test accuracy")
LM_LOSS = ("test_loss", "validation loss (nats/char)")


def is_language_model(run: Run) -> bool:
    """Whether ``run`` trained a character-level language model: its ``model.name`` names, in
    `istjax.models.MODELS`, a `istjax.models.Transformer` (or a subclass), whose ``test_loss`` is the validation
    split's mean loss in nats per character."""
    from istjax.models import MODELS, Transformer

    model = run.config.get("model")
    name = model.get("name") if isinstance(model, dict) else None
    cls = MODELS.get(name) if name in MODELS else None
    return isinstance(cls, type) and issubclass(cls, Transformer)


def y_metric(runs: Sequence[Run]) -> tuple[str, str]:
    """``(record field, axis label)`` the panels plot: `LM_LOSS` when every run is a language model
    (`is_language_model`), else `ACCURACY`. A `PlotError` for a mix of both: one y axis cannot show both."""
    lm = [is_language_model(r) for r in runs]
    if any(lm) and not all(lm):
        first = next(r for r, is_lm in zip(runs, lm) if not is_lm)
        raise PlotError(f"{first.path} is not a language model, but other runs are: the panels share one y axis "
                        f"(validation nats/char or test accuracy); plot the two kinds of run separately.")
    return LM_LOSS if lm and all(lm) else ACCURACY


def _join(names: Sequence[str]) -> str:
    """``["a"] -> "a"``, ``["a", "b"] -> "a and b"``, ``["a", "b", "c"] -> "a, b and c"``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def figure_title(runs: Sequence[Run], what: Optional[str] = None) -> str:
    """The default title: ``"test accuracy of mlp and residual_mlp on digits, W=2, K=10"`` (``what`` first: default
    the plotted metric, `y_metric`): the models
    (``model.name``) and the data sets (``data.name``) of ``runs``, in first-seen order, and the worker count and
    local steps when every run shares them (`legend_labels` leaves them out then); a part no run's config names is
    left out."""
    def names(section: str) -> list[str]:
        found = (r.config.get(section, {}).get("name") for r in runs if isinstance(r.config.get(section), dict))
        return list(dict.fromkeys(str(n) for n in found if n))

    models, datasets = names("model"), names("data")
    shared = [f"{k}={v}" for k, v in (("W", _common(runs, "num_workers")), ("K", _common(runs, "local_steps")))
              if v is not None]
    return ((y_metric(runs)[1] if what is None else what) + (f" of {_join(models)}" if models else "")
            + (f" on {_join(datasets)}" if datasets else "") + "".join(f", {p}" for p in shared))



def wall_time_label(runs: Sequence[Run], *, log_time: bool = False) -> str:
    """The wall-time panel's axis label, saying what was timed (`wall_time_text`): ``"training wall time (s): one
    process computes every worker, no communication (runtime=simulate)"``, ``"training wall time (s) under
    runtime=mpi, 4 processes"``; plain ``"training wall time (s)"`` when no run records its runtime."""
    unit = " (log scale)" if log_time else " (s)"
    text = wall_time_text(runs)
    if not text:
        return "training wall time" + unit
    # One named runtime reads "under runtime=mpi, 4 processes"; a runtime's own words, or several kinds, follow a colon.
    return "training wall time" + unit + (f" under {text}" if text.startswith("runtime=") and ";" not in text
                                          else f": {text}")


def wrap_label(text: str, width: int = _WRAP) -> str:
    """``text`` broken at spaces into lines of at most ``width`` characters (a longer word stays whole), so a long
    legend label takes several short lines instead of the figure's width."""
    import textwrap

    return textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False)


def _legend_columns(texts: Sequence[str]) -> int:
    """How many legend columns of ``texts`` (wrapped labels) fit side by side under the figure's panels."""
    widest = max((len(line) for t in texts for line in t.splitlines()), default=1)
    fit = int((_FIG_WIDTH - 0.5) // (widest * _CHAR_WIDTH + _HANDLE_WIDTH))
    return max(1, min(len(texts), fit))


def _legend_height(texts: Sequence[str], columns: int, title: Optional[str]) -> float:
    """Inches the legend below the panels takes: its rows (each as tall as its tallest label) and its title."""
    rows = math.ceil(len(texts) / columns)
    lines = [t.count("\n") + 1 for t in texts]
    tallest = sorted(lines, reverse=True)[:rows]  # the column-major fill puts at most `rows` labels in a column
    return _LINE_HEIGHT * (sum(tallest) + (title.count("\n") + 1 if title else 0)) + 0.3


def _draw_curves(axes, panels, groups: Sequence[Sequence[Run]], texts: Sequence[str],
                 styles: Sequence[dict[str, Any]], band: str, y_field: str) -> dict[str, bool]:
    """Each group's curve (and band) of the record's ``y_field`` in every panel; returns, per panel's field, whether
    anything was drawn."""
    drawn = {field: False for field, _, _ in panels}
    for group, text, style in zip(groups, texts, styles):
        for ax, (field, _, _) in zip(axes, panels):
            curve = group_curve(group, field, band, y_field=y_field)
            if curve is None or not curve.x:
                continue
            drawn[field] = True
            ax.plot(curve.x, curve.y, label=text, linewidth=1.8, **style)
            if curve.lo is not None:
                ax.fill_between(curve.x, curve.lo, curve.hi, color=style["color"], alpha=0.18, linewidth=0)
    return drawn


def _decorate_axes(axes, panels, drawn: dict[str, bool], target: Optional[float], metric: tuple[str, str]) -> None:
    """Axis labels and scales (log axes in units), grids, the target line and the y axis (`y_metric`'s label; an
    accuracy in percent)."""
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    for ax, (field, xlabel, scale) in zip(axes, panels):
        ax.set_xlabel(xlabel)
        if scale == "log" and drawn[field]:
            ax.set_xscale("log")
            _log_units(ax.xaxis, format_bytes if field in BYTES_FIELDS else format_seconds)
        if field == "round":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, which="major", alpha=0.35)
        if target is not None:
            ax.axhline(target, color="black", linestyle=":", linewidth=1, alpha=0.7)
    axes[0].set_ylabel(metric[1])
    if metric == ACCURACY:
        axes[0].yaxis.set_major_formatter(PercentFormatter(1.0))


def plot_runs(run_dirs: Sequence[str | os.PathLike], out: str | os.PathLike, *,
              title: Optional[str] = None, target: Optional[float] = None, band: Optional[str] = "minmax",
              log_time: bool = False) -> pathlib.Path:
    """Draws the three-panel comparison of ``run_dirs`` into the PNG ``out``; returns its path.

    Args:
      run_dirs: run directories (each with ``metrics.jsonl``).
      out: the PNG to write (parent folders are created).
      title: figure title (default: `figure_title`, the models and data sets the runs trained, and W and K when
        every run shares them; with a title of your own the labels name W and K instead).
      target: draw a dotted horizontal line at this test accuracy (a language model's: validation nats/char).
      band: runs that differ only in ``seed`` are one mean curve with this band (a key of `BANDS`: ``"minmax"``,
        ``"std"``); None draws every run as its own line, labelled with its seed.
      log_time: the wall-time axis on a log scale (labelled ``10 ms``, ``1 s``, ...).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if band is not None and band not in BANDS:
        raise PlotError(f"band={band!r}: choose one of {sorted(BANDS)}, or None for one line per seed.")
    if not run_dirs:
        raise PlotError("no run directories given; pass at least one RUN_DIR.")
    runs = [load_run(d) for d in run_dirs]
    metric = y_metric(runs)
    out = pathlib.Path(out)
    if out.suffix.lower() != ".png":
        raise PlotError(f"--out {str(out)!r}: the figure is written as PNG; give a file name ending in .png.")
    show_seed = band is None
    groups = group_runs(runs) if band is not None else [[r] for r in runs]
    # A seed group without a common range of rounds cannot be averaged: its runs are drawn separately.
    if any(len(g) > 1 and group_curve(g, "round") is None for g in groups):
        groups = [sub for g in groups for sub in ([g] if len(g) == 1 or group_curve(g, "round") else
                                                   [[r] for r in g])]
        show_seed = True
    labels = legend_labels(groups, show_seed=show_seed, shared_in_title=title is None)
    styles = _styles(groups, show_seed=show_seed)
    panels = (("round", "rounds", "linear"),
              ("wall_time_s", wrap_label(wall_time_label(runs, log_time=log_time), 55),
               "log" if log_time else "linear"),
              (BYTES_PER_WORKER, f"{BYTES_CONVENTION}, so far (log scale)", "log"))
    texts = [wrap_label(t) for t in labels]
    legend_title = (f"line: mean over seeds\nshaded: {BANDS[band or 'minmax']}"
                    if any(len(g) > 1 for g in groups) else None)
    columns = _legend_columns(texts)
    height = _PANEL_HEIGHT + _legend_height(texts, columns, legend_title)
    fig, axes = plt.subplots(1, 3, figsize=(_FIG_WIDTH, height), sharey=True, layout="constrained")
    drawn = _draw_curves(axes, panels, groups, texts, styles, band or "minmax", metric[0])
    _decorate_axes(axes, panels, drawn, target, metric)
    fig.suptitle(wrap_label(figure_title(runs) if title is None else title, 120))
    handles, shown = axes[0].get_legend_handles_labels()
    # Below the panels, as wide as the figure: the panels keep their width however long the labels are.
    fig.legend(handles, shown, loc="outside lower center", ncols=columns,
               frameon=False, title=legend_title, alignment="left" if legend_title else "center")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


# The loss split's figure: one panel per record field, with its axis label.
SPLIT_PANELS = (("worker_train_loss", "the workers' own train loss"),
                ("merged_test_loss", "merged model, test mode, same batches"),
                ("merge_cost", "merge cost (merged minus the workers', train mode)"))


def has_loss_split(run: Run) -> bool:
    """Whether any of ``run``'s records carries the round's loss split (`istjax.algorithms.loss_split`)."""
    return any(rec.get("worker_train_loss") is not None for rec in run.records)


def plot_loss_split(run_dirs: Sequence[str | os.PathLike], out: str | os.PathLike, *, title: Optional[str] = None,
                    band: Optional[str] = "minmax") -> Optional[pathlib.Path]:
    """Where each run's loss went, against rounds, into the PNG ``out``, one panel each (`SPLIT_PANELS`): the workers'
    own training loss on the batch each trained last, the merged model's test-mode loss on the same batches, and the
    merge cost (0 for data parallel); seeds grouped, colours and line styles as in `plot_runs`. Returns None (and
    writes nothing) when no run recorded the split."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [load_run(d) for d in run_dirs]
    runs = [r for r in runs if has_loss_split(r)]
    if not runs:
        return None
    groups = group_runs(runs) if band is not None else [[r] for r in runs]
    labels = legend_labels(groups, show_seed=band is None, shared_in_title=title is None)
    styles = _styles(groups, show_seed=band is None)
    texts = [wrap_label(t) for t in labels]
    columns = _legend_columns(texts)
    fig, axes = plt.subplots(1, len(SPLIT_PANELS), figsize=(_FIG_WIDTH, _PANEL_HEIGHT + _legend_height(
        texts, columns, None)), layout="constrained")
    for group, text, style in zip(groups, texts, styles):
        for ax, (field, _) in zip(axes, SPLIT_PANELS):
            curve = group_curve(group, "round", band or "minmax", y_field=field)
            if curve is None or not curve.x:
                continue
            ax.plot(curve.x, curve.y, label=text, linewidth=1.6, **style)
            if curve.lo is not None:
                ax.fill_between(curve.x, curve.lo, curve.hi, color=style["color"], alpha=0.15, linewidth=0)
    for ax, (field, what) in zip(axes, SPLIT_PANELS):
        ax.set_ylabel(what)
        ax.set_xlabel("rounds (each point: the mean since the previous record)")
        ax.grid(True, alpha=0.35)
    axes[-1].axhline(0.0, color="black", linewidth=0.8, alpha=0.6)
    handles, shown = axes[0].get_legend_handles_labels()
    fig.legend(handles, shown, loc="outside lower center", ncols=columns, frameon=False)
    fig.suptitle(wrap_label(title or figure_title(runs, what="loss split"), 120))
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="istjax plot", description="Plot test accuracy (a language model's: validation nats/char) against "
        "rounds, wall time and bytes communicated for "
        "one or more run directories into a PNG: one line per run, runs that differ only in seed as one mean curve "
        "with a band; the legend names every config field in which the runs differ.")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (their metrics.jsonl)")
    p.add_argument("--out", default=None, help="PNG to write (default: RUN_DIR/accuracy.png for one run, "
                   "./comparison.png for several)")
    p.add_argument("--title", default=None, help="figure title")
    p.add_argument("--target", type=float, default=None, help="draw a line at this test accuracy (a language "
                   "model's: validation nats/char)")
    p.add_argument("--band", choices=sorted(BANDS), default="minmax",
                   help="band around the mean of runs that differ only in seed: minmax (default: min..max across "
                        "seeds) or std (mean +- one sample standard deviation)")
    p.add_argument("--no-bands", action="store_true", help="draw every seed as its own line (labelled seed=..)")
    p.add_argument("--log-time", action="store_true", help="wall-time axis on a log scale")
    return p


def main(argv: Sequence[str]) -> int:
    """``istjax plot`` (``argv`` without the program and subcommand names); returns the exit code."""
    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as e:  # argparse has printed usage/help
        return int(e.code or 0)
    out = args.out or (os.path.join(args.run_dirs[0], "accuracy.png") if len(args.run_dirs) == 1
                       else "comparison.png")
    band = None if args.no_bands else args.band
    try:
        path = plot_runs(args.run_dirs, out, title=args.title, target=args.target, band=band, log_time=args.log_time)
        split = plot_loss_split(args.run_dirs, path.with_name(f"{path.stem}_loss_split.png"), title=args.title,
                                band=band)
    except PlotError as e:
        print(f"istjax plot: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}" + (f" and {split} (where the loss went)" if split else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
