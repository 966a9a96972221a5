"""The transformer study's tables: ``experiments/text/results/study.json`` (``python -m experiments.text.study``).
Registered in `experiments.tables` when `experiments.report` imports this module."""

from __future__ import annotations

from typing import Optional

from experiments.tables import (ROUND_COLUMNS, baseline_rows, cell, markdown_table, nbytes, round_cells, scalar,
                               seconds_to_target, table)
from istjax.launch.metrics import format_mean_std

STUDY = "experiments/text/results/study.json"
NAMES = {"ist": "IST", "data_parallel": "data parallel", "local_sgd": "local SGD", "diloco": "DiLoCo"}
TOLERANCE = 0.05  # the issue's: IST within 0.05 nats per character of local SGD and of DiLoCo
BYTES_GOAL = {2: 0.6, 4: 0.35}  # the issue's: IST's bytes a round over local SGD's, at most


def _what(r: dict) -> str:
    if r["algorithm"] != "ist":
        return NAMES[r["algorithm"]]
    scaling = {"none": "no scaling", "train": "training-time scaling", "test": "test-time scaling"}[r["scaling"]]
    return f"IST by {r['split']}, {scaling}"


def _row(d, label: str) -> Optional[dict]:
    return next((r for r in d["rows"] if r["label"] == label), None)


def _loss(r: Optional[dict]) -> str:
    if r is None or r.get("val_loss_mean") is None:
        return "-"
    return format_mean_std(r["val_loss_mean"], r.get("val_loss_std"), len(r["seeds"]))


def _bytes_ratio(d, r: dict) -> Optional[float]:
    ls = _row(d, f"local_sgd_w{r['num_workers']}")
    return r["bytes_per_worker_per_round"] / ls["bytes_per_worker_per_round"] if ls else None


@table("text_study", STUDY, shows=("test_loss",))
def _study(d):
    rows = sorted(d["rows"], key=lambda r: (r["num_workers"], r["algorithm"] != "ist", r["label"]))
    body = markdown_table(
        ["W", "algorithm", "validation loss (nats/char)", "bytes a worker moves a round", "over local SGD's",
         "seconds a round"],
        [[cell(r["num_workers"]), _what(r), _loss(r), nbytes(r["bytes_per_worker_per_round"], binary=False),
          f"{_bytes_ratio(d, r):.2f}" if _bytes_ratio(d, r) is not None else "-",
          f"{r['time_per_round_s_mean']:.2f}"] for r in rows]
        + [["-", name, loss, "-", "-", "-"] for name, loss in baseline_rows(d, ("test_loss",))])
    first = rows[0]
    return (f"Shakespeare's plays (held-out plays), {cell(first['samples_seen'])} windows of 64 characters per run "
            f"(every cell the same), mean ± std over seeds; bytes both ways, the analytic count the runtime "
            f"reports; seconds a round on this machine's two cores (simulate runtime: the W workers share them).\n\n"
            + body)


def best_ist(d, w: int, split: str = "width") -> Optional[dict]:
    """The IST cell at W = ``w`` with the lowest mean validation loss (over its scalings) for ``split``."""
    mine = [r for r in d["rows"] if r["algorithm"] == "ist" and r["num_workers"] == w and r["split"] == split
            and r.get("val_loss_mean") is not None]
    return min(mine, key=lambda r: r["val_loss_mean"]) if mine else None


def _target(d, w: int) -> str:
    """The issue's accuracy target at W = ``w``: IST's best within TOLERANCE of local SGD's and of DiLoCo's mean."""
    ist = best_ist(d, w)
    others = [r for r in (_row(d, f"local_sgd_w{w}"), _row(d, f"diloco_w{w}")) if r is not None]
    if ist is None or len(others) < 2:
        return "not measured"
    gaps = {NAMES[r["algorithm"]]: ist["val_loss_mean"] - r["val_loss_mean"] for r in others}
    missed = [f"{k} by {v:+.3f}" for k, v in gaps.items() if v > TOLERANCE]
    return "met" if not missed else "missed (" + ", ".join(missed) + ")"


def _bytes_target(d, w: int) -> str:
    ist = best_ist(d, w)
    ratio = _bytes_ratio(d, ist) if ist else None
    if ratio is None:
        return "not measured"
    return f"{ratio:.2f} ({'met' if ratio <= BYTES_GOAL[w] else 'missed'}: at most {BYTES_GOAL[w]})"


