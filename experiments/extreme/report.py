"""The extreme-classification study's tables: ``experiments/extreme/results/debian.json`` (``python -m
experiments.extreme.study``). Registered in `experiments.tables` when `experiments.report` imports this module.
"""

from __future__ import annotations

import math
import operator
from typing import Optional

from experiments.claims import claim
from experiments.tables import (ROUND_COLUMNS, ResultsError, baseline_cells, cell, choices_on_edges, markdown_table,
                               nbytes, register, round_cells, scalar, seconds_to_target, settings_words, table,
                               tuning_caption, tuning_rows)
from istjax.algorithms import ALGORITHMS
from istjax.algorithms.tensor import step_bytes
from istjax.launch.metrics import format_mean_std

DEBIAN = "experiments/extreme/results/debian.json"
NAMES = {"ist": "IST (sharded)", "data_parallel": "data parallel", "local_sgd": "local SGD",
         "tensor_parallel": "tensor parallel"}


def _metric(r: dict, name: str) -> str:
    """Mean ± std over the seeds that trained: every cell with any, a cell that fits some seeds and not others
    included (its "fits" column says how many)."""
    if not r.get("seeds") or r.get(f"{name}_mean") is None:  # PSP@k: not in runs older than the metric
        return "-"
    return format_mean_std(r[f"{name}_mean"], r.get(f"{name}_std"), len(r["seeds"]))


#: The metrics a multi-label study's tables show: every one the task computes (`istjax.xmc.loss.scores`).
METRIC_COLUMNS = (("precision_at_1", "P@1"), ("precision_at_3", "P@3"), ("precision_at_5", "P@5"),
                  ("ndcg_at_5", "nDCG@5"), ("psp_at_1", "PSP@1"), ("psp_at_3", "PSP@3"), ("psp_at_5", "PSP@5"))


def _baseline_rows(d, leading: int, trailing: int) -> list[list[str]]:
    """The trivial baselines the results file records (`istjax.launch.baselines`: the most-frequent-labels
    predictor) as rows of a study table: their metrics under the metric columns, ``-`` elsewhere."""
    return [[f"{name.replace('_', ' ')} (trivial baseline)", *["-"] * (leading - 1),
             *(cell(b.get(f"test_{m}")) for m, _ in METRIC_COLUMNS), *["-"] * trailing]
            for name, b in (d.get("baselines") or {}).items()]


def _fits(r: dict) -> str:
    """``yes``, ``no``, or ``no (1 of 3 seeds trained)`` for a cell at the edge of the cap."""
    if r["fits"] or not r["seeds"]:
        return cell(r["fits"])
    return f"no ({len(r['seeds'])} of {r.get('attempted', '?')} seeds trained)"


def _why(r: dict) -> str:
    """A cell that does not fit: the kernel's line (the run without the prediction, or the run itself)."""
    if r["fits"]:
        return ""
    return r.get("observed") or r.get("predicted") or "did not train"


def _data_name(d) -> str:
    """The data set the study ran on, read from its first cell's resolved config (its shape when recorded)."""
    configs, shape = d.get("configs") or {}, d.get("shape") or {}
    name = next(iter(configs.values()))["resolved"]["data"]["name"].replace("_", "-") if configs else "the data"
    return name + (f" ({shape['features']:,} features, {shape['labels']:,} labels)" if "labels" in shape else "")


def _study(d):
    """Every cell of a study (``python -m experiments.extreme.study``): fit under the cap, memory, P@k, PSP@k, speed."""
    rows = sorted(d["rows"], key=lambda r: (list(NAMES).index(r["algorithm"]), r["ranks"], r["hidden"]))
    tuned = any(r.get("tuned") for r in rows)  # a study run with --tune: each row's choice beside it
    body = markdown_table(
        ["algorithm", "ranks", "H", *(["chosen on the tuning split"] if tuned else []), "fits", "peak RSS per rank",
         "cgroup peak", *(label for _, label in METRIC_COLUMNS), "time per sample", "bytes per worker per round"],
        [[NAMES[r["algorithm"]], cell(r["ranks"]), cell(r["hidden"]),
          *([settings_words(r["tuned"]) if r.get("tuned") else "-"] if tuned else []), _fits(r),
          nbytes(r["peak_rss_bytes"]) if r.get("peak_rss_bytes") else "-",
          nbytes(r["cgroup_peak_bytes"]) if r.get("cgroup_peak_bytes") else "-",
          *(_metric(r, m) for m, _ in METRIC_COLUMNS),
          f"{r['time_per_sample_s'] * 1e6:.0f} µs" if r.get("time_per_sample_s") else "-",
          nbytes(r["bytes_per_worker_per_round"], binary=False) if r.get("bytes_per_worker_per_round") else "-"]
         for r in rows] + _baseline_rows(d, 6 + tuned, 2))
    misfits = [f"- {NAMES[r['algorithm']]}, {r['ranks']} ranks, H = {r['hidden']}: {_why(r)}"
               for r in rows if not r["fits"]]
    samples = next((r.get("samples_seen") for r in rows if r.get("samples_seen")), None)
    head = (f"{_data_name(d)}, every rank limited to "
            f"{d['cap']} (its own cgroup; `runtime.memory_limit` the same), {cell(samples)} samples per run (every "
            f"arm the same), mean ± std over the seeds that trained; a cell that trained in some seeds and not "
            f"others shows how many and their scores." + (" Every width of an arm trains at the settings its "
                                                           "tuning chose (the tuning table)." if tuned else ""))
    return "\n\n".join([head, body] + (["Cells that do not fit:\n\n" + "\n".join(misfits)] if misfits else []))


