"""bfloat16 compute and exchange (issue 37): the tables of docs/precision.md, from
``experiments/precision/results/*.json`` (``python -m experiments.precision.studies accuracy``, ``python -m
experiments.precision.network``) and study 8 of the benchmark suite, run alone into its own file (``python -m
experiments.benchmarks.run --only 8 --out experiments/benchmarks/results_precision.json``). Registered in
`experiments.tables` when `experiments.report` imports this module.
"""

from __future__ import annotations

from experiments.tables import (algorithm_name, baseline_cells, cell, fixed, link_name, markdown_table, nbytes, ratio,
                               scalar, table)

ACCURACY = "experiments/precision/results/accuracy.json"
NETWORK = "experiments/precision/results/time_to_accuracy.json"
BENCHMARKS = "experiments/benchmarks/results_precision.json"
DATA = {"speech": "speech MLP (FSDD, 2-layer)", "images": "ResNet-18 at 1/8 width (Fashion-MNIST)",
        "graphs": "GCN (Cora)"}
PRECISIONS = ("float32", "bf16_compute", "bf16_exchange")


def _points(x):
    return f"{100 * x:+.1f}"


@table("precision_accuracy", ACCURACY)
def accuracy(d):
    """Per data set and algorithm: float32's test accuracy (mean ± std over seeds), each bfloat16 setting's and its
    difference in points (mean of the seed-by-seed differences, with their range), bytes per worker per round; then
    the data set's linear model (``--baselines``)."""
    rows = {(r["data"], r["algorithm"], r["precision"]): r for r in d["rows"]}
    by_label = {r["label"]: {run["seed"]: run for run in d["runs"] if run["label"] == r["label"]} for r in d["rows"]}
    out = []
    for data in DATA:
        for algorithm in ("ist", "data_parallel", "local_sgd"):
            base = rows.get((data, algorithm, "float32"))
            if base is None:
                continue
            line = [DATA[data], algorithm_name(algorithm), cell(base["seeds"]),
                    f"{fixed(base['test_accuracy_mean'], 3)} ± {fixed(base['test_accuracy_std'] or 0, 3)}"]
            for precision in PRECISIONS[1:]:
                r = rows.get((data, algorithm, precision))
                if r is None:
                    line.append("-")
                    continue
                ref, mine = by_label[base["label"]], by_label[r["label"]]
                diffs = [mine[s]["test_accuracy"] - ref[s]["test_accuracy"] for s in mine if s in ref]
                mean = sum(diffs) / len(diffs)
                line.append(f"{fixed(r['test_accuracy_mean'], 3)} ({_points(mean)} pt; "
                            f"{_points(min(diffs))} to {_points(max(diffs))})")
            ex = rows.get((data, algorithm, "bf16_exchange"))
            line.append(f"{nbytes(base['bytes_per_worker_per_round'], binary=False)} -> "
                        f"{nbytes(ex['bytes_per_worker_per_round'], binary=False) if ex else '-'}")
            out.append(line)
        linear = (d.get("baselines") or {}).get(f"{data} linear")  # `accuracy --baselines`, one per data set
        (row,) = baseline_cells({"baselines": {"linear": linear}} if linear else {}, 7, {3: "test_accuracy"}, name_at=1)
        out.append([DATA[data], *row[1:]])
    return markdown_table(["model", "algorithm", "seeds", "float32", "bfloat16 compute (vs float32)",
                           "bfloat16 exchange (vs float32)", "bytes per worker per round"], out)


for _data in DATA:  # each data set's linear model (``accuracy --baselines``), for the page's prose
    scalar(f"precision.linear.{_data}", ACCURACY,
           lambda d, data=_data: fixed(d["baselines"][f"{data} linear"]["test_accuracy"], 3))


def _speed_rows(d):
    return d["results"]["8_precision"]["rows"]


def _bf16_row(d, algorithm: str) -> dict:
    return next(r for r in _speed_rows(d) if r["algorithm"] == algorithm and r["dtype"] == "bfloat16")


def paired(median: float, low: float, high: float, reps: int) -> str:
    """A ratio of paired repetitions (`experiments.benchmarks.measure.paired_ratio`) as the pages show it:
    ``1.20x (range 1.11-1.27, 7 reps)``."""
    return f"{ratio(median, 2)} (range {fixed(low, 2)}-{fixed(high, 2)}, {reps} reps)"


