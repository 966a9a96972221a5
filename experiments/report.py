"""Every number in the README and docs/ regenerated from the committed results files.

    python -m experiments.report           # rewrite every table between markers from the JSON (`make results`)
    python -m experiments.report --check   # exit 1 with a diff where a table differs from what the JSON gives
    python -m experiments.report --list    # the tables, the files they read and where they stand

In README.md and docs/*.md a table stands between two marker lines, ``<!-- report:NAME -->`` and
``<!-- /report:NAME -->``; a single figure inside prose stands between the same two markers on one line
(``IST was <!-- report:NAME -->5.8x<!-- /report:NAME --> sooner``). Markers inside code (fenced blocks, backticks)
are text. NAME is an entry of `REGISTRY`: the JSON files it reads (relative to the repository root) and a pure
function from their contents to the text. Adding a table of an aggregated results file (a list ``rows``, one per
cell, each with ``algorithm``, ``num_workers``, ``seeds``, ``test_accuracy_mean`` and ``test_accuracy_std``) is
one call::

    results_table("images_resist", "experiments/images/results/resist.json",
                  ["label", "algorithm", "num_workers", "test_accuracy", "bytes_per_round"])

and any other table a function under ``@table(NAME, PATH, ...)`` (or ``scalar(NAME, PATH, fn)`` for one figure).

Exit status: 0 every table agrees (or was rewritten); 1 (``--check``) a table differs from its JSON; 2 the files
cannot be read as asked: a marker naming no entry, a marker without its other half, a results file missing or
malformed. Nothing is written unless every table renders.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import pathlib
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from istjax.launch.metrics import format_mean_std as mean_std

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/*.md")  # the files whose markers are kept, relative to the root
FIX = "python -m experiments.report (or make results)"


# ----------------------------------------------------------------------------------------------------------------
# The registry

@dataclasses.dataclass(frozen=True)
class Entry:
    """A named table (or, ``inline``, one figure): ``render(*loaded)`` with each of ``sources`` loaded as JSON."""
    name: str
    sources: tuple[str, ...]
    render: Callable[..., str]
    inline: bool = False


REGISTRY: dict[str, Entry] = {}
_NAME = r"[A-Za-z0-9_.-]+"


def register(name: str, sources: Sequence[str], render: Callable[..., str], *, inline: bool = False) -> Entry:
    if not re.fullmatch(_NAME, name):
        raise ValueError(f"report name {name!r}: use letters, digits, '_', '.' and '-'")
    if name in REGISTRY:
        raise ValueError(f"report name {name!r} is registered twice")
    REGISTRY[name] = Entry(name, tuple(sources), render, inline)
    return REGISTRY[name]


def table(name: str, *sources: str):
    """Registers the decorated ``fn(*loaded) -> markdown`` as the table ``name``."""
    def deco(fn):
        register(name, sources, fn)
        return fn
    return deco


def scalar(name: str, source: str, fn: Callable[[Any], Any]) -> Entry:
    """One figure for prose: ``fn(loaded)``, a string (or a number, written with `cell`), on one line."""
    return register(name, (source,), lambda data: cell(fn(data)), inline=True)


# ----------------------------------------------------------------------------------------------------------------
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


# ----------------------------------------------------------------------------------------------------------------
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
    return mean_std(r["test_accuracy_mean"], r["test_accuracy_std"], len(r["seeds"]))


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
                  where: Callable[[dict[str, Any]], bool] | None = None) -> Entry:
    """Registers the table ``name``: one line per row of the aggregated file ``source`` (``where`` keeps some),
    with ``columns``: names of `COLUMNS`, other row keys, or ``(header, fn(row) -> str)``."""
    cols = [c if isinstance(c, tuple) else COLUMNS.get(c, (c, lambda r, k=c: cell(r.get(k)))) for c in columns]

    def render(data):
        rows = [r for r in result_rows(data) if where is None or where(r)]
        return markdown_table([h for h, _ in cols], [[fn(r) for _, fn in cols] for r in rows])
    return register(name, (source,), render)


# ----------------------------------------------------------------------------------------------------------------
# The MLP benchmark suite: experiments/benchmarks/results*.json (python -m experiments.benchmarks.run)

BENCH = "experiments/benchmarks/results.json"
BENCH_H100 = "experiments/benchmarks/results_h100.json"
BENCH_GPU = "experiments/benchmarks/results_gpu.json"
CONV, CONV_GPU = "experiments/benchmarks/results_conv.json", "experiments/benchmarks/results_conv_gpu.json"
GRAPH, GRAPH_GPU = "experiments/benchmarks/results_graph.json", "experiments/benchmarks/results_graph_gpu.json"
FSDD, KEYWORDS = "experiments/network/results.json", "experiments/network/results_keywords.json"
OVERLAP = "experiments/network/overlap.json"


def study(d: dict, key: str, **match) -> list[dict]:
    """The rows of a suite study, those whose fields equal ``match``."""
    return [r for r in d["results"][key]["rows"] if all(r.get(k) == v for k, v in match.items())]


def verdicts(d: dict) -> list[dict]:
    """A suite run's verdicts, taken afresh from its rows by `experiments.benchmarks.run.targets` (so a goal changed
    since the run is judged as it stands now, not as the file stored it)."""
    from experiments.benchmarks import run
    return run.targets(d["results"])


def target(d: dict, key: str, what: str = "") -> dict:
    """The suite's verdict row for study ``key`` (the first whose target text contains ``what``)."""
    return next(t for t in verdicts(d) if t["study"] == key and what in t["target"])


def _machine_line(d: dict) -> str:
    m = d["machine"]
    return (f"{m['cpu']} ({m['cores']} cores), jax {m['jax']}, {d['mode']} run, load average "
            f"{m['loadavg_start'][0]:.1f} -> {m['loadavg_end'][0]:.1f}, {d['total_seconds']:.0f} s in all")


def _suite_tables(d: dict, heading: str = "####") -> str:
    from experiments.benchmarks import run
    parts = [f"Measured on {_machine_line(d)}.", "", f"{heading} targets (worst row of each study)", "",
             run.markdown(verdicts(d), run.TARGET_COLUMNS)]
    for key, res in d["results"].items():
        parts += ["", f"{heading} {key} ({res['seconds']:.0f} s)", "",
                  run.markdown(res["rows"], run.TABLE_COLUMNS[key])]
    return "\n".join(parts)


@table("bench_cpu", BENCH)
def _bench_cpu(d):
    """Every table of the suite's latest CPU run, as ``results.md`` has them."""
    return _suite_tables(d)


def _suite_targets(d: dict) -> str:
    """The verdicts of a suite run (the GPU runs, whose study tables stay in their ``.md``)."""
    from experiments.benchmarks import run
    return f"Measured on {_machine_line(d)}.\n\n" + run.markdown(verdicts(d), run.TARGET_COLUMNS)


table("bench_targets_h100", BENCH_H100)(_suite_targets)
table("bench_targets_gpu", BENCH_GPU)(_suite_targets)


@table("bench_summary", BENCH)
def _bench_summary(d):
    """The suite's verdicts in words, one line per study, from its latest run."""
    eff = study(d, "1_compute_efficiency")
    gs = study(d, "2_gather_scatter")
    ro = study(d, "3_round_overhead")
    tp = {(r["algorithm"], r["backend"]): r for r in study(d, "4_throughput")}
    comm = study(d, "5_communication")
    comp = study(d, "6_compilation")
    sc = study(d, "7_scaling")

    def met(key, what=""):
        return target(d, key, what)["met"]

    mpi_ist, mpi_dp = tp[("ist", "mpi x2")], tp[("data_parallel", "mpi x2")]
    two = [r for r in comm if r["model"].startswith("2-layer")]
    three = [r for r in comm if r["model"].startswith("3-layer")]
    small = [r for r in sc if sc[0]["W"] < r["W"] <= 16]
    widest = sc[-1]
    rows = [
        ["1. local-phase FLOP rate >= 0.6 of the best dense matmul rate (`efficiency_strict`)",
         "; ".join(f"{r['model'].split()[0]} {algorithm_name(r['algorithm'])} **{fixed(r['efficiency_strict'])}** "
                   f"(of its own row's best: {fixed(r['efficiency'])})" for r in eff)
         + f"; every phase runs {span([r['vs_step_matmuls'] for r in eff], lambda x: ratio(x, 2))} faster than its "
           "own matmuls timed alone", met("1_compute_efficiency")],
        ["2. extract + merge >= 0.5 of a copy (`extract_merge_vs_copy`)",
         "; ".join(f"{m} **{span([r['extract_merge_vs_copy'] for r in gs if r['model'].startswith(m)])}** "
                   f"(W = {', '.join(str(r['W']) for r in gs if r['model'].startswith(m))})"
                   for m in ("2-layer", "3-layer")), met("2_gather_scatter")],
        ["3. round overhead <= 10 % at K = 20 (`overhead_share_at_K20`)",
         "; ".join(f"{r['model'].split()[0]} **{percent(r['overhead_share_at_K20'])}**"
                   + (f" (rescaled from K = {r['K']})" if r["K"] != 20 else "") for r in ro), met("3_round_overhead")],
        ["4. throughput, W = 2 (samples/s)",
         f"simulate: IST {count(tp[('ist', 'simulate')]['samples_per_s'])}, data parallel "
         f"{count(tp[('data_parallel', 'simulate')]['samples_per_s'])}, local SGD "
         f"{count(tp[('local_sgd', 'simulate')]['samples_per_s'])}; MPI x 2: IST {count(mpi_ist['samples_per_s'])} "
         f"(**{fixed(mpi_ist['vs_simulate'], 3)}** of simulate, overhead **{percent(mpi_ist['overhead_share'])}** of a "
         f"round), data parallel {count(mpi_dp['samples_per_s'])} (all-reduce at "
         f"**{fixed(mpi_dp['allreduce_vs_plain'])}** of a plain one inside its loop, "
         f"**{fixed(mpi_dp['standalone_vs_plain'])}** as one standalone call), "
         f"local SGD {count(tp[('local_sgd', 'mpi x2')]['samples_per_s'])}",
         "yes" if all(t["met"] == "yes" for t in verdicts(d) if t["study"] == "4_throughput") else "NO"],
        ["5. bytes per worker per round",
         ("IST = 1/W of the 2-layer model" if all(abs(r["ist_fraction_of_model"] - r["1/W"]) < 1e-9 for r in two)
          else f"IST {' / '.join(fixed(r['ist_fraction_of_model'], 3) for r in two)} of the 2-layer model")
         + f" at W = {' / '.join(str(r['W']) for r in two)}; 3-layer "
           f"{' / '.join(fixed(r['ist_fraction_of_model'], 3) for r in three)} of it; local SGD "
           f"{span([r['local_sgd_over_ist'] for r in comm], ratio, ' to ')} IST, data parallel "
           f"{span([r['data_parallel_over_ist'] for r in comm], lambda x: ratio(x, 0), ' to ')}", "-"],
        ["6. one compilation per distinct function",
         f"{span([r['first_round_compilations'] for r in comp], str, ' to ')} in the first round, each a different "
         f"function; **{max(r['later_round_compilations'] for r in comp)}** in rounds 2 to "
         f"{max(r['rounds'] for r in comp)}", met("6_compilation")],
        [f"7. scaling W = {sc[0]['W']} .. {widest['W']}",
         f"time per round {span([r['round_s_vs_first'] for r in small], lambda x: ratio(x, 2), ' to ')} that of "
         f"W = {sc[0]['W']} ({fixed(sc[0]['round_s'])} s) at W = {small[0]['W']} to {small[-1]['W']}, "
         f"{ratio(widest['round_s_vs_first'], 2)} at W = {widest['W']} ({widest['W'] // sc[0]['W']}x the samples); "
         f"XLA's peak memory {nbytes(sc[0]['peak_bytes'], False, 0)} at W = {sc[0]['W']} to "
         f"{nbytes(widest['peak_bytes'], False, 2)} at W = {widest['W']}", "-"],
    ]
    return markdown_table(["target", "measured (latest run)", "met"], rows)


