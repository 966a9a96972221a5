"""Time to accuracy on a real slow network: IST vs data parallel vs local SGD, the IST paper's headline claim.

Run as root from the repository root (with ``ISTJAX_DATA_DIR`` pointing at the folder holding FSDD)::

    python -m experiments.network.time_to_accuracy                       # 2-layer model, 2 ranks, 1 and 10 Gbit/s
    python -m experiments.network.time_to_accuracy --models 2,3 --ranks 2,4 --links 1gbit,10gbit --seeds 0,1,2
    python -m experiments.network.time_to_accuracy --models 2 --links 100mbit --append   # add runs to results.json
    python -m experiments.network.time_to_accuracy --render              # redraw results.md / .png only
    python -m experiments.network.time_to_accuracy --baselines           # record the linear baseline, train nothing

Every (model, rank count, link rate, algorithm) is a cell of the library's study runner (`istjax.launch.study`),
trained once per seed of ``--seeds`` into ``--workdir`` (default ``runs/network/<dataset>``; a finished run with the
same config is reused, so a study cut short continues where it stopped): for each run it builds the namespaces and
shaped links of `experiments.network.slow_net`, launches ``istjax train`` on them as a child process
(`istjax.launch.study.child_command` behind slow_net's command) with ``--config.runtime.name=mpi`` and
``--config.seed`` (one worker per rank, the paper's setting), stops at the first evaluation at or above ``--target``
(``stop_at_target``), and reads the run's ``summary.json``: the training seconds to the target, the rounds, the
bytes, and the links' byte counters. Compilation and evaluation are excluded: every run first trains one warm-up
round, which compiles its step and is dropped; its time is the row's ``compile_time_s``. A run that does not reach
the target within ``--max-rounds`` or ``--timeout`` seconds is recorded as such. Results go to ``--out`` (default
``experiments/network/results.json``, with ``results.md`` and a plot of test accuracy against training seconds,
``results.png``): per model, rank count and link, each algorithm's seconds to the target (mean and sample standard
deviation over the seeds), and IST's ``speedup_vs_data_parallel`` and ``speedup_vs_local_sgd`` taken seed by seed
and averaged (the paper: 10.6x and 4.2x for the 2-layer model, 16.6x and 6.1x for the 3-layer), and per model and
rank count the link rate at which data parallel would catch IST up (`catch_up`, fitted from the mean round times
on two links or more).

Files written before ``--seeds`` hold one run per cell, no ``seed`` (taken as 0, the configs' seed) and no
``compile_time_s``: their first round counted compilation.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional

from experiments.grid import cell_baselines, recorded_baselines, seed_list
from experiments.network import slow_net
from istjax.launch import study
from istjax.launch.metrics import read_metrics
from istjax.launch.study import mean_std

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
ALGORITHMS = ("ist", "data_parallel", "local_sgd")
LABELS = {"ist": "IST", "data_parallel": "data parallel", "local_sgd": "local SGD"}
CONFIGS = {"fsdd": "fsdd_speech.py", "keywords": "keywords_speech.py"}  # --dataset -> experiments/configs/
NAMES = {"fsdd": "FSDD", "keywords": "the synthesised keywords"}
PAPER = {"2": {"speedup_vs_data_parallel": 10.6, "speedup_vs_local_sgd": 4.2},
         "3": {"speedup_vs_data_parallel": 16.6, "speedup_vs_local_sgd": 6.1}}
RUN_KEY = ("model", "ranks", "link", "algorithm")  # with the seed, what names a run (--append replaces on it)


def cell(model: str, algorithm: str, ranks: int, rate: str, *, target: float, max_rounds: int,
         dataset: str = "fsdd", extra: Sequence[str] = ()) -> study.Cell:
    """One (model, ranks, link, algorithm) of the study: ``experiments/configs/<dataset config>:<model>`` on the MPI
    runtime, one worker per rank, evaluated every round, stopping at ``target``."""
    return study.Cell(
        f"m{model}-r{ranks}-{rate}-{algorithm}", f"experiments/configs/{CONFIGS[dataset]}:{model}",
        (f"--config.algorithm.name={algorithm}", "--config.runtime.name=mpi", f"--config.num_workers={ranks}",
         f"--config.target_accuracy={target}", "--config.stop_at_target=True", "--config.eval_every=1",
         f"--config.num_rounds={max_rounds}", f"--config.checkpoint_every={max_rounds}", *extra),
        {"model": model, "ranks": ranks, "link": rate, "algorithm": algorithm})


def train_command(model: str, algorithm: str, ranks: int, workdir: pathlib.Path, *, target: float,
                  max_rounds: int, dataset: str = "fsdd", seed: int = 0, extra: Sequence[str] = ()) -> list[str]:
    """The ``istjax train`` line every rank runs (`istjax.launch.study.child_command` of the run)."""
    c = cell(model, algorithm, ranks, "any", target=target, max_rounds=max_rounds, dataset=dataset, extra=extra)
    return study.child_command(study.Planned(c, seed, pathlib.Path(workdir), None), ROOT)


def _files(p: study.Planned) -> tuple[pathlib.Path, pathlib.Path]:
    """Beside a run's directory: the links' report (slow_net ``--report``) and the job's (exit status, seconds)."""
    return p.run_dir.with_name(p.run_dir.name + ".net.json"), p.run_dir.with_name(p.run_dir.name + ".job.json")


