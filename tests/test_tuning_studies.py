"""Every study page has its tuning record (issue 55): a graph's tuning split is its validation nodes
(`istjax.data.graphs.as_dataset`, `istjax.data.tuning`), the grid studies' ``--tune`` (`experiments.grid.run_grid`
with a `experiments.grid.Tuning`), the GIST and keywords studies' grids, and the tables that render a tuning record
(`experiments.graphs.report`, `experiments.mlp.report`)."""

import copy
import json
import os
import pathlib

import numpy as np
import pytest

from experiments import grid, tables
from istjax.data import keywords as K
from istjax.data.graphs import as_dataset, csbm
from istjax.data.tuning import tuning_split
from istjax.launch.study import Cell
from istjax.launch.tuning import Objective, grid_points

REPO = pathlib.Path(__file__).resolve().parents[1]
GRAPH = dict(num_nodes=200, num_classes=4, num_features=8, train_per_class=5, num_val=30, num_test=50)


# ----------------------------------------------------------------------------------------------------------------
# A graph's tuning split: its validation nodes


def test_a_graphs_tuning_runs_train_on_its_training_nodes_and_score_on_its_validation_nodes():
    g = csbm(**GRAPH)
    g = g._replace(labels=np.where(np.isin(np.arange(g.num_nodes), g.test_idx), -1, g.labels).astype(np.int32))
    for fraction in (0.1, 0.5):  # any fraction > 0: the validation nodes, whatever the value
        d = tuning_split(as_dataset(g), fraction)
        np.testing.assert_array_equal(d.train_x.astype(int), g.train_idx)
        np.testing.assert_array_equal(d.test_x.astype(int), g.val_idx)
        np.testing.assert_array_equal(d.test_y, g.labels[g.val_idx])
        assert (d.train_y >= 0).all() and (d.test_y >= 0).all()  # no test node's (poisoned) label read
        assert not set(d.test_x.astype(int)) & set(g.test_idx) and not set(d.train_x.astype(int)) & set(g.test_idx)
    reported = tuning_split(as_dataset(g), 0.0)  # no tuning: the test nodes, as before
    np.testing.assert_array_equal(reported.test_x.astype(int), g.test_idx)


def test_a_config_on_a_graph_without_validation_nodes_is_refused_naming_the_field():
    from istjax.launch.config import default_config, load_config_data

    c = default_config()
    c.data.name = "csbm"
    c.data.kwargs = {**GRAPH, "num_val": 0}
    assert len(load_config_data(c).test_y) == GRAPH["num_test"]  # untuned: fine
    c.data.tuning_fraction = 0.1
    with pytest.raises(ValueError, match=r"data.tuning_fraction=0.1: data set 'csbm' .* validation .* empty.*num_val"):
        load_config_data(c)
    c.data.kwargs = GRAPH
    assert len(load_config_data(c).test_y) == GRAPH["num_val"]


def test_a_tuned_cora_config_scores_on_its_500_validation_nodes():
    import runpy

    from istjax.launch.config import load_config_data

    if not (pathlib.Path(os.environ.get("ISTJAX_DATA_DIR", "/nonexistent")) / "planetoid").is_dir():
        pytest.skip("Planetoid files not found (set ISTJAX_DATA_DIR)")
    c = runpy.run_path(str(REPO / "experiments/configs/cora_gist.py"))["get_config"](None)
    reported = load_config_data(c)
    c.data.tuning_fraction = 0.1
    tuned = load_config_data(c)
    assert (len(reported.train_y), len(reported.test_y)) == (140, 1000)
    assert (len(tuned.train_y), len(tuned.test_y)) == (140, 500)
    assert not set(tuned.test_x.astype(int)) & set(reported.test_x.astype(int))


def test_the_keywords_splits_list_every_word_in_turn_so_the_tuning_tail_holds_every_word(monkeypatch):
    """Made word by word, the training split's last tenth held only the last words; listed clip by clip across
    words, every tail and head holds every word alike."""
    per_word, words = 10, len(K.WORDS)

    def made_word_by_word(per_word, test_fraction, seed):
        y = np.repeat(np.arange(words, dtype=np.int32), per_word)
        is_test = np.tile(np.arange(per_word) < round(per_word * test_fraction), words)
        x = np.random.default_rng(0).normal(size=(len(y), 6)).astype(np.float32) + y[:, None]
        return x, y, is_test

    monkeypatch.setattr(K, "_generate", made_word_by_word)
    d = K.load_spoken_keywords(per_word=per_word, test_fraction=0.2, cache=False)
    assert np.bincount(d.train_y).tolist() == [8] * words and np.bincount(d.test_y).tolist() == [2] * words
    tail = tuning_split(d, 0.125).test_y  # the last 35 of 280 training clips
    assert sorted(tail.tolist()) == list(range(words))
    np.testing.assert_array_equal(d.train_y[:words], np.arange(words))