def _span_scalar(name, source, key, column, fmt=fixed, sep="-", **match):
    return scalar(name, source, lambda d: span([r[column] for r in study(d, key, **match)], fmt, sep))


# Figures the prose of docs/benchmarks.md and docs/distributed.md quotes from the CPU run.
_span_scalar("bench.efficiency_strict", BENCH, "1_compute_efficiency", "efficiency_strict", sep=" to ")
_span_scalar("bench.efficiency", BENCH, "1_compute_efficiency", "efficiency", sep=" to ")
_span_scalar("bench.vs_step_matmuls", BENCH, "1_compute_efficiency", "vs_step_matmuls", sep=" to ")
_span_scalar("bench.gather", BENCH, "2_gather_scatter", "extract_merge_vs_copy", sep=" to ")
_span_scalar("bench.extract_2layer", BENCH, "2_gather_scatter", "extract_vs_copy", sep=" to ",
             model="2-layer 4096-4096-35")
_span_scalar("bench.merge_3layer", BENCH, "2_gather_scatter", "merge_vs_copy", sep=" to ",
             model="3-layer 4096-8192-8192-35")
_span_scalar("bench.merge_model_3layer", BENCH, "2_gather_scatter", "merge_vs_copy_model", sep=" to ",
             model="3-layer 4096-8192-8192-35")
_span_scalar("bench.partition_ms", BENCH, "3_round_overhead", "partition_s", lambda s: fixed(1e3 * s, 1), " to ")
scalar("bench.overhead_2layer", BENCH,
       lambda d: percent(study(d, "3_round_overhead", K=20)[0]["overhead_share_at_K20"]))
scalar("bench.overhead_3layer", BENCH,
       lambda d: percent(study(d, "3_round_overhead")[-1]["overhead_share_at_K20"]))
for _alg in ("ist", "data_parallel", "local_sgd"):
    for _backend, _tag in (("simulate", "simulate"), ("mpi x2", "mpi")):
        scalar(f"bench.samples.{_alg}.{_tag}", BENCH,
               lambda d, a=_alg, b=_backend: count(
                   study(d, "4_throughput", algorithm=a, backend=b)[0]["samples_per_s"]))
scalar("bench.mpi_ist_vs_simulate", BENCH, lambda d: fixed(d["mpi_ist_vs_simulate"], 3))
scalar("bench.mpi_overhead_share", BENCH, lambda d: fixed(d["mpi_overhead_share"], 3))
scalar("bench.mpi_allreduce_vs_plain", BENCH, lambda d: fixed(target(d, "4_throughput", "compiled loop")["worst"]))
scalar("bench.mpi_allreduce_standalone", BENCH,
       lambda d: fixed(study(d, "4_throughput", algorithm="data_parallel", backend="mpi x2")[0]["standalone_vs_plain"]))
scalar("bench.mpi_ist_round_s", BENCH,
       lambda d: fixed(study(d, "4_throughput", algorithm="ist", backend="mpi x2")[0]["round_s"], 3))
scalar("bench.sim_ist_round_s", BENCH,
       lambda d: fixed(study(d, "4_throughput", algorithm="ist", backend="simulate")[0]["round_s"], 3))
scalar("bench.mpi_ist_round_range", BENCH, lambda d: span(
    study(d, "4_throughput", algorithm="ist", backend="mpi x2")[0]["timings"]["samples_s"], fixed, "-"))
scalar("bench.mpi_local_s", BENCH, lambda d: span(
    [p["local"] for p in study(d, "4_throughput", algorithm="ist", backend="mpi x2")[0]["phases_by_rank"]],
    fixed, "-"))
for _alg, _digits in (("ist", 1), ("data_parallel", 2), ("local_sgd", 1)):
    scalar(f"bench.mpi_bytes.{_alg}", BENCH, lambda d, a=_alg, n=_digits: nbytes(
        study(d, "4_throughput", algorithm=a, backend="mpi x2")[0]["measured_bytes_received"], False, n))
scalar("bench.dp_local_s", BENCH,
       lambda d: fixed(study(d, "1_compute_efficiency", algorithm="data_parallel")[0]["local_s"]))
scalar("bench.dp_efficiency", BENCH,
       lambda d: fixed(study(d, "1_compute_efficiency", algorithm="data_parallel")[0]["efficiency"]))
scalar("bench.ist_fraction_3layer", BENCH, lambda d: " / ".join(
    fixed(r["ist_fraction_of_model"], 3) for r in study(d, "5_communication") if r["model"].startswith("3-layer")))
_span_scalar("bench.local_sgd_over_ist", BENCH, "5_communication", "local_sgd_over_ist", ratio, " to ")
_span_scalar("bench.data_parallel_over_ist", BENCH, "5_communication", "data_parallel_over_ist",
             lambda x: ratio(x, 0), " to ")
scalar("bench.scaling_small", BENCH, lambda d: span(
    [r["round_s_vs_first"] for r in study(d, "7_scaling") if 1 < r["W"] <= 16], lambda x: ratio(x, 2), " to "))
scalar("bench.scaling_32", BENCH, lambda d: ratio(study(d, "7_scaling", W=32)[0]["round_s_vs_first"], 2))
scalar("bench.scaling_64", BENCH, lambda d: ratio(study(d, "7_scaling", W=64)[0]["round_s_vs_first"], 2))
scalar("bench.scaling_round_s", BENCH, lambda d: span(
    [r["round_s"] for r in study(d, "7_scaling") if r["W"] <= 16], fixed, " to "))

PHASES = ("batches", "distribute", "scatter", "local", "gather", "collect", "metrics")


@table("mpi_phases", BENCH)
def _mpi_phases(d):
    """IST's parameter-server round under MPI, phase by phase on every rank (ms)."""
    ist = study(d, "4_throughput", algorithm="ist", backend="mpi x2")[0]
    return markdown_table(["phase (ms per round)", *PHASES],
                          [[f"rank {i}" + (" (the server)" if i == 0 else ""),
                            *(f"{1e3 * p[k]:.0f}" for k in PHASES)] for i, p in enumerate(ist["phases_by_rank"])])


COMM_MEMORY = "experiments/distributed/results/comm_and_memory.json"
SHARDED_EVAL = "experiments/distributed/results/sharded_eval_memory.json"


def _mib(b: float) -> str:
    return f"{b / 2 ** 20:.1f}"


@table("distributed_comm_memory", COMM_MEMORY)
def _comm_memory(d):
    """Bytes per worker per round (analytic and measured) and each rank's memory, per rank count and mode."""
    rows = [[cell(r["procs"]), r["algorithm"], r["mode"] if r["algorithm"] == "ist" else "replicated (allreduce)",
             f"{_mib(r['analytic_received'])} / {_mib(r['analytic_sent'])}",
             f"{_mib(r['measured_received'])} / {_mib(r['measured_sent'])}",
             " ".join(_mib(x) for x in r["max_rss"]), " ".join(_mib(x) for x in r["largest_array"])]
            for r in d["rows"]]
    return (f"{d['model']} speech MLP, batch {d['batch']}, K = {d['local_steps']}, W = P workers; full model "
            f"{_mib(d['rows'][0]['full_model_bytes'])} MiB\n\n" + markdown_table(
                ["P", "algorithm", "mode", "analytic recv/sent per worker per round (MiB)", "measured recv/sent (MiB)",
                 "peak RSS per rank (MiB)", "largest array per rank (MiB)"], rows))


def _largest(d, procs: int, mode: str) -> list[int]:
    return next(r["largest_array"] for r in d["rows"]
                if r["procs"] == procs and r["algorithm"] == "ist" and r["mode"] == mode)


scalar("distributed.server_extra", COMM_MEMORY, lambda d: span(
    [(r["max_rss"][0] - max(r["max_rss"][1:])) / 2 ** 20 for r in d["rows"]
     if r["algorithm"] == "ist" and r["mode"] == "parameter_server"], lambda x: f"{x:.0f}", "-"))