def _log(p: study.Planned) -> pathlib.Path:
    """Beside a run's directory: everything its job printed (for a job killed at its timeout, slow_net's
    `~experiments.network.slow_net.snapshot`: the ranks' stacks, their TCP sockets and queues)."""
    return p.run_dir.with_name(p.run_dir.name + ".log")


def launch(p: study.Planned, *, timeout: float, tag: str) -> Optional[str]:
    """Trains run ``p`` across ``ranks`` namespaces on links of its rate (slow_net wrapping its ``istjax train``
    line); writes the job's exit status, seconds and error beside it, and all it printed (`_log`); returns the
    error, or None."""
    net, job = _files(p)
    info = p.cell.info
    cmd = [sys.executable, "-m", "experiments.network.slow_net", "--hosts", str(info["ranks"]), "--rate",
           info["link"], "--tag", tag, "--report", str(net), "--timeout", str(timeout), "--",
           *study.child_command(p, ROOT)]
    p.run_dir.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    _log(p).write_text(out.stdout + out.stderr)
    error = (out.stderr or out.stdout)[-2000:] if out.returncode or not (p.run_dir / "summary.json").exists() else None
    study.write_json(job, {"returncode": out.returncode, "job_wall_s": time.time() - t0, "error": error})
    return error


def trainer(timeout: float, prefix: str) -> Callable[[study.Planned], Optional[str]]:
    """The study runner's ``train`` for a study on shaped links: announces each run, then `launch`es it with a tag
    of its own (``prefix``, at most 3 characters, and a count below 1000: slow_net's names allow 6)."""
    tags = itertools.count()

    def train(p: study.Planned) -> Optional[str]:
        print(f"{p.cell.label}, seed {p.seed} ...", flush=True)
        return launch(p, timeout=timeout, tag=f"{prefix}{next(tags) % 1000}")

    return train


def row(p: study.Planned) -> Optional[dict[str, Any]]:
    """One run's row (None before it ran): its summary's numbers, the accuracy curve, the links' counters, the
    job's exit status and seconds, and the commit that trained it."""
    net, job = _files(p)
    if not job.exists():
        return None
    ran = json.loads(job.read_text())
    out: dict[str, Any] = {**{k: p.cell.info[k] for k in RUN_KEY}, "seed": p.seed,
                           "returncode": ran["returncode"], "job_wall_s": ran["job_wall_s"]}
    summary = p.run_dir / "summary.json"
    if summary.exists():
        s = json.loads(summary.read_text())
        out.update({k: s.get(k) for k in ("rounds", "test_accuracy", "time_to_target_s", "round_to_target",
                                          "samples_to_target", "time_per_round_s", "compile_time_s",
                                          "bytes_sent_per_worker_per_round", "bytes_total")})
        out.update(commit=(s.get("code") or {}).get("commit"), clean=(s.get("code") or {}).get("clean"))
    if (p.run_dir / "metrics.jsonl").exists():  # the accuracy curve: (training seconds, test accuracy) per evaluation
        out["curve"] = [(r["wall_time_s"], r["test_accuracy"]) for r in read_metrics(p.run_dir)
                        if r.get("test_accuracy") is not None and r.get("wall_time_s") is not None]
    if net.exists():
        out["links"] = json.loads(net.read_text())["links"]
    if ran.get("error"):
        out["error"] = ran["error"]
    return out