def test_a_tuning_tail_holding_classes_the_head_never_shows_is_refused():
    from istjax.data.dataset import Dataset

    x = np.zeros((40, 3), np.float32)
    by_class = Dataset("sorted", x, np.repeat(np.arange(4, dtype=np.int32), 10), x[:4], np.arange(4, dtype=np.int32), 4)
    with pytest.raises(ValueError, match=r"tuning_fraction=0.25: data set 'sorted' .* class\(es\) \[3\] the first 30"):
        tuning_split(by_class, 0.25)
    interleaved = by_class._replace(train_y=np.tile(np.arange(4, dtype=np.int32), 10))
    assert sorted(tuning_split(interleaved, 0.2).test_y.tolist()) == [0, 0, 1, 1, 2, 2, 3, 3]


# ----------------------------------------------------------------------------------------------------------------
# --tune: the grid runner's tuning stage

TINY = ("--config.num_rounds=1", "--config.eval_every=1", "--config.checkpoint_every=1", "--config.local_steps=1",
        "--config.num_workers=2", "--config.batch_size=16", "--config.model.hidden=(8,)",
        "--config.runtime.loss_split=False", "--config.eval_train_examples=256")


@pytest.mark.slow
def test_run_grid_with_a_tuning_stage_records_every_tuning_run_and_trains_the_cells_at_their_choice(tmp_path):
    cells = [Cell("ist", "experiments/configs/digits_ist.py", TINY, {"what": "IST"}),
             Cell("dp", "experiments/configs/digits_data_parallel.py", TINY, {"what": "data parallel"})]
    out = tmp_path / "tiny.json"
    out.write_text(json.dumps({"baselines": {"linear": {"test_accuracy": 0.5}}, "regime": {"baseline": "linear"}}))
    rates = {"learning_rate": (0.001, 0.1)}
    t = grid.Tuning(grids={"ist": rates, "dp": rates}, objective=Objective("test_accuracy", "max"), fraction=0.2)
    assert grid.run_grid("tiny", cells, [0], tmp_path / "runs", out, "pytest --tune", tuning=t) == 0

    doc = json.loads(out.read_text())
    record = doc["tuning"]
    assert [(r["arm"], r["settings"]) for r in record["runs"]] == [
        (arm, {"learning_rate": lr}) for arm in ("ist", "dp") for lr in (0.001, 0.1)]
    assert all(r["test_accuracy"] is not None and pathlib.Path(r["run_dir"]).is_relative_to(tmp_path / "runs" /
                                                                                              "tuning")
               for r in record["runs"])
    for arm in ("ist", "dp"):
        mine = [r for r in record["runs"] if r["arm"] == arm]
        assert record["chosen"][arm] == max(mine, key=lambda r: r["test_accuracy"])["settings"]
        (row,) = [r for r in doc["rows"] if r["label"] == arm]
        assert row["tuned"] == record["chosen"][arm] and row["config"] and row["seeds"] == [0]
        assert doc["configs"][arm]["resolved"]["learning_rate"] == record["chosen"][arm]["learning_rate"]
    assert doc["baselines"] == {"linear": {"test_accuracy": 0.5}} and doc["command"] == "pytest --tune"


def test_the_grid_parser_offers_tune_where_a_study_asks_for_it():
    assert grid.parser("p", "", ["a"], tune=True).parse_args(["--tune"]).tune is True
    assert grid.parser("p", "", ["a"], tune=True).parse_args([]).tune is False
    with pytest.raises(SystemExit):
        grid.parser("p", "", ["a"]).parse_args(["--tune"])


def test_tune_is_refused_for_a_study_without_a_grid(capsys):
    from experiments.graphs import studies as graphs
    from experiments.mlp import studies as mlp

    for main, argv in ((graphs.main, ["recipe", "--tune"]), (mlp.main, ["digits", "--tune"])):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2 and "--tune" in capsys.readouterr().err


