"""GIST benchmarks: sparse aggregation against memory bandwidth, round overhead, and throughput.

Run from the repository root::

    .venv/bin/python -m experiments.benchmarks.graph            # full, a few minutes on 2 CPU cores
    .venv/bin/python -m experiments.benchmarks.graph --quick    # CI-size smoke run

Workload: a generated contextual stochastic block model (`istjax.data.graphs.csbm`, average degree 10) and a
GraphSAGE with two hidden layers (LayerNorm), full-graph training, Adam. Studies (the issue's speed goals):

1. `istjax.graph.ops.mean_aggregate` of ``[N, H]`` features against a jitted copy of the ``[E, H]`` messages it
   gathers (the bytes it must at least read and write): goal >= 0.5 of the copy's rate;
2. partition + extract + merge as a share of a GIST round at K = 20: goal <= 10 %;
3. throughput, nodes per second (``W * K * N`` node updates per round over the round's time) of GIST at W = 2 and 4
   against full-model training (W = 1, the same code), side by side.

Ratios of medians measured interleaved in one process (`measure.interleaved`); results go to ``--out`` (default
``experiments/benchmarks/results_graph.json`` and ``.md``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import optax

import istjax
from experiments.benchmarks import measure
from experiments.benchmarks import run as suite
from experiments.tables import markdown_table
from istjax.data.graphs import as_dataset, csbm
from istjax.graph import ops
from istjax.graph import task as graph_task
from istjax.models import GraphSAGE

FULL = dict(num_nodes=20_000, hidden=128, features=64, batch=512, reps=3)
QUICK = dict(num_nodes=4_000, hidden=64, features=16, batch=128, reps=2)


def aggregation(shared: dict, hidden: int, reps: int) -> dict[str, Any]:
    g = shared["graph"]
    x = jax.device_put(np.random.default_rng(0).standard_normal((g.num_nodes, hidden), np.float32))
    msgs = jax.device_put(np.zeros((g.num_edges, hidden), np.float32))
    agg = jax.jit(ops.mean_aggregate)  # the graph as an argument, as in training (no constant-folded degrees)
    cp = measure.copy_fn()
    t = measure.interleaved({"aggregate": lambda: agg(g, x), "copy_messages": lambda: cp(msgs)}, reps)
    nbytes = g.num_edges * hidden * 4
    return {"nodes": g.num_nodes, "edges": g.num_edges, "hidden": hidden,
            "aggregate_s": t["aggregate"].median, "copy_s": t["copy_messages"].median,
            "aggregate_GBps": nbytes / t["aggregate"].median / 1e9, "copy_GBps": nbytes / t["copy_messages"].median / 1e9,
            "aggregate_vs_copy": t["copy_messages"].median / t["aggregate"].median,
            "timings": {k: v.as_dict() for k, v in t.items()}}


def _batches(n_train: int, w: int, k: int, b: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": jax.device_put(rng.integers(0, n_train, size=(w, k, b)).astype(np.float32)),
            "y": jax.device_put(rng.integers(0, 10, size=(w, k, b)).astype(np.int32))}


def overhead_and_throughput(task, shared: dict, batch: int, reps: int, workers: Sequence[int], k: int):
    """Round overhead of GIST at W = workers[1] and throughput at every W (full-model training at W = 1)."""
    n = shared["graph"].num_nodes
    rounds, over = {}, None
    for w in workers:
        alg = istjax.ist(task, optax.adam(1e-3), num_workers=w, local_steps=k)
        state = jax.jit(alg.init)(jax.random.key(0))
        b = _batches(n, w, k, batch)
        rounds[w] = (lambda alg=alg, state=state, b=b: alg.round(state, b, shared))
        if over is None and w > 1:
            over = measure.round_overhead(alg, state, b, reps, shared)
    t = measure.interleaved({str(w): fn for w, fn in rounds.items()}, reps)
    rows = [{"algorithm": "full model" if w == 1 else "gist", "W": w, "K": k, "round_s": t[str(w)].median,
             "nodes_per_s": w * k * n / t[str(w)].median} for w in workers]
    return over, rows


def run(quick: bool) -> dict[str, Any]:
    s = QUICK if quick else FULL
    t0 = time.time()
    data = csbm(num_nodes=s["num_nodes"], num_classes=10, num_features=s["features"], avg_degree=10.0, seed=0,
                num_val=100, num_test=500)
    dataset = as_dataset(data)
    shared = dataset.shared
    task = graph_task.node_classifier(GraphSAGE(hidden=(s["hidden"], s["hidden"]), num_classes=10,
                                                layer_norm=True), dataset)
    out: dict[str, Any] = {**suite.header(quick), "graph": repr(data), "hidden": s["hidden"]}
    print("1. aggregation vs copy", flush=True)
    out["aggregation"] = aggregation(shared, s["hidden"], s["reps"])
    print("2-3. round overhead and throughput", flush=True)
    out["round_overhead"], out["throughput"] = overhead_and_throughput(
        task, shared, s["batch"], s["reps"], (1, 2, 4), 4 if quick else 20)
    agg, ro = out["aggregation"], out["round_overhead"]
    out["targets"] = measure.targets([
        ("aggregation / copy of the gathered messages", agg["aggregate_vs_copy"], ">=", 0.5),
        measure.overhead_target(ro, "GIST")])
    out["wall_s"] = time.time() - t0
    return out


def markdown(out: dict[str, Any]) -> str:
    lines = measure.heading("GIST benchmarks", out, f"{out['graph']}, GraphSAGE {out['hidden']}-{out['hidden']}")
    a = out["aggregation"]
    lines += ["", f"Mean aggregation of [{a['nodes']}, {a['hidden']}] over {a['edges']} edges: "
                  f"{a['aggregate_s'] * 1e3:.2f} ms ({a['aggregate_GBps']:.2f} GB/s of messages); copy of the messages "
                  f"{a['copy_s'] * 1e3:.2f} ms ({a['copy_GBps']:.2f} GB/s). "
                  + measure.round_line(out["round_overhead"], "GIST"), "",
              markdown_table(["algorithm", "W", "K", "round (ms)", "nodes/s"],
                             [[r["algorithm"], str(r["W"]), str(r["K"]), f"{r['round_s'] * 1e3:.1f}",
                               f"{r['nodes_per_s']:,.0f}"] for r in out["throughput"]])]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    return measure.family_main(argv, name="graph", doc=__doc__, run=run, markdown=markdown)


if __name__ == "__main__":
    main(sys.argv[1:])
