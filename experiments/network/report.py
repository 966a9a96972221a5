"""Time to accuracy across shaped links: ``experiments/network/results*.json`` and ``overlap.json`` (``python -m
experiments.network.time_to_accuracy``). Registered in `experiments.tables` when `experiments.report` imports this
module.
"""

from __future__ import annotations

from collections.abc import Callable

from experiments.tables import (baseline_cells, cell, count, fixed, headline_row, link_name, markdown_table, percent,
                               ratio, scalar, span, table)
from istjax.launch.study import mean_std

FSDD, KEYWORDS = "experiments/network/results.json", "experiments/network/results_keywords.json"
OVERLAP = "experiments/network/overlap.json"


def _time_to_accuracy(d):
    from experiments.network import time_to_accuracy
    return time_to_accuracy.markdown(d).strip()


def _with_baseline(d):
    """`_time_to_accuracy`, then the linear baseline (``--baselines``) on the same test clips against the target."""
    rows = [[name, acc, cell(d["target"])] for name, acc, _ in baseline_cells(d, 3, {1: "test_accuracy"})]
    return (_time_to_accuracy(d) + "\n\nThe data's trivial baseline on the same test clips:\n\n"
            + markdown_table(["baseline", "test accuracy", "the target"], rows))


table("network_fsdd", FSDD)(_with_baseline)
table("network_keywords", KEYWORDS)(_with_baseline)


def _linear_vs_target(d) -> str:
    """The linear baseline's test accuracy against the race's target: '0.967, above the target 0.9'."""
    acc, target = d["baselines"]["linear"]["test_accuracy"], d["target"]
    return f"{cell(acc)}, {'at or above' if acc >= target else 'below'} the target {target:g}"


scalar("fsdd.linear", FSDD, _linear_vs_target)
scalar("keywords.race_linear", KEYWORDS, _linear_vs_target)


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
    from experiments.network.time_to_accuracy import seed_of
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