def _keys(rows: list[dict[str, Any]]) -> list[tuple[str, int, str]]:
    """The (model, ranks, link) of the runs, links in order of rate (slowest first)."""
    return sorted({(r["model"], r["ranks"], r["link"]) for r in rows},
                  key=lambda k: (k[0], k[1], slow_net.Link(k[2]).bits_per_second()))


def seed_of(row: dict[str, Any]) -> int:
    """A run's seed: runs recorded before ``--seeds`` carry none and trained the configs' seed, 0."""
    return row.get("seed", 0)


def _seconds_by_seed(rows: list[dict[str, Any]], key: tuple[str, int, str]) -> dict[str, dict[int, Optional[float]]]:
    """Per algorithm, per seed: the seconds to the target of the runs of ``key`` (model, ranks, link); None where
    the run did not reach it."""
    out: dict[str, dict[int, Optional[float]]] = {}
    for r in rows:
        if (r["model"], r["ranks"], r["link"]) == key:
            out.setdefault(r["algorithm"], {})[seed_of(r)] = r.get("time_to_target_s") or None
    return out


def _ratios(ist: dict[int, Optional[float]], other: dict[int, Optional[float]], name: str) -> dict[str, Any]:
    """IST's speed-up over another algorithm, seed by seed (each seed's IST run against the other's run of the same
    seed), over the seeds where both reached the target: ``name`` the mean (None where no seed counts),
    ``name_std`` the sample standard deviation (None under two seeds), ``name_min``, ``name_max``, and
    ``name_seeds`` the seeds counted."""
    seeds = sorted(s for s in ist if ist[s] and other.get(s))
    per_seed = [other[s] / ist[s] for s in seeds]
    mean, std = mean_std(per_seed)
    return {name: mean, f"{name}_std": std, f"{name}_min": min(per_seed, default=None),
            f"{name}_max": max(per_seed, default=None), f"{name}_seeds": seeds}


