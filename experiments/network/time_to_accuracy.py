"""Time to accuracy on a real slow network: IST vs data parallel vs local SGD, the IST paper's headline claim.

Run as root from the repository root (with ``ISTJAX_DATA_DIR`` pointing at the folder holding FSDD)::

    python -m experiments.network.time_to_accuracy                       # 2-layer model, 2 ranks, 1 and 10 Gbit/s
    python -m experiments.network.time_to_accuracy --models 2,3 --ranks 2,4 --links 1gbit,10gbit
    python -m experiments.network.time_to_accuracy --models 2 --links 100mbit --append   # add runs to results.json
    python -m experiments.network.time_to_accuracy --render              # redraw results.md / .png only

For every (model, rank count, link rate, algorithm) it builds the namespaces and shaped links of
`experiments.network.slow_net`, launches ``istjax train`` on them with ``--config.backend=mpi`` (one worker per
rank, the paper's setting), stops at the first evaluation at or above ``--target`` (``stop_at_target``), and reads
the run's ``summary.json``: the training seconds to the target (compilation and evaluation excluded), the rounds,
the bytes, and the links' byte counters. A run that does not reach the target within ``--max-rounds`` or
``--timeout`` seconds is recorded as such. Results go to ``--out`` (default ``experiments/network/results.json``,
with ``results.md`` and a plot of test accuracy against training seconds, ``results.png``):
per model, rank count and link, each algorithm's seconds to the target, and for IST ``speedup_vs_data_parallel``
and ``speedup_vs_local_sgd`` (the paper: 10.6x and 4.2x for the 2-layer model, 16.6x and 6.1x for the 3-layer),
and per model and rank count the link rate at which data parallel would catch IST up (`catch_up`, fitted from the
round times on two links or more).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any, Optional

from experiments.network import slow_net
from istjax.experiment.metrics import read_metrics

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
ALGORITHMS = ("ist", "data_parallel", "local_sgd")
CONFIGS = {"fsdd": "fsdd_speech.py", "keywords": "keywords_speech.py"}  # --dataset -> experiments/configs/
NAMES = {"fsdd": "FSDD", "keywords": "the synthesised keywords"}
PAPER = {"2": {"speedup_vs_data_parallel": 10.6, "speedup_vs_local_sgd": 4.2},
         "3": {"speedup_vs_data_parallel": 16.6, "speedup_vs_local_sgd": 6.1}}


def train_command(model: str, algorithm: str, ranks: int, workdir: pathlib.Path, *, target: float,
                  max_rounds: int, dataset: str = "fsdd", extra: Sequence[str] = ()) -> list[str]:
    """The ``istjax train`` line every rank runs."""
    return [sys.executable, "-m", "istjax.experiment.cli", "train",
            f"--config={ROOT / 'experiments' / 'configs' / CONFIGS[dataset]}:{model}",
            f"--config.algorithm={algorithm}", "--config.backend=mpi", f"--config.num_workers={ranks}",
            f"--config.target_accuracy={target}", "--config.stop_at_target=True", "--config.eval_every=1",
            f"--config.num_rounds={max_rounds}", f"--config.checkpoint_every={max_rounds}",
            "--config.progress=False", f"--workdir={workdir}", *extra]


def one_run(model: str, algorithm: str, ranks: int, rate: str, *, target: float, max_rounds: int,
            timeout: float, scratch: pathlib.Path, tag: str, dataset: str = "fsdd") -> dict[str, Any]:
    """One training run across ``ranks`` namespaces on links of ``rate``; its summary and the link counters."""
    workdir = scratch / f"m{model}-r{ranks}-{rate}-{algorithm}"
    report = scratch / f"{workdir.name}.net.json"
    cmd = [sys.executable, "-m", "experiments.network.slow_net", "--hosts", str(ranks), "--rate", rate, "--tag", tag,
           "--report", str(report), "--timeout", str(timeout), "--",
           *train_command(model, algorithm, ranks, workdir, target=target, max_rounds=max_rounds, dataset=dataset)]
    t0 = time.time()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    row: dict[str, Any] = {"model": model, "ranks": ranks, "link": rate, "algorithm": algorithm,
                           "returncode": out.returncode, "job_wall_s": time.time() - t0}
    summary = workdir / "summary.json"
    if summary.exists():
        s = json.loads(summary.read_text())
        row.update({k: s.get(k) for k in ("rounds", "test_accuracy", "time_to_target_s", "round_to_target",
                                          "samples_to_target", "time_per_round_s", "compile_time_s",
                                          "bytes_sent_per_worker_per_round", "bytes_total")})
    if (workdir / "metrics.jsonl").exists():  # the accuracy curve: (training seconds, test accuracy) per evaluation
        row["curve"] = [(r["wall_time_s"], r["test_accuracy"]) for r in read_metrics(workdir)
                        if r.get("test_accuracy") is not None and r.get("wall_time_s") is not None]
    if report.exists():
        row["links"] = json.loads(report.read_text())["links"]
    if out.returncode or not summary.exists():
        row["error"] = (out.stderr or out.stdout)[-2000:]
    return row


def _keys(rows: list[dict[str, Any]]) -> list[tuple[str, int, str]]:
    """The (model, ranks, link) of the runs, links in order of rate (slowest first)."""
    return sorted({(r["model"], r["ranks"], r["link"]) for r in rows},
                  key=lambda k: (k[0], k[1], slow_net.Link(k[2]).bits_per_second()))


def speedups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, ranks, link): seconds to the target per algorithm, and IST's speed-ups over the others."""
    out = []
    keys = _keys(rows)
    for model, ranks, link in keys:
        t = {r["algorithm"]: r.get("time_to_target_s") for r in rows
             if (r["model"], r["ranks"], r["link"]) == (model, ranks, link)}
        entry: dict[str, Any] = {"model": model, "ranks": ranks, "link": link, "seconds_to_target": t}
        ist = t.get("ist")
        for other in ("data_parallel", "local_sgd"):
            entry[f"speedup_vs_{other}"] = (t[other] / ist) if ist and t.get(other) else None
        entry["paper"] = PAPER.get(model)
        out.append(entry)
    return out


