"""The classification studies' trivial baseline (issue 55, item 2): ``--baselines`` records a linear model trained
to convergence in a study's results file (`experiments.grid.record_baselines`), a rerun of the study keeps it, and
the tables render it as a row beneath their cells (`experiments.tables.baseline_cells`, ``results_table(...,
baselines=True)``), with the prose's distance above it (`experiments.tables.points_above_baseline`)."""

import json

import pytest

from experiments import claims, grid, report, tables
from experiments.graphs import studies as graph_studies
from experiments.images import studies as image_studies
from experiments.network import report as network_report
from experiments.network import time_to_accuracy as tta

TINY = ("--config.num_rounds=2", "--config.eval_every=2", "--config.checkpoint_every=2", "--config.local_steps=2")
REGIME = {"baseline": "linear", "metric": "test_accuracy", "direction": "max"}


@pytest.mark.slow  # a tiny study trained and rerun, and the linear model: about 20 s
def test_record_baselines_writes_the_linear_model_and_a_rerun_keeps_it(tmp_path):
    """A one-cell digits study: ``--baselines`` adds the linear model (trained to convergence on the cell's data,
    scored on its test split) and the regime to the file, keeping its rows; the study rerun keeps both."""
    cell = grid.Cell("ist", "experiments/configs/digits_ist.py", TINY, {"what": "IST"})
    out = tmp_path / "tiny.json"
    assert grid.run_grid("tiny", [cell], [0], tmp_path / "runs", out, "pytest") == 0
    assert grid.recorded_baselines(out) == {}
    grid.record_baselines(out, cell)
    doc = json.loads(out.read_text())
    linear = doc["baselines"]["linear"]
    assert doc["regime"] == REGIME and doc["rows"][0]["label"] == "ist" and doc["command"] == "pytest"
    assert linear["converged"] and 0.9 < linear["test_accuracy"] <= 1.0  # digits: a linear model does well
    assert linear["train_accuracy"] >= linear["test_accuracy"] - 0.05
    assert grid.run_grid("tiny", [cell], [0], tmp_path / "runs", out, "pytest again") == 0  # the run is reused
    again = json.loads(out.read_text())
    assert again["command"] == "pytest again" and again["baselines"] == doc["baselines"] and again["regime"] == REGIME


def test_the_width_study_records_its_graphs_baseline_and_a_rerun_of_that_graph_keeps_it(tmp_path, monkeypatch):
    """``graphs.studies width --baselines``: the generated graph's linear model on the study's test nodes, recorded
    with the graph; a rerun of the study on that graph keeps it, on another graph drops it, and recording a
    baseline of another graph into a file holding a study is refused."""
    out = tmp_path / "gist_width.json"
    monkeypatch.setattr(graph_studies, "WIDTH_OUT", out)
    graph_studies.width_baselines(10_000)
    doc = json.loads(out.read_text())
    graph = repr(graph_studies._csbm(10_000))
    assert doc["graph"] == graph and doc["regime"] == REGIME and doc["baselines"]["linear"]["converged"]
    assert 0.1 < doc["baselines"]["linear"]["test_accuracy"] < 1.0  # ten classes: above chance, not solved
    out.write_text(json.dumps({**doc, "rows": [], "runs": []}))
    assert graph_studies._recorded_baselines(graph) == {"baselines": doc["baselines"], "regime": REGIME}
    assert graph_studies._recorded_baselines(repr(graph_studies._csbm(12_000))) == {}
    with pytest.raises(SystemExit, match="--num-nodes 12000: .* holds the study of"):
        graph_studies.width_baselines(12_000)


DOC = {"code": {"commit": "0" * 40, "clean": True}, "rows": [
    {"label": "ist", "algorithm": "ist", "num_workers": 2, "seeds": [0, 1], "test_accuracy_mean": 0.801,
     "test_accuracy_std": 0.01},
    {"label": "dp", "algorithm": "data_parallel", "num_workers": 2, "seeds": [0, 1], "test_accuracy_mean": 0.873,
     "test_accuracy_std": 0.002}],
    "baselines": {"linear": {"test_accuracy": 0.842, "train_accuracy": 0.87}}, "regime": REGIME}


def test_baseline_cells_put_the_name_and_metrics_in_their_columns_and_refuse_a_file_without():
    assert tables.baseline_cells(DOC, 4, {0: "algorithm", 2: "test_accuracy"}, name_at=1) == [
        ["-", "linear (trivial baseline, regime)", "0.842", "-"]]
    assert tables.baseline_cells(DOC, 3, {0: "algorithm", 2: "train_accuracy"}) == [
        ["linear (trivial baseline, regime)", "-", "0.870"]]  # the name is never overwritten by a metric
    with pytest.raises(tables.ResultsError, match="--baselines"):
        tables.baseline_cells({"rows": DOC["rows"]}, 3, {1: "test_accuracy"})


def test_a_linear_model_stopped_at_its_step_limit_says_so():
    doc = {**DOC, "baselines": {"linear": {"test_accuracy": 0.8, "converged": False}}}
    assert tables.baseline_rows(doc, ["test_accuracy"]) == [["linear (trivial baseline, regime, not converged)",
                                                              "0.800"]]