def speedups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, ranks, link): each algorithm's seconds to the target over the seeds, and IST's speed-ups.

    Each entry holds ``seeds`` (the seeds run); per algorithm ``seconds_to_target`` and ``seconds_to_target_std``
    (mean and sample standard deviation over the seeds that reached the target; None where none did, the standard
    deviation None under two), ``seconds_by_seed`` (``[[seed, seconds or None], ...]``) and ``reached`` (how many
    seeds reached the target); ``speedup_vs_data_parallel`` and ``speedup_vs_local_sgd`` with their ``_std``,
    ``_min``, ``_max`` and ``_seeds`` (`_ratios`: per seed, then the mean; a seed whose run of either algorithm
    missed the target is left out); ``paper``, the paper's speed-ups for the model.
    """
    out = []
    for model, ranks, link in _keys(rows):
        t = _seconds_by_seed(rows, (model, ranks, link))
        stats = {a: mean_std(per.values()) for a, per in t.items()}
        entry: dict[str, Any] = {
            "model": model, "ranks": ranks, "link": link, "seeds": sorted({s for per in t.values() for s in per}),
            "seconds_to_target": {a: m for a, (m, _) in stats.items()},
            "seconds_to_target_std": {a: s for a, (_, s) in stats.items()},
            "seconds_by_seed": {a: [[s, per[s]] for s in sorted(per)] for a, per in t.items()},
            "reached": {a: sum(v is not None for v in per.values()) for a, per in t.items()}}
        for other in ("data_parallel", "local_sgd"):
            entry.update(_ratios(t.get("ist", {}), t.get(other, {}), f"speedup_vs_{other}"))
        entry["paper"] = PAPER.get(model)
        out.append(entry)
    return out


def _round_points(rows: list[dict[str, Any]], model: str, ranks: int, algorithm: str) -> list[tuple[float, ...]]:
    """Per link its rate (Mbit/s), the mean seconds per round and the mean rounds over the seeds whose run reached
    the target."""
    by_link: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if ((r["model"], r["ranks"], r["algorithm"]) == (model, ranks, algorithm) and r.get("time_per_round_s")
                and r.get("time_to_target_s")):
            by_link.setdefault(r["link"], []).append(r)

    def rounds(rs):  # a whole number stays an int, as one seed gives
        m = mean_std(r["rounds"] for r in rs)[0]
        return int(m) if m.is_integer() else m
    return [(slow_net.Link(link).bits_per_second() / 1e6, mean_std(r["time_per_round_s"] for r in rs)[0],
             rounds(rs)) for link, rs in by_link.items()]


def catch_up(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, ranks): the link rate at which data parallel would reach the target as soon as IST.

    Fits every algorithm's round time over the links it ran on as ``compute_s + megabits / rate`` (least squares in
    ``1 / rate``; two links or more), from each link's mean seconds per round over the seeds (steady rounds: the
    warm-up round that compiles is not among them; in files from before ``--seeds`` the first round counted
    compilation), and solves ``R_dp * t_dp(rate) == R_ist * t_ist(rate)`` with the rounds ``R`` each took to the
    target (the mean over the seeds, the most over the links: taken as the same on every link). ``catch_up_mbit`` is
    None where data parallel never catches up (its compute alone takes longer), with the fits beside it.
    """
    import numpy as np

    out = []
    for model, ranks in sorted({(r["model"], r["ranks"]) for r in rows}):
        fits, rounds = {}, {}
        for a in ("ist", "data_parallel"):
            pts = _round_points(rows, model, ranks, a)
            if len(pts) < 2:
                continue
            inv, t = np.array([1 / p[0] for p in pts]), np.array([p[1] for p in pts])
            megabits, compute = np.polyfit(inv, t, 1)
            fits[a] = {"compute_s": float(compute), "megabits": float(megabits)}
            rounds[a] = max(p[2] for p in pts)
        if len(fits) < 2:
            continue
        i, d = fits["ist"], fits["data_parallel"]
        ri, rd = rounds["ist"], rounds["data_parallel"]
        gap = ri * i["compute_s"] - rd * d["compute_s"]  # > 0: IST's compute is the slower part; a fast link helps DP
        need = rd * d["megabits"] - ri * i["megabits"]
        rate = need / gap if gap > 0 and need > 0 else None
        out.append({"model": model, "ranks": ranks, "fits": fits, "rounds": rounds, "catch_up_mbit": rate})
    return out


def seconds_cell(entry: dict[str, Any], algorithm: str) -> str:
    """An algorithm's seconds to the target in a `speedups` entry: '7.1', '7.1 ± 0.3' over several seeds, with
    '(2 of 3)' where only some seeds reached it; 'not reached'; '-' where it did not run."""
    if algorithm not in entry["seconds_to_target"]:
        return "-"
    mean = entry["seconds_to_target"][algorithm]
    if mean is None:
        return "not reached"
    std = entry.get("seconds_to_target_std", {}).get(algorithm)
    runs = len(entry.get("seconds_by_seed", {}).get(algorithm, [None]))
    reached = entry.get("reached", {}).get(algorithm, runs)
    return f"{mean:.1f}" + (f" ± {std:.1f}" if std is not None else "") + (
        f" ({reached} of {runs})" if reached < runs else "")


def ratio_cell(entry: dict[str, Any], name: str) -> str:
    """A speed-up of a `speedups` entry (``name``, e.g. 'speedup_vs_data_parallel'): '5.8x', '5.8 ± 0.4x' over
    several seeds, with '(2 of 3 seeds)' where only some seeds count; 'not reached'."""
    mean, std = entry.get(name), entry.get(f"{name}_std")
    if mean is None:
        return "not reached"
    runs, counted = len(entry.get("seeds", [None])), len(entry.get(f"{name}_seeds", [None]))
    return (f"{mean:.1f} ± {std:.1f}x" if std is not None else f"{mean:.1f}x") + (
        f" ({counted} of {runs} seeds)" if counted < runs else "")