def _ist_round_bytes(shape: dict, hidden: int, workers: int, carried: bool = False) -> int:
    """A worker's IST round, both ways: its bag columns and their biases, its output-layer rows and the whole output
    bias (`SparseMLP` at ``H / W`` units), float32; with Adam's state ``carried``, its two moments travel with every
    one of those weights (three times the floats)."""
    h = hidden // workers
    return (3 if carried else 1) * 2 * 4 * ((shape["features"] + shape["labels"]) * h + h + shape["labels"])


def _carried(r: Optional[dict]) -> bool:
    """Whether a row's arm trains with Adam's state carried across rounds (its tuned choice)."""
    return bool(r) and (r.get("tuned") or {}).get("algorithm.optimizer_state") == "carry"


def _tp_sample_bytes(hidden: int, shards: int) -> float:
    """Tensor parallel's bytes a sample, all shards, both ways (`istjax.algorithms.tensor.step_bytes`)."""
    step = step_bytes(shards, hidden, shards)  # a shard's step of P examples (integer H / P per example)
    return float(step.sent + step.received)  # x P shards / P examples


def _measured_sample_bytes(d, r: dict) -> Optional[float]:
    """All ranks' measured bytes (both ways) over the samples of a round, or None where the cell did not train."""
    run = next((x for x in d["runs"] if x["label"] == r["label"]), None)
    if run is None or not r.get("bytes_per_worker_per_round"):
        return None
    return r["bytes_per_worker_per_round"] * r["ranks"] / (run["samples_seen"] / run["rounds"])


def bytes_rows(d) -> list[dict]:
    """Per H: IST's and tensor parallel's bytes a sample (analytic and measured) and the crossover K above which
    IST moves fewer (its round's bytes are spread over the K x B samples a worker trains)."""
    shape, out = d["shape"], []
    k, b = shape["local_steps"], shape["batch_size"]
    for hidden in sorted({r["hidden"] for r in d["rows"] if r["algorithm"] == "tensor_parallel"}):
        ist = next((r for r in d["rows"] if r["algorithm"] == "ist" and r["hidden"] == hidden and r["ranks"] == 2),
                   None)
        tp = next(r for r in d["rows"] if r["algorithm"] == "tensor_parallel" and r["hidden"] == hidden)
        ist_round = _ist_round_bytes(shape, hidden, 2, _carried(ist))
        tp_sample = _tp_sample_bytes(hidden, tp["ranks"])
        out.append({"hidden": hidden, "ist_analytic": ist_round / (k * b),
                    "ist_measured": _measured_sample_bytes(d, ist) if ist else None,
                    "tp_analytic": tp_sample, "tp_measured": _measured_sample_bytes(d, tp),
                    "crossover_k": math.ceil(ist_round / (b * tp_sample))})
    return out


@table("extreme_bytes", DEBIAN)
def _bytes(d):
    rows = bytes_rows(d)
    shape = d["shape"]

    def size(v):
        return nbytes(v, binary=False) if v else "-"

    body = markdown_table(
        ["H", "IST analytic", "IST measured", "tensor parallel analytic", "tensor parallel measured",
         "crossover K"],
        [[cell(r["hidden"]), size(r["ist_analytic"]), size(r["ist_measured"]), size(r["tp_analytic"]),
          size(r["tp_measured"]), cell(r["crossover_k"])] for r in rows])
    return (f"Bytes a sample (all ranks, both directions) on 2 ranks, IST at K = {shape['local_steps']} local steps of "
            f"B = {shape['batch_size']} ({shape['features']:,} features, {shape['labels']:,} labels); measured: what "
            f"the MPI runtime counted in the compiled round; crossover K: the local steps above which IST would move "
            f"fewer bytes a sample than tensor parallel."
            + (" IST's Adam state is carried (its tuned choice): the two moments travel with its weights, three times "
               "the floats." if any(_carried(r) for r in d["rows"] if r["algorithm"] == "ist") else "")
            + "\n\n" + body)


