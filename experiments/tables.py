"""What every results table of the README and docs/ is made of: the registry of named tables and figures, the number
formats they share, aggregated results files (one row per cell over seeds), and the README's headline rows.

Each study family registers its own tables beside its study (``experiments/<family>/report.py``);
`experiments.report` finds them in the pages and renders, checks or lists them.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from istjax.launch.metrics import format_mean_std


@dataclasses.dataclass(frozen=True)
class Entry:
    """A named table (or, ``inline``, one figure): ``render(*loaded)`` with each of ``sources`` loaded as JSON;
    ``shows``: the metrics its cells show (run metric names, ``test_loss``), what a claim on it may rest on
    (`experiments.claims`)."""
    name: str
    sources: tuple[str, ...]
    render: Callable[..., str]
    inline: bool = False
    shows: tuple[str, ...] = ()


REGISTRY: dict[str, Entry] = {}
NAME_PATTERN = r"[A-Za-z0-9_.-]+"


def register(name: str, sources: Sequence[str], render: Callable[..., str], *, inline: bool = False,
             shows: Sequence[str] = ()) -> Entry:
    if not re.fullmatch(NAME_PATTERN, name):
        raise ValueError(f"report name {name!r}: use letters, digits, '_', '.' and '-'")
    if name in REGISTRY:
        raise ValueError(f"report name {name!r} is registered twice")
    if name == "provenance":
        raise ValueError("report name 'provenance' is the page's provenance note (experiments.report); pick another")
    REGISTRY[name] = Entry(name, tuple(sources), render, inline, tuple(shows))
    return REGISTRY[name]


def table(name: str, *sources: str, shows: Sequence[str] = ()):
    """Registers the decorated ``fn(*loaded) -> markdown`` as the table ``name``, showing the metrics ``shows``."""
    def deco(fn):
        register(name, sources, fn, shows=shows)
        return fn
    return deco


def scalar(name: str, source: str, fn: Callable[[Any], Any]) -> Entry:
    """One figure for prose: ``fn(loaded)``, a string (or a number, written with `cell`), on one line."""
    return register(name, (source,), lambda data: cell(fn(data)), inline=True)


# Number formats shared by every table

def cell(v: Any) -> str:
    """A value as a table cell: floats to 3 decimals, large integers with thousands separators, None as '-'."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.3f}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, (list, tuple)):
        return ", ".join(cell(x) for x in v)
    return str(v)


