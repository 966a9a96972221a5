"""experiments.grid: a study as cells x seeds (the library's runner, `istjax.launch.study`), its results file (per
seed and per cell) and its figure."""

import json
import statistics

import pytest

from experiments import grid

TINY = ("--config.num_rounds=2", "--config.eval_every=2", "--config.checkpoint_every=2", "--config.local_steps=2")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grid")
    cells = [grid.Cell("ist", "experiments/configs/digits_ist.py", TINY, {"what": "IST"}),
             grid.Cell("dp", "experiments/configs/digits_data_parallel.py", TINY, {"what": "data parallel"})]
    out = tmp / "results" / "tiny.json"
    assert grid.run_grid("tiny", cells, [0, 1], tmp / "runs", out, "pytest") == 0
    return cells, tmp, out


def test_rows_are_mean_and_sample_std_of_the_seeds(study):
    _, _, out = study
    doc = json.loads(out.read_text())
    assert doc["study"] == "tiny" and doc["command"] == "pytest" and doc["machine"]["cores"]
    assert all(r["commit"] and isinstance(r["clean"], bool) for r in doc["runs"])  # each run's own provenance
    assert doc["configs"]["ist"]["config"] == "experiments/configs/digits_ist.py"
    assert doc["configs"]["ist"]["resolved"]["num_rounds"] == 2
    assert [r["label"] for r in doc["rows"]] == ["ist", "dp"] and len(doc["runs"]) == 4
    for row in doc["rows"]:
        accs = [r["test_accuracy"] for r in doc["runs"] if r["label"] == row["label"]]
        assert row["seeds"] == [0, 1]
        assert row["test_accuracy_mean"] == pytest.approx(statistics.fmean(accs))
        assert row["test_accuracy_std"] == pytest.approx(statistics.stdev(accs))
        assert row["algorithm"] == {"ist": "ist", "dp": "data_parallel"}[row["label"]] and row["num_workers"] == 4
        assert row["samples_seen"] == 2 * 4 * 2 * 32 and row["what"]
    ist, dp = doc["rows"]
    assert ist["bytes_per_worker_per_round"] < dp["bytes_per_worker_per_round"]
    # Two seeds of one config are two different runs.
    assert len({r["test_accuracy"] for r in doc["runs"] if r["label"] == "dp"} | {0}) >= 2


def test_finished_runs_are_reused_and_the_figure_drawn(study, capsys):
    cells, tmp, out = study
    before = (tmp / "runs" / "ist" / "s0" / "summary.json").stat().st_mtime
    assert grid.run_grid("tiny", cells, [0, 1], tmp / "runs", out, "pytest", only=["ist"]) == 0
    assert (tmp / "runs" / "ist" / "s0" / "summary.json").stat().st_mtime == before
    assert len(json.loads(out.read_text())["rows"]) == 2  # the other cell's runs are still in the file
    png = grid.plot(out, tmp / "fig.png", "tiny", reference="dp")
    assert png.stat().st_size > 1000


def test_unknown_cell_and_repeated_labels_are_refused(tmp_path):
    cell = grid.Cell("a", "experiments/configs/digits_ist.py", TINY)
    with pytest.raises(SystemExit, match="no cell named"):
        grid.run_grid("x", [cell], [0], tmp_path, tmp_path / "x.json", "c", only=["b"])
    with pytest.raises(SystemExit, match="repeat"):
        grid.run_grid("x", [cell, cell], [0], tmp_path, tmp_path / "x.json", "c")


def test_a_module_of_one_study_need_not_name_it():
    """`grid.parser`: ``python -m experiments.custom.fit --seeds 0,1`` as its docstring says; where a module holds
    several studies the name stays required and an unknown one is refused."""
    one = grid.parser("fit", "", ["fit"])
    assert one.parse_args(["--seeds", "0,1"]).study == "fit"
    assert one.parse_args(["fit"]).seeds == [0, 1, 2]
    several = grid.parser("images", "", ["diagnosis", "resist"])
    with pytest.raises(SystemExit):
        several.parse_args(["--seeds", "0"])
    with pytest.raises(SystemExit):
        several.parse_args(["resnet"])
