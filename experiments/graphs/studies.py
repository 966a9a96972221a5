"""The GIST studies of docs/graphs.md: GIST against full-model training on Cora and Citeseer, the recipe that
brings the full model to the literature's accuracy, and width scaling.

A thin script over the library::

    python -m experiments.graphs.studies cora       # GCN and GraphSAGE, W = 1, 2, 4, 8, three seeds
    python -m experiments.graphs.studies citeseer   # the same on Citeseer
    python -m experiments.graphs.studies recipe     # Cora, W = 1: the recipe's changes one at a time
    python -m experiments.graphs.studies width      # 10^5 nodes, wide GraphSAGE, three seeds

``cora``, ``citeseer`` and ``recipe`` are grids (`experiments.grid`): every cell trains once per seed (``--seeds``,
default 0,1,2) into ``runs/graphs/<study>/<cell>/s<seed>`` (a finished run with the same config is reused), and
after every run ``experiments/graphs/results/gist_<study>.json`` (per seed and per cell: mean and spread, with the
command, commit and machine) and the figure ``docs/figures/gist_<study>.png`` are rewritten; `experiments.report`
renders the docs' tables from the JSON. ``--only CELL,...`` trains some cells, ``--plot`` redraws the figure from the
committed file, ``--baselines`` records the data's trivial baseline (a linear model on the nodes' features, trained
full batch: `experiments.grid.record_baselines`; ``width``: on its generated graph's test nodes) in the results
file without training. Needs the Planetoid files
(``$ISTJAX_DATA_DIR/planetoid``).

``cora --tune`` and ``citeseer --tune`` first choose each cell's settings (`tuning`): Adam's learning rate over
0.005, 0.01 and 0.02 and Adam's state restarted every round or carried, six runs a cell at its full budget and
seed 0, each trained on the training nodes and scored by its accuracy on the data set's 500 validation nodes
(a graph's tuning split, `istjax.data.graphs.as_dataset`; no test node's label is read), under
``runs/graphs/<study>/tuning/<cell>/<settings>``; then every cell trains on ``--seeds`` at its choice. The tuned
study writes the same ``gist_<study>.json``, which it supersedes: its rows are at the chosen settings (each row's
``tuned``), its ``tuning`` section holds every tuning run and the choice, and the ``--baselines`` sections stay.
Rerunning without ``--tune`` writes the untuned study again, without the ``tuning`` section.

The ``cora`` and ``citeseer`` cells train ``experiments/configs/{cora,citeseer}_gist.py`` (Kipf and Welling's
recipe at 256 hidden features, 20 rounds of K = 10 full-graph steps, Adam's moments carried) with GIST at
W = 1, 2, 4, 8 for GCN and GraphSAGE: every W trains the same 256-wide network, a worker holding 256 / W features
of the hidden layer (32 at W = 8), and W = 1 is ordinary full-model training (one worker, one Adam state, 200
steps). ``paper_gcn16`` is the published model itself (16 hidden features, W = 1), too narrow to deal among 8
workers (2 features each). Data parallel is not a cell: with every worker on the same 140 (120) training nodes it
only averages dropout masks, and at W = 1 it is the W = 1 cell.

``width`` generates a contextual stochastic block model with 100,000 nodes, cuts it into clusters with METIS and
compiles one worker's local training step (K Cluster-GCN steps of GraphSAGE with two hidden layers of ``--hidden``
features, Adam) for W = 1, 2, 4, 8, reading each step's peak memory from XLA's memory analysis
(`experiments.benchmarks.measure.memory_stats`: arguments + outputs + temporaries). Against an explicit per-worker
budget (``--budget-mib``) the full model (W = 1) does not fit; GIST then trains the network at the smallest W that
fits, each worker holding 1/W of the width, once per seed of ``--seeds`` (the seed draws the initial weights, the
partitions and the cluster batches; the graph is the same), and evaluates the full-width model on the whole graph.
It writes ``experiments/graphs/results/gist_width.json`` (the memory rows, each seed's run, their mean and spread,
the command, commit and machine), which `experiments.report` renders into docs/graphs.md and the README.
"""

from __future__ import annotations

import json
import pathlib
import runpy
import sys
import time
from collections.abc import Sequence
from typing import Any

from experiments.grid import REPO, Cell, Tuning, parser, plot, record_baselines, recorded_baselines, run_grid
from istjax.launch.study import mean_std
from istjax.launch.tuning import Objective, arm_grid