def compile_times(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Per algorithm, the mean ``compile_time_s`` (the warm-up round) of the runs that recorded one."""
    times: dict[str, list[float]] = {}
    for r in runs:
        if r.get("compile_time_s") is not None:
            times.setdefault(r["algorithm"], []).append(r["compile_time_s"])
    return {a: mean_std(times[a])[0] for a in ALGORITHMS if a in times}


def _notes(result: dict[str, Any]) -> list[str]:
    """The lines under the speed-up table: the seeds (where there are several) and the warm-up round (where the
    runs recorded it); none for a file of one seed from before ``--seeds``."""
    seeds = sorted({s for e in result["speedups"] for s in e.get("seeds", [])})
    notes = []
    if len(seeds) > 1:
        notes.append(f"Mean ± sample standard deviation over seeds {', '.join(map(str, seeds))}. IST's speed-ups "
                     "are taken seed by seed (each IST run against the other algorithm's run of the same seed), "
                     "then averaged; '(2 of 3)': only that many seeds reached the target and count."
                     + (" The round-time fit below uses each link's mean seconds per round over the seeds."
                        if result.get("catch_up") else ""))
    warm = compile_times(result.get("runs", []))
    if warm:
        notes.append("Compilation excluded: every run first trains one warm-up round, which compiles its step and "
                     "is dropped; it took (compilation plus one round's work, mean over the runs) "
                     + ", ".join(f"{LABELS[a]} {s:.1f} s" for a, s in warm.items()) + ".")
    return [line for note in notes for line in ("", note)]


def _catch_up_lines(result: dict[str, Any]) -> list[str]:
    """The catch-up table (`catch_up`), or nothing where no model ran on two links."""
    if not result.get("catch_up"):
        return []
    lines = ["", "Round time fitted as compute + megabits / link rate; the link at which data parallel would "
             "reach the target as soon as IST:", "",
             "| model | ranks | IST round | data parallel round | data parallel catches up at |",
             "|---|---|---|---|---|"]
    for c in result["catch_up"]:
        i, d = c["fits"]["ist"], c["fits"]["data_parallel"]
        at = (f"{c['catch_up_mbit'] / 1000:.1f} Gbit/s" if c["catch_up_mbit"]
              else "never (its compute alone is slower)")
        lines.append(f"| {c['model']}-layer | {c['ranks']} | {i['compute_s']:.2f} s + {i['megabits']:.0f} Mbit / "
                     f"rate | {d['compute_s']:.2f} s + {d['megabits']:.0f} Mbit / rate | {at} |")
    return lines


def markdown(result: dict[str, Any]) -> str:
    """The speed-up table (seconds as mean ± std and ratios as mean ± std x where there are several seeds), its
    notes, and the catch-up table."""
    data = NAMES.get(result.get("dataset"), "FSDD")
    lines = [f"Time to {result['target']} test accuracy on {data} (training seconds; compilation and evaluation "
             f"excluded), MPI across network namespaces, links shaped with tc", "",
             "| model | ranks | link | IST (s) | data parallel (s) | local SGD (s) | IST vs DP | IST vs local SGD | "
             "paper (DP, local SGD) |", "|---|---|---|---|---|---|---|---|---|"]
    for e in result["speedups"]:
        p = e["paper"] or {}
        lines.append(f"| {e['model']}-layer | {e['ranks']} | {e['link']} | "
                     + " | ".join(seconds_cell(e, a) for a in ALGORITHMS) + " | "
                     f"{ratio_cell(e, 'speedup_vs_data_parallel')} | {ratio_cell(e, 'speedup_vs_local_sgd')} | "
                     f"{p.get('speedup_vs_data_parallel', '')}x, {p.get('speedup_vs_local_sgd', '')}x |")
    return "\n".join(lines + _notes(result) + _catch_up_lines(result)) + "\n"


COLORS = {"ist": "tab:blue", "data_parallel": "tab:red", "local_sgd": "tab:green"}


def plot(result: dict[str, Any], path: pathlib.Path) -> pathlib.Path:
    """Test accuracy against training seconds, one panel per (model, ranks, link), one line per run (an
    algorithm's seeds in its colour)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    keys = _keys(result["runs"])
    setups = list(dict.fromkeys(k[:2] for k in keys))  # one row of panels per (model, ranks)
    links = list(dict.fromkeys(k[2] for k in sorted(keys, key=lambda k: slow_net.Link(k[2]).bits_per_second())))
    fig, axes = plt.subplots(len(setups), len(links), figsize=(4.2 * len(links), 3.4 * len(setups)),
                             squeeze=False, sharey=True)
    for (i, setup), (j, link) in itertools.product(enumerate(setups), enumerate(links)):
        ax, (model, ranks) = axes[i][j], setup
        curves = [r for r in result["runs"]
                  if (r["model"], r["ranks"], r["link"]) == (model, ranks, link) and r.get("curve")]
        if not curves:
            ax.axis("off")
            ax.text(0.5, 0.5, f"{model}-layer, {ranks} ranks, {link}:\nnot run", ha="center", va="center",
                    transform=ax.transAxes, color="gray")
            continue
        for r in curves:
            t, acc = zip(*r["curve"])
            ax.plot(t, acc, "o-", color=COLORS.get(r["algorithm"]), label=r["algorithm"].replace("_", " "))
        ax.axhline(result["target"], color="gray", ls=":", lw=1)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title(f"{model}-layer, {ranks} ranks, {link}")
        if i == len(setups) - 1:
            ax.set_xlabel("training seconds")
    for row in axes:  # the first panel drawn in each row carries the accuracy axis
        first = next((ax for ax in row if ax.axison), None)
        if first is not None:
            first.set_ylabel("test accuracy")
            first.yaxis.set_tick_params(labelleft=True)
    labelled = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            labelled.setdefault(label, handle)
    if labelled:
        axes[0][0].legend(labelled.values(), labelled.keys(), loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m experiments.network.time_to_accuracy",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="2", help="comma-separated: 2 and/or 3 (layers)")
    ap.add_argument("--ranks", default="2", help="comma-separated rank counts (one worker each)")
    ap.add_argument("--links", default="1gbit,10gbit", help="comma-separated link rates (tc units)")
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--seeds", type=seed_list, default=[0],
                    help="comma-separated seeds (--config.seed), each cell run once per seed; the table gives the "
                         "mean ± sample std over them and IST's speed-ups seed by seed (default: 0)")
    ap.add_argument("--dataset", default="fsdd", choices=sorted(CONFIGS),
                    help="fsdd (spoken digits) or keywords (synthesised Speech Commands words; use another --out)")
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--max-rounds", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run before it is killed")
    ap.add_argument("--out", default=str(ROOT / "experiments" / "network" / "results.json"))
    ap.add_argument("--workdir", default=None, help="where the runs go (default runs/network/<dataset>); a finished "
                                                    "run there with the same config is reused")
    ap.add_argument("--append", action="store_true", help="keep the runs already in --out, replacing those measured "
                                                          "again (same model, ranks, link, algorithm and seed)")
    ap.add_argument("--render", action="store_true", help="only redraw the table and plot from --out's runs")
    ap.add_argument("--baselines", action="store_true", help="train nothing: record the data's trivial baseline (a "
                    "linear model trained full batch, experiments.grid.cell_baselines) in --out")
    return ap


def _check(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuses (``ap.error``) what cannot run: no privileges, no data, an unknown algorithm or link, an --append to a
    file of another data set or target."""
    why = slow_net.missing_privileges()
    if why:
        ap.error(why)
    if args.dataset == "fsdd" and not os.environ.get("ISTJAX_DATA_DIR"):
        ap.error("set ISTJAX_DATA_DIR to the folder holding fsdd-recordings.tar.gz (e.g. ../shared/data).")
    for a in args.algorithms.split(","):
        if a not in ALGORITHMS:
            ap.error(f"--algorithms: {a!r} is not one of {ALGORITHMS}")
    for rate in args.links.split(","):
        slow_net.Link(rate)  # validates the units before anything runs
    out = pathlib.Path(args.out)
    if args.append and out.exists():
        before = json.loads(out.read_text())
        if before.get("dataset", "fsdd") != args.dataset or before.get("target") != args.target:
            ap.error(f"--append: {out} holds {before.get('dataset', 'fsdd')} runs to {before.get('target')}; these "
                     f"would be {args.dataset} to {args.target}. Use another --out.")


def cells(args: argparse.Namespace) -> list[study.Cell]:
    """Every (model, ranks, link, algorithm) of ``args``, algorithms innermost (a seed's algorithms run one after
    the other, so that they see the same machine)."""
    return [cell(m, a, n, rate, target=args.target, max_rounds=args.max_rounds, dataset=args.dataset)
            for m, n, rate, a in itertools.product(args.models.split(","), [int(r) for r in args.ranks.split(",")],
                                                   args.links.split(","), args.algorithms.split(","))]


def run_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every cell (`cells`) once per seed of ``args``, by the study runner (a finished run in the workdir is
    reused); the rows of the runs this invocation asked for."""
    workdir = pathlib.Path(args.workdir or ROOT / "runs" / "network" / args.dataset)
    outcome = study.run_study("time_to_accuracy", cells(args), args.seeds, workdir, root=ROOT,
                              train=trainer(args.timeout, "tta"), record=row)
    for r in outcome.records:
        print(f"  {r['model']}-layer, {r['ranks']} ranks, {r['link']}, seed {r['seed']}, {r['algorithm']}: time to "
              f"target {r.get('time_to_target_s')} s, rounds {r.get('rounds')}, warm-up {r.get('compile_time_s')} s, "
              f"rc {r['returncode']}" + (f"\n  {r['error'][-300:]}" if "error" in r else ""), flush=True)
    return outcome.records


def run_key(row: dict[str, Any]) -> tuple:
    """What names a run: (model, ranks, link, algorithm, seed)."""
    return tuple(row[k] for k in RUN_KEY) + (seed_of(row),)


def merge(before: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``--append``: the runs of ``before`` not measured again in ``rows`` (same `run_key`), then ``rows``."""
    new = {run_key(r) for r in rows}
    return [r for r in before if run_key(r) not in new] + rows


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    ap = parser()
    args = ap.parse_args(argv)
    out = pathlib.Path(args.out)
    if args.render:
        before = json.loads(out.read_text())
        return write(before["runs"], out, before.get("target", args.target), None, before.get("dataset", "fsdd"))
    if args.baselines:  # the data of the study's first cell (every cell reads the same), in the file's own layout
        result = {**json.loads(out.read_text()), **cell_baselines(cells(args)[0])}
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {out}")
        return result
    _check(ap, args)
    command = " ".join(["python -m experiments.network.time_to_accuracy", *(sys.argv[1:] if argv is None else argv)])
    t0 = time.time()
    rows = run_all(args)
    wall = time.time() - t0
    if args.append and out.exists():
        before = json.loads(out.read_text())
        rows = merge(before["runs"], rows)
        wall += before.get("wall_s", 0.0)
    return write(rows, out, args.target, wall, args.dataset, command)


def write(rows: list[dict[str, Any]], out: pathlib.Path, target: float, wall: Optional[float],
          dataset: str = "fsdd", command: Optional[str] = None) -> dict[str, Any]:
    """Writes ``out`` (JSON: the command, the runs, each with the commit that trained it, speed-ups and catch-up
    fits), its ``.md`` table and ``.png`` plot. ``wall`` and ``command`` None: the file's own, when it has them; the
    file's trivial baselines (``--baselines``) are kept."""
    before = json.loads(out.read_text()) if out.exists() else {}
    wall = before.get("wall_s") if wall is None else wall
    command = before.get("command") if command is None else command
    result = {"target": target, "dataset": dataset, "runs": rows, "speedups": speedups(rows),
              "catch_up": catch_up(rows), "wall_s": wall, **recorded_baselines(out)}
    if command is not None:
        result = {"command": command, **result}
    out.write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    plot(result, out.with_suffix(".png"))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
