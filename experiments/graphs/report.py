"""The GIST studies' tables: ``experiments/graphs/results/gist_*.json`` (``python -m experiments.graphs.studies``).
Registered in `experiments.tables` when `experiments.report` imports this module.
"""

from __future__ import annotations

from experiments.tables import (ResultsError, accuracy, baseline_cells, cell, choices_on_edges, fixed, headline_row,
                               label_accuracy, markdown_table, mib, nbytes, points_above_baseline, result_rows,
                               results_table, scalar, spread, table, tuning_rows)

GIST_FILES = {"cora": "experiments/graphs/results/gist_cora.json",
              "citeseer": "experiments/graphs/results/gist_citeseer.json"}
GIST_RECIPE = "experiments/graphs/results/gist_recipe.json"
SPLITS = {"cora": (140, 500), "citeseer": (120, 500)}  # Planetoid's standard split: training / validation nodes


def _tuning_table(dataset: str):
    """Every tuning run of ``python -m experiments.graphs.studies <dataset> --tune``, each cell's best first."""
    def render(d):
        if not d.get("tuning"):
            raise ResultsError(f"{GIST_FILES[dataset]} records no tuning stage; fix: run python -m "
                               f"experiments.graphs.studies {dataset} --tune")
        t, (train, val) = d["tuning"], SPLITS[dataset]
        return (f"Every tuning run: seed {t['seed']}, each cell at its full budget, trained on the {train} training "
                f"nodes and scored on the {val} validation nodes (no test node read); each cell's highest validation "
                f"accuracy chosen, before any reported run.\n\n"
                + markdown_table(["cell", "settings", "validation accuracy"], tuning_rows(t, lambda a: f"`{a}`")))
    return render


for _dataset, _src in GIST_FILES.items():
    results_table(f"graphs_gist_{_dataset}", _src, [
        ("cell", lambda r: f"`{r['label']}`"), ("model", lambda r: r["model"]), "num_workers",
        ("hidden features per worker", lambda r: f"{r['per_worker']} of {r['hidden']}"), "test_accuracy",
        ("min-max", spread), ("train loss", lambda r: fixed(r["train_loss_mean"], 3)),
        ("bytes per worker per round", lambda r: nbytes(r["bytes_per_worker_per_round"], binary=False)),
        ("s per round", lambda r: fixed(r["time_per_round_s_mean"]))], baselines=True, tuned=True)
    table(f"graphs_tuning_{_dataset}", _src)(_tuning_table(_dataset))
    for _label in ("paper_gcn16", *(f"{m}_W{w}" for m in ("gcn", "graphsage") for w in (1, 2, 4, 8))):
        scalar(f"graphs.{_dataset}.{_label}", _src, label_accuracy(_label))
    scalar(f"graphs.{_dataset}.rate_edges", _src,  # how many cells chose a rate on the grid's edge
           lambda d: f"{len(choices_on_edges(d['tuning']))} of {len(d['tuning']['chosen'])}")
    # the linear baseline on the nodes' features (`--baselines`) and how far every cell lies above it
    scalar(f"graphs.{_dataset}.linear", _src, lambda d: d["baselines"]["linear"]["test_accuracy"])
    scalar(f"graphs.{_dataset}.above_linear", _src,
           lambda d: points_above_baseline(d, [r["label"] for r in result_rows(d)]))
results_table("graphs_recipe", GIST_RECIPE, [
    ("cell", lambda r: f"`{r['label']}`"), ("change from the recipe", lambda r: r["change"]), "test_accuracy",
    ("min-max", spread), ("train loss", lambda r: fixed(r["train_loss_mean"], 4))], baselines=True)
for _label in ("recipe", "layer_norm", "steps300", "optimizer_reset", "before", "paper_width"):
    scalar(f"graphs.recipe.{_label}", GIST_RECIPE, label_accuracy(_label))
GIST_WIDTH = "experiments/graphs/results/gist_width.json"