scalar("distributed.sharded_largest", COMM_MEMORY, lambda d: " / ".join(
    f"{max(_largest(d, r['procs'], 'sharded')) / 2 ** 20:.0f}" for r in d["rows"]
    if r["algorithm"] == "ist" and r["mode"] == "sharded"))


def _eval_rss(d, way):
    row = next(r for r in d["rows"] if r["way"] == way)
    return " / ".join(f"{r / 2 ** 20:,.0f}" for r in row["max_rss"])


def _eval_live(d, way):
    row = next(r for r in d["rows"] if r["way"] == way)
    return " / ".join(f"{v / 2 ** 20:,.0f}" for v in row["live_bytes"])


scalar("distributed.eval_gather_live", SHARDED_EVAL, lambda d: _eval_live(d, "gather"))
scalar("distributed.eval_in_place_live", SHARDED_EVAL, lambda d: _eval_live(d, "in_place"))
scalar("distributed.eval_gather_rss", SHARDED_EVAL, lambda d: _eval_rss(d, "gather"))
scalar("distributed.eval_in_place_rss", SHARDED_EVAL, lambda d: _eval_rss(d, "in_place"))


@table("mpi_goals", BENCH)
def _mpi_goals(d):
    """The MPI runtime's four goals (study 4) against the latest run."""
    rows = [t for t in verdicts(d) if t["study"] == "4_throughput"]
    return markdown_table(["goal", "measured", "met"], [[t["target"], fixed(t["worst"], 3), t["met"]] for t in rows])


# GPU runs: the same suite on one H100.
def _gpu_range(name, source, key, column, k20_only=False):
    scalar(name, source, lambda d: span(
        [r[column] for r in study(d, key) if not k20_only or r.get("K") == 20], fixed, "-"))


_gpu_range("h100.efficiency", BENCH_H100, "1_compute_efficiency", "efficiency_strict")
_gpu_range("h100.gather", BENCH_H100, "2_gather_scatter", "extract_merge_vs_copy")
_gpu_range("h100.overhead", BENCH_H100, "3_round_overhead", "overhead_share_at_K20")
_gpu_range("gpu.efficiency", BENCH_GPU, "1_compute_efficiency", "efficiency_strict")
_gpu_range("gpu.gather", BENCH_GPU, "2_gather_scatter", "extract_merge_vs_copy")
scalar("gpu.overhead_2layer", BENCH_GPU, lambda d: fixed(study(d, "3_round_overhead")[0]["overhead_share_at_K20"]))
scalar("gpu.overhead_3layer", BENCH_GPU, lambda d: fixed(study(d, "3_round_overhead")[-1]["overhead_share_at_K20"]))
scalar("gpu.round_ms", BENCH_GPU, lambda d: fixed(1e3 * study(d, "3_round_overhead")[0]["round_s"], 1))


# ----------------------------------------------------------------------------------------------------------------
# Conv models and GIST: experiments/benchmarks/results_{conv,graph}[_gpu].json

def _conv(d):
    from experiments.benchmarks import conv
    return conv.markdown(d).strip()


def _graph(d):
    from experiments.benchmarks import graph
    return graph.markdown(d).strip()


table("conv_cpu", CONV)(_conv)
table("conv_gpu", CONV_GPU)(_conv)
table("graph_cpu", GRAPH)(_graph)


def _conv_target(d, what):
    return next(t for t in d["targets"] if t["goal"].startswith(what))


def _conv_goal(d, what):
    return _conv_target(d, what)["measured"]


def _samples(d, algorithm, model_prefix="ResNet-18"):
    return next(r["samples_per_s"] for r in d["throughput"]
                if r["algorithm"] == algorithm and r["model"].startswith(model_prefix))


for _name, _src in (("conv", CONV), ("conv_gpu", CONV_GPU)):
    scalar(f"{_name}.local_vs_convs", _src, lambda d: fixed(d["local_vs_convs"]["local_vs_convs"]))
    scalar(f"{_name}.gather_bytes_full", _src,
           lambda d: fixed(_conv_goal(d, "extract + merge / copy of the bytes written (ResNet-18 (")))
    scalar(f"{_name}.gather_bytes_quarter", _src,
           lambda d: fixed(_conv_goal(d, "extract + merge / copy of the bytes written (ResNet-18 shape")))
    scalar(f"{_name}.overhead", _src, lambda d: percent(_conv_goal(d, "partition + extract + merge")))
    scalar(f"{_name}.ist_vs_dp", _src, lambda d: ratio(_samples(d, "ist") / _samples(d, "data_parallel")))
    scalar(f"{_name}.ist_vs_local_sgd", _src, lambda d: ratio(_samples(d, "ist") / _samples(d, "local_sgd")))
    scalar(f"{_name}.resist_vs_local_sgd", _src,
           lambda d: ratio(_samples(d, "resist", "depth") / _samples(d, "local_sgd", "depth")))
scalar("conv_both.gather_arrays", CONV, lambda d: span(
    [t["measured"] for t in d["targets"] if "same" in t["goal"]], fixed, "-"))
scalar("conv_gpu.gather_arrays", CONV_GPU, lambda d: span(
    [t["measured"] for t in d["targets"] if "same" in t["goal"]], fixed, "-"))
scalar("graph.aggregate_vs_copy", GRAPH, lambda d: fixed(d["aggregation"]["aggregate_vs_copy"]))
scalar("graph.overhead", GRAPH, lambda d: percent(d["round_overhead"]["overhead_share_parts"], 2))
scalar("graph.nodes_vs_full", GRAPH, lambda d: " and ".join(
    fixed(r["nodes_per_s"] / d["throughput"][0]["nodes_per_s"], 1) for r in d["throughput"][1:]))
scalar("graph_gpu.aggregate_vs_copy", GRAPH_GPU, lambda d: fixed(d["aggregation"]["aggregate_vs_copy"]))
scalar("graph_gpu.overhead", GRAPH_GPU, lambda d: fixed(d["round_overhead"]["overhead_share_parts"]))


# ----------------------------------------------------------------------------------------------------------------
# Time to accuracy across shaped links: experiments/network/results*.json, overlap.json

def _time_to_accuracy(d):
    from experiments.network import time_to_accuracy
    return time_to_accuracy.markdown(d).strip()


table("network_fsdd", FSDD)(_time_to_accuracy)
table("network_keywords", KEYWORDS)(_time_to_accuracy)


def _seeds(d) -> list[int]:
    """The seeds of a time-to-accuracy file's runs: [0] for a file from before ``--seeds`` (one run per cell)."""
    from experiments.network import time_to_accuracy
    return sorted({time_to_accuracy.seed_of(r) for r in d["runs"]})


def _runs_in_words(d) -> str:
    """'one run each', or 'mean ± std over 3 seeds'."""
    n = len(_seeds(d))
    return "one run each" if n == 1 else f"mean ± std over {n} seeds"


def _over_seeds(values: list, fmt: Callable[[float], str]) -> str:
    """One cell of runs over seeds: the one value as ``fmt`` gives it, or 'mean ± std' (``fmt`` for both)."""
    from experiments.network.time_to_accuracy import mean_std
    mean, std = mean_std(values)
    if mean is None:
        return "-"
    return fmt(mean) if std is None else f"{fmt(mean)} ± {fmt(std)}"


def _rounds_over_seeds(runs: list[dict]) -> str:
    """Rounds to the target over seeds: '3', '3-4', with '(2 of 3)' where some seeds did not reach it; '-'."""
    reached = [r["round_to_target"] for r in runs if r.get("round_to_target") is not None]
    if not reached:
        return "-"
    return span(reached, cell) + (f" ({len(reached)} of {len(runs)})" if len(reached) < len(runs) else "")


def _per_round(d):
    """Per model, rank count and link: rounds to the target, seconds per round, bytes per worker and on the links
    (several seeds: the range of rounds, the mean ± std of seconds, the mean of bytes)."""
    runs: dict[tuple, list[dict]] = {}
    for r in d["runs"]:
        runs.setdefault((r["model"], r["ranks"], r["link"], r["algorithm"]), []).append(r)
    algs, several = ("ist", "data_parallel", "local_sgd"), len(_seeds(d)) > 1

    def each(key, fn, finished_only=True):  # a run that failed (killed at its timeout) has rounds, no times
        def one(rs):
            done = [r for r in rs if "time_per_round_s" in r] if finished_only else rs
            return fn(done) if done else "-"
        return " / ".join(one(runs[key + (a,)]) if key + (a,) in runs else "-" for a in algs)

    def mean(rs, value, fmt):
        return fmt(sum(value(r) for r in rs) / len(rs))

    rows = []
    for e in d["speedups"]:
        key = (e["model"], e["ranks"], e["link"])
        rows.append([f"{e['model']}-layer", e["ranks"], link_name(e["link"]),
                     each(key, _rounds_over_seeds, finished_only=False),
                     each(key, lambda rs: _over_seeds([r["time_per_round_s"] for r in rs], fixed)),
                     each(key, lambda rs: mean(rs, lambda r: r["bytes_sent_per_worker_per_round"] / 1e6,
                                               lambda x: f"{x:,.1f}")),
                     each(key, lambda rs: mean(rs, lambda r: sum(v["tx_bytes"] for v in r["links"].values()) / 1e6,
                                               count))])
    header = ["model", "ranks", "link", "rounds to the target", "s per round", "MB per worker per round, each way",
              "links carried (MB, all hosts' tx, whole run)"]
    if several:
        header[3:] = ["rounds to the target (range over seeds)", "s per round (mean ± std over seeds)", header[5],
                      "links carried (MB, all hosts' tx, whole run; mean over seeds)"]
    return markdown_table(header, rows)


table("network_fsdd_rounds", FSDD)(_per_round)
table("network_keywords_rounds", KEYWORDS)(_per_round)