def test_the_studies_grids_are_the_rates_around_the_configs_and_the_state_where_it_exists():
    from experiments.graphs import studies as graphs
    from experiments.mlp import studies as mlp

    gist = graphs.tuning()
    assert gist.objective == Objective("test_accuracy", "max")
    for cell in graphs.GRIDS["cora"]():
        assert gist.grids(cell) == {"learning_rate": (0.005, 0.01, 0.02),
                                    "algorithm.optimizer_state": ("reset", "carry")}, cell.label
    words = mlp.keywords_tuning()
    for cell in mlp.cells("keywords"):  # plain SGD keeps no state to restart or carry
        assert words.grids(cell) == {"learning_rate": (0.005, 0.01, 0.02)}, cell.label


# ----------------------------------------------------------------------------------------------------------------
# The tables of a tuned study


def _render(name: str, doc: dict) -> str:
    import experiments.graphs.report  # noqa: F401  (registers the tables)
    import experiments.mlp.report  # noqa: F401

    return tables.REGISTRY[name].render(doc)


def _untuned(path: str) -> dict:
    """The committed results file ``path`` as an untuned study writes it: no tuning record, no row's choice."""
    doc = {k: v for k, v in json.loads((REPO / path).read_text()).items() if k != "tuning"}
    doc["rows"] = [{k: v for k, v in row.items() if k != "tuned"} for row in doc["rows"]]
    return doc


def _tuned(path: str, grids: dict, metric_of) -> dict:
    """The committed results file ``path`` as a tuned study would write it: a tuning record over ``grids`` (per
    label) and each row's choice."""
    doc = copy.deepcopy(json.loads((REPO / path).read_text()))
    runs, chosen = [], {}
    for row in doc["rows"]:
        points = grid_points(grids)
        runs += [{"arm": row["label"], "settings": p, "run_dir": "x", "test_accuracy": metric_of(i), "error": None,
                  "commit": "c", "clean": True} for i, p in enumerate(points)]
        chosen[row["label"]] = row["tuned"] = points[int(np.argmax([metric_of(i) for i in range(len(points))]))]
    doc["tuning"] = {"objective": {"metric": "test_accuracy", "direction": "max"}, "tuning_fraction": 0.1, "seed": 0,
                     "grids": {label: {k: list(v) for k, v in grids.items()} for label in chosen}, "runs": runs,
                     "chosen": chosen}
    return doc


def test_the_graph_tables_show_each_cells_choice_and_every_tuning_run():
    path = "experiments/graphs/results/gist_cora.json"
    plain = _untuned(path)
    assert "chosen settings" not in _render("graphs_gist_cora", plain)  # an untuned file as before
    with pytest.raises(tables.ResultsError, match="--tune"):
        _render("graphs_tuning_cora", plain)

    doc = _tuned(path, {"learning_rate": (0.005, 0.01, 0.02), "algorithm.optimizer_state": ("reset", "carry")},
                 lambda i: [0.70, 0.75, 0.78, 0.80, 0.76, 0.71][i])  # best: lr 0.01, carried
    study = _render("graphs_gist_cora", doc).splitlines()
    assert "| cell | chosen settings (tuning) | model |" in study[0]
    assert study[2].startswith("| `paper_gcn16` | lr 0.01, state carried | GCN |")
    widths = {line.count("|") for line in study}
    assert len(widths) == 1  # the baseline rows beneath keep the columns
    assert any(line.startswith("| linear (trivial baseline") for line in study)

    tuning = _render("graphs_tuning_cora", doc)
    assert "trained on the 140 training nodes and scored on the 500 validation nodes" in tuning
    rows = [line for line in tuning.splitlines() if line.startswith("| `gcn_W2`")]
    assert len(rows) == 6 and rows[0] == "| `gcn_W2` | lr 0.01, state carried (chosen) | 0.800 |"
    assert sum("(chosen)" in line for line in tuning.splitlines()) == len(doc["rows"])


def test_the_keywords_tables_show_each_arms_choice_and_every_tuning_run():
    path = "experiments/mlp/results/keywords.json"
    plain = _untuned(path)
    assert "chosen settings" not in _render("keywords_generalisation", plain)
    doc = _tuned(path, {"learning_rate": (0.005, 0.01, 0.02)}, lambda i: [0.40, 0.45, 0.43][i])
    study = _render("keywords_generalisation", doc)
    assert "| IST | lr 0.01 | 2 |" in study and "| data parallel | lr 0.01 | 2 |" in study
    tuning = _render("keywords_tuning", doc)
    assert "first 90% of the training clips and scored on the last 10%" in tuning
    assert "| IST | lr 0.01 (chosen) | 0.450 |" in tuning and "| data parallel | lr 0.005 | 0.400 |" in tuning