@table("graphs_width", GIST_WIDTH)
def _graphs_width(d):
    """Each W's worker step against the budget, and the seeds' accuracy at the smallest W that fits."""
    memory = markdown_table(
        ["W", "hidden per worker", "worker parameters", "worker step peak (MiB)", "fits"],
        [[cell(r["W"]), cell(d["hidden"] // r["W"]), cell(r["worker_params"]), mib(r["worker_peak_bytes"]),
          "yes" if r["fits"] else "no"] for r in d["memory"]])
    trained = markdown_table(
        ["GIST", "rounds", "test accuracy (mean ± std over seeds)", "min-max", "s of training per seed"],
        [[f"W = {r['num_workers']}", cell(r["rounds"]), accuracy(r), spread(r), f"{r['train_s_mean']:.0f}"]
         for r in result_rows(d)] + baseline_cells(d, 5, {2: "test_accuracy"}))
    runs = markdown_table(
        ["seed", "test accuracy", "test loss (full-width model)", "workers' training loss, last round"],
        [[cell(r["seed"]), fixed(r["test_accuracy"], 3), fixed(r["test_loss"], 3), fixed(r["train_loss_last_round"], 3)]
         for r in d["runs"]])
    return f"Budget {d['budget_mib']:g} MiB per worker, {d['graph']}.\n\n{memory}\n\n{trained}\n\n{runs}"


def _width_fit(d) -> tuple[dict, dict]:
    full = next(r for r in d["memory"] if r["W"] == 1)
    return full, next(r for r in d["memory"] if r["W"] == result_rows(d)[0]["num_workers"])


scalar("graphs.width.full_peak", GIST_WIDTH, lambda d: f"{_width_fit(d)[0]['worker_peak_bytes'] / 2 ** 20:.0f}")
scalar("graphs.width.over_budget", GIST_WIDTH,
       lambda d: fixed(_width_fit(d)[0]["worker_peak_bytes"] / 2 ** 20 / d["budget_mib"], 1))
scalar("graphs.width.worker_peak", GIST_WIDTH, lambda d: f"{_width_fit(d)[1]['worker_peak_bytes'] / 2 ** 20:.0f}")
scalar("graphs.width.accuracy", GIST_WIDTH, lambda d: accuracy(result_rows(d)[0]))
scalar("graphs.width.linear", GIST_WIDTH, lambda d: fixed(d["baselines"]["linear"]["test_accuracy"], 3))
scalar("graphs.width.halving", GIST_WIDTH, lambda d: fixed(
    next(r for r in d["memory"] if r["W"] == 2)["worker_peak_bytes"] / _width_fit(d)[0]["worker_peak_bytes"]))


def _headline_gist(d) -> str:
    by = {r["label"]: r for r in result_rows(d)}

    def mean_std(r):
        return f"{r['test_accuracy_mean']:.3f} ± {r['test_accuracy_std']:.3f}"

    def model(m):
        return (f"{'GCN' if m == 'gcn' else 'GraphSAGE'} full model {accuracy(by[f'{m}_W1'])}, GIST W = 2 / 4 / 8 "
                + " / ".join(mean_std(by[f"{m}_W{w}"]) for w in (2, 4, 8)))
    return (f"{model('gcn')}; {model('graphsage')}; Kipf and Welling's 16-wide GCN trained here "
            f"{accuracy(by['paper_gcn16'])}")


# The command each committed file was made by: Cora's tuned rerun is in, Citeseer's is still to run (issue 55).
for _dataset, _name, _how in (("cora", "Cora", " --tune"), ("citeseer", "Citeseer", " --tune")):
    headline_row(f"GIST on {_name} (public split), 256 hidden features split among W workers, 3 seeds "
                 f"(`python -m experiments.graphs.studies {_dataset}{_how}`)", "`docs/graphs.md`",
                 GIST_FILES[_dataset])(_headline_gist)


@headline_row("GIST width scaling: GraphSAGE 2048-2048 on a generated graph of 100,000 nodes, 128 MiB per worker "
              "(`python -m experiments.graphs.studies width`)", "`docs/graphs.md`", GIST_WIDTH)
def _headline_width(d):
    full, fit = _width_fit(d)
    r = result_rows(d)[0]
    return (f"the full model's step needs {full['worker_peak_bytes'] / 2 ** 20:.0f} MiB (does not fit); GIST at "
            f"W = {r['num_workers']}: {fit['worker_peak_bytes'] / 2 ** 20:.0f} MiB per worker, test accuracy "
            f"{accuracy(r)} after {r['rounds']} rounds")