def _gap(d):
    """IST against exact training: its P@1 and PSP@1 beside tensor parallel's (exact full-model training) at each H
    both train, same ranks and samples; the difference of the means with the two spreads."""
    def at(algorithm, hidden):
        return next((r for r in d["rows"] if r["algorithm"] == algorithm and r["hidden"] == hidden
                     and r["ranks"] == 2 and r["fits"]), None)

    lines = []
    for hidden in sorted({r["hidden"] for r in d["rows"] if r["algorithm"] == "tensor_parallel"}):
        ist, tp = at("ist", hidden), at("tensor_parallel", hidden)
        if ist is None or tp is None:
            lines.append([cell(hidden), _metric(ist, "precision_at_1") if ist else "-",
                          _metric(tp, "precision_at_1") if tp else "does not fit", "-", "-"])
            continue
        lines.append([cell(hidden), _metric(ist, "precision_at_1"), _metric(tp, "precision_at_1"),
                      f"{ist['precision_at_1_mean'] - tp['precision_at_1_mean']:+.3f}",
                      f"{ist['psp_at_1_mean'] - tp['psp_at_1_mean']:+.3f}"
                      if ist.get("psp_at_1_mean") is not None and tp.get("psp_at_1_mean") is not None else "-"])
    return markdown_table(["H", "IST P@1", "tensor parallel P@1", "IST - tensor parallel, P@1", "the same, PSP@1"],
                          lines)


def _largest(d, algorithm: str, ranks: int = 2) -> dict:
    fitting = [r for r in d["rows"] if r["algorithm"] == algorithm and r["fits"] and r["ranks"] == ranks]
    return max(fitting, key=lambda r: r["hidden"])


def _best(d, algorithms) -> dict:
    return max((r for r in d["rows"] if r["algorithm"] in algorithms and r["fits"]),
               key=lambda r: r["precision_at_1_mean"])


def _constant(d, metric: str = "precision_at_1") -> str:
    """The most-frequent-labels predictor's ``metric`` (`istjax.launch.baselines`, recorded by ``--baselines``)."""
    return cell(d["baselines"]["most_frequent_labels"][f"test_{metric}"])


def _both_fit(d, a: str, b: str) -> tuple[dict, list[int]]:
    """The rows on 2 ranks that fit, by (algorithm, H), and the widths at which both ``a`` and ``b`` fit."""
    rows = {(r["algorithm"], r["hidden"]): r for r in d["rows"] if r["ranks"] == 2 and r["fits"]}
    return rows, sorted(h for (alg, h) in rows if alg == a and (b, h) in rows)


def _equal_width(d, a: str = "local_sgd", b: str = "ist") -> str:
    """P@1 of ``a`` and ``b`` at every width both fit on 2 ranks, for the prose."""
    rows, widths = _both_fit(d, a, b)
    p1 = lambda alg: " / ".join(cell(rows[alg, h]["precision_at_1_mean"]) for h in widths)  # noqa: E731
    return f"P@1 {p1(a)} against IST's {p1(b)} at H = {' / '.join(map(str, widths))}"


def _deficit(d, a: str = "tensor_parallel", b: str = "ist") -> str:
    """How far ``b``'s P@1 is below ``a``'s at every width both fit on 2 ranks (negative where ``b`` is above), for
    the prose."""
    rows, widths = _both_fit(d, a, b)
    gaps = (rows[a, h]["precision_at_1_mean"] - rows[b, h]["precision_at_1_mean"] for h in widths)
    return f"{' / '.join(f'{g:.3f}' for g in gaps)} at H = {' / '.join(map(str, widths))}"


def _by_width(d, algorithm: str, ranks: int = 2) -> str:
    """P@1 of ``algorithm`` on ``ranks`` ranks at every width it fits, for the prose."""
    rows = sorted((r for r in d["rows"] if (r["algorithm"], r["ranks"]) == (algorithm, ranks) and r["fits"]),
                  key=lambda r: r["hidden"])
    return (f"P@1 {' / '.join(cell(r['precision_at_1_mean']) for r in rows)} at "
            f"H = {' / '.join(str(r['hidden']) for r in rows)}")