def catch_up(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, ranks): the link rate at which data parallel would reach the target as soon as IST.

    Fits every algorithm's round time over the links it ran on as ``compute_s + megabits / rate`` (least squares in
    ``1 / rate``; two links or more) and solves ``R_dp * t_dp(rate) == R_ist * t_ist(rate)`` with the rounds ``R``
    each took to the target (taken as the same on every link: the runs are seeded alike). ``catch_up_mbit`` is None
    where data parallel never catches up (its compute alone takes longer), with the fits beside it.
    """
    import numpy as np

    out = []
    for model, ranks in sorted({(r["model"], r["ranks"]) for r in rows}):
        fits, rounds = {}, {}
        for a in ("ist", "data_parallel"):
            pts = [(slow_net.Link(r["link"]).bits_per_second() / 1e6, r["time_per_round_s"], r.get("rounds"))
                   for r in rows if (r["model"], r["ranks"], r["algorithm"]) == (model, ranks, a)
                   and r.get("time_per_round_s") and r.get("time_to_target_s")]
            if len({p[0] for p in pts}) < 2:
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


def markdown(result: dict[str, Any]) -> str:
    data = NAMES.get(result.get("dataset"), "FSDD")
    lines = [f"Time to {result['target']} test accuracy on {data} (training seconds; compilation and evaluation "
             f"excluded), MPI across network namespaces, links shaped with tc", "",
             "| model | ranks | link | IST (s) | data parallel (s) | local SGD (s) | IST vs DP | IST vs local SGD | "
             "paper (DP, local SGD) |", "|---|---|---|---|---|---|---|---|---|"]

    def f(v, fmt="{:.1f}"):
        return fmt.format(v) if isinstance(v, (int, float)) else "not reached"

    for e in result["speedups"]:
        t, p = e["seconds_to_target"], e["paper"] or {}
        lines.append(f"| {e['model']}-layer | {e['ranks']} | {e['link']} | {f(t.get('ist'))} | "
                     f"{f(t.get('data_parallel'))} | {f(t.get('local_sgd'))} | "
                     f"{f(e['speedup_vs_data_parallel'], '{:.1f}x')} | {f(e['speedup_vs_local_sgd'], '{:.1f}x')} | "
                     f"{p.get('speedup_vs_data_parallel', '')}x, {p.get('speedup_vs_local_sgd', '')}x |")
    if result.get("catch_up"):
        lines += ["", "Round time fitted as compute + megabits / link rate; the link at which data parallel would "
                  "reach the target as soon as IST:", "",
                  "| model | ranks | IST round | data parallel round | data parallel catches up at |",
                  "|---|---|---|---|---|"]
        for c in result["catch_up"]:
            i, d = c["fits"]["ist"], c["fits"]["data_parallel"]
            at = (f"{c['catch_up_mbit'] / 1000:.1f} Gbit/s" if c["catch_up_mbit"]
                  else "never (its compute alone is slower)")
            lines.append(f"| {c['model']}-layer | {c['ranks']} | {i['compute_s']:.2f} s + {i['megabits']:.0f} Mbit / "
                         f"rate | {d['compute_s']:.2f} s + {d['megabits']:.0f} Mbit / rate | {at} |")
    return "\n".join(lines) + "\n"


COLORS = {"ist": "tab:blue", "data_parallel": "tab:red", "local_sgd": "tab:green"}


def plot(result: dict[str, Any], path: pathlib.Path) -> pathlib.Path:
    """Test accuracy against training seconds, one panel per (model, ranks, link), one line per algorithm."""
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


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m experiments.network.time_to_accuracy",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="2", help="comma-separated: 2 and/or 3 (layers)")
    ap.add_argument("--ranks", default="2", help="comma-separated rank counts (one worker each)")
    ap.add_argument("--links", default="1gbit,10gbit", help="comma-separated link rates (tc units)")
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--dataset", default="fsdd", choices=sorted(CONFIGS),
                    help="fsdd (spoken digits) or keywords (synthesised Speech Commands words; use another --out)")
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--max-rounds", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run before it is killed")
    ap.add_argument("--out", default=str(ROOT / "experiments" / "network" / "results.json"))
    ap.add_argument("--append", action="store_true", help="keep the runs already in --out, replacing those measured "
                                                          "again (same model, ranks, link and algorithm)")
    ap.add_argument("--render", action="store_true", help="only redraw the table and plot from --out's runs")
    args = ap.parse_args(argv)
    if args.render:
        before = json.loads(pathlib.Path(args.out).read_text())
        return write(before["runs"], pathlib.Path(args.out), before.get("target", args.target), None,
                     before.get("dataset", "fsdd"))
    why = slow_net.missing_privileges()
    if why:
        ap.error(why)
    if args.dataset == "fsdd" and not os.environ.get("ISTJAX_DATA_DIR"):
        ap.error("set ISTJAX_DATA_DIR to the folder holding fsdd-recordings.tar.gz (e.g. ../shared/data).")
    models, ranks = args.models.split(","), [int(r) for r in args.ranks.split(",")]
    links, algorithms = args.links.split(","), args.algorithms.split(",")
    for a in algorithms:
        if a not in ALGORITHMS:
            ap.error(f"--algorithms: {a!r} is not one of {ALGORITHMS}")
    for rate in links:
        slow_net.Link(rate)  # validates the units before anything runs
    out = pathlib.Path(args.out)
    if args.append and out.exists():
        before = json.loads(out.read_text())
        if before.get("dataset", "fsdd") != args.dataset or before.get("target") != args.target:
            ap.error(f"--append: {out} holds {before.get('dataset', 'fsdd')} runs to {before.get('target')}; these "
                     f"would be {args.dataset} to {args.target}. Use another --out.")
    rows = []
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="istjax-tta-") as scratch:
        for model in models:
            for n in ranks:
                for rate in links:
                    for a in algorithms:
                        print(f"{model}-layer, {n} ranks, {rate}: {a} ...", flush=True)
                        row = one_run(model, a, n, rate, target=args.target, max_rounds=args.max_rounds,
                                      timeout=args.timeout, scratch=pathlib.Path(scratch), tag=f"tta{len(rows)}",
                                      dataset=args.dataset)
                        print(f"  time to target {row.get('time_to_target_s')} s, rounds {row.get('rounds')}, "
                              f"rc {row['returncode']}" + (f"\n  {row['error'][-300:]}" if "error" in row else ""),
                              flush=True)
                        rows.append(row)
    wall = time.time() - t0
    if args.append and out.exists():
        key = ("model", "ranks", "link", "algorithm")
        new_keys = {tuple(r[k] for k in key) for r in rows}
        before = json.loads(out.read_text())
        rows = [r for r in before["runs"] if tuple(r[k] for k in key) not in new_keys] + rows
        wall += before.get("wall_s", 0.0)
    return write(rows, out, args.target, wall, args.dataset)


def write(rows: list[dict[str, Any]], out: pathlib.Path, target: float, wall: Optional[float],
          dataset: str = "fsdd") -> dict[str, Any]:
    """Writes ``out`` (JSON: the runs, speed-ups and catch-up fits), its ``.md`` table and ``.png`` plot."""
    if wall is None and out.exists():
        wall = json.loads(out.read_text()).get("wall_s")
    result = {"target": target, "dataset": dataset, "runs": rows, "speedups": speedups(rows),
              "catch_up": catch_up(rows), "wall_s": wall}
    out.write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    plot(result, out.with_suffix(".png"))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