def _speedup(r: dict) -> str:
    return paired(r["speedup"], r["speedup_min"], r["speedup_max"], r["reps"])


@table("precision_speed", BENCHMARKS)
def speed(d):
    """Study 8: each algorithm's local phase in float32 and bfloat16 (seconds, GFLOP/s, speed-up: the median of the
    paired repetitions' ratios and their range), and IST's rate against its own matmuls in bfloat16 timed alone."""
    out = []
    for r in _speed_rows(d):
        out.append([algorithm_name(r["algorithm"]), r["dtype"], fixed(r["local_s"], 3), fixed(r["local_gflops"], 0),
                    _speedup(r) if r["dtype"] != "float32" else "1x",
                    fixed(r["own_matmuls_gflops"], 0) if r.get("own_matmuls_gflops") else "-",
                    fixed(r["vs_own_matmuls"], 2) if r.get("vs_own_matmuls") else "-"])
    flags = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in d.get("cpu_flags", {}).items())
    first = _speed_rows(d)[0]
    return (markdown_table(["algorithm", "compute", "local phase (s)", "GFLOP/s", "speed-up",
                            "own matmuls alone (GFLOP/s)", "phase / own matmuls"], out)
            + f"\n\nCPU: {d['machine']['cpu']} ({flags}); W = {first['W']}, K = {first['K']}, B = 128; local phase: "
              f"the median of {first['reps']} interleaved repetitions; speed-up: the median of the {first['reps']} "
              f"ratios of a float32 repetition to the bfloat16 one run beside it, and their range.")


scalar("precision_speedup", BENCHMARKS, lambda d: _speedup(_bf16_row(d, "ist")))
scalar("precision_dp_speedup", BENCHMARKS, lambda d: _speedup(_bf16_row(d, "data_parallel")))


def _other_cpu(d) -> str:
    """Study 8 as the full suite's run measured it (`experiments/benchmarks/results.json`, possibly another machine):
    IST's speed-up, its CPU and whether that CPU has AMX tiles (bfloat16 matrix units)."""
    amx = "with" if (d.get("cpu_flags") or {}).get("amx_bf16") else "without"
    return f"{d['bf16_vs_f32_local_phase']:.2f}x on {d['machine']['cpu']} ({amx} AMX)"


scalar("precision_speedup_suite", "experiments/benchmarks/results.json", _other_cpu)


def _ms(seconds: float) -> str:
    return f"{fixed(1e3 * seconds, 1)} ms"


def dp_reason(d) -> str:
    """Why data parallel's bfloat16 phase runs at the speed it does, from its widest layer's products timed alone
    (``pieces``, `experiments.benchmarks.dp_bfloat16`): each form's milliseconds and the step's speed in each."""
    r = _bf16_row(d, "data_parallel")
    p, w, b = r["pieces"], r["pieces"]["W"], r["pieces"]["B"]
    t, steps = p["pieces"], p["steps"]
    i, o = p["kernel"]
    turn, rows = steps["bfloat16 in turn"], steps["bfloat16 all rows"]
    verdict = "loses" if turn["speed_vs_float32"]["median"] < 1 else "gains"
    return (f"its {i} x {o} layer's products of one step, timed alone ({p['reps']} reps, medians), run in bfloat16 "
            f"worker after worker at {_speed_pair(turn)} their float32 speed, so the step {verdict}: the forward "
            f"product {'gains' if t['forward/bfloat16 in turn'] < t['forward/float32'] else 'loses'} "
            f"({_ms(t['forward/float32'])} in float32, {_ms(t['forward/bfloat16 in turn'])} in "
            f"bfloat16); the weight gradient, {w} products over {b} rows each rounded to bfloat16 and added in "
            f"float32, takes {_ms(t['weight_grad/bfloat16 in turn'])} against {_ms(t['weight_grad/float32'])} for "
            f"float32's one product over all {w * b} rows, and the kernel's cast to bfloat16 "
            f"{_ms(t['convert_kernel'])} more; the same products in bfloat16 over all {w * b} rows at once would run "
            f"at {_speed_pair(rows)} float32's")


def _speed_pair(step: dict) -> str:
    s = step["speed_vs_float32"]
    return paired(s["median"], s["min"], s["max"], s["reps"])


