"""The extreme-classification study: P@k against the hidden width H under a memory limit per rank.

Every arm runs under ``mpiexec -n P`` with each rank in its own cgroup v1 memory group limited to ``--cap``
(`experiments.extreme.limits.run_ranks`) and with ``runtime.memory_limit`` set to the same cap, so a width that does
not fit is refused before training with the predicted and allowed bytes (`istjax.core.memory`); for such a cell one
run without the prediction (``runtime.memory_limit=0``, a few rounds) shows what the kernel does at the limit (the
rank killed, the job ended, no hang). Arms:

* ``ist``: sharded IST on P ranks (W = P workers, hidden units dealt stratified by P owners): no rank holds the
  whole model;
* ``data_parallel`` and ``local_sgd``: W = P replicas, one a rank, each holding the whole model;
* ``tensor_parallel``: Megatron's split on P ranks (`istjax.algorithms.tensor`: the hidden units by columns, the
  labels by blocks, activations exchanged every step): exact full-model training on W = P workers' batches, the
  model in shards like IST's.

Every arm sees the same samples (``--samples``: ``num_rounds x W x K x B`` with ``num_rounds`` set per arm; or
``--rounds``, the same rounds for every arm, for a study of memory and time) with the config's recipe
(``experiments/configs/xmc_debian_ist.py``: Adam 1e-3, K = 10, B = 128). Per run the study records the run's
summary, its last evaluation's P@1/P@3/P@5, nDCG@5 and PSP@1/3/5 (inverse propensities of the training
labels, A = 0.55, B = 1.5; `istjax.xmc.metrics`), and each rank's peak resident memory (VmHWM) and peak
cgroup usage (what the kernel charges against the limit: VmHWM also counts shared library pages the cgroup
charged to whichever group touched them first). The results file (``experiments/extreme/results/debian.json``) has, besides the study runner's
record (`istjax.launch.study`), ``rows``: one per (algorithm, hidden, ranks) with ``fits`` (every seed trained
within the limit), ``peak_rss_bytes`` (the largest rank's peak over seeds), ``precision_at_k_mean``/``_std`` over
``seeds`` where it trained, ``predicted`` (the refusal) and ``observed`` (what the kernel did) where it did not.

With ``--tune`` (`experiments.extreme.tuning`) each arm's Adam rate, and its state where the algorithm reads one,
is first chosen on a tuning split of the training points at one width (``--tune-width``; default the largest every
arm fitted at under the same cap in ``--out``), seed 0, a quarter of the samples, under the same trainer; every
width of the arm then trains at its choice, and the file records the grid, every tuning run and the choice as
``tuning``.

Command (as root, from the repository root)::

    ISTJAX_DATA_DIR=../shared/data python -m experiments.extreme.study --cap 1.9GiB --widths 128,256,512,1024 \\
        --arms ist:2,data_parallel:2,local_sgd:2,tensor_parallel:2,ist:4 --seeds 0,1,2 --samples 102400 [--tune]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import re
import sys
from collections.abc import Sequence
from typing import Any, Optional

from experiments.extreme import limits
from experiments.extreme import tuning as tuning_lib
from istjax.core.memory import format_size, parse_bytes
from istjax.launch import study as study_lib
from istjax.launch.tuning import TuningError, recorded_tuning

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = "experiments/configs/xmc_debian_ist.py"
OUT = ROOT / "experiments" / "extreme" / "results" / "debian.json"
FIGURE = ROOT / "docs" / "figures" / "extreme_debian.png"
MODES = {"ist": "sharded", "data_parallel": "parameter_server", "local_sgd": "parameter_server",
         "tensor_parallel": "sharded"}
METRICS = ("precision_at_1", "precision_at_3", "precision_at_5", "ndcg_at_5", "psp_at_1", "psp_at_3", "psp_at_5")
SAMPLES = 102_400  # the default samples a run (40 rounds of 2 x 10 x 128 with the Debian config on 2 ranks)
OBSERVED_ROUNDS = 3  # rounds of the run without the prediction that shows what the kernel does at the limit


def arm_rounds(config: str, ranks: int, *, rounds: Optional[int] = None, samples: Optional[int] = None) -> int:
    """An arm's rounds: ``rounds`` for every arm, or ``samples / (P x K x B)`` (``K``, ``B`` the config's) so that
    every arm sees the same samples whatever its number of workers W = P; a ValueError when P x K x B does not
    divide ``samples``."""
    if (rounds is None) == (samples is None):
        raise ValueError("give one of rounds (the same rounds for every arm) or samples (the same samples)")
    if samples is None:
        return rounds
    from istjax.launch.args import load_config

    c = load_config(str(ROOT / config))
    per_round = ranks * int(c.local_steps) * int(c.batch_size)
    if samples % per_round:
        raise ValueError(f"--samples {samples} is not a whole number of rounds of {ranks} x {c.local_steps} x "
                         f"{c.batch_size} = {per_round} samples (P x K x B on {ranks} ranks); use a multiple of "
                         f"{per_round}.")
    return samples // per_round


def cells(arms: Sequence[tuple[str, int]], widths: Sequence[int], cap: int, rounds: Optional[int] = None,
          config: str = CONFIG, *, samples: Optional[int] = None) -> list[study_lib.Cell]:
    """One cell per arm and width (labels ``<algorithm>_p<P>_h<H>``) of ``config``, the cap in bytes on every
    rank, each training ``rounds`` rounds or ``samples`` samples (`arm_rounds`)."""
    out = []
    for algorithm, ranks in arms:
        rounds_ = arm_rounds(config, ranks, rounds=rounds, samples=samples)
        for hidden in widths:
            overrides = (f"--config.algorithm.name={algorithm}", "--config.runtime.name=mpi",
                         f"--config.runtime.mode={MODES[algorithm]}", f"--config.num_workers={ranks}",
                         f"--config.sampler.num_owners={ranks}", f"--config.model.hidden=({hidden},)",
                         f"--config.num_rounds={rounds_}", f"--config.eval_every={max(1, rounds_ // 2)}",
                         f"--config.checkpoint_every={rounds_}", f"--config.runtime.memory_limit={cap}")
            out.append(study_lib.Cell(f"{algorithm}_p{ranks}_h{hidden}", config, overrides,
                                      {"algorithm": algorithm, "hidden": hidden, "ranks": ranks}))
    return out


def _limit_file(run_dir: pathlib.Path) -> pathlib.Path:
    return run_dir.with_name(run_dir.name + ".limit.json")


def _record_limit(result: limits.Limited, tail: str) -> dict:
    return {**dataclasses.asdict(result), "summary": result.summary, "tail": tail[-1500:]}


def _refusal(text: str) -> Optional[str]:
    """The predicted-memory refusal's first line in a failed run's output, or None."""
    return next((line.strip(" -") for line in text.splitlines() if "would hold" in line), None)


def failure(result: limits.Limited, text: str) -> str:
    """Why a run under the limit failed: the predicted-memory refusal's line; else, for a run that exited by itself,
    the kernel's summary and the last error the command line wrote (``istjax train: workdir=... holds a run with a
    different config ...``: without it a refusal reads only as ``exit 2``); else the summary alone."""
    refused = _refusal(text)
    if refused is not None:
        return refused
    said = [line.strip() for line in text.splitlines() if line.startswith("istjax ")]
    return f"{result.summary}: {said[-1]}" if said and not result.oom_killed else result.summary


def trainer(cap: int, timeout: float, mpiexec: str):
    """`run_study`'s ``train`` (and the tuning stage's, `experiments.extreme.tuning`): the run under ``mpiexec -n P``
    (P the config's ``num_workers``: W = P in every arm) with a limit per rank; a refused cell's seed-0 run is
    followed by one without the prediction (`OBSERVED_ROUNDS` rounds) under the same limit, a tuning run's is not
    (the reported cells show what the kernel does)."""
    def train(p: study_lib.Planned) -> Optional[str]:
        first = _first_seed_failure(p)
        if first is not None:  # the same config on another seed holds the same memory: not run again
            return first
        ranks = int(p.config.num_workers)
        cmd = study_lib.child_command(p, ROOT)
        result, text = _run(ranks, cmd, cap, timeout, mpiexec, p.cell.label)
        record = {"run": _record_limit(result, text)}
        refused = _refusal(text)
        if refused is not None:
            record["predicted"] = refused
            if p.seed in (0, None) and not p.config.data.get("tuning_fraction"):
                observed_dir = p.run_dir.with_name(p.run_dir.name + "_unchecked")
                free = [a for a in cmd if not a.startswith(("--config.runtime.memory_limit", "--config.num_rounds",
                                                           "--workdir", "--config.eval_every"))]
                free += ["--config.runtime.memory_limit=0", f"--config.num_rounds={OBSERVED_ROUNDS}",
                         f"--config.eval_every={OBSERVED_ROUNDS}", f"--workdir={observed_dir}"]
                seen, seen_text = _run(ranks, free, cap, timeout, mpiexec, p.cell.label + "-unchecked")
                record["observed"] = _record_limit(seen, seen_text)
        p.run_dir.parent.mkdir(parents=True, exist_ok=True)
        study_lib.write_json(_limit_file(p.run_dir), record)
        if result.returncode == 0 and not result.oom_killed:
            return None
        return failure(result, text)
    return train


def _first_seed_failure(p: study_lib.Planned) -> Optional[str]:
    """Why seed 0 of ``p``'s cell did not fit (None when it fit, or has not run, or ``p`` is seed 0)."""
    if p.seed in (0, None):
        return None
    try:
        first = json.loads(_limit_file(p.run_dir.with_name("s0")).read_text())
    except (OSError, ValueError):
        return None
    run = first["run"]
    if run["returncode"] == 0 and not run["oom_killed"]:
        return None
    return f"not run: seed 0 of this cell did not fit ({first.get('predicted') or run['summary']})"


def group_name(label: str) -> str:
    """A run's label as part of its memory group's directory name (`limits.memory_group`): every run of characters
    other than letters, digits and '.' as one '-' (a tuning run's label, ``ist_p2/learning_rate=0.001,...``, holds
    a '/', which would name a group inside a group that does not exist)."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", label)


def _run(ranks: int, cmd: list[str], cap: int, timeout: float, mpiexec: str, name: str):
    import subprocess
    import tempfile

    with tempfile.TemporaryFile("w+") as log:
        result = limits.run_ranks(ranks, cmd, cap, mpiexec=mpiexec, timeout=timeout, name=group_name(name),
                                  stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.seek(0)
        text = log.read()
    print(f"   {result.summary}", file=sys.stderr, flush=True)
    return result, text


def record(p: study_lib.Planned) -> Optional[dict[str, Any]]:
    """The runner's record plus the last evaluation's ranking metrics and the ranks' peaks under the limit."""
    base = study_lib.run_record(p)
    if base is None:
        return None
    last = json.loads((p.run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    try:
        lim = json.loads(_limit_file(p.run_dir).read_text())["run"]
    except (OSError, ValueError, KeyError):
        lim = {}
    peaks = lim.get("peak_rss_bytes", {})
    return {**base, **{m: last.get(f"test_{m}") for m in METRICS},
            "peak_rss_bytes": max((v for k, v in peaks.items() if k.startswith("rank ")), default=None),
            "rank_peak_bytes": lim.get("rank_peak_bytes"), "cgroup": lim.get("summary")}


def rows(cells_: Sequence[study_lib.Cell], planned: Sequence[study_lib.Planned], runs: Sequence[dict]) -> list[dict]:
    """The issue's rows: one per cell, ``fits`` and the peaks; P@k over the seeds that trained."""
    out = []
    for cell in cells_:
        mine = [r for r in runs if r["label"] == cell.label]
        limits_ = [json.loads(_limit_file(p.run_dir).read_text()) for p in planned
                   if p.cell.label == cell.label and _limit_file(p.run_dir).exists()]
        if not mine and not limits_:
            continue
        row = {**cell.info, "label": cell.label, "fits": bool(mine) and len(mine) == len(limits_),
               "seeds": [r["seed"] for r in mine], "attempted": len(limits_),
               "peak_rss_bytes": max((r["peak_rss_bytes"] or 0 for r in mine), default=None) or _peak(limits_),
               "cgroup_peak_bytes": max((v for r in mine for v in (r.get("rank_peak_bytes") or {}).values()),
                                        default=None)}
        for m in METRICS:
            row[f"{m}_mean"], row[f"{m}_std"] = study_lib.mean_std(r[m] for r in mine)
        if mine:
            row["time_per_sample_s"] = study_lib.mean_std(
                r["time_per_round_s"] / (r["samples_seen"] / r["rounds"]) for r in mine)[0]
            row["time_per_round_s"] = study_lib.mean_std(r["time_per_round_s"] for r in mine)[0]
            row["bytes_per_worker_per_round"] = mine[0]["bytes_per_worker_per_round"]
            row["samples_seen"] = mine[0]["samples_seen"]
        killed = [lim["run"]["summary"] for lim in limits_ if lim["run"]["returncode"] != 0]
        if killed:  # every seed killed, or some (a cell at the edge of the cap)
            row["observed"] = killed[0]
        refused = [lim for lim in limits_ if "predicted" in lim]
        if refused:
            row["predicted"] = refused[0]["predicted"]
            observed = next((lim["observed"] for lim in refused if "observed" in lim), None)
            if observed:
                row["observed"] = observed["summary"]
                row["peak_rss_bytes"] = max(row["peak_rss_bytes"] or 0, _peak([{"run": observed}]) or 0)
        out.append(row)
    return out


def _peak(records: Sequence[dict]) -> Optional[int]:
    values = [v for rec in records for k, v in rec["run"].get("peak_rss_bytes", {}).items() if k.startswith("rank ")]
    return max(values, default=None)


def shape(planned: Sequence[study_lib.Planned]) -> dict[str, int]:
    """What the bytes a sample costs depend on: the data's features and labels, the runs' K and B (the config's,
    read from a finished run), for `experiments.extreme.report`'s analytic bytes per sample."""
    for p in planned:
        config = p.run_dir / "config.json"
        if config.exists():
            c = json.loads(config.read_text())
            return {**_data_shape(c["data"]), "local_steps": int(c["local_steps"]), "batch_size": int(c["batch_size"])}
    return {}


def _data_shape(data: dict) -> dict[str, int]:
    """The features and labels of a run's data: the Debian set's from its files, synthetic data's from its
    arguments."""
    if data["name"] == "xmc_synthetic":
        return {"features": int(data["kwargs"]["num_features"]), "labels": int(data["kwargs"]["num_labels"])}
    from istjax.data import extreme

    train = extreme.load_xmc_debian_deps().train
    return {"features": int(train.num_features), "labels": int(train.num_labels)}


def plot(doc: dict, path: pathlib.Path) -> pathlib.Path:
    """P@1 against H per arm (mean and the seeds' spread), the widths that did not fit the cap marked on the axis, a
    cell that trained in some of its seeds drawn hollow at their mean with how many, and the most-frequent-labels
    predictor's P@1 as a dashed line where the file records it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.0, 4.0))
    arms = sorted({(r["algorithm"], r["ranks"]) for r in doc["rows"]})
    misfits = []
    for i, (algorithm, ranks) in enumerate(arms):  # distinct markers: equal arms (data and tensor parallel) overlap
        mine = sorted((r for r in doc["rows"] if (r["algorithm"], r["ranks"]) == (algorithm, ranks)),
                      key=lambda r: r["hidden"])
        fit = [r for r in mine if r["fits"]]
        line = ax.errorbar([r["hidden"] for r in fit], [r["precision_at_1_mean"] for r in fit],
                           yerr=[r["precision_at_1_std"] or 0 for r in fit], marker="osD^v"[i % 5], capsize=3,
                           markersize=9 - 1.2 * i, fillstyle="none" if i % 2 else "full",
                           label=f"{algorithm.replace('_', ' ')}, {ranks} ranks")
        misfits.append(([r["hidden"] for r in mine if not r["fits"]], line[0].get_color()))
        for r in mine:  # at the cap's edge: trained in some seeds, killed in others
            if not r["fits"] and r.get("seeds") and r.get("precision_at_1_mean") is not None:
                ax.errorbar([r["hidden"]], [r["precision_at_1_mean"]], yerr=[r["precision_at_1_std"] or 0],
                            marker="osD^v"[i % 5], fillstyle="none", capsize=3, color=line[0].get_color(),
                            linestyle="none")
                ax.annotate(f"{len(r['seeds'])} of {r['attempted']} seeds", (r["hidden"], r["precision_at_1_mean"]),
                            textcoords="offset points", xytext=(6, -12), fontsize=7, color=line[0].get_color())
    constant = ((doc.get("baselines") or {}).get("most_frequent_labels") or {}).get("test_precision_at_1")
    low, high = ax.get_ylim()
    if constant is not None and constant >= low - (high - low):  # near the cells: a line
        ax.axhline(constant, color="0.4", linestyle="--", linewidth=1, label="most frequent labels")
    elif constant is not None:  # far below them: a line would flatten every difference between the arms
        ax.text(0.01, 0.02, f"most frequent labels: P@1 {constant:.3f}, below the axis", transform=ax.transAxes,
                fontsize=8, color="0.3")
    bottom, top = ax.get_ylim()
    for widths, color in misfits:  # on the axis, once every line has set the limits
        ax.scatter(widths, [bottom] * len(widths), marker="x", color=color, clip_on=False, zorder=3)
    ax.set_ylim(bottom, top)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("hidden units H (x on the axis: does not fit the cap)")
    ax.set_ylabel("test P@1")
    shape = doc.get("shape", {})
    data = next(iter(doc["configs"].values()))["resolved"]["data"]["name"] if doc.get("configs") else ""
    name = (f"synthetic ({shape['features']:,} features, {shape['labels']:,} labels)" if data == "xmc_synthetic"
            else "xmc-debian-deps")
    ax.set_title(f"{name}, {doc['cap']} per rank")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: no point hidden under it
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m experiments.extreme.study", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cap", default="1.9GiB", help="memory limit per rank (cgroup and runtime.memory_limit)")
    ap.add_argument("--config", default=CONFIG, help="the config every cell trains (its data, K, B, rounds' eval)")
    ap.add_argument("--widths", default="128,256,512,1024", help="hidden widths")
    ap.add_argument("--arms", default="ist:2,data_parallel:2,local_sgd:2", help="algorithm:ranks, comma-separated")
    ap.add_argument("--seeds", default="0,1,2")
    span = ap.add_mutually_exclusive_group()
    span.add_argument("--samples", type=int, default=None,
                      help="samples every arm trains (rounds of P x K x B each; default 102,400)")
    span.add_argument("--rounds", type=int, default=None,
                      help="rounds every arm trains, whatever its samples a round (memory and time studies)")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per run before it is killed")
    ap.add_argument("--workdir", default="runs/extreme")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--only", default="", help="comma-separated cell labels to train (the file keeps every cell)")
    ap.add_argument("--figure", default=str(FIGURE),
                    help="the P@1-against-H figure, drawn after every run ('': none)")
    ap.add_argument("--replot", action="store_true", help="only redraw the figure from the results file --out")
    ap.add_argument("--rewrite", action="store_true",
                    help="train nothing: rewrite the results file and the figure from the runs in --workdir")
    ap.add_argument("--baselines", action="store_true",
                    help="train nothing: record the trivial baselines of the data in the results file --out")
    tune = ap.add_argument_group("tuning (experiments.extreme.tuning)")
    tune.add_argument("--tune", action="store_true",
                      help="first choose each arm's Adam rate (and its state, where the algorithm reads it) on a "
                           "tuning split of the training points at one width, seed 0, runs under WORKDIR/tuning; "
                           "every width then trains at its arm's choice, recorded in --out as 'tuning'")
    tune.add_argument("--tune-width", type=int, default=None,
                      help="the width the arms are tuned at (default: the largest every arm fitted at under the "
                           "same cap in --out, an earlier run of the study)")
    tune.add_argument("--tune-samples", type=int, default=None,
                      help="samples a tuning run trains (default a quarter of --samples; with --rounds, a quarter "
                           "of the rounds)")
    tune.add_argument("--tune-rates", default=",".join(map(str, tuning_lib.RATES)),
                      help="Adam's rates tried, comma-separated")
    tune.add_argument("--tune-states", default=",".join(tuning_lib.STATES),
                      help="Adam's states tried where the algorithm reads one ('reset': restarted every round, "
                           "'carry'); 'reset' alone keeps the memory IST's widest cells fit in")
    return ap.parse_args(argv)


def tuning_record(args: argparse.Namespace, arms: Sequence[tuple[str, int]], cap: int,
                  train) -> Optional[dict[str, Any]]:
    """The tuning record the reported cells train at (`experiments.extreme.tuning`): ``--tune``'s, its runs trained
    with ``train`` at ``--tune-width`` (or the width `tuning.tuning_width` reads from ``--out``) on a quarter of the
    budget; with ``--rewrite``, the one ``--out`` records (its runs trained at it); None without either. A
    ValueError for a budget, width or grid that cannot be tuned at."""
    if args.rewrite:
        record = recorded_tuning(args.out)
        if args.tune and record is None:
            raise ValueError(f"--rewrite --tune: {args.out} records no tuning stage; run the study with --tune")
        return record
    if not args.tune:
        return None
    width = args.tune_width or tuning_lib.tuning_width(args.out, arms, cap)
    rounds = None if args.rounds is None else max(1, args.rounds // 4)
    samples = None if rounds is not None else (args.tune_samples or (args.samples or SAMPLES) // 4)
    try:
        at_width = cells(arms, [width], cap, rounds, args.config, samples=samples)
    except ValueError as e:
        raise ValueError(f"the tuning budget (--tune-samples): {e}") from None
    try:
        rates = [float(r) for r in args.tune_rates.split(",")]
    except ValueError:
        raise ValueError(f"--tune-rates {args.tune_rates!r}: give comma-separated rates, e.g. 5e-4,1e-3,2e-3"
                         ) from None
    return tuning_lib.run_tuning(tuning_lib.tuning_arms(at_width), args.workdir, train=train, root=ROOT,
                                 rates=rates, states=args.tune_states.split(","), earlier=recorded_tuning(args.out),
                                 width=width, samples=samples, rounds=rounds)


def baselines(out: os.PathLike) -> dict[str, Any]:
    """The trivial baselines of the data the study at ``out`` trained on (`istjax.launch.baselines`: the
    most-frequent-labels predictor, every metric the task computes, on the split its runs are scored on) and the
    regime they set, from its first cell's resolved config; written into ``out`` (``--baselines``) and with every
    rewrite of it."""
    from istjax.launch.baselines import baseline_sections
    from istjax.launch.config import from_dict

    doc = json.loads(pathlib.Path(out).read_text())
    resolved = dict(next(iter(doc["configs"].values()))["resolved"])
    return baseline_sections(from_dict(resolved))


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.replot and args.figure:
        print(plot(json.loads(pathlib.Path(args.out).read_text()), pathlib.Path(args.figure)))
        return 0
    if args.baselines:
        from istjax.launch.baselines import record_sections

        print(record_sections(args.out, baselines(args.out)))
        return 0
    why = limits.missing_privileges()
    if why:
        print(f"extreme study: cannot make memory cgroups: {why}.", file=sys.stderr)
        return 2
    cap = parse_bytes(args.cap, "cap")
    arms = [(a, int(p)) for a, _, p in (s.partition(":") for s in args.arms.split(","))]
    samples = None if args.rounds is not None else (args.samples or SAMPLES)
    try:
        cells_ = cells(arms, [int(w) for w in args.widths.split(",")], cap, args.rounds, args.config, samples=samples)
    except ValueError as e:
        print(f"extreme study: {e}", file=sys.stderr)
        return 2
    seeds = [int(s) for s in args.seeds.split(",")]
    mpiexec = str(pathlib.Path(sys.executable).parent / "mpiexec")
    train = trainer(cap, args.timeout, mpiexec)
    try:
        tuned = tuning_record(args, arms, cap, train)
        if tuned is not None:
            cells_ = tuning_lib.applied(cells_, tuned)
    except ValueError as e:
        print(f"extreme study: {e}", file=sys.stderr)
        return 2
    except TuningError as e:  # an arm none of whose tuning runs trained
        print(f"extreme study: {e}", file=sys.stderr)
        return 1
    given = sys.argv[1:] if argv is None else list(argv)
    command = "python -m experiments.extreme.study " + " ".join(  # the command that trains them, not the rewrite
        a for a in given if a not in ("--rewrite",) and not a.startswith(("--out", "--figure", "--only")))
    started = study_lib.time.strftime("%Y-%m-%dT%H:%M:%S%z")
    every = study_lib.plan(cells_, seeds, args.workdir, root=ROOT)

    trivial: dict[str, Any] = {}

    def write(*_):
        runs = [r for p in every if (r := record(p)) is not None]
        doc = study_lib.results("extreme", command, every, runs, started)
        doc.update(cap_bytes=cap, cap=format_size(cap), config=args.config, shape=shape(every),
                   rows=rows(cells_, every, runs))
        if not trivial and pathlib.Path(args.out).exists():
            trivial.update(baselines(args.out))  # once: the data are the same for every run
        doc.update(trivial)
        if tuned is not None:
            doc["tuning"] = tuned
        study_lib.write_json(args.out, doc)
        if args.figure and any(r["fits"] for r in doc["rows"]):
            plot(doc, pathlib.Path(args.figure))

    if args.rewrite:
        write()
        return 0
    study_lib.run_study("extreme", cells_, seeds, args.workdir, root=ROOT,
                        only=[s for s in args.only.split(",") if s], train=train,
                        record=record, after_run=write)
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