def _tuning_best(d, arm: str, state: str) -> str:
    """The best tuning-split P@1 of ``arm``'s runs with Adam's state ``state`` and its rate, for the prose; "none of
    its N runs trained" where every such run failed (the kernel's kill at the cap: the tuning table says why)."""
    t = d["tuning"]
    metric = t["objective"]["metric"]
    runs = [r for r in t["runs"] if r["arm"] == arm and r["settings"].get("algorithm.optimizer_state") == state]
    if not runs:
        raise ResultsError(f"the tuning record holds no run of {arm} with optimizer_state={state}")
    scored = [r for r in runs if r[metric] is not None]
    if not scored:
        return f"none of its {len(runs)} runs trained"
    best = max(scored, key=lambda r: r[metric])
    return f"{cell(best[metric])} (lr {best['settings']['learning_rate']:g})"


scalar("extreme.constant_p1", DEBIAN, _constant)
for _arm in ("ist_p2", "ist_p4", "local_sgd_p2"):
    for _state in ("carry", "reset"):
        scalar(f"extreme.tuning.{_arm}_{_state}", DEBIAN,
               lambda d, arm=_arm, state=_state: _tuning_best(d, arm, state))

# The same study before `SparseMLP.rescale` existed (its IST cells: sub-networks without the H / h scaling).
NO_RESCALE = "experiments/extreme/results/debian_no_rescale.json"
scalar("extreme.no_rescale.ist_largest_p1", NO_RESCALE, lambda d: _metric(_largest(d, "ist"), "precision_at_1"))
scalar("extreme.no_rescale.commit", NO_RESCALE, lambda d: sorted({r["commit"][:7] for r in d["runs"]
                                                                  if r["label"].startswith("ist")})[0])

# Time to a P@1 target on shaped links (`python -m experiments.extreme.network`).
NETWORK = "experiments/extreme/results/network.json"


def _network_name(d: dict, algorithm: str) -> str:
    """The arm's name with the MPI mode its cells ran in (read from the file's cells)."""
    modes = {o.split("=", 1)[1] for label, overrides in d["cells"].items() if f"-{algorithm}-k" in label
             for o in overrides if o.startswith("--config.runtime.mode=")}
    name = {"ist": "IST", "tensor_parallel": "tensor parallel"}[algorithm]
    return name if algorithm != "ist" else f"{name} ({' / '.join(sorted(modes)).replace('_', ' ')})"


# The race's target over the constant predictor (the study's file records the predictor, the race's its target).
register("extreme.constant_margin", (NETWORK, DEBIAN), lambda race, study: cell(
    race["target"] - study["baselines"]["most_frequent_labels"]["test_precision_at_1"]), inline=True)
scalar("extreme.race_target", NETWORK, lambda d: d["target"])


def _race_bytes_per_sample(d: dict, algorithm: str, k: int) -> str:
    """The bytes a worker sends a sample in the race's arm (``algorithm``, K = ``k``): a round's over its
    ``ranks x K x B`` samples (tensor parallelism's steps, like IST's, each on ``ranks x B``; B as its runs record)."""
    row = next(r for r in d["summary"] if (r["algorithm"], r["local_steps"]) == (algorithm, k))
    batch = next(r["batch_size"] for r in d["runs"] if (r["algorithm"], r["local_steps"]) == (algorithm, k))
    return nbytes(row["bytes_per_worker_per_round"] / (d["ranks"] * k * batch), binary=False)


for _alg, _k in (("ist", 80), ("ist", 160), ("tensor_parallel", 10)):
    scalar(f"extreme.race.bytes_per_sample.{_alg}_k{_k}", NETWORK,
           lambda d, a=_alg, k=_k: _race_bytes_per_sample(d, a, k))


def _race_settings(d: dict, algorithm: str) -> str:
    """The optimizer settings the race trained ``algorithm`` at, in words: the last learning rate and state its
    cells' overrides set (the pinned `RACE_SETTINGS`, then a ``--tuned`` choice after them), the state only where
    the algorithm reads one (`istjax.algorithms.ALGORITHMS`: tensor parallelism always carries Adam's)."""
    found = {}
    keys = ["learning_rate"] + (["algorithm.optimizer_state"] if "optimizer_state" in ALGORITHMS.get(
        algorithm).options else [])
    for label, overrides in d["cells"].items():
        if f"-{algorithm}-k" in label:
            for o in overrides:
                key, _, value = o.removeprefix("--config.").partition("=")
                if key in keys:
                    found[key] = float(value) if key == "learning_rate" else value
    return settings_words(found) or "the config's settings at the runs' commit"