scalar("precision_dp_reason", BENCHMARKS, dp_reason)
scalar("precision_dp_reason_short", BENCHMARKS, lambda d: (
    f"in bfloat16 its {_bf16_row(d, 'data_parallel')['W']} workers compute their weight gradients one after "
    f"another, {_ms(_bf16_row(d, 'data_parallel')['pieces']['pieces']['weight_grad/bfloat16 in turn'])} a step for "
    f"the widest layer against {_ms(_bf16_row(d, 'data_parallel')['pieces']['pieces']['weight_grad/float32'])} for "
    f"float32's one product over all their rows"))


@table("precision_network", NETWORK)
def network(d):
    """Per link and algorithm: each exchange dtype's seconds to the target (mean ± std over seeds), rounds, bytes
    per worker per round, and bfloat16's speed-up over float32 seed by seed."""
    out = []
    for r in d["rows"]:
        t = r.get("time_to_target_s_mean")
        std = r.get("time_to_target_s_std")
        out.append([link_name(r["link"]), algorithm_name(r["algorithm"]), r["exchange"],
                    f"{r['reached']} of {r['seeds']}",
                    "-" if t is None else f"{fixed(t, 1)}" + ("" if std is None else f" ± {fixed(std, 1)}"),
                    fixed(r["round_to_target_mean"], 1) if r.get("round_to_target_mean") is not None else "-",
                    nbytes(r["bytes_sent_per_worker_per_round_mean"], binary=False)
                    if r.get("bytes_sent_per_worker_per_round_mean") else "-",
                    (ratio(r["speedup_vs_float32_mean"], 2) + (f" ± {fixed(r['speedup_vs_float32_std'], 2)}"
                                                               if r.get("speedup_vs_float32_std") else ""))
                    if r.get("speedup_vs_float32_mean") else "-"])
    return markdown_table(["link", "algorithm", "exchange", "reached", "seconds to target", "rounds",
                           "bytes per worker per round", "speed-up vs float32"], out)


@table("precision_summary", ACCURACY, NETWORK, BENCHMARKS)
def summary(acc, net, bench):
    """IST, data parallel and local SGD on the speech MLP, side by side: the local phase's speed-up computing in
    bfloat16 (study 8), bytes per worker per round in each exchange dtype, seconds to 0.9 on the 100 Mbit/s link
    (IST), and test accuracy on three seeds in each precision."""
    speed = {r["algorithm"]: r["speedup"] for r in _speed_rows(bench) if r["dtype"] == "bfloat16"}
    rows = {(r["algorithm"], r["precision"]): r for r in acc["rows"] if r["data"] == "speech"}
    slow = {r["exchange"]: r for r in net["rows"] if r["link"] == "100mbit"}
    out = []
    for algorithm in ("ist", "data_parallel", "local_sgd"):
        f32, comp, ex = (rows.get((algorithm, p)) for p in PRECISIONS)
        tta = "-"
        if algorithm == "ist" and "float32" in slow and "bfloat16" in slow:
            tta = (f"{fixed(slow['float32']['time_to_target_s_mean'], 1)} -> "
                   f"{fixed(slow['bfloat16']['time_to_target_s_mean'], 1)} "
                   f"({ratio(slow['bfloat16']['speedup_vs_float32_mean'], 2)})")
        out.append([algorithm_name(algorithm), ratio(speed[algorithm], 2) if algorithm in speed else "-",
                    f"{nbytes(f32['bytes_per_worker_per_round'], binary=False)} -> "
                    f"{nbytes(ex['bytes_per_worker_per_round'], binary=False)}" if f32 and ex else "-", tta,
                    *(fixed(r["test_accuracy_mean"], 3) if r else "-" for r in (f32, comp, ex))])
    return markdown_table(["algorithm", "local phase, bfloat16 / float32", "bytes per worker per round",
                           "seconds to 0.9 at 100 Mbit/s", "accuracy float32", "bfloat16 compute",
                           "bfloat16 exchange"], out)


def _tta_speedup(variant: str, link: str = "100mbit"):
    def fn(d):
        row = next(r for r in d["rows"] if r["link"] == link and r["exchange"] == variant)
        return ratio(row["speedup_vs_float32_mean"], 2)
    return fn


scalar("precision_tta_exchange", NETWORK, _tta_speedup("bfloat16"))
scalar("precision_tta_both", NETWORK, _tta_speedup("bfloat16-compute"))
scalar("precision_tta_exchange_1gbit", NETWORK, _tta_speedup("bfloat16", "1gbit"))