for _w in (2, 4):
    scalar(f"text.target_w{_w}", STUDY, lambda d, w=_w: _target(d, w))
    scalar(f"text.bytes_w{_w}", STUDY, lambda d, w=_w: _bytes_target(d, w))
    scalar(f"text.best_ist_w{_w}", STUDY, lambda d, w=_w: (lambda r: f"{_what(r)}, {_loss(r)}" if r else "-")(
        best_ist(d, w)))
    scalar(f"text.local_sgd_w{_w}", STUDY, lambda d, w=_w: _loss(_row(d, f"local_sgd_w{w}")))
    scalar(f"text.diloco_w{_w}", STUDY, lambda d, w=_w: _loss(_row(d, f"diloco_w{w}")))
    scalar(f"text.data_parallel_w{_w}", STUDY, lambda d, w=_w: _loss(_row(d, f"data_parallel_w{w}")))
    scalar(f"text.depth_w{_w}", STUDY, lambda d, w=_w: _loss(best_ist(d, w, "depth")))


@table("text_samples", STUDY)
def _samples(d):
    s = d.get("samples")
    if not s:
        return "(no generated texts in the results file yet: `python -m experiments.text.study --text`)"
    parts = [f"Each cell's seed-{s['seed']} model, prompted with {s['prompt']!r}, temperature {s['temperature']} "
             f"(`python -m experiments.text.study --text`):"]
    for label, text in s["texts"].items():
        r = _row(d, label)
        if r is None:  # a sample of a cell the study no longer has
            continue
        parts.append(f"**{_what(r)}, W = {r['num_workers']}** (validation loss {_loss(r)}):\n\n```text\n"
                     f"{text.strip()}\n```")
    return "\n\n".join(parts)


# Time to a validation-loss target on a shaped link (`python -m experiments.text.network`).
NETWORK = "experiments/text/results/network.json"


@table("text_network", NETWORK)
def _network(d):
    body = markdown_table(
        ["link", "algorithm", "seconds to target", *ROUND_COLUMNS],
        [[r["link"], NAMES[r["algorithm"]], seconds_to_target(r), *round_cells(r)] for r in d["summary"]])
    return (f"The transformer on {d['ranks']} MPI processes in network namespaces, one worker each, to validation "
            f"loss <= {d['target']} nats per character (training seconds: compilation and evaluation excluded; at "
            f"most {d['samples']:,} windows a run), mean ± std over the seeds that reached it.\n\n" + body)


def _race(d, other: str) -> str:
    """IST's seconds to the target against ``other``'s on the slowest link (means over the seeds that reached it)."""
    rows = {r["algorithm"]: r for r in d["summary"]}
    ist, them = rows.get("ist"), rows.get(other)
    if not ist or not them or not ist["reached"]:
        return "not measured"
    if not them["reached"]:
        return f"IST reached it; {NAMES[other]} did not"
    ratio = them["seconds_to_target"] / ist["seconds_to_target"]
    return f"{ratio:.1f}x sooner" if ratio > 1 else f"{1 / ratio:.1f}x later"


scalar("text.network.ist_vs_data_parallel", NETWORK, lambda d: _race(d, "data_parallel"))
scalar("text.network.ist_vs_diloco", NETWORK, lambda d: _race(d, "diloco"))


# The study's IST cells on the MPI runtime (`python -m experiments.text.study --mpi parameter_server,sharded`).
MPI = "experiments/text/results/mpi.json"
MODES = {"parameter_server": "parameter server", "sharded": "sharded (stratified sampler, evaluated in place)"}


@table("text_mpi", MPI)
def _mpi(d):
    import json
    import pathlib

    simulate = json.loads((pathlib.Path(__file__).resolve().parents[2] / STUDY).read_text())
    rows = sorted(d["rows"], key=lambda r: (r["num_workers"], r["mode"], r["split"]))
    body = markdown_table(
        ["W", "cell", "runtime", "validation loss (nats/char)", "same cell, simulate", "seconds a round"],
        [[cell(r["num_workers"]), _what(r), f"MPI, {MODES[r['mode']]}", _loss(r),
          _loss(_row(simulate, r["label"].removesuffix(f"_{r['mode']}"))),
          f"{r['time_per_round_s_mean']:.2f}"] for r in rows])
    return (f"The study's IST cells trained by `mpiexec -n W` processes (one worker each; {cell(rows[0]['samples_seen'])} "
            f"windows a run, the seeds of the simulate study), mean ± std over seeds.\n\n" + body)


scalar("text.trigram", STUDY, lambda d: cell(d["baselines"]["trigram"]["test_loss"]))  # the regime baseline