@table("extreme_network", NETWORK)
def _network(d):
    body = markdown_table(
        ["link", "algorithm", "K", "seconds to target", "samples to target", *ROUND_COLUMNS],
        [[r["link"], _network_name(d, r["algorithm"]), cell(r["local_steps"]), seconds_to_target(r),
          cell(round(r["samples_to_target"])) if r.get("samples_to_target") else "-", *round_cells(r)]
         for r in d["summary"]])
    return (f"xmc-debian-deps, H = {d['hidden']}, {d['ranks']} ranks on shaped links, to test P@1 >= {d['target']} "
            f"(training seconds: compilation and evaluation excluded; at most {d['samples']:,} samples a run), "
            f"mean ± std over the seeds that reached it. Adam at "
            + "; ".join(f"{_network_name(d, a)}: {_race_settings(d, a)}" for a in sorted({r["algorithm"] for r in
                                                                                     d["summary"]}))
            + (f" (the choices of the tuned study {d['tuned']})." if d.get("tuned") else
               " (pinned, not tuned: `RACE_SETTINGS`).") + "\n\n" + body)

# Amazon-670k's shape on synthetic data: who fits the cap, and IST's rounds at widths no other arm holds.
AMAZON = "experiments/extreme/results/amazon_shape.json"


@table("extreme_amazon", AMAZON)
def _amazon(d):
    rows = sorted(d["rows"], key=lambda r: (list(NAMES).index(r["algorithm"]), r["ranks"], r["hidden"]))
    shape = d["shape"]

    def params(h: int) -> str:
        return f"{(shape['features'] + shape['labels'] + 1) * h / 1e6:,.0f} M"

    body = markdown_table(
        ["algorithm", "ranks", "H", "parameters", "fits", "peak RSS per rank", "cgroup peak", "time per round",
         "bytes per worker per round"],
        [[NAMES[r["algorithm"]], cell(r["ranks"]), cell(r["hidden"]), params(r["hidden"]), _fits(r),
          nbytes(r["peak_rss_bytes"]) if r.get("peak_rss_bytes") else "-",
          nbytes(r["cgroup_peak_bytes"]) if r.get("cgroup_peak_bytes") else "-",
          f"{r['time_per_round_s']:.1f} s" if r.get("time_per_round_s") else "-",
          nbytes(r["bytes_per_worker_per_round"], binary=False) if r.get("bytes_per_worker_per_round") else "-"]
         for r in rows])

    def why(r: dict) -> str:  # refused by the prediction (then run without it), or passed it and was killed
        if r.get("predicted"):
            return f"refused: {r['predicted']}; without the check: {r.get('observed') or '-'}"
        return f"passed the prediction, then {r.get('observed') or 'did not train'}"

    misfits = [f"- {NAMES[r['algorithm']]}, {r['ranks']} ranks, H = {r['hidden']}: {why(r)}"
               for r in rows if not r["fits"]]
    head = (f"Synthetic data at Amazon-670k's shape ({shape['features']:,} features, {shape['labels']:,} labels), "
            f"every rank limited to {d['cap']}, {cell(shape['local_steps'])} local steps of "
            f"{cell(shape['batch_size'])} a round, one seed (memory and time, not accuracy).")
    return "\n\n".join([head, body] + (["Cells that do not fit:\n\n" + "\n".join(misfits)] if misfits else []))


def _largest_amazon(d, algorithm: str, ranks: int) -> str:
    fit = [r for r in d["rows"] if (r["algorithm"], r["ranks"]) == (algorithm, ranks) and r["fits"]]
    return cell(max(r["hidden"] for r in fit)) if fit else "none"


for _alg, _ranks in (("ist", 2), ("ist", 4), ("data_parallel", 2), ("local_sgd", 2), ("tensor_parallel", 4)):
    scalar(f"extreme.amazon.largest_{_alg}_p{_ranks}", AMAZON, lambda d, a=_alg, p=_ranks: _largest_amazon(d, a, p))


# XLA's accounting of the programs a rank runs (`python -m experiments.extreme.memory`).
MEMORY = "experiments/extreme/results/memory.json"


@table("extreme_memory", MEMORY)
def _memory(d):
    body = markdown_table(
        ["H", "the model (float32)", "program", "points", "temporaries", "outputs"],
        [[cell(r["hidden"]), nbytes(r["model_bytes"]), r["program"], cell(r["points"]) if r.get("points") else "-",
          nbytes(r["temp_bytes"]), nbytes(r["output_bytes"])] for r in d["rows"]])
    return (f"`compile().memory_analysis()` on xmc-debian-deps' shape ({d['features']:,} features, {d['labels']:,} "
            f"labels, {d['slots']} slots a point), JAX {d['jax']}.\n\n" + body)


def _memory_row(d, hidden: int, program: str, points: Optional[int] = None) -> dict:
    return next(r for r in d["rows"] if r["hidden"] == hidden and r["program"] == program
                and (points is None or r.get("points") == points))