RESULTS = REPO / "experiments" / "graphs" / "results"
WIDTH_OUT = RESULTS / "gist_width.json"
CONFIGS = {"cora": "experiments/configs/cora_gist.py", "citeseer": "experiments/configs/citeseer_gist.py"}
MODELS = {"gcn": "GCN", "graphsage": "GraphSAGE"}
WORKERS = (1, 2, 4, 8)
LEARNING_RATE = 0.01  # width study: Adam, re-created every round (as GIST's workers do)
TUNED = ("cora", "citeseer")  # the studies --tune tunes
TUNING_RATES = (0.005, 0.01, 0.02)  # Adam's, --tune: the configs' 0.01 (Kipf and Welling's) halved and doubled


def _value(v: Any) -> str:
    return f"({', '.join(map(str, v))},)" if isinstance(v, (tuple, list)) else str(v)


def _overrides(config: str, **fields: Any) -> tuple[str, ...]:
    """``--config.FIELD=VALUE`` for the ``fields`` (``model__hidden`` for ``model.hidden``) whose value differs
    from the config file's own, so that the cell that runs the file as it is has no overrides."""
    c = runpy.run_path(str(REPO / config))["get_config"](None)
    out = []
    for key, value in fields.items():
        path = key.split("__")
        have = c
        for part in path:
            have = have[part]
        if (tuple(have) if isinstance(have, (tuple, list)) else have) != value:
            out.append(f"--config.{'.'.join(path)}={_value(value)}")
    return tuple(out)


def _gist_cells(dataset: str) -> list[Cell]:
    """The paper's 16-wide GCN at W = 1, then GIST for GCN and GraphSAGE at 256 hidden features, W = 1, 2, 4, 8."""
    cfg = CONFIGS[dataset]
    hidden = runpy.run_path(str(REPO / cfg))["get_config"](None).model.hidden[0]
    cells = [Cell("paper_gcn16", cfg, _overrides(cfg, num_workers=1, model__hidden=(16,)),
                  {"model": "GCN", "hidden": 16, "per_worker": 16,
                   "what": "Kipf and Welling's GCN as published (16 hidden), full-model training"})]
    for model, name in MODELS.items():
        for w in WORKERS:
            cells.append(Cell(f"{model}_W{w}", cfg, _overrides(cfg, model__name=model, num_workers=w),
                              {"model": name, "hidden": hidden, "per_worker": hidden // w,
                               "what": "full-model training" if w == 1 else f"GIST, {w} workers"}))
    return cells


def _recipe_cells() -> list[Cell]:
    """Cora, GCN, 256 hidden, W = 1 (full-model training): the recipe, each of its changes undone alone, and the
    config as it was before (LayerNorm, 30 rounds), whose full-model baseline read 0.780."""
    cfg = CONFIGS["cora"]

    def cell(label, change, **fields):
        return Cell(label, cfg, _overrides(cfg, num_workers=1, **fields), {"change": change})

    return [
        cell("recipe", "the recipe (no LayerNorm, 200 steps, Adam's moments carried)"),
        cell("layer_norm", "with LayerNorm after the hidden layer", model__layer_norm=True),
        cell("steps300", "300 steps (30 rounds)", num_rounds=30, eval_every=10),
        cell("optimizer_reset", "Adam's state reset every round of K = 10 steps", algorithm__optimizer_state="reset"),
        cell("before", "the config before: LayerNorm, 300 steps", model__layer_norm=True, num_rounds=30,
             eval_every=10),
        cell("paper_width", "16 hidden features (the published width)", model__hidden=(16,)),
    ]


GRIDS = {"cora": lambda: _gist_cells("cora"), "citeseer": lambda: _gist_cells("citeseer"), "recipe": _recipe_cells}
FIGURES = {
    "cora": ("GIST on Cora: the same 256-wide network trained by W workers (W = 1: full-model training)", "gcn_W1"),
    "citeseer": ("GIST on Citeseer: the same 256-wide network trained by W workers (W = 1: full-model training)",
                 "gcn_W1"),
    "recipe": ("Cora, 256-wide GCN, full-model training: the recipe's changes undone one at a time", "recipe"),
}


def tuning() -> Tuning:
    """``--tune`` (module docstring): each cell's grid is `TUNING_RATES` x Adam's state restarted or carried
    (`istjax.launch.tuning.arm_grid`: GIST reads ``algorithm.optimizer_state``), its runs at the cell's full budget,
    the highest validation accuracy chosen. The fraction only switches the tuning split on: a graph's is its
    validation nodes whatever the value (`istjax.data.tuning`)."""
    return Tuning(grids=lambda cell: arm_grid(cell, TUNING_RATES, root=REPO),
                  objective=Objective("test_accuracy", "max"))


