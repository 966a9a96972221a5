"""The extreme-classification study's tables: ``experiments/extreme/results/debian.json`` (``python -m
experiments.extreme.study``). Registered in `experiments.tables` when `experiments.report` imports this module.
"""

from __future__ import annotations

from experiments.tables import cell, markdown_table, nbytes, scalar, table
from istjax.launch.metrics import format_mean_std

DEBIAN = "experiments/extreme/results/debian.json"
NAMES = {"ist": "IST (sharded)", "data_parallel": "data parallel", "local_sgd": "local SGD",
         "tensor_parallel": "tensor parallel"}


def _metric(r: dict, name: str) -> str:
    if not r["fits"] or r.get(f"{name}_mean") is None:  # PSP@k: not in runs older than the metric
        return "-"
    return format_mean_std(r[f"{name}_mean"], r.get(f"{name}_std"), len(r["seeds"]))


def _why(r: dict) -> str:
    """A cell that does not fit: the kernel's line (the run without the prediction, or the run itself)."""
    if r["fits"]:
        return ""
    return r.get("observed") or r.get("predicted") or "did not train"


@table("extreme_debian", DEBIAN)
def _debian(d):
    rows = sorted(d["rows"], key=lambda r: (list(NAMES).index(r["algorithm"]), r["ranks"], r["hidden"]))
    body = markdown_table(
        ["algorithm", "ranks", "H", "fits", "peak RSS per rank", "cgroup peak", "P@1", "P@3", "P@5", "nDCG@5",
         "PSP@1", "PSP@5", "time per sample", "bytes per worker per round"],
        [[NAMES[r["algorithm"]], cell(r["ranks"]), cell(r["hidden"]), cell(r["fits"]),
          nbytes(r["peak_rss_bytes"]) if r.get("peak_rss_bytes") else "-",
          nbytes(r["cgroup_peak_bytes"]) if r.get("cgroup_peak_bytes") else "-",
          _metric(r, "precision_at_1"), _metric(r, "precision_at_3"), _metric(r, "precision_at_5"),
          _metric(r, "ndcg_at_5"), _metric(r, "psp_at_1"), _metric(r, "psp_at_5"),
          f"{r['time_per_sample_s'] * 1e6:.0f} µs" if r.get("time_per_sample_s") else "-",
          nbytes(r["bytes_per_worker_per_round"], binary=False) if r.get("bytes_per_worker_per_round") else "-"]
         for r in rows])
    misfits = [f"- {NAMES[r['algorithm']]}, {r['ranks']} ranks, H = {r['hidden']}: {_why(r)}"
               for r in rows if not r["fits"]]
    head = (f"xmc-debian-deps, every rank limited to {d['cap']} (its own cgroup; `runtime.memory_limit` the same), "
            f"{cell(rows[0].get('samples_seen'))} samples per run (every arm the same), mean ± std over seeds.")
    return "\n\n".join([head, body] + (["Cells that do not fit:\n\n" + "\n".join(misfits)] if misfits else []))


def _largest(d, algorithm: str) -> dict:
    fitting = [r for r in d["rows"] if r["algorithm"] == algorithm and r["fits"]]
    return max(fitting, key=lambda r: r["hidden"])


def _best(d, algorithms) -> dict:
    return max((r for r in d["rows"] if r["algorithm"] in algorithms and r["fits"]),
               key=lambda r: r["precision_at_1_mean"])


scalar("extreme.cap", DEBIAN, lambda d: d["cap"])
scalar("extreme.dp_largest", DEBIAN, lambda d: _largest(d, "data_parallel")["hidden"])
scalar("extreme.ist_largest", DEBIAN, lambda d: _largest(d, "ist")["hidden"])
scalar("extreme.ist_largest_p1", DEBIAN, lambda d: _metric(_largest(d, "ist"), "precision_at_1"))
scalar("extreme.replicated_best_p1", DEBIAN, lambda d: _metric(_best(d, ("data_parallel", "local_sgd")),
                                                               "precision_at_1"))
scalar("extreme.replicated_best", DEBIAN, lambda d: "{} at H = {}".format(
    NAMES[_best(d, ("data_parallel", "local_sgd"))["algorithm"]], _best(d, ("data_parallel", "local_sgd"))["hidden"]))

# The same study before `SparseMLP.rescale` existed (its IST cells: sub-networks without the H / h scaling).
NO_RESCALE = "experiments/extreme/results/debian_no_rescale.json"
scalar("extreme.no_rescale.ist_largest_p1", NO_RESCALE, lambda d: _metric(_largest(d, "ist"), "precision_at_1"))
scalar("extreme.no_rescale.commit", NO_RESCALE, lambda d: sorted({r["commit"][:7] for r in d["runs"]
                                                                  if r["label"].startswith("ist")})[0])
