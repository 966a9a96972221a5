"""The GIST studies of docs/graphs.md: accuracy against full-model training on Cora, and width scaling.

A thin script over the library::

    python experiments/graphs/studies.py accuracy --workdir=runs/graphs/accuracy   # GCN and GraphSAGE, W=1,2,4,8
    python experiments/graphs/studies.py width --workdir=runs/graphs/width         # 10^5 nodes, wide GraphSAGE

``accuracy`` trains ``experiments/configs/cora_gist.py`` with GIST (``algorithm="ist"``) and data parallel at
W = 1, 2, 4, 8 for each model (W = 1 is ordinary full-model training; both algorithms are the same there) through
``istjax compare`` (tables ``<model>/comparison.md``, curves ``<model>/comparison.png``). Needs the Planetoid files
(``$ISTJAX_DATA_DIR/planetoid``).

``width`` generates a contextual stochastic block model with 100,000 nodes, cuts it into clusters with METIS and
compiles one worker's local training step (K Cluster-GCN steps of GraphSAGE with two hidden layers of ``--hidden``
features, Adam) for W = 1, 2, 4, 8, reading each step's peak memory from XLA's memory analysis
(`experiments.benchmarks.measure.memory_stats`: arguments + outputs + temporaries). Against an explicit per-worker
budget (``--budget-mib``) the full model (W = 1) does not fit; GIST then trains the network at the smallest W that
fits, each worker holding 1/W of the width, and evaluates the full-width model on the whole graph.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from collections.abc import Sequence

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # experiments.benchmarks.measure

CONFIG = REPO / "experiments" / "configs" / "cora_gist.py"
LEARNING_RATE = 0.01  # width study: Adam, re-created every round (as GIST's workers do)


def accuracy(workdir: pathlib.Path, overrides: Sequence[str], overwrite: bool) -> int:
    from istjax.experiment import compare

    code = 0
    for model in ("gcn", "graphsage"):
        argv = ["--config", str(CONFIG), "--algorithms", "ist,data_parallel", "--workers", "1,2,4,8",
                f"--config.model.name={model}", "--workdir", str(workdir / model),
                "--title", f"GIST vs data parallel, {model} on Cora (W=1: full-model training)", *overrides]
        code = max(code, compare.main(argv + (["--overwrite"] if overwrite else [])))
    return code


def _graph(num_nodes: int):
    """The generated graph (10 blocks, 64 features, degree 10) and its shared input with 32 METIS clusters."""
    import numpy as np

    from istjax.data.graphs import as_dataset, csbm
    from istjax.graph import task as graph_task

    t0 = time.time()
    data = csbm(num_nodes=num_nodes, num_classes=10, num_features=64, avg_degree=10.0, homophily=0.8, snr=1.0,
                seed=0, train_per_class=num_nodes // 50, num_val=1000, num_test=5000)
    full = as_dataset(data).shared
    shared = graph_task.with_clusters(full, np.asarray(data.labels), np.asarray(data.train_idx), 32, method="metis")
    print(f"graph: {data}; 32 METIS clusters, up to {shared['clusters'].max_nodes} nodes and "
          f"{shared['clusters'].max_edges} edges each ({time.time() - t0:.1f} s)", flush=True)
    return data, full, shared


def _worker_memory(task, shared, w: int, k: int, budget_mib: float) -> dict:
    """One worker's local step at W=w, compiled from shapes only: its parameters and XLA's peak bytes."""
    import jax
    import numpy as np
    import optax

    import istjax
    from experiments.benchmarks import measure

    alg = istjax.ist(task, optax.adam(LEARNING_RATE), num_workers=w, local_steps=k)
    workers, _ = jax.eval_shape(alg.distribute, jax.eval_shape(alg.init, jax.random.key(0)))
    one = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), workers)
    ids = jax.ShapeDtypeStruct((k, 1), np.int32)
    mem = measure.memory_stats(jax.jit(alg.local), one, {"x": ids, "y": ids}, shared)
    params = sum(int(np.prod(a.shape)) for a in jax.tree.leaves(one.params))
    print(f"W={w}: a worker holds {params:,} parameters; its local step needs {mem['peak_bytes'] / 2 ** 20:.1f} MiB "
          f"(budget {budget_mib} MiB)", flush=True)
    return {"W": w, "worker_params": params, "worker_peak_bytes": mem["peak_bytes"],
            "fits": mem["peak_bytes"] <= budget_mib * 2 ** 20, **mem}


def _train(task, data, full, shared, w: int, k: int, rounds: int) -> dict:
    """GIST at W=w for ``rounds`` rounds of cluster batches, then the full-width model on the whole graph."""
    import jax
    import numpy as np
    import optax

    import istjax
    from istjax.graph import task as graph_task

    alg = istjax.ist(task, optax.adam(LEARNING_RATE), num_workers=w, local_steps=k)
    batches = graph_task.cluster_batch_fn(shared, num_workers=w, local_steps=k, clusters_per_step=1, seed=0)
    state = jax.jit(alg.init)(jax.random.key(0))
    step = jax.jit(lambda s, r: alg.round(s, batches.apply(batches.data, r), shared))
    t1 = time.time()
    for r in range(rounds):
        state, metrics = step(state, np.int32(r))
        print(f"  round {r + 1}/{rounds}: loss {float(metrics['train_loss']):.4f}", flush=True)
    train_s = time.time() - t1
    loss, aux = graph_task.evaluate_full_graph(task, state.params, state.model_state, data.test_idx,
                                               data.labels[data.test_idx], full)
    print(f"GIST at W={w}: test accuracy {float(aux['accuracy']):.4f} after {rounds} rounds ({train_s:.0f} s)")
    return {"W": w, "rounds": rounds, "train_s": train_s, "test_loss": float(loss),
            "test_accuracy": float(aux["accuracy"])}


def _width_table(result: dict) -> str:
    lines = [f"GraphSAGE {result['hidden']}-{result['hidden']} on {result['graph']}; budget {result['budget_mib']} "
             f"MiB per worker, K={result['local_steps']} Cluster-GCN steps per round", "",
             "| W | hidden per worker | worker parameters | worker step peak (MiB) | fits |", "|---|---|---|---|---|"]
    lines += [f"| {r['W']} | {result['hidden'] // r['W']} | {r['worker_params']:,} | "
              f"{r['worker_peak_bytes'] / 2 ** 20:.1f} | {'yes' if r['fits'] else 'no'} |" for r in result["rows"]]
    if "trained" in result:
        t = result["trained"]
        lines += ["", f"Trained with GIST at W={t['W']}: test accuracy {t['test_accuracy']:.4f} after {t['rounds']} "
                      f"rounds ({t['train_s']:.0f} s of training)."]
    return "\n".join(lines) + "\n"


def width(workdir: pathlib.Path, hidden: int, budget_mib: float, workers: Sequence[int], rounds: int,
          num_nodes: int) -> int:
    """The width-scaling study (see the module docstring); writes ``width.json`` and ``width.md``."""
    from istjax.graph import task as graph_task
    from istjax.models import GraphSAGE

    data, full, shared = _graph(num_nodes)
    task = graph_task.cluster_classifier(GraphSAGE(hidden=(hidden, hidden), num_classes=10, layer_norm=True), shared)
    k = 5
    rows = [_worker_memory(task, shared, w, k, budget_mib) for w in workers]
    result = {"graph": repr(data), "hidden": hidden, "budget_mib": budget_mib, "local_steps": k, "rows": rows}
    fitting = [r["W"] for r in rows if r["fits"]]
    if fitting:
        result["trained"] = _train(task, data, full, shared, min(fitting), k, rounds)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "width.json").write_text(json.dumps(result, indent=2) + "\n")
    (workdir / "width.md").write_text(_width_table(result))
    print(_width_table(result))
    return 0


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="studies.py", description=__doc__.split("::")[0].strip())
    parser.add_argument("study", choices=["accuracy", "width"])
    parser.add_argument("--workdir", required=True, type=pathlib.Path)
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--hidden", type=int, default=2048, help="width: hidden features per layer")
    parser.add_argument("--budget-mib", type=float, default=128.0, help="width: per-worker memory budget")
    parser.add_argument("--workers", default="1,2,4,8", help="width: worker counts to measure")
    parser.add_argument("--rounds", type=int, default=20, help="width: GIST rounds to train")
    parser.add_argument("--num-nodes", type=int, default=100_000, help="width: nodes of the generated graph")
    args, overrides = parser.parse_known_args(argv)
    if args.study == "accuracy":
        return accuracy(args.workdir, overrides, args.overwrite)
    return width(args.workdir, args.hidden, args.budget_mib, [int(w) for w in args.workers.split(",")],
                 args.rounds, args.num_nodes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