def test_points_above_the_baseline_span_the_cells():
    # ist: 80.1 - 84.2 = -4.1 points, dp: 87.3 - 84.2 = +3.1
    assert tables.points_above_baseline(DOC, ["ist", "dp"]) == "-4.1 to +3.1"
    assert tables.points_above_baseline(DOC, ["dp"]) == "+3.1"
    with pytest.raises(tables.ResultsError, match="no row labelled nope"):
        tables.points_above_baseline(DOC, ["nope"])
    with pytest.raises(tables.ResultsError, match="--baselines"):
        tables.points_above_baseline(DOC, ["ist"], baseline="trigram")


def test_a_results_table_with_baselines_renders_the_linear_row_beneath(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tables, "REGISTRY", {})
    monkeypatch.setattr(claims, "CLAIMS", [])  # the pages' claims name tables of the real registry
    tables.results_table("demo", "agg.json", ["algorithm", "num_workers", "test_accuracy"], baselines=True)
    root = tmp_path / "repo"
    root.mkdir()
    (root / "agg.json").write_text(json.dumps(DOC))
    (root / "README.md").write_text("<!-- report:demo -->\n<!-- /report:demo -->\n")
    assert report.main(["--root", str(root)]) == 0
    lines = (root / "README.md").read_text().splitlines()
    assert lines[lines.index("| data parallel | 2 | 0.873 ± 0.002 (2 seeds) |") + 1] == (
        "| linear (trivial baseline, regime) | - | 0.842 |")
    # no baselines recorded: an error, with the fix
    (root / "agg.json").write_text(json.dumps({k: v for k, v in DOC.items() if k not in ("baselines", "regime")}))
    assert report.main(["--check", "--root", str(root)]) != 0
    assert "--baselines" in capsys.readouterr().err


def test_a_study_without_a_config_refuses_baselines(capsys):
    with pytest.raises(SystemExit) as e:
        image_studies.main(["bytes", "--baselines"])
    assert e.value.code == 2 and "name one of resnet, ablation, decompose" in capsys.readouterr().err


def test_time_to_accuracy_rewrites_keep_the_recorded_baselines(tmp_path):
    out = tmp_path / "r.json"
    out.write_text(json.dumps({"baselines": DOC["baselines"], "regime": REGIME}))
    rows = [{"model": "2", "ranks": 2, "link": "1gbit", "algorithm": "ist", "seed": 0, "returncode": 0,
             "time_to_target_s": 5.0, "round_to_target": 2, "rounds": 2, "time_per_round_s": 2.5,
             "compile_time_s": 4.0, "bytes_sent_per_worker_per_round": 2e6, "links": {}, "curve": [(1.0, 0.91)]}]
    result = tta.write(rows, out, 0.9, 10.0)
    assert result["baselines"] == DOC["baselines"] and json.loads(out.read_text())["regime"] == REGIME


def test_the_fsdd_race_shows_the_linear_baseline_against_its_target():
    """network_fsdd: the time-to-accuracy tables, then the linear baseline's test accuracy beside the race's target;
    the prose's scalar says on which side of the target it lies."""
    rows = [{"model": "2", "ranks": 2, "link": "1gbit", "algorithm": a, "seed": 0, "returncode": 0,
             "time_to_target_s": t, "round_to_target": 2, "rounds": 2, "time_per_round_s": t / 2,
             "compile_time_s": 4.0, "bytes_sent_per_worker_per_round": 2e6, "links": {}, "curve": [(t, 0.91)]}
            for a, t in (("ist", 5.0), ("data_parallel", 40.0), ("local_sgd", 9.0))]
    d = {"target": 0.9, "dataset": "fsdd", "runs": rows, "speedups": tta.speedups(rows),
         "catch_up": tta.catch_up(rows), "baselines": {"linear": {"test_accuracy": 0.9667, "converged": False}},
         "regime": REGIME}
    text = tables.REGISTRY["network_fsdd"].render(d)
    assert text.startswith(tta.markdown(d).strip())
    assert text.endswith("| baseline | test accuracy | the target |\n|---|---|---|\n"
                         "| linear (trivial baseline, regime, not converged) | 0.967 | 0.900 |")
    assert tables.REGISTRY["fsdd.linear"].render(d) == "0.967, at or above the target 0.9"
    d["baselines"]["linear"]["test_accuracy"] = 0.85
    assert network_report._linear_vs_target(d) == "0.850, below the target 0.9"


def test_choices_on_a_grids_edge_are_counted_only_on_grids_of_three_or_more():
    t = {"grids": {"a": {"learning_rate": [0.01, 0.005, 0.02]}, "b": {"learning_rate": [0.005, 0.01, 0.02]},
                   "c": {"learning_rate": [0.1, 0.2]}, "d": {"optimizer_state": ["reset", "carry"]}},
         "chosen": {"a": {"learning_rate": 0.005}, "b": {"learning_rate": 0.01}, "c": {"learning_rate": 0.2},
                    "d": {"optimizer_state": "carry"}}}
    assert tables.choices_on_edges(t) == ["a"]  # b inside, c's grid too small to have an inside, d has no rate