def fixed(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


def count(x: float) -> str:
    """8087.1 -> '8,087'."""
    return f"{x:,.0f}"


def ratio(x: float | None, digits: int = 1) -> str:
    """How many times: 15.94 -> '15.9x'."""
    return "-" if x is None else f"{x:.{digits}f}x"


def percent(share: float, digits: int = 1) -> str:
    """A share of 1 as a percentage: 0.0570 -> '5.7 %'."""
    return f"{100 * share:.{digits}f} %"


def span(values: Iterable[float], fmt: Callable[[float], str] = fixed, sep: str = "-") -> str:
    """Lowest to highest: '0.64-0.72' (one value when they print the same)."""
    vs = sorted(values)
    lo, hi = fmt(vs[0]), fmt(vs[-1])
    return lo if lo == hi else f"{lo}{sep}{hi}"


def nbytes(b: float, binary: bool = True, digits: int = 1, unit: str | None = None) -> str:
    """Bytes with a unit: binary 33857536 -> '32.3 MiB', decimal -> '33.9 MB'; ``unit`` fixes it ('MiB')."""
    base, units = (1024, ("B", "KiB", "MiB", "GiB", "TiB")) if binary else (1000, ("B", "kB", "MB", "GB", "TB"))
    i = units.index(unit) if unit else 0
    b = b / base ** i
    while unit is None and abs(b) >= base and i < len(units) - 1:
        b, i = b / base, i + 1
    return f"{b:.0f} B" if i == 0 else f"{b:,.{digits}f} {units[i]}"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(v if isinstance(v, str) else cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


ALGORITHMS = {"ist": "IST", "data_parallel": "data parallel", "local_sgd": "local SGD", "resist": "ResIST",
              "gist": "GIST"}


def algorithm_name(a: str) -> str:
    return ALGORITHMS.get(a, a)


def link_name(link: str) -> str:
    """'100mbit' -> '100 Mbit/s', '10gbit' -> '10 Gbit/s'."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg])bit", link)
    return f"{m.group(1)} {m.group(2).upper()}bit/s" if m else link


# Aggregated results files: {"rows": [{"algorithm", "num_workers", "seeds", "test_accuracy_mean", ...}, ...]}

REQUIRED = ("algorithm", "num_workers", "seeds", "test_accuracy_mean", "test_accuracy_std")


class ResultsError(ValueError):
    """A results file that does not hold what its table needs."""


def result_rows(data: Any) -> list[dict[str, Any]]:
    """The ``rows`` of an aggregated results file, each checked to carry `REQUIRED`."""
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ResultsError("an aggregated results file holds a non-empty list 'rows', one per cell")
    for i, r in enumerate(rows):
        missing = [k for k in REQUIRED if not isinstance(r, dict) or k not in r]
        if missing:
            raise ResultsError(f"rows[{i}] lacks {', '.join(missing)} (every row has {', '.join(REQUIRED)})")
        if not isinstance(r["seeds"], list) or not r["seeds"]:
            raise ResultsError(f"rows[{i}]: 'seeds' is the list of seeds the mean is over, got {r['seeds']!r}")
    return rows


def accuracy(r: dict[str, Any]) -> str:
    return format_mean_std(r["test_accuracy_mean"], r["test_accuracy_std"], len(r["seeds"]))


# The columns a results table names: header and how a row gives its cell. Any other name is a row key, shown as is.
COLUMNS: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "label": ("", lambda r: str(r.get("label", ""))),
    "algorithm": ("algorithm", lambda r: algorithm_name(r["algorithm"])),
    "num_workers": ("W", lambda r: cell(r["num_workers"])),
    "seeds": ("seeds", lambda r: cell(r["seeds"])),
    "test_accuracy": ("test accuracy (mean ± std over seeds)", accuracy),
    "bytes_per_round": ("bytes per worker per round", lambda r: nbytes(r["bytes_per_round"], binary=False)),
    "rounds": ("rounds", lambda r: cell(r.get("rounds"))),
    "samples": ("samples", lambda r: cell(r.get("samples"))),
}


def results_table(name: str, source: str, columns: Sequence[str | tuple[str, Callable[[dict], str]]],
                  where: Callable[[dict[str, Any]], bool] | None = None, shows: Sequence[str] | None = None,
                  baselines: bool = False, tuned: bool = False) -> Entry:
    """Registers the table ``name``: one line per row of the aggregated file ``source`` (``where`` keeps some),
    with ``columns``: names of `COLUMNS`, other row keys, or ``(header, fn(row) -> str)``; with ``baselines``, the
    trivial baselines the file records beneath them (`baseline_cells`: each named column's metric, ``test_accuracy``
    for ``test_accuracy``); with ``tuned``, where the file records a tuning stage (``tuning``: a study run with
    ``--tune``, `experiments.grid.Tuning`), each cell's chosen settings (its row's ``tuned``, `settings_words`) as
    the second column (a file without one renders without it). The metrics it shows are ``shows``, by default its
    named columns (``test_loss_mean`` shows ``test_loss``)."""
    cols = [c if isinstance(c, tuple) else COLUMNS.get(c, (c, lambda r, k=c: cell(r.get(k)))) for c in columns]
    metrics = {i: c.removesuffix("_mean") for i, c in enumerate(columns) if isinstance(c, str)}

    def render(data):
        use, at = cols, metrics
        if tuned and data.get("tuning"):
            use = [cols[0], ("chosen settings (tuning)", lambda r: settings_words(r.get("tuned") or {}) or "-"),
                   *cols[1:]]
            at = {i + (i > 0): m for i, m in metrics.items()}
        rows = [[fn(r) for _, fn in use] for r in result_rows(data) if where is None or where(r)]
        if baselines:
            rows += baseline_cells(data, len(use), at)
        return markdown_table([h for h, _ in use], rows)
    if shows is None:
        shows = [c.removesuffix("_mean") for c in columns if isinstance(c, str)]
    return register(name, (source,), render, shows=shows)


def baseline_rows(data: Any, metrics: Sequence[str]) -> list[list[str]]:
    """The trivial baselines a results file records (``baselines``, `istjax.launch.baselines`) as table rows:
    name (the regime baseline marked, and one trained to a step limit short of convergence: ``converged`` false),
    then each of ``metrics``, for a study's table to show beside its cells."""
    regime = (data.get("regime") or {}).get("baseline")
    return [[f"{name} (trivial baseline{', regime' if name == regime else ''}"
             f"{', not converged' if b.get('converged') is False else ''})", *(cell(b.get(m)) for m in metrics)]
            for name, b in (data.get("baselines") or {}).items()]


def baseline_cells(data: Any, width: int, metrics: dict[int, str], name_at: int = 0) -> list[list[str]]:
    """The trivial baselines ``data`` records (`baseline_rows`) as rows of a table ``width`` columns wide, to show
    beneath its cells: the name in column ``name_at``, metric ``metrics[i]`` in column ``i``, '-' elsewhere.

    Raises:
      ResultsError: the file records no baselines (its study's ``--baselines`` records them).
    """
    metrics = {i: m for i, m in metrics.items() if i != name_at}
    found = baseline_rows(data, list(metrics.values()))
    if not found:
        raise ResultsError("the results file records no 'baselines'; fix: run its study with --baselines "
                           "(experiments.grid.record_baselines)")
    rows = []
    for name, *values in found:
        row = ["-"] * width
        for i, v in zip(metrics, values):
            row[i] = v
        row[name_at] = name
        rows.append(row)
    return rows


def choices_on_edges(tuning: Any, field: str = "learning_rate") -> list[str]:
    """The arms of a tuning record (``tuning``: ``grids`` and ``chosen``) whose chosen ``field`` is the lowest or
    highest value of a grid of three or more: a choice there says only that the best may lie beyond the grid."""
    out = []
    for arm, chosen in tuning["chosen"].items():
        values = sorted(tuning["grids"].get(arm, {}).get(field) or [])
        if len(values) >= 3 and chosen.get(field) in (values[0], values[-1]):
            out.append(arm)
    return out


def points_above_baseline(data: Any, labels: Sequence[str], baseline: str = "linear",
                          metric: str = "test_accuracy") -> str:
    """How far the cells ``labels`` (their mean ``metric`` over seeds) lie above the recorded ``baseline``'s, in
    points, lowest to highest: '+2.6 to +9.1' (one figure where they print alike; negative: below it)."""
    base = ((data.get("baselines") or {}).get(baseline) or {}).get(metric)
    if not isinstance(base, (int, float)):
        raise ResultsError(f"the results file records no {metric} of a baseline {baseline!r}; fix: run its study "
                           f"with --baselines")
    by = {r.get("label"): r for r in result_rows(data)}
    missing = [label for label in labels if label not in by]
    if missing:
        raise ResultsError(f"no row labelled {', '.join(missing)} (rows: {', '.join(map(str, by))})")
    return span((100 * (by[label][f"{metric}_mean"] - base) for label in labels), lambda x: f"{x:+.1f}", " to ")


def baselines_table(name: str, source: str, metrics: Sequence[str]) -> Entry:
    """Registers the table ``name``: the trivial baselines ``source`` records, with ``metrics`` (run metric
    names: ``test_loss``, ``test_precision_at_3``)."""
    def render(data):
        rows = baseline_rows(data, metrics)
        if not rows:
            raise ResultsError(f"{source} records no 'baselines' (istjax.launch.baselines.record_sections)")
        return markdown_table(["baseline", *metrics], rows)
    return register(name, (source,), render, shows=metrics)


def seconds_to_target(r: dict[str, Any]) -> str:
    """A race's cell: the mean seconds to the target over the seeds that reached it (``seconds_to_target``,
    ``seconds_to_target_std``, ``reached`` of ``seeds``), and how many did not."""
    if not r["reached"]:
        return f"not reached ({len(r['seeds'])} seeds)"
    text = format_mean_std(r["seconds_to_target"], r["seconds_to_target_std"], r["reached"], digits=1)
    return text + (f", {len(r['seeds']) - r['reached']} of {len(r['seeds'])} not reached"
                   if r["reached"] < len(r["seeds"]) else "")


ROUND_COLUMNS = ["seconds a round", "bytes a worker sends a round"]


def round_cells(r: dict[str, Any]) -> list[str]:
    """A race's `ROUND_COLUMNS`: the mean seconds a round (``time_per_round_s``) and the bytes a worker sends a round
    (``bytes_per_worker_per_round``, what the links carried), '-' where not measured."""
    return [f"{r['time_per_round_s']:.2f}" if r.get("time_per_round_s") else "-",
            nbytes(r["bytes_per_worker_per_round"], binary=False) if r.get("bytes_per_worker_per_round") else "-"]


def mib(b: float) -> str:
    return f"{b / 2 ** 20:.1f}"


def spread(r: dict[str, Any]) -> str:
    """The seeds' lowest to highest test accuracy ('-' for one seed)."""
    return "-" if len(r["seeds"]) < 2 else f"{r['test_accuracy_min']:.3f}-{r['test_accuracy_max']:.3f}"


def label_accuracy(label: str) -> Callable[[Any], str]:
    def fn(d):
        (r,) = [r for r in result_rows(d) if r["label"] == label]
        return accuracy(r)
    return fn


# Reading a study's results file (``rows``: one per cell over seeds; ``runs``: one per run, with its ``curve``)

def runs_of(d: dict[str, Any], label: str) -> list[dict[str, Any]]:
    """The finished runs of the cell ``label`` in results file ``d``, by seed."""
    return sorted((r for r in d.get("runs", []) if r["label"] == label), key=lambda r: r["seed"])


def row_of(d: dict[str, Any], label: str) -> dict[str, Any] | None:
    """The aggregated row of the cell ``label`` (None: the file has none)."""
    return next((r for r in d.get("rows", []) if r["label"] == label), None)


def seeds_text(n: int) -> str:
    return f"{n} seed{'s' if n > 1 else ''}"


def mean_spread(values: Sequence[float], digits: int = 1, unit: str = "") -> str:
    """``'12.3x ± 1.1x (3 seeds)'``: the mean of ``values``, their sample standard deviation (none for one), the
    count; '-' for none."""
    if not values:
        return "-"
    text = f"{statistics.mean(values):.{digits}f}{unit}"
    if len(values) > 1:
        text += f" ± {statistics.stdev(values):.{digits}f}{unit}"
    return f"{text} ({seeds_text(len(values))})"


def points_spread(values: Sequence[float]) -> str:
    """Differences of accuracy (fractions) in points: ``'+0.5 ± 0.1 points (3 seeds)'``; '-' for none."""
    if not values:
        return "-"
    pts = [100 * v for v in values]
    spread_ = f" ± {statistics.stdev(pts):.1f}" if len(pts) > 1 else ""
    return f"{statistics.mean(pts):+.1f}{spread_} points ({seeds_text(len(pts))})"


# (what, where, source, fn(loaded) -> result); ``what`` a string or ``what(loaded) -> str``
HEADLINE: list[tuple[str | Callable[[Any], str], str, str, Callable[[Any], str]]] = []


def headline_row(what: str | Callable[[Any], str], where: str, source: str) -> Callable:
    """Adds the decorated ``fn(loaded) -> str`` as a row of the README's headline table (rows in call order);
    ``what`` may be a function of the loaded file too."""
    def deco(fn):
        HEADLINE.append((what, where, source, fn))
        return fn
    return deco


SETTING_WORDS = {"learning_rate": "lr {}", "algorithm.optimizer_state": "state {}",
                 "algorithm.outer_learning_rate": "outer {}", "model.scaling": "scaling {}",
                 "local_steps": "K = {}", "algorithm.server_learning_rate": "server lr {}",
                 "algorithm.rho": "rho {}", "algorithm.distill_weight": "distillation weight {}"}


def settings_words(point: dict[str, Any]) -> str:
    """A tuning grid point in words: ``lr 0.002, state carried, outer 0.7, scaling test`` (an unnamed field as
    ``field value``)."""
    return ", ".join(SETTING_WORDS.get(k, k + " {}").format({"reset": "restarted", "carry": "carried"}.get(v, v))
                     for k, v in point.items())


def tuning_rows(tuning: dict[str, Any], arm_name: Callable[[str], str] = str, digits: int = 3) -> list[list[str]]:
    """Every run of a tuning record (the ``tuning`` section `istjax.launch.tuning.tune` writes) as rows ``[arm,
    settings (the choice marked), its metric on the tuning split]``, each arm's best first."""
    metric, direction = tuning["objective"]["metric"], tuning["objective"]["direction"]
    sign = 1 if direction == "min" else -1
    out = []
    for arm, chosen in tuning["chosen"].items():
        mine = sorted((r for r in tuning["runs"] if r["arm"] == arm),
                      key=lambda r: (r[metric] is None, sign * (r[metric] or 0)))
        out += [[arm_name(arm), settings_words(r["settings"]) + (" (chosen)" if r["settings"] == chosen else ""),
                 _tuning_score(r, metric, digits)] for r in mine]
    return out


def _tuning_score(run: dict[str, Any], metric: str, digits: int) -> str:
    """A tuning run's score, or ``-`` and, for a run that failed, the first clause of why (``rank 0 killed by the
    kernel at the 1.90 GiB cgroup limit per rank (exit 9)``)."""
    if run[metric] is not None:
        return f"{run[metric]:.{digits}f}"
    return f"- ({run['error'].split(', ')[0].split('; ')[0]})" if run.get("error") else "-"


def tuning_table(name: str, source: str, unit: str, score: Callable[[dict[str, Any]], str]) -> Entry:
    """Registers the table ``name``: every tuning run ``source`` records (its ``tuning``), each arm's choice marked,
    under `tuning_caption` (budget in ``unit``); ``score(tuning)`` heads the score column."""
    def render(d):
        t = d.get("tuning")
        if not t:
            return f"{source} records no tuning stage (run its study with --tune)."
        return tuning_caption(t, unit) + "\n\n" + markdown_table(["cell", "settings", score(t)],
                                                                 tuning_rows(t, lambda a: f"`{a}`"))
    return register(name, (source,), render)


def tuning_caption(tuning: dict[str, Any], unit: str) -> str:
    """What a tuning table's rows are: the seed, the budget (``samples`` where recorded, in ``unit``), the split."""
    budget = f", {cell(tuning['samples'])} {unit}" if tuning.get("samples") else ""
    return (f"Every tuning run: seed {tuning['seed']}{budget}, trained on the first {1 - tuning['tuning_fraction']:.0%}"
            f" of the training {unit} and scored on the last {tuning['tuning_fraction']:.0%} (the reported split "
            f"never read); each arm's best chosen, before any reported run.")
