"""The benchmark suites' tables and figures: ``experiments/benchmarks/results*.json`` (``python -m
experiments.benchmarks.run``, ``.conv``, ``.graph``). Registered in `experiments.tables` when `experiments.report`
imports this module.
"""

from __future__ import annotations

from experiments.tables import (algorithm_name, cell, count, fixed, headline_row, markdown_table, nbytes, percent, ratio,
                               scalar, span, table)

BENCH = "experiments/benchmarks/results.json"
BENCH_H100 = "experiments/benchmarks/results_h100.json"
BENCH_GPU = "experiments/benchmarks/results_gpu.json"
CONV, CONV_GPU = "experiments/benchmarks/results_conv.json", "experiments/benchmarks/results_conv_gpu.json"
GRAPH, GRAPH_GPU = "experiments/benchmarks/results_graph.json", "experiments/benchmarks/results_graph_gpu.json"
XMC = "experiments/benchmarks/results_xmc.json"
TRANSFORMER = "experiments/benchmarks/results_transformer.json"


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


def _suite_tables(d: dict, heading: str = "###") -> str:
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


def _targets_verdict(d: dict) -> str:
    """The latest run's verdicts in one sentence: every target met, or which were not, with the worst reading."""
    every = verdicts(d)
    missed = [t for t in every if t["met"] != "yes"]
    if not missed:
        return f"Every target ({len(every)}) is met in the latest run"
    return (f"{len(every) - len(missed)} of the {len(every)} targets are met in the latest run; not met: "
            + "; ".join(f"{t['target']} (worst row {cell(t['worst'])})" for t in missed))


scalar("bench.targets_verdict", BENCH, _targets_verdict)


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
def _with_verdict(d: dict, column: str, what: str) -> str:
    """Data parallel's all-reduce ratio ``column`` under MPI and the suite's verdict on it: ``0.58, met``."""
    value = study(d, "4_throughput", algorithm="data_parallel", backend="mpi x2")[0][column]
    return f"{fixed(value)}, {'met' if target(d, '4_throughput', what)['met'] == 'yes' else '**not met**'}"


scalar("bench.mpi_allreduce_standalone", BENCH,
       lambda d: _with_verdict(d, "standalone_vs_plain", "one standalone call"))
scalar("bench.mpi_allreduce_vs_plain", BENCH, lambda d: _with_verdict(d, "allreduce_vs_plain", "compiled loop"))
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


def _xmc(d):
    from experiments.benchmarks import xmc
    return xmc.markdown(d).strip()


table("xmc_cpu", XMC)(_xmc)


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


def _transformer(d):
    from experiments.benchmarks import transformer
    return transformer.markdown(d).strip()


table("transformer_cpu", TRANSFORMER)(_transformer)


LOSS_SPLIT = "experiments/benchmarks/results_loss_split.json"


def _loss_split(d):
    from experiments.benchmarks import loss_split
    return loss_split.markdown(d).strip()


table("loss_split_cost", LOSS_SPLIT)(_loss_split)
scalar("loss_split.largest_share", LOSS_SPLIT, lambda d: f"{max(r['share'] for r in d['rows']):.3f}")