scalar("extreme.memory.eval_512", MEMORY, lambda d: nbytes(_memory_row(d, 512, "evaluate", 1000)["temp_bytes"]))
scalar("extreme.memory.state_512", MEMORY, lambda d: nbytes(4 * _memory_row(d, 512, "evaluate", 1000)["model_bytes"]))
scalar("extreme.memory.step_512", MEMORY, lambda d: nbytes(_memory_row(d, 512, "train step")["temp_bytes"]))
scalar("extreme.memory.eval_512_block", MEMORY,
       lambda d: nbytes(_memory_row(d, 512, "evaluate, all slots at once", 1000)["temp_bytes"]))
scalar("extreme.memory.step_512_block", MEMORY,
       lambda d: nbytes(_memory_row(d, 512, "train step, all slots at once")["temp_bytes"]))


def _target(d, ranks: int) -> str:
    """The issue's target on ``ranks`` ranks: IST's widest width at least P times data parallel's and its P@1 mean
    above the best data parallel or local SGD reaches at any width (``met``; else ``missed`` and which half)."""
    ist, dp = _largest(d, "ist", ranks), _largest(d, "data_parallel")
    best = _best(d, ("data_parallel", "local_sgd"))
    wide, better = ist["hidden"] >= ranks * dp["hidden"], ist["precision_at_1_mean"] > best["precision_at_1_mean"]
    if wide and better:
        return "met"
    return "missed (" + " and ".join(w for w, bad in (("width", not wide), ("P@1", not better)) if bad) + ")"


SYNTHETIC = "experiments/extreme/results/synthetic.json"  # synthetic data sized for this machine


def _per_metric(d):
    """The target's comparison on every metric the table shows: IST's widest cell on 2 and on 4 ranks against the
    best any replicated cell (data parallel, local SGD) reaches on that metric at any width it fits, beside the
    most-frequent-labels predictor and tensor parallelism's best; ``above``/``below`` the replicated best. A
    replicated cell that trained in some seeds and not others (at the cap's edge) is shown in a column of its own,
    not counted as fitting."""
    replicated = [r for r in d["rows"] if r["algorithm"] in ("data_parallel", "local_sgd") and r["fits"]]
    widest = [(ranks, r) for ranks in (2, 4)
              if (r := max((r for r in d["rows"] if r["algorithm"] == "ist" and r["ranks"] == ranks and r["fits"]),
                           key=lambda r: r["hidden"], default=None)) is not None]
    tensor = [r for r in d["rows"] if r["algorithm"] == "tensor_parallel" and r["fits"]]
    edge = [r for r in d["rows"] if r["algorithm"] in ("data_parallel", "local_sgd") and not r["fits"] and r["seeds"]]
    constant = (d.get("baselines") or {}).get("most_frequent_labels") or {}

    def where(r: dict) -> str:
        return f"{NAMES[r['algorithm']]}, H = {r['hidden']:,}"

    lines = []
    for m, label in METRIC_COLUMNS:
        if not replicated or replicated[0].get(f"{m}_mean") is None:
            continue
        best = max(replicated, key=lambda r: r[f"{m}_mean"])
        ist = [f"{_metric(r, m)}: {'above' if r[f'{m}_mean'] > best[f'{m}_mean'] else 'below'}" for _, r in widest]
        tp = max(tensor, key=lambda r: r[f"{m}_mean"], default=None)
        partial = max(edge, key=lambda r: r[f"{m}_mean"], default=None)
        lines.append([label, cell(constant.get(f"test_{m}")), f"{_metric(best, m)} ({where(best)})", *ist,
                      f"{_metric(tp, m)} ({where(tp)})" if tp else "-",
                      *([f"{_metric(partial, m)} ({where(partial)}, {_fits(partial)})"] if edge else [])])
    heads = [f"IST, {ranks} ranks, H = {r['hidden']:,} (widest)" for ranks, r in widest]
    return markdown_table(["metric", "most frequent labels", "best replicated cell", *heads,
                           "best tensor parallel cell", *(["replicated, at the cap's edge"] if edge else [])], lines)