def _speedup_text(e: dict, vs: str, seeds_count: bool = True) -> str:
    """IST's speed-up of a `speedups` entry over ``vs``: '15.9x' (one run); over several seeds '15.9x ± 1.2
    (3 seeds)', '(2 of 3 seeds)' where only some seeds reached the target (``seeds_count`` False: no count unless
    some seeds did not count)."""
    name = f"speedup_vs_{vs}"
    runs = len(e.get("seeds", [None]))
    if e[name] is None or runs == 1:
        return ratio(e[name])
    counted, std = len(e[f"{name}_seeds"]), e.get(f"{name}_std")
    text = ratio(e[name]) + (f" ± {std:.1f}" if std is not None else "")
    if counted < runs:
        return f"{text} ({counted} of {runs} seeds)"
    return f"{text} ({runs} seeds)" if seeds_count else text


def _speedup(d, model, ranks, link, vs="data_parallel"):
    e = next(e for e in d["speedups"] if (e["model"], e["ranks"], e["link"]) == (model, ranks, link))
    return _speedup_text(e, vs)


def _lsgd_range(d) -> str:
    """IST's speed-ups over local SGD, lowest to highest over the cells: '1.0x-1.6x' (one run each); over several
    seeds the means' range, then the single seeds' ('1.0x-1.6x (means over 3 seeds; 0.9x-1.8x seed by seed)')."""
    es = [e for e in d["speedups"] if e["speedup_vs_local_sgd"] is not None]
    means = span([e["speedup_vs_local_sgd"] for e in es], ratio)
    n = len(_seeds(d))
    if n == 1:
        return means
    single = span([e["speedup_vs_local_sgd_min"] for e in es] + [e["speedup_vs_local_sgd_max"] for e in es], ratio)
    return f"{means} (means over {n} seeds; {single} seed by seed)"


# The speedups the prose of docs/network.md quotes: (file, model, ranks, link, against).
for _name, _src, _cells in (
        ("fsdd", FSDD, [("2", 2, "1gbit", "dp"), ("2", 2, "10gbit", "dp"), ("2", 4, "1gbit", "dp"),
                        ("3", 2, "1gbit", "dp"), ("3", 2, "10gbit", "dp"), ("2", 4, "1gbit", "lsgd")]),
        ("keywords", KEYWORDS, [("2", 2, "1gbit", "dp"), ("2", 2, "10gbit", "dp"), ("2", 2, "1gbit", "lsgd"),
                                ("2", 2, "10gbit", "lsgd")])):
    for _m, _r, _l, _tag in _cells:
        scalar(f"{_name}.{_tag}.{_m}layer.{_r}ranks.{_l}", _src, lambda d, m=_m, r=_r, l=_l, t=_tag: _speedup(
            d, m, r, l, "data_parallel" if t == "dp" else "local_sgd"))
    scalar(f"{_name}.lsgd_range", _src, _lsgd_range)
    scalar(f"{_name}.wall_min", _src, lambda d: f"{sum(r['job_wall_s'] for r in d['runs']) / 60:.0f}")
scalar("keywords.target", KEYWORDS, lambda d: cell(d["target"]).rstrip("0"))


def _rounds_to_target(d, model, algorithm):
    """Every seed's and link's rounds to the target: '10', '10 or 11'."""
    rounds = {r["round_to_target"] for r in d["runs"] if r["model"] == model and r["algorithm"] == algorithm}
    return " or ".join(cell(x) for x in sorted(rounds, key=lambda x: (x is None, x)))


for _m in ("2", "3"):
    for _a in ("ist", "data_parallel", "local_sgd"):
        for _name, _src in (("fsdd", FSDD), ("keywords", KEYWORDS)):
            scalar(f"{_name}.rounds.{_m}layer.{_a}", _src, lambda d, m=_m, a=_a: _rounds_to_target(d, m, a))


def _per_round_speedup(d, model, ranks, link):
    """Data parallel's seconds per round over IST's: '7.9x' (one run); over several seeds each seed against its own,
    '7.9x ± 0.3 (3 seeds)'."""
    from experiments.network.time_to_accuracy import mean_std, seed_of
    t: dict[str, dict] = {}
    for r in d["runs"]:
        if (r["model"], r["ranks"], r["link"]) == (model, ranks, link):
            t.setdefault(r["algorithm"], {})[seed_of(r)] = r["time_per_round_s"]
    per_seed = [t["data_parallel"][s] / t["ist"][s] for s in sorted(t["ist"]) if s in t["data_parallel"]]
    mean, std = mean_std(per_seed)
    return ratio(mean) if std is None else f"{ratio(mean)} ± {std:.1f} ({len(per_seed)} seeds)"


scalar("fsdd.per_round_dp.3layer.2ranks.1gbit", FSDD, lambda d: _per_round_speedup(d, "3", 2, "1gbit"))
scalar("fsdd.per_round_dp.2layer.2ranks.1gbit", FSDD, lambda d: _per_round_speedup(d, "2", 2, "1gbit"))
def _dp_megabits_2layer(d) -> float:
    """Data parallel's megabits sent per worker per round on the 2-layer model (from any run that finished)."""
    return 8 * next(r["bytes_sent_per_worker_per_round"] for r in d["runs"] if r["model"] == "2"
                    and r["algorithm"] == "data_parallel" and "bytes_sent_per_worker_per_round" in r) / 1e6


scalar("fsdd.dp_megabits_2layer", FSDD, lambda d: count(_dp_megabits_2layer(d)))
scalar("fsdd.ist_megabits_2layer", FSDD, lambda d: count(8 * next(
    r["bytes_sent_per_worker_per_round"] for r in d["runs"] if r["model"] == "2" and r["ranks"] == 2
    and r["algorithm"] == "ist") / 1e6))
def _dp_link_share(d) -> str:
    """Data parallel's megabits sent per worker per round over the fit's megabits: the share of the link it reaches."""
    return percent(_dp_megabits_2layer(d) / d["catch_up"][0]["fits"]["data_parallel"]["megabits"])


scalar("fsdd.dp_link_share_2layer", FSDD, _dp_link_share)
scalar("fsdd.dp_fit_megabits_2layer", FSDD, lambda d: count(d["catch_up"][0]["fits"]["data_parallel"]["megabits"]))
scalar("fsdd.infinite_link_2layer", FSDD, lambda d: ratio(
    (lambda c: c["fits"]["data_parallel"]["compute_s"] * c["rounds"]["data_parallel"]
     / (c["fits"]["ist"]["compute_s"] * c["rounds"]["ist"]))(d["catch_up"][0])))


@table("overlap", OVERLAP)
def _overlap(d):
    from experiments.network import overlap
    return overlap.markdown(d).strip()


# ----------------------------------------------------------------------------------------------------------------
# Images (experiments/images/results/*.json, written by experiments/images/studies.py)

DIAGNOSIS = "experiments/images/results/diagnosis.json"
DIGITS = "experiments/mlp/results/digits.json"
MNIST1D = "experiments/mlp/results/mnist1d.json"
KEYWORDS_GEN = "experiments/mlp/results/keywords.json"


def _spread(r: dict[str, Any]) -> str:
    """The seeds' lowest to highest test accuracy ('-' for one seed)."""
    return "-" if len(r["seeds"]) < 2 else f"{r['test_accuracy_min']:.3f}-{r['test_accuracy_max']:.3f}"


IMAGE_BYTES = "experiments/images/results/bytes.json"


@table("images_bytes", IMAGE_BYTES)
def _images_bytes(d):
    """ResIST's analytic bytes per worker per round over local SGD's, per model and W."""
    return markdown_table(["model", "local SGD moves (M floats)", *(f"W={w}" for w in d["workers"])],
                          [[m["model"], f"{m['local_sgd_floats'] / 1e6:.2f} M",
                            *(fixed(m["resist_over_local_sgd"][str(w)]) for w in d["workers"])] for m in d["models"]])


def _bytes_row(d, prefix: str) -> str:
    m = next(m for m in d["models"] if m["model"].startswith(prefix))
    return ", ".join(fixed(m["resist_over_local_sgd"][str(w)]) for w in d["workers"])


scalar("images.bytes.paper_layout", IMAGE_BYTES, lambda d: _bytes_row(d, "3-4-23-3 basic blocks, 64-512 ch, stage 2"))
scalar("images.bytes.study", IMAGE_BYTES, lambda d: _bytes_row(d, "fmnist_resist.py"))


results_table("images_diagnosis", DIAGNOSIS, [
    ("group", lambda r: r["group"]), ("cell", lambda r: f"`{r['label']}`"), ("what", lambda r: r["what"]),
    "num_workers", "test_accuracy", ("min-max", _spread), ("train loss", lambda r: fixed(r["train_loss_mean"], 3)),
    ("bytes per worker per round", lambda r: nbytes(r["bytes_per_worker_per_round"], binary=False)),
    ("s per round", lambda r: fixed(r["time_per_round_s_mean"]))])


def _diagnosis_accuracy(label: str) -> Callable[[Any], str]:
    def fn(d):
        (r,) = [r for r in result_rows(d) if r["label"] == label]
        return accuracy(r)
    return fn


for _label in ("data_parallel", "local_sgd", "full_w1", "half_alone", "all_none_recompute", "inner_none_recompute",
               "inner_train_recompute", "inner_test_recompute", "inner_none_carry", "inner_train_carry",
               "inner_optcarry", "inner_K5", "inner_K20", "inner_lr0.1", "inner_lr0.02", "inner_train_optcarry"):
    scalar(f"diagnosis.{_label}", DIAGNOSIS, _diagnosis_accuracy(_label))


def _bytes_vs(label: str, reference: str) -> Callable[[Any], str]:
    """Cell ``label``'s bytes per worker per round over ``reference``'s, as a fraction: '0.51'."""
    def fn(d):
        by = {r["label"]: r for r in result_rows(d)}
        return fixed(by[label]["bytes_per_worker_per_round"] / by[reference]["bytes_per_worker_per_round"])
    return fn


scalar("diagnosis.bytes_inner_vs_local", DIAGNOSIS, _bytes_vs("inner_none_recompute", "local_sgd"))
scalar("diagnosis.bytes_all_vs_local", DIAGNOSIS, _bytes_vs("all_none_recompute", "local_sgd"))
scalar("diagnosis.bytes_optcarry_vs_local", DIAGNOSIS, _bytes_vs("inner_optcarry", "local_sgd"))