def grid_main(study: str, workdir: pathlib.Path, seeds: Sequence[int], only: Sequence[str], plot_only: bool,
              jobs: int = 1, tune: bool = False) -> int:
    """Trains a grid study on ``seeds`` into ``workdir`` (``tune``: at the settings `tuning` chooses first); writes
    ``experiments/graphs/results/gist_<study>.json`` and its figure ``docs/figures/gist_<study>.png``
    (``plot_only``: the figure alone, from the committed file)."""
    status = 0
    out = RESULTS / f"gist_{study}.json"
    if not plot_only:
        command = (f"ISTJAX_DATA_DIR=../shared/data python -m experiments.graphs.studies {study} "
                   f"--seeds {','.join(map(str, seeds))}" + (" --tune" if tune else ""))
        status = run_grid(study, GRIDS[study](), seeds, workdir, out, command, only, jobs,
                          tuning() if tune else None)
    title, reference = FIGURES[study]
    print(f"wrote {plot(out, REPO / 'docs' / 'figures' / f'gist_{study}.png', title, reference)}")
    return status


def _csbm(num_nodes: int):
    """The generated graph: 10 blocks, 64 features, degree 10, 2% of the nodes training, 5,000 test nodes."""
    from istjax.data.graphs import csbm

    return csbm(num_nodes=num_nodes, num_classes=10, num_features=64, avg_degree=10.0, homophily=0.8, snr=1.0,
                seed=0, train_per_class=num_nodes // 50, num_val=1000, num_test=5000)


def _graph(num_nodes: int):
    """The generated graph (`_csbm`) and its shared input with 32 METIS clusters."""
    import numpy as np

    from istjax.data.graphs import as_dataset
    from istjax.graph import task as graph_task

    t0 = time.time()
    data = _csbm(num_nodes)
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


def _train(task, data, full, shared, w: int, k: int, rounds: int, seed: int) -> dict:
    """GIST at W=w for ``rounds`` rounds of cluster batches drawn with ``seed`` (as are the initial weights and the
    partitions), then the full-width model on the whole graph."""
    import jax
    import numpy as np
    import optax

    import istjax
    from istjax.data.cluster_batches import cluster_batch_fn
    from istjax.graph import task as graph_task

    alg = istjax.ist(task, optax.adam(LEARNING_RATE), num_workers=w, local_steps=k)
    batches = cluster_batch_fn(shared, num_workers=w, local_steps=k, clusters_per_step=1, seed=seed)
    state = jax.jit(alg.init)(jax.random.key(seed))
    step = jax.jit(lambda s, r: alg.round(s, batches.apply(batches.data, r), shared))
    t1 = time.time()
    for r in range(rounds):
        state, metrics = step(state, np.int32(r))
        print(f"  round {r + 1}/{rounds}: loss {float(metrics['train_loss']):.4f}", flush=True)
    train_s = time.time() - t1
    loss, aux = graph_task.evaluate_full_graph(task, state.params, state.model_state, data.test_idx,
                                               data.labels[data.test_idx], full)
    print(f"GIST at W={w}, seed {seed}: test accuracy {float(aux['accuracy']):.4f} after {rounds} rounds "
          f"({train_s:.0f} s)", flush=True)
    return {"W": w, "seed": seed, "rounds": rounds, "train_s": train_s, "test_loss": float(loss),
            "train_loss_last_round": float(metrics["train_loss"]), "test_accuracy": float(aux["accuracy"])}


def _write_width(result: dict) -> None:
    result["written"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    RESULTS.mkdir(parents=True, exist_ok=True)
    tmp = WIDTH_OUT.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(WIDTH_OUT)


def _recorded_baselines(graph: str) -> dict:
    """What ``gist_width.json`` records of the graph ``graph`` (its repr) for a rerun of the study to keep
    (`experiments.grid.recorded_baselines`); nothing when the file holds another graph's study."""
    prior = json.loads(WIDTH_OUT.read_text()) if WIDTH_OUT.exists() else {}
    return recorded_baselines(WIDTH_OUT) if prior.get("graph") == graph else {}


def width_baselines(num_nodes: int) -> pathlib.Path:
    """``width --baselines``: trains no network; adds the generated graph's trivial baseline (a linear model on the
    nodes' features, scored on the study's test nodes: `istjax.launch.baselines.data_sections`) to
    ``gist_width.json``, with the graph it was computed on. Refused when the file holds another graph's study."""
    from istjax.data.graphs import as_dataset
    from istjax.launch.baselines import data_sections, record_sections

    data = _csbm(num_nodes)
    recorded = json.loads(WIDTH_OUT.read_text()).get("graph") if WIDTH_OUT.exists() else None
    if recorded not in (None, repr(data)):
        raise SystemExit(f"--num-nodes {num_nodes}: {WIDTH_OUT} holds the study of {recorded}, not {data!r}; "
                         f"rerun the study at this --num-nodes first, or pass the file's.")
    return record_sections(WIDTH_OUT, {**data_sections(as_dataset(data)), "graph": repr(data)})


def width(hidden: int, budget_mib: float, workers: Sequence[int], rounds: int, num_nodes: int,
          seeds: Sequence[int], command: str) -> int:
    """The width-scaling study (see the module docstring); writes ``experiments/graphs/results/gist_width.json``."""
    from istjax.graph import task as graph_task
    from istjax.launch.provenance import code_version, machine
    from istjax.models import GraphSAGE

    data, full, shared = _graph(num_nodes)
    task = graph_task.cluster_classifier(GraphSAGE(hidden=(hidden, hidden), num_classes=10, layer_norm=True), shared)
    k = 5
    memory = [_worker_memory(task, shared, w, k, budget_mib) for w in workers]
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    result = {"study": "width", "command": command, "code": code_version(), "machine": machine(), "started": started,
              "graph": repr(data), "num_nodes": num_nodes, "hidden": hidden, "budget_mib": budget_mib,
              "local_steps": k, "memory": memory, **_recorded_baselines(repr(data)), "rows": [], "runs": []}
    fitting = [r["W"] for r in memory if r["fits"]]
    for seed in seeds if fitting else ():
        result["runs"].append(_train(task, data, full, shared, min(fitting), k, rounds, seed))
        accs = [r["test_accuracy"] for r in result["runs"]]
        acc_mean, acc_std = mean_std(accs)
        result["rows"] = [{"label": f"gist_W{min(fitting)}", "algorithm": "ist", "num_workers": min(fitting),
                           "rounds": rounds, "seeds": [r["seed"] for r in result["runs"]],
                           "test_accuracy_mean": acc_mean, "test_accuracy_std": acc_std,
                           "test_accuracy_min": min(accs), "test_accuracy_max": max(accs),
                           "train_s_mean": mean_std(r["train_s"] for r in result["runs"])[0]}]
        _write_width(result)  # after every seed, so a cut-short study keeps what it measured
    if not fitting:
        _write_width(result)
    for r in result["rows"]:
        print(f"GIST at W={r['num_workers']}: test accuracy {r['test_accuracy_mean']:.4f} ± "
              f"{r['test_accuracy_std'] or 0:.4f} over seeds {r['seeds']}")
    print(f"wrote {RESULTS / 'gist_width.json'}; `python -m experiments.report` renders its table into docs/graphs.md")
    return 0


def main(argv: Sequence[str]) -> int:
    ap = parser("python -m experiments.graphs.studies", __doc__, [*GRIDS, "width"], baselines=True, tune=True)
    ap.add_argument("--hidden", type=int, default=2048, help="width: hidden features per layer")
    ap.add_argument("--budget-mib", type=float, default=128.0, help="width: per-worker memory budget")
    ap.add_argument("--workers", default="1,2,4,8", help="width: worker counts to measure")
    ap.add_argument("--rounds", type=int, default=20, help="width: GIST rounds to train")
    ap.add_argument("--num-nodes", type=int, default=100_000, help="width: nodes of the generated graph")
    args = ap.parse_args(argv)
    workdir = args.workdir or REPO / "runs" / "graphs" / args.study
    seeds = args.seeds
    if args.tune and args.study not in TUNED:
        ap.error(f"--tune: study {args.study!r} is not a comparison of tuned cells; name one of {', '.join(TUNED)}")
    if args.baselines:
        out = (width_baselines(args.num_nodes) if args.study == "width"
               else record_baselines(RESULTS / f"gist_{args.study}.json", GRIDS[args.study]()[0]))
        print(f"wrote {out}")
        return 0
    if args.study == "width":
        command = "python -m experiments.graphs.studies width" + "".join(
            f" {flag}={value}" for flag, value, default in (
                ("--hidden", args.hidden, 2048), ("--budget-mib", args.budget_mib, 128.0),
                ("--workers", args.workers, "1,2,4,8"), ("--rounds", args.rounds, 20),
                ("--num-nodes", args.num_nodes, 100_000),
                ("--seeds", ",".join(map(str, seeds)), "0,1,2")) if value != default)
        return width(args.hidden, args.budget_mib, [int(w) for w in args.workers.split(",")], args.rounds,
                     args.num_nodes, seeds, command)
    only = [x for x in args.only.split(",") if x]
    return grid_main(args.study, workdir, seeds, only, args.plot, args.jobs, args.tune)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