def _register_study(tables: str, gap: str, prefix: str, source: str) -> None:
    """The study's tables (every cell; IST beside tensor parallel; the target on every metric) and its headline
    figures (``{prefix}.*``), the same for every data set the study ran on."""
    table(tables, source, shows=tuple(m for m, _ in METRIC_COLUMNS))(_study)
    table(gap, source)(_gap)
    table(f"{tables}_per_metric", source)(_per_metric)
    replicated = ("data_parallel", "local_sgd")
    for name, fn in {
        "cap": lambda d: d["cap"],
        "dp_largest": lambda d: _largest(d, "data_parallel")["hidden"],
        "ist_largest": lambda d: _largest(d, "ist")["hidden"],
        "ist_largest_p1": lambda d: _metric(_largest(d, "ist"), "precision_at_1"),
        "tp_largest": lambda d: _largest(d, "tensor_parallel")["hidden"],
        "ist4_largest": lambda d: _largest(d, "ist", 4)["hidden"],
        "ist4_largest_p1": lambda d: _metric(_largest(d, "ist", 4), "precision_at_1"),
        "replicated_best_p1": lambda d: _metric(_best(d, replicated), "precision_at_1"),
        "replicated_best": lambda d: "{} at H = {}".format(NAMES[_best(d, replicated)["algorithm"]],
                                                           _best(d, replicated)["hidden"]),
        "target_p2": lambda d: _target(d, 2),
        "target_p4": lambda d: _target(d, 4),
        "local_sgd_vs_ist": _equal_width,
        "dp_vs_ist": lambda d: _equal_width(d, "data_parallel", "ist"),
        "ist_minus_tp": _deficit,
        "dp_by_width": lambda d: _by_width(d, "data_parallel"),
        "tp_by_width": lambda d: _by_width(d, "tensor_parallel"),
        "ist_by_width": lambda d: _by_width(d, "ist"),
        "ist4_by_width": lambda d: _by_width(d, "ist", 4),
        "local_sgd_by_width": lambda d: _by_width(d, "local_sgd"),
    }.items():
        scalar(f"{prefix}.{name}", source, fn)


# The Debian study again with Adam's state restarted every round wherever an arm reads one (``--tune-states reset``):
# the memory-lean variant of IST and local SGD, its rate chosen from the same tuning runs (data and tensor
# parallelism, which carry their state by construction, the same cells as in DEBIAN).
DEBIAN_RESET = "experiments/extreme/results/debian_reset.json"
_register_study("extreme_debian", "extreme_gap", "extreme", DEBIAN)
_register_study("extreme_debian_reset", "extreme_gap_reset", "extreme.reset", DEBIAN_RESET)
_register_study("extreme_synthetic", "extreme_synthetic_gap", "extreme.synthetic", SYNTHETIC)
# The synthetic study again with Adam's state restarted (``--tune-states reset``), as DEBIAN_RESET is to DEBIAN.
SYNTHETIC_RESET = "experiments/extreme/results/synthetic_reset.json"
_register_study("extreme_synthetic_reset", "extreme_synthetic_gap_reset", "extreme.synthetic.reset", SYNTHETIC_RESET)


TRANSFORMER = "experiments/extreme/results/transformer.json"


def _transformer_row(d, algorithm: str) -> dict:
    return next(r for r in d["rows"] if r["algorithm"] == algorithm)


@table("extreme_transformer", TRANSFORMER, shows=("test_loss",))
def _transformer(d):
    """IST against tensor parallelism on the character transformer, P ranks each under the same cap: validation
    nats/char over seeds, the largest rank's cgroup peak, the bytes a worker moves a round, seconds a round; the
    character n-gram tables on the same windows below."""
    tuned = any(r.get("tuned") for r in d["rows"])  # run with --tune: each arm's choice beside it
    out = [[NAMES[r["algorithm"]], r["ranks"], *([settings_words(r.get("tuned") or {}) or "-"] if tuned else []),
            format_mean_std(r["validation_loss_mean"], r["validation_loss_std"], len(r["seeds"])),
            nbytes(r["cgroup_peak_bytes"]) if r.get("cgroup_peak_bytes") else "-",
            nbytes(r["bytes_per_worker_per_round"]) if r.get("bytes_per_worker_per_round") else "-",
            f"{r['time_per_round_s']:.2f}"] for r in d["rows"]]
    out += baseline_cells(d, 6 + tuned, {2 + tuned: "test_loss"})
    rounds = next(iter(d["configs"].values()))["resolved"]["num_rounds"]
    return (markdown_table(["arm", "ranks", *(["chosen on the tuning split"] if tuned else []),
                            "validation loss (nats/char)", "peak memory, largest rank",
                            "bytes a worker moves a round", "seconds a round"], out)
            + f"\n\nEach rank in its own cgroup of {nbytes(d['cap_bytes'])}; {rounds} rounds of the same batches "
              f"for both arms.")


def _ist_and_tp(d, key: str) -> tuple[float, float]:
    """IST's ``key`` and tensor parallelism's, for the transformer cell's prose."""
    return _transformer_row(d, "ist")[key], _transformer_row(d, "tensor_parallel")[key]


scalar("extreme.transformer.ist_minus_tp", TRANSFORMER,
       lambda d: "{:+.3f}".format(operator.sub(*_ist_and_tp(d, "validation_loss_mean"))))
scalar("extreme.transformer.bytes_ratio", TRANSFORMER,
       lambda d: "{:.3f}".format(operator.truediv(*_ist_and_tp(d, "bytes_per_worker_per_round"))))