RESIST = "experiments/images/results/resist.json"
ABLATION = "experiments/images/results/ablation.json"
RESNET = "experiments/images/results/resnet.json"


def _points_vs(rows: list[dict[str, Any]], algorithm: str) -> Callable[[dict[str, Any]], str]:
    """A row's mean test accuracy minus ``algorithm``'s at the same W, in points: '-3.0'."""
    ref = {r["num_workers"]: r for r in rows if r["label"] == f"{algorithm}_W{r['num_workers']}"}

    def fn(r):
        other = ref.get(r["num_workers"])
        if other is None or other is r:
            return "-"
        return f"{100 * (r['test_accuracy_mean'] - other['test_accuracy_mean']):+.1f}"
    return fn


def _cell_name(r: dict[str, Any]) -> str:
    """'IST, momentum carried across repartitions' from a comparison cell's ``what`` ('ist, W = 2, momentum ...')."""
    rest = r["what"].split(", ")[2:]
    return ", ".join([algorithm_name(r["algorithm"]), *rest])


@table("images_resnet", RESNET)
def _images_resnet(d):
    rows = result_rows(d)
    dp, local = _points_vs(rows, "data_parallel"), _points_vs(rows, "local_sgd")
    return markdown_table(
        ["cell", "W", "test accuracy (mean ± std over seeds)", "min-max", "points vs data parallel",
         "points vs local SGD", "train loss", "bytes per worker per round"],
        [[_cell_name(r), r["num_workers"], accuracy(r), _spread(r), dp(r), local(r), fixed(r["train_loss_mean"], 3),
          nbytes(r["bytes_per_worker_per_round"], binary=False)] for r in rows])


for _label in ("ist_W2", "ist_W4", "data_parallel_W2", "data_parallel_W4", "local_sgd_W2", "local_sgd_W4",
               "ist_W2_momentum_carried"):
    scalar(f"resnet.{_label}", RESNET, _diagnosis_accuracy(_label))
scalar("resnet.bytes_ist_vs_local_W2", RESNET, _bytes_vs("ist_W2", "local_sgd_W2"))
scalar("resnet.bytes_ist_vs_local_W4", RESNET, _bytes_vs("ist_W4", "local_sgd_W4"))
scalar("resnet.bytes_carried_vs_local_W2", RESNET, _bytes_vs("ist_W2_momentum_carried", "local_sgd_W2"))
scalar("resnet.machine", RESNET, lambda d: f"{d['machine'].get('device', d['machine']['cpu'])}, jax "
                                        f"{d['machine'].get('jax', '?')}")


def _vs_local_sgd(rows: list[dict[str, Any]]) -> Callable[[dict[str, Any]], str]:
    """A row's bytes per round over local SGD's at the same W."""
    local = {r["num_workers"]: r for r in rows if r["algorithm"] == "local_sgd"}

    def fn(r):
        ref = local.get(r["num_workers"])
        return "-" if ref is None else fixed(r["bytes_per_worker_per_round"] / ref["bytes_per_worker_per_round"])
    return fn


@table("images_resist", RESIST)
def _images_resist(d):
    rows = result_rows(d)
    vs, local = _vs_local_sgd(rows), _points_vs(rows, "local_sgd")
    return markdown_table(
        ["cell", "W", "test accuracy (mean ± std over seeds)", "min-max", "points vs local SGD", "train loss",
         "bytes per worker per round", "of local SGD's"],
        [[_cell_name(r), r["num_workers"], accuracy(r), _spread(r), local(r), fixed(r["train_loss_mean"], 3),
          nbytes(r["bytes_per_worker_per_round"], binary=False), vs(r)] for r in rows])


for _label in ("resist_W2", "resist_W4", "local_sgd_W2", "local_sgd_W4", "resist_W2_momentum_carried",
               "resist_W2_stats_recomputed"):
    scalar(f"resist.{_label}", RESIST, _diagnosis_accuracy(_label))
for _i, _step in enumerate(("naive", "share_strided", "one_section", "test_scale", "preactivation"), 1):
    scalar(f"ablation.{_i}", ABLATION, _diagnosis_accuracy(f"{_i}_{_step}"))


@table("images_ablation", ABLATION)
def _images_ablation(d):
    return markdown_table(
        ["step", "test accuracy (mean ± std over seeds)", "min-max", "train loss", "paper (CIFAR-10)",
         "bytes per worker per round"],
        [[r["step"], accuracy(r), _spread(r), fixed(r["train_loss_mean"], 3), f"{r['paper']:.1f}",
          nbytes(r["bytes_per_worker_per_round"], binary=False)] for r in result_rows(d)])


# ----------------------------------------------------------------------------------------------------------------
# Is a model a good fit for IST? (experiments/custom/results/fit.json, written by experiments/custom/fit.py)

FIT = "experiments/custom/results/fit.json"
REMEDIES = {"none": "none (the researcher's model)",
            "scale": "train-time scaling (x full / sub-network channels)",
            "norm": "LayerNorm after each partitioned sum",
            "batchnorm": "batch-statistics BatchNorm after each partitioned sum and on the logits"}


def _fit(d, algorithm: str, remedy: str) -> dict:
    for r in result_rows(d):
        if r["algorithm"] == algorithm and r.get("remedy") == remedy:
            return r
    raise ResultsError(f"no row for {algorithm} with remedy {remedy!r}")


def _fit_gap(d, remedy: str) -> float:
    """Local SGD's mean test accuracy minus IST's on the model with ``remedy``, in points."""
    return 100 * (_fit(d, "local_sgd", remedy)["test_accuracy_mean"] - _fit(d, "ist", remedy)["test_accuracy_mean"])


@table("fit.table", FIT)
def _fit_table(d):
    return markdown_table(
        ["remedy", "algorithm", "test accuracy (mean ± std over seeds)", "lowest / highest seed",
         "train loss of the full network"],
        [[REMEDIES.get(r["remedy"], r["remedy"]), algorithm_name(r["algorithm"]), accuracy(r),
          f"{fixed(r['test_accuracy_min'], 3)} / {fixed(r['test_accuracy_max'], 3)}", fixed(r["train_loss_mean"], 3)]
         for r in result_rows(d)])


for _a, _r in (("ist", "none"), ("local_sgd", "none"), ("ist", "batchnorm"), ("local_sgd", "batchnorm")):
    scalar(f"fit.{_a}_{_r}", FIT, lambda d, a=_a, r=_r: accuracy(_fit(d, a, r)))
for _r in ("scale", "norm"):
    scalar(f"fit.ist_{_r}", FIT, lambda d, r=_r: accuracy(_fit(d, "ist", r)))
for _r in ("none", "scale"):
    scalar(f"fit.loss_ist_{_r}", FIT, lambda d, r=_r: fixed(_fit(d, "ist", r)["train_loss_mean"], 2))
scalar("fit.gap_none", FIT, lambda d: fixed(_fit_gap(d, "none"), 1))
scalar("fit.gap_batchnorm", FIT, lambda d: fixed(_fit_gap(d, "batchnorm"), 1))
scalar("fit.gap_closed", FIT, lambda d: percent(1 - _fit_gap(d, "batchnorm") / _fit_gap(d, "none"), 0))


# ----------------------------------------------------------------------------------------------------------------
# Graphs (experiments/graphs/results/gist_*.json, written by experiments/graphs/studies.py)

GIST_FILES = {"cora": "experiments/graphs/results/gist_cora.json",
              "citeseer": "experiments/graphs/results/gist_citeseer.json"}
GIST_RECIPE = "experiments/graphs/results/gist_recipe.json"

for _dataset, _src in GIST_FILES.items():
    results_table(f"graphs_gist_{_dataset}", _src, [
        ("cell", lambda r: f"`{r['label']}`"), ("model", lambda r: r["model"]), "num_workers",
        ("hidden features per worker", lambda r: f"{r['per_worker']} of {r['hidden']}"), "test_accuracy",
        ("min-max", _spread), ("train loss", lambda r: fixed(r["train_loss_mean"], 3)),
        ("bytes per worker per round", lambda r: nbytes(r["bytes_per_worker_per_round"], binary=False)),
        ("s per round", lambda r: fixed(r["time_per_round_s_mean"]))])
    for _label in ("paper_gcn16", *(f"{m}_W{w}" for m in ("gcn", "graphsage") for w in (1, 2, 4, 8))):
        scalar(f"graphs.{_dataset}.{_label}", _src, _diagnosis_accuracy(_label))
results_table("graphs_recipe", GIST_RECIPE, [
    ("cell", lambda r: f"`{r['label']}`"), ("change from the recipe", lambda r: r["change"]), "test_accuracy",
    ("min-max", _spread), ("train loss", lambda r: fixed(r["train_loss_mean"], 4))])
for _label in ("recipe", "layer_norm", "steps300", "optimizer_reset", "before", "paper_width"):
    scalar(f"graphs.recipe.{_label}", GIST_RECIPE, _diagnosis_accuracy(_label))
GIST_WIDTH = "experiments/graphs/results/gist_width.json"


@table("graphs_width", GIST_WIDTH)
def _graphs_width(d):
    """Each W's worker step against the budget, and the seeds' accuracy at the smallest W that fits."""
    memory = markdown_table(
        ["W", "hidden per worker", "worker parameters", "worker step peak (MiB)", "fits"],
        [[cell(r["W"]), cell(d["hidden"] // r["W"]), cell(r["worker_params"]), _mib(r["worker_peak_bytes"]),
          "yes" if r["fits"] else "no"] for r in d["memory"]])
    trained = markdown_table(
        ["GIST", "rounds", "test accuracy (mean ± std over seeds)", "min-max", "s of training per seed"],
        [[f"W = {r['num_workers']}", cell(r["rounds"]), accuracy(r), _spread(r), f"{r['train_s_mean']:.0f}"]
         for r in result_rows(d)])
    runs = markdown_table(
        ["seed", "test accuracy", "test loss (full-width model)", "workers' training loss, last round"],
        [[cell(r["seed"]), fixed(r["test_accuracy"], 3), fixed(r["test_loss"], 3), fixed(r["train_loss_last_round"], 3)]
         for r in d["runs"]])
    return f"Budget {d['budget_mib']:g} MiB per worker, {d['graph']}.\n\n{memory}\n\n{trained}\n\n{runs}"


def _width_fit(d) -> tuple[dict, dict]:
    full = next(r for r in d["memory"] if r["W"] == 1)
    return full, next(r for r in d["memory"] if r["W"] == result_rows(d)[0]["num_workers"])


scalar("graphs.width.full_peak", GIST_WIDTH, lambda d: f"{_width_fit(d)[0]['worker_peak_bytes'] / 2 ** 20:.0f}")
scalar("graphs.width.over_budget", GIST_WIDTH,
       lambda d: fixed(_width_fit(d)[0]["worker_peak_bytes"] / 2 ** 20 / d["budget_mib"], 1))
scalar("graphs.width.worker_peak", GIST_WIDTH, lambda d: f"{_width_fit(d)[1]['worker_peak_bytes'] / 2 ** 20:.0f}")
scalar("graphs.width.accuracy", GIST_WIDTH, lambda d: accuracy(result_rows(d)[0]))
scalar("graphs.width.halving", GIST_WIDTH, lambda d: fixed(
    next(r for r in d["memory"] if r["W"] == 2)["worker_peak_bytes"] / _width_fit(d)[0]["worker_peak_bytes"]))


# ----------------------------------------------------------------------------------------------------------------
# The README's headline table: one row per result that has a committed file behind it.

# (what, where, source, fn(loaded) -> result); ``what`` a string or ``what(loaded) -> str``
HEADLINE: list[tuple[str | Callable[[Any], str], str, str, Callable[[Any], str]]] = []


def headline_row(what: str | Callable[[Any], str], where: str, source: str) -> Callable:
    """Adds the decorated ``fn(loaded) -> str`` as a row of the README's headline table (rows in call order);
    ``what`` may be a function of the loaded file too."""
    def deco(fn):
        HEADLINE.append((what, where, source, fn))
        return fn
    return deco


def _per_algorithm(rows, fn, sep=" / ") -> str:
    by = {r["algorithm"]: r for r in rows}
    return sep.join(fn(by[a]) for a in ("ist", "data_parallel", "local_sgd") if a in by)


def _three_way(d) -> str:
    """'IST / data parallel / local SGD: a ± s / ...; bytes ...' from an MLP study's rows."""
    rows = result_rows(d)
    acc = _per_algorithm(rows, lambda r: f"{r['test_accuracy_mean']:.3f} ± {r['test_accuracy_std']:.3f}")
    moved = _per_algorithm(rows, lambda r: nbytes(r["bytes_per_worker_per_round"] / 2, binary=False))
    n = min(len(r["seeds"]) for r in rows)
    return f"{acc} test accuracy (mean ± std, {n} seeds); {moved} per worker per round each way"


results_table("keywords_generalisation", KEYWORDS_GEN, [
    "algorithm", "num_workers", "test_accuracy", ("min-max", _spread),
    ("train loss", lambda r: fixed(r["train_loss_mean"], 3)), ("samples (all workers)", lambda r: cell(r["samples_seen"])),
    ("bytes per worker per round", lambda r: nbytes(r["bytes_per_worker_per_round"], binary=False)),
    ("s per round (simulate)", lambda r: fixed(r["time_per_round_s_mean"]))])


def _keywords_gap(d) -> float:
    by = {r["algorithm"]: r for r in result_rows(d)}
    return by["ist"]["test_accuracy_mean"] - by["data_parallel"]["test_accuracy_mean"]


scalar("keywords.gen_gap", KEYWORDS_GEN, lambda d: f"{100 * _keywords_gap(d):+.1f}")


BREAST_CANCER = "experiments/mlp/results/breast_cancer.json"
results_table("breast_cancer", BREAST_CANCER, [
    "algorithm", "num_workers", "test_accuracy", ("min-max", _spread),
    ("train loss", lambda r: fixed(r["train_loss_mean"], 3)), ("samples (all workers)", lambda r: cell(r["samples_seen"])),
    ("bytes per worker per round, each way", lambda r: nbytes(r["bytes_per_worker_per_round"] / 2, binary=False))])


scalar("digits.ist", DIGITS, lambda d: accuracy([r for r in result_rows(d) if r["algorithm"] == "ist"][0]))


@headline_row("digits, W = 4, 76,800 samples: IST / data parallel / local SGD "
              "(`python experiments/mlp/studies.py digits`)", "`experiments/mlp/results/digits.json`", DIGITS)
def _headline_digits(d):
    return _three_way(d)


@headline_row("generalisation on the synthesised keywords (35 words, test voices unseen in training), 2-layer speech "
              "MLP, W = 2, 204,800 samples: IST / data parallel (`python experiments/mlp/studies.py keywords`)",
              "`docs/network.md`", KEYWORDS_GEN)
def _headline_keywords_generalisation(d):
    gap = _keywords_gap(d)
    return (_three_way(d) + f"; IST {'above' if gap > 0 else 'below'} data parallel by {100 * abs(gap):.1f} points "
            "(the paper, real Speech Commands: .8153 vs .7938)")


@headline_row("MNIST-1D, W = 4, 192,000 samples: IST / data parallel / local SGD, a negative result "
              "(`python experiments/mlp/studies.py mnist1d`)", "`experiments/mlp/results/mnist1d.json`", MNIST1D)
def _headline_mnist1d(d):
    return _three_way(d) + "; IST trails both here: each worker holds 1/16 of the 512 x 512 hidden weight"


@headline_row("channel IST's diagnosis, ResNet-18 layout at 1/8 width, Fashion-MNIST, W = 2, 25,600 samples "
              "(`python experiments/images/studies.py diagnosis`)", "`docs/images.md`", DIAGNOSIS)
def _headline_diagnosis(d):
    by = {r["label"]: r for r in result_rows(d)}
    return (f"every conv's channels partitioned (the paper's layout) {accuracy(by['all_none_recompute'])}; only the "
            f"blocks' inner channels {accuracy(by['inner_none_recompute'])}, K = 20 {accuracy(by['inner_K20'])}; "
            f"data parallel {accuracy(by['data_parallel'])}, local SGD {accuracy(by['local_sgd'])}: still short of "
            f"the baselines at this budget")


@headline_row("channel IST vs data parallel vs local SGD, ResNet-18 layout at 1/4 width, Fashion-MNIST, 384,000 "
              "samples per worker, on a GPU (`python experiments/images/studies.py resnet`)", "`docs/images.md`",
              RESNET)
def _headline_resnet(d):
    by = {r["label"]: r for r in result_rows(d)}

    def at(w):
        return (f"W = {w}: IST {accuracy(by[f'ist_W{w}'])}, data parallel {accuracy(by[f'data_parallel_W{w}'])}, "
                f"local SGD {accuracy(by[f'local_sgd_W{w}'])}")
    gaps = [by[f"ist_W{w}"]["test_accuracy_mean"] - by[f"{a}_W{w}"]["test_accuracy_mean"]
            for w in (2, 4) for a in ("data_parallel", "local_sgd")]
    verdict = ("within 1 point of both: the target is met" if min(gaps) >= -0.01 else
               f"IST trails by up to {-100 * min(gaps):.1f} points: the target (within 1 point) is not met")
    return (f"{at(2)}; {at(4)}; IST moves {_bytes_vs('ist_W2', 'local_sgd_W2')(d)} (W = 2) and "
            f"{_bytes_vs('ist_W4', 'local_sgd_W4')(d)} (W = 4) of local SGD's bytes; {verdict}")


@headline_row("ResIST vs local SGD, pre-activation ResNet (2-2-9 blocks, 4-16 channels), Fashion-MNIST, 64,000 "
              "samples per worker (`python experiments/images/studies.py resist`)", "`docs/images.md`", RESIST)
def _headline_resist(d):
    by = {r["label"]: r for r in result_rows(d)}
    parts, gaps = [], []
    for w in (2, 4):
        res, loc = by[f"resist_W{w}"], by[f"local_sgd_W{w}"]
        gaps.append(res["test_accuracy_mean"] - loc["test_accuracy_mean"])
        parts.append(f"W = {w}: ResIST {accuracy(res)}, local SGD {accuracy(loc)}, "
                     f"{_bytes_vs(f'resist_W{w}', f'local_sgd_W{w}')(d)} of its bytes")
    verdict = ("within 1 point of local SGD: the target is met" if min(gaps) >= -0.01 else
               f"ResIST trails by up to {-100 * min(gaps):.1f} points: the target (within 1 point) is not met")
    best = by.get("resist_W2_momentum_carried")
    if best is not None:
        verdict += (f"; best setting found, momentum carried across repartitions: {accuracy(best)} at W = 2 "
                    f"({_bytes_vs('resist_W2_momentum_carried', 'local_sgd_W2')(d)} of local SGD's bytes)")
    return "; ".join(parts) + f"; {verdict}"


@headline_row("ResIST's five ablation steps in miniature, W = 2, 150 rounds "
              "(`python experiments/images/studies.py ablation`)", "`docs/images.md`", ABLATION)
def _headline_ablation(d):
    rows = result_rows(d)
    ours = " -> ".join(f"{r['test_accuracy_mean']:.3f}" for r in rows)
    paper = " -> ".join(str(r["paper"]) for r in rows)
    n = min(len(r["seeds"]) for r in rows)
    rises = all(b["test_accuracy_mean"] > a["test_accuracy_mean"] for a, b in zip(rows, rows[1:]))
    return (f"{ours} (mean of {n} seeds; the paper, CIFAR-10: {paper}); "
            + ("every step helps, as in the paper" if rises else "not every step helps here (docs/images.md says why)"))


def _headline_gist(d) -> str:
    by = {r["label"]: r for r in result_rows(d)}

    def model(m):
        return (f"{'GCN' if m == 'gcn' else 'GraphSAGE'} full model {accuracy(by[f'{m}_W1'])}, GIST W = 2 / 4 / 8 "
                + " / ".join(f"{by[f'{m}_W{w}']['test_accuracy_mean']:.3f} ± {by[f'{m}_W{w}']['test_accuracy_std']:.3f}"
                             for w in (2, 4, 8)))
    return (f"{model('gcn')}; {model('graphsage')}; Kipf and Welling's 16-wide GCN trained here "
            f"{accuracy(by['paper_gcn16'])}")


for _dataset, _name in (("cora", "Cora"), ("citeseer", "Citeseer")):
    headline_row(f"GIST on {_name} (public split), 256 hidden features split among W workers, 3 seeds "
                 f"(`python experiments/graphs/studies.py {_dataset}`)", "`docs/graphs.md`",
                 GIST_FILES[_dataset])(_headline_gist)


@headline_row("a model istjax does not ship: a researcher's 1-D CNN on MNIST-1D (`model.module`), W = 4, 192,000 "
              "samples, IST vs local SGD (`python experiments/custom/fit.py`)", "`docs/ist_fit.md`", FIT)
def _headline_fit(d):
    return (f"as written: IST {accuracy(_fit(d, 'ist', 'none'))}, local SGD {accuracy(_fit(d, 'local_sgd', 'none'))}"
            f"; with batch-statistics BatchNorm after its partitioned sums: IST "
            f"{accuracy(_fit(d, 'ist', 'batchnorm'))}, local SGD {accuracy(_fit(d, 'local_sgd', 'batchnorm'))}: "
            f"{percent(1 - _fit_gap(d, 'batchnorm') / _fit_gap(d, 'none'), 0)} of the gap to local SGD closed")


@headline_row("GIST width scaling: GraphSAGE 2048-2048 on a generated graph of 100,000 nodes, 128 MiB per worker "
              "(`python experiments/graphs/studies.py width`)", "`docs/graphs.md`", GIST_WIDTH)
def _headline_width(d):
    full, fit = _width_fit(d)
    r = result_rows(d)[0]
    return (f"the full model's step needs {full['worker_peak_bytes'] / 2 ** 20:.0f} MiB (does not fit); GIST at "
            f"W = {r['num_workers']}: {fit['worker_peak_bytes'] / 2 ** 20:.0f} MiB per worker, test accuracy "
            f"{accuracy(r)} after {r['rounds']} rounds")


@headline_row("sharded MPI, 2-layer speech MLP (4096-4096-35), one worker per rank: the largest array a rank holds "
              "(`python experiments/distributed/comm_and_memory.py`)", "`docs/distributed.md`", COMM_MEMORY)
def _headline_sharded(d):
    procs = sorted({r["procs"] for r in d["rows"]})
    return "; ".join(f"P = {p}: {max(_largest(d, p, 'sharded')) / 2 ** 20:.0f} MiB sharded, "
                     f"{max(_largest(d, p, 'parameter_server')) / 2 ** 20:.0f} MiB on the parameter server's rank 0"
                     for p in procs) + f" (the full model: {_mib(d['rows'][0]['full_model_bytes'])} MiB)"


@headline_row("2-layer speech MLP (4096-4096-35), bytes per worker per round each way, W = 2, under "
              "`mpiexec -n 2`", "`docs/distributed.md`", BENCH)
def _headline_bytes(d):
    comm = study(d, "5_communication", W=2)[0]
    parts, exact = [], True
    for a in ("ist", "local_sgd", "data_parallel"):
        r = study(d, "4_throughput", algorithm=a, backend="mpi x2")[0]
        parts.append(f"{algorithm_name(a)} {nbytes(r['measured_bytes_received'], unit='MiB')}")
        exact &= r["measured_bytes_received"] + r["measured_bytes_sent"] == comm[f"{a}_bytes"]
    return ", ".join(parts) + (" (measured = analytic)" if exact else " (measured; the analytic bytes differ)")


@headline_row("2-layer speech MLP, W = 2, K = 20 (`python -m experiments.benchmarks.run`, ~5 min)",
              "`docs/benchmarks.md`", BENCH)
def _headline_suite(d):
    e, g = target(d, "1_compute_efficiency"), target(d, "2_gather_scatter")
    o, c = target(d, "3_round_overhead"), target(d, "6_compilation")
    rounds = max(r["rounds"] for r in study(d, "6_compilation"))
    return (f"local phase at {span([e['worst'], e['best']])} of the best dense matmul rate; extract + merge at "
            f"{span([g['worst'], g['best']])} of a copy; partition + extract + merge at most {percent(o['worst'])} "
            f"of a round; {c['worst']} recompilations in {rounds} rounds")


@headline_row("throughput, W = 2 (samples/s), simulate / MPI x 2 (`mpiexec -n 2 -bind-to core`)",
              "`docs/distributed.md`", BENCH)
def _headline_throughput(d):
    def s(a, b):
        return count(study(d, "4_throughput", algorithm=a, backend=b)[0]["samples_per_s"])
    return (f"IST {s('ist', 'simulate')} / {s('ist', 'mpi x2')} (MPI at {fixed(d['mpi_ist_vs_simulate'], 3)} of "
            f"simulate; server overhead {percent(d['mpi_overhead_share'])} of a round), data parallel "
            f"{s('data_parallel', 'simulate')} / {s('data_parallel', 'mpi x2')}, local SGD {s('local_sgd', 'simulate')}"
            f" / {s('local_sgd', 'mpi x2')}")


@headline_row("ResNet-18 layout (1/4 width), W = 2, K = 20 (`python -m experiments.benchmarks.conv`, ~4 min)",
              "`docs/benchmarks.md`", CONV)
def _headline_conv(d):
    flat = _conv_target(d, "extract + merge / copy of the bytes written (ResNet-18 shape")
    return (f"local phase at {fixed(d['local_vs_convs']['local_vs_convs'])} of its own convolutions; samples/s "
            f"IST {count(_samples(d, 'ist'))}, local SGD {count(_samples(d, 'local_sgd'))}, data parallel "
            f"{count(_samples(d, 'data_parallel'))}; ResIST {count(_samples(d, 'resist', 'depth'))} vs local SGD "
            f"{count(_samples(d, 'local_sgd', 'depth'))} (ResNet-34 layout); extract + merge at "
            f"{fixed(flat['measured'])} of a flat copy of the bytes they write at this width: the goal "
            f"({flat['target']}) is {'met' if flat['met'] else 'not met'} "
            f"({fixed(_conv_goal(d, 'extract + merge / copy of the same 62 arrays (ResNet-18 shape'))} of a copy of "
            f"the same 62 arrays)")


def _speedups_in_words(d) -> str:
    """'2-layer, 2 ranks 15.9x / 5.8x at 100 Mbit/s / 1 Gbit/s; ...' against data parallel, then local SGD's span
    (over several seeds each speed-up as '15.9x ± 1.2', the span as `_lsgd_range` gives it)."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for e in d["speedups"]:
        groups.setdefault((e["model"], e["ranks"]), []).append(e)
    parts = [f"{model}-layer, {ranks} ranks: "
             f"{' / '.join(_speedup_text(e, 'data_parallel', seeds_count=False) for e in es)} at "
             f"{' / '.join(link_name(e['link']) for e in es)}" for (model, ranks), es in groups.items()]
    papers = {e["model"]: e["paper"] for e in d["speedups"] if e.get("paper")}
    paper = "; ".join(f"{m}-layer {ratio(p['speedup_vs_data_parallel'])} / {ratio(p['speedup_vs_local_sgd'])}"
                      for m, p in papers.items())
    narrower = (" (this project's 3-layer network is 4096-4096-4096; the paper's is 4096-8192-8192)"
                if any(str(e["model"]) == "3" for e in d["speedups"]) else "")
    return (f"IST sooner than data parallel, {'; '.join(parts)}; sooner than local SGD {_lsgd_range(d)}"
            + (f" (the paper, vs data parallel / local SGD: {paper})" if paper else "") + narrower)


@headline_row(lambda d: f"time to 0.9 on FSDD (real speech), MPI ranks across shaped links, {_runs_in_words(d)} "
              "(`experiments/network/time_to_accuracy`)", "`docs/network.md`", FSDD)
def _headline_fsdd(d):
    return _speedups_in_words(d)


@headline_row(lambda d: f"time to 0.45 on the synthesised keywords (35 words, unseen voices), 2 MPI ranks, "
              f"{_runs_in_words(d)}", "`docs/network.md`", KEYWORDS)
def _headline_keywords(d):
    return _speedups_in_words(d)


def _headline(*loaded):
    data = dict(zip(_headline_sources(), loaded))
    return markdown_table(["what", "result", "where"],
                          [[what(data[source]) if callable(what) else what, fn(data[source]), where]
                           for what, where, source, fn in HEADLINE])


def _headline_sources() -> tuple[str, ...]:
    return tuple(dict.fromkeys(source for _, _, source, _ in HEADLINE))


def _register_headline() -> None:
    """(Re)registers the headline table over the sources of the rows `HEADLINE` holds now."""
    REGISTRY.pop("headline", None)
    register("headline", _headline_sources(), _headline)


# ----------------------------------------------------------------------------------------------------------------
# Theory (experiments/theory/results/quadratic/results.json, written by experiments/theory/main.py)

QUADRATIC = "experiments/theory/results/quadratic/results.json"


def _vector(v: Sequence[float]) -> str:
    return "[" + ", ".join(f"{x:.4f}".replace("-", "−") for x in v) + "]"


@table("theory_quadratic", QUADRATIC)
def _theory_quadratic(d):
    runs = d["config"]["num_runs"]
    rows = []
    for p in d["results"]["panels"]:
        schedule = f", γ_t = γ/(1+{p['decay']:g}t)" if p["decay"] else ""
        rows.append([f"{p['local_steps']}, {p['step_size']:g}{schedule}", _vector(p["x_hat_enumerated"]),
                     _vector(p["mean_of_runs_final"]), f"{max(abs(z) for z in p['z_scores_final']):.2f}",
                     _vector(p["x_star"])])
    return markdown_table(["K, γ", "x̂ (exact, enumerated)", f"mean of {runs} runs",
                           "largest \\|z\\|", "x*"], rows)


def _z_scores(d) -> list[float]:
    return [z for p in d["results"]["panels"] for z in p["z_scores_final"]]


scalar("theory.z_count", QUADRATIC, lambda d: str(len(_z_scores(d))))
scalar("theory.z_max", QUADRATIC, lambda d: f"{max(abs(z) for z in _z_scores(d)):.2f}")
scalar("theory.runs", QUADRATIC, lambda d: str(d["config"]["num_runs"]))
scalar("theory.closed_form_diff", QUADRATIC, lambda d: f"{max(p['closed_form_max_abs_diff'] or 0.0 for p in d['results']['panels']):.0e}")


@headline_row("quadratic theory: IST's mean iterate vs the exact expected fixed point, heterogeneous d = 6, n = 3 "
              "(`python experiments/theory/main.py --config=experiments/theory/configs/quadratic.py "
              "--workdir=experiments/theory/results/quadratic`)", "`docs/theory.md`", QUADRATIC)
def _headline_theory(d):
    z = _z_scores(d)
    inside = sum(abs(x) <= 2 for x in z)
    return (f"mean of {d['config']['num_runs']} runs within 2 standard errors of x̂ in {inside} of {len(z)} "
            f"coordinates (largest \\|z\\| {max(abs(x) for x in z):.2f}), 5 settings of K and γ")


_register_headline()


# ----------------------------------------------------------------------------------------------------------------
# Markers

OPEN = re.compile(rf"<!-- report:({_NAME}) -->")
CLOSE = re.compile(rf"<!-- /report:({_NAME}) -->")
INLINE = re.compile(rf"<!-- report:(?P<name>{_NAME}) -->(?P<body>.*?)<!-- /report:(?P=name) -->")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


class ReportError(Exception):
    """The files cannot be read as asked (exit status 2); the message names the file, the line and the fix."""


@dataclasses.dataclass
class Placement:
    """Where a table (or, ``inline``, a figure) stands: ``text[start:end]`` is what the file holds now."""
    path: str
    line: int
    name: str
    start: int
    end: int
    inline: bool


def _mask_code(line: str) -> str:
    """The line with code spans blanked (same length), so markers quoted in backticks are not markers."""
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def find_markers(text: str, path: str) -> list[Placement]:
    """Every marker pair in ``text``; a `ReportError` for one without its other half."""
    placements: list[Placement] = []
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    open_block: tuple[str, int] | None = None  # (name, index of its line)
    in_fence = False
    for i, line in enumerate(lines):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        masked = _mask_code(line)
        stripped = masked.strip()
        if (m := OPEN.fullmatch(stripped)) and not INLINE.search(masked):
            if open_block:
                raise ReportError(f"{path}:{i + 1}: <!-- report:{m.group(1)} --> opens inside report:{open_block[0]} "
                                  f"(opened at line {open_block[1] + 1}), which has no closing marker before it; "
                                  f"fix: add <!-- /report:{open_block[0]} --> after its table")
            open_block = (m.group(1), i)
            continue
        if m := CLOSE.fullmatch(stripped):
            if not open_block or open_block[0] != m.group(1):
                opened = f" (report:{open_block[0]} is open, from line {open_block[1] + 1})" if open_block else ""
                raise ReportError(f"{path}:{i + 1}: <!-- /report:{m.group(1)} --> closes a table that was not "
                                  f"opened{opened}; fix: put <!-- report:{m.group(1)} --> on its own line before "
                                  f"the table, or remove this marker")
            name, j = open_block
            placements.append(Placement(path, j + 1, name, offsets[j + 1], offsets[i], inline=False))
            open_block = None
            continue
        for m in INLINE.finditer(masked):
            placements.append(Placement(path, i + 1, m.group("name"), offsets[i] + m.start("body"),
                                        offsets[i] + m.end("body"), inline=True))
        rest = INLINE.sub("", masked)
        if m := (OPEN.search(rest) or CLOSE.search(rest)):
            raise ReportError(f"{path}:{i + 1}: {m.group(0)} has no other half on its line; fix: a table's markers "
                              f"stand alone on their own lines, a figure's both on the line it is in, "
                              f"<!-- report:{m.group(1)} -->value<!-- /report:{m.group(1)} -->")
    if open_block:
        raise ReportError(f"{path}:{open_block[1] + 1}: <!-- report:{open_block[0]} --> is never closed; fix: add "
                          f"<!-- /report:{open_block[0]} --> on its own line after the table")
    return placements


# ----------------------------------------------------------------------------------------------------------------
# Rendering and the command

def pages(root: pathlib.Path) -> list[pathlib.Path]:
    found: list[pathlib.Path] = []
    for pattern in PAGES:
        found += sorted(root.glob(pattern))
    return found


def block(text: str) -> str:
    """What stands between a table's two marker lines: the table with a blank line on either side."""
    return "\n" + text.strip("\n") + "\n\n"


class _Renderer:
    """Renders each entry once, loading each JSON file once; errors name the marker that asked."""

    def __init__(self, root: pathlib.Path, registry: dict[str, Entry]):
        self.root, self.registry = root, registry
        self.loaded: dict[str, Any] = {}
        self.done: dict[str, str] = {}

    def load(self, source: str, where: str, name: str) -> Any:
        if source not in self.loaded:
            path = self.root / source
            if not path.is_file():
                raise ReportError(f"{where}: report:{name} reads {source}, which is not in {self.root}; fix: run the "
                                  f"study that writes it and commit the file, or remove the marker")
            try:
                self.loaded[source] = json.loads(path.read_text())
            except (OSError, ValueError) as e:
                raise ReportError(f"{where}: report:{name} reads {source}, which is not valid JSON ({e}); fix: "
                                  f"restore it from git or run its study again") from e
        return self.loaded[source]

    def render(self, p: Placement) -> str:
        where = f"{p.path}:{p.line}"
        entry = self.registry.get(p.name)
        if entry is None:
            near = difflib.get_close_matches(p.name, self.registry, n=3)
            hint = f"did you mean {', '.join(near)}? " if near else ""
            raise ReportError(f"{where}: report:{p.name} names no table; {hint}fix: use a name that "
                              f"`python -m experiments.report --list` shows, or register it in experiments/report.py")
        if entry.inline != p.inline:
            want = ("on one line, <!-- report:NAME -->value<!-- /report:NAME -->" if entry.inline
                    else "each on its own line around the table")
            raise ReportError(f"{where}: report:{p.name} is a {'figure' if entry.inline else 'table'}; fix: put "
                              f"its markers {want}")
        if p.name not in self.done:
            loaded = [self.load(s, where, p.name) for s in entry.sources]
            try:
                text = entry.render(*loaded)
            except (KeyError, IndexError, TypeError, ValueError, StopIteration, ZeroDivisionError) as e:
                raise ReportError(f"{where}: report:{p.name} cannot be rendered from {', '.join(entry.sources)}: "
                                  f"{type(e).__name__}: {e}; fix: check the file against what its entry in "
                                  f"experiments/report.py reads") from e
            if entry.inline and "\n" in text:
                raise ReportError(f"{where}: report:{p.name} rendered more than one line")
            self.done[p.name] = text if entry.inline else block(text)
        return self.done[p.name]


def run(root: pathlib.Path, check: bool, registry: dict[str, Entry] | None = None, out=None) -> int:
    """Rewrites (or, ``check``, compares) every marked table under ``root``; returns the exit status."""
    registry = REGISTRY if registry is None else registry
    out = out or sys.stdout
    renderer = _Renderer(root, registry)
    new_texts: dict[pathlib.Path, str] = {}
    diffs: list[str] = []
    for page in pages(root):
        rel = page.relative_to(root).as_posix()
        text = page.read_text()
        placements = find_markers(text, rel)
        new = text
        for p in sorted(placements, key=lambda p: p.start, reverse=True):
            want, have = renderer.render(p), text[p.start:p.end]
            if want != have:
                sources = ", ".join(registry[p.name].sources)
                diffs.append("".join(difflib.unified_diff(
                    have.splitlines(keepends=True) if not p.inline else [have + "\n"],
                    want.splitlines(keepends=True) if not p.inline else [want + "\n"],
                    fromfile=f"{rel}:{p.line} report:{p.name} (as written)",
                    tofile=f"{rel}:{p.line} report:{p.name} (from {sources})")))
                new = new[:p.start] + want + new[p.end:]
        if new != text:
            new_texts[page] = new
    if check:
        if diffs:
            print("\n".join(reversed(diffs)), file=out)
            print(f"{len(diffs)} table(s) differ from the committed results; fix: {FIX}", file=out)
            return 1
        print(f"every table agrees with the committed results ({len(renderer.done)} entries used)", file=out)
        return 0
    for page, new in new_texts.items():
        page.write_text(new)
    print(f"rewrote {len(diffs)} table(s) in {len(new_texts)} file(s); {len(renderer.done)} entries used", file=out)
    return 0


def listing(root: pathlib.Path, registry: dict[str, Entry]) -> str:
    used: dict[str, list[str]] = {}
    for page in pages(root):
        rel = page.relative_to(root).as_posix()
        for p in find_markers(page.read_text(), rel):
            used.setdefault(p.name, []).append(f"{rel}:{p.line}")
    lines = []
    for name, e in sorted(registry.items()):
        lines.append(f"{name:44s} {'figure' if e.inline else 'table ':6s} {', '.join(e.sources)}  "
                     f"[{', '.join(used.get(name, [])) or 'unused'}]")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.report", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 with a diff where a table differs from its results file")
    parser.add_argument("--list", action="store_true", help="list the registered tables and where they stand")
    parser.add_argument("--root", type=pathlib.Path, default=ROOT,
                        help="the repository tree to read (default: this checkout)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        if args.list:
            print(listing(root, REGISTRY))
            return 0
        return run(root, args.check)
    except ReportError as e:
        print(f"experiments.report: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