scalar("extreme.transformer.tp_slower", TRANSFORMER,
       lambda d: "{:.1f}x".format(1 / operator.truediv(*_ist_and_tp(d, "time_per_round_s"))))


# Each study's tuning stage (``--tune``, `experiments.extreme.tuning`): every tuning run and each arm's choice. A file
# without one raises only when a page's marker asks for the table.
def _arm_words(arm: str) -> str:
    """A tuned arm's label in words: ``ist_p2`` -> ``IST (sharded), 2 ranks``."""
    algorithm, _, ranks = arm.rpartition("_p")
    return f"{NAMES.get(algorithm, algorithm)}, {ranks} ranks"


def _tuning_table(source: str, module: str, unit: str, metric: str):
    """The ``tuning`` record of ``source`` (``python -m experiments.extreme.<module> ... --tune``): the caption (seed,
    budget, split, the width and the points' order where recorded) and every run, each arm's best first."""
    def render(d):
        t = d.get("tuning")
        if not t:
            raise ResultsError(f"{source} records no tuning stage; fix: run python -m experiments.extreme.{module} "
                               f"with --tune")
        where = " ".join(filter(None, [
             f"Every arm at H = {t['width']:,}, under the study's cap and trainer." if t.get("width") else "",
             f"{t['rounds']} rounds a run." if t.get("rounds") and not t.get("samples") else "",
             f"The training points listed in a fixed permutation (`data.kwargs.order={t['order']}`), so the held-out "
             f"tail is a fair draw of them." if t.get("order") else "",
             f"Chosen at an edge of its rate grid (the best may lie beyond it): "
             f"{'; '.join(map(_arm_words, edges))}." if (edges := choices_on_edges(t)) else ""]))
        return (f"{tuning_caption(t, unit)} {where}".rstrip() + "\n\n"
                + markdown_table(["arm", "settings", metric], tuning_rows(t, _arm_words)))
    return render


table("extreme_tuning_debian", DEBIAN)(_tuning_table(DEBIAN, "study", "points", "tuning P@1"))
table("extreme_tuning_debian_reset", DEBIAN_RESET)(_tuning_table(DEBIAN_RESET, "study", "points", "tuning P@1"))
table("extreme_tuning_synthetic", SYNTHETIC)(_tuning_table(SYNTHETIC, "study", "points", "tuning P@1"))
table("extreme_tuning_synthetic_reset", SYNTHETIC_RESET)(_tuning_table(SYNTHETIC_RESET, "study", "points",
                                                                       "tuning P@1"))
table("extreme_tuning_transformer", TRANSFORMER)(_tuning_table(TRANSFORMER, "transformer", "windows",
                                                               "tuning loss (nats/char)"))


# The comparisons the page claims, held to the regime gate by `experiments.report --check` (`experiments.claims`):
# every arm above the most-frequent-labels predictor, on a metric its table shows.
claim("extreme.tuned_widths", table="extreme_debian",
      arms=("ist_p2_h256", "ist_p4_h512", "data_parallel_p2_h256", "tensor_parallel_p2_h512"),
      metric="precision_at_1", text="each arm at its tuned settings (IST's state carried): IST fits no wider than data "
      "parallel on 2 ranks and scores below exact training at equal width")
claim("extreme.ist_below_exact", table="extreme_debian",
      arms=("ist_p2_h128", "ist_p2_h256", "tensor_parallel_p2_h128", "tensor_parallel_p2_h256"),
      metric="precision_at_1", text="at equal width, tuned, IST (state carried) below exact training")
claim("extreme.reset.widths", table="extreme_debian_reset",
      arms=("ist_p2_h1024", "ist_p4_h2048", "data_parallel_p2_h256"), metric="precision_at_1",
      text="Adam's state restarted: IST holds 4 and 8 times data parallel's widest width and scores below it")
claim("extreme.synthetic.widths", table="extreme_synthetic",
      arms=("ist_p2_h512", "ist_p4_h1024", "data_parallel_p2_h512", "tensor_parallel_p2_h2048"),
      metric="precision_at_1", text="on synthetic data, each arm at its tuned settings (IST's state carried): IST fits "
      "no wider than data parallel on 2 ranks, twice as wide on 4, and scores below exact training")
claim("extreme.synthetic.reset.widths", table="extreme_synthetic_reset",
      arms=("ist_p2_h2048", "ist_p4_h4096", "data_parallel_p2_h512"), metric="precision_at_1",
      text="on synthetic data, Adam's state restarted: IST holds wider widths than data parallel; P@1 against it")
claim("extreme.transformer", table="extreme_transformer", arms=("ist_p2", "tensor_parallel_p2"), metric="test_loss",
      text="IST against tensor parallelism on the transformer under the same cap: both below the trigram table")
