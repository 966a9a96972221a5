"""The image headline (issue 55): IST, data parallel and local SGD at the decomposition's largest budget, each tuned
on the training images' tail first (`experiments.grid.Tuning`), beside the decomposition's best combination, on five
seeds (`experiments.images.studies`, study ``headline``); its tables (`experiments.images.headline`). No training
here: the cells, grids and command line are checked as built, the tables on a hand-made results file."""

import json

import pytest

from experiments import tables
from experiments.grid import REPO
from experiments.images import headline
from experiments.images import studies
from istjax.launch.config import to_dict
from istjax.launch.study import plan
from istjax.launch.tuning import Objective

TUNED = [f"{a}_W{w}" for w in (2, 4) for a in ("ist", "data_parallel", "local_sgd")]
BEST = [f"{a}_W{w}_best" for w in (2, 4) for a in ("ist", "local_sgd")]


def _fields(overrides) -> dict:
    return dict(o.removeprefix("--config.").split("=", 1) for o in overrides)


def _resolved(cell) -> dict:
    config = to_dict(plan([cell], [None], ".", root=REPO)[0].config)
    config.pop("seed", None)
    return config


def test_the_reported_cells_are_the_decompositions_largest_budget_tuned_arms_and_its_best_combination():
    cells = {c.label: c for c in studies.GRIDS["headline"]()}
    assert list(cells) == TUNED + BEST
    for label, c in cells.items():
        f = _fields(c.overrides)
        k, w, rounds = int(f["local_steps"]), int(f["num_workers"]), int(f["num_rounds"])
        assert rounds * w * k * 32 == c.info["budget"] == 163_840
        assert (int(f["eval_every"]), int(f["checkpoint_every"])) == (rounds // 4, rounds)
        assert c.info["setting"] == ("best" if label.endswith("_best") else "tuned")
        assert c.config == "experiments/configs/fmnist_resnet_ist.py"
    # the decomposition's best combination, exactly as it was added to the decomposition (issue 55)
    assert cells["ist_W4_best"].overrides == (
        "--config.algorithm.name=ist", "--config.num_workers=4", "--config.local_steps=40", "--config.num_rounds=32",
        "--config.eval_every=8", "--config.checkpoint_every=32", "--config.learning_rate=0.1",
        "--config.algorithm.optimizer_state=carry")
    assert all(_fields(cells[b].overrides)["learning_rate"] == "0.1" for b in BEST)
    # a tuned arm pins nothing its grid chooses
    assert not any(o.startswith(("--config.learning_rate", "--config.algorithm.optimizer_state"))
                   for label in TUNED for o in cells[label].overrides)


def test_a_tuned_arm_is_the_decompositions_cell_at_the_same_budget_but_for_the_pinned_rate():
    """The same config, width, K, rounds and evaluations as ``<algorithm>_W<W>_163k`` of the decomposition; only
    the learning rate it pinned at 0.05 (`studies.MEASURED_LR`) is left to the tuning."""
    decompose = {c.label: c for c in studies.GRIDS["decompose"]()}
    for label, c in ((c.label, c) for c in studies.GRIDS["headline"]() if c.label in ("ist_W4", "local_sgd_W2")):
        mine, theirs = _resolved(c), _resolved(decompose[f"{label}_163k"])
        assert {k for k in mine if mine[k] != theirs[k]} == {"learning_rate"}
        assert (mine["learning_rate"], theirs["learning_rate"]) == (0.1, 0.05)


def test_the_tuning_runs_are_the_same_arms_at_the_reported_budget_each_evaluated_once():
    tuning = studies.TUNINGS["headline"]()
    reported = {c.label: c for c in studies.GRIDS["headline"]()}
    assert [c.label for c in tuning.cells] == list(reported)
    assert tuning.objective == Objective("test_accuracy", "max") and tuning.fraction == 0.1
    for c in tuning.cells:
        f, g = _fields(c.overrides), _fields(reported[c.label].overrides)
        assert f["num_rounds"] == g["num_rounds"]
        assert f["eval_every"] == f["num_rounds"] == f["checkpoint_every"]
        assert {k: v for k, v in f.items() if k not in ("num_rounds", "eval_every", "checkpoint_every")} == \
               {k: v for k, v in g.items() if k not in ("num_rounds", "eval_every", "checkpoint_every")}


def test_each_arms_grid_tunes_the_rate_and_the_state_only_where_its_algorithm_restarts_one():
    tuning = studies.TUNINGS["headline"]()
    grids = {c.label: tuning.grids(c) for c in tuning.cells}
    rates = (0.05, 0.1, 0.2)
    for w in (2, 4):
        assert grids[f"ist_W{w}"] == grids[f"local_sgd_W{w}"] == {
            "learning_rate": rates, "algorithm.optimizer_state": ("reset", "carry")}
        assert grids[f"data_parallel_W{w}"] == {"learning_rate": rates}
    assert all(grids[b] == {} for b in BEST)  # one point, as they are: not tuned
    assert sum(len(rates) * len(g.get("algorithm.optimizer_state", (1,))) if g else 1 for g in grids.values()) == 34


def test_the_decomposition_no_longer_holds_the_headline_cells():
    labels = [c.label for c in studies.GRIDS["decompose"]()]
    assert len(labels) == 54 and len(set(labels)) == 54
    assert not [x for x in labels if x.endswith(("_defaults", "_best"))]
    assert not hasattr(studies, "DECOMPOSE_HEADLINE")


def test_the_command_line_tunes_the_headline_on_five_seeds_and_records_its_baselines(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(studies, "run_grid", lambda study, cells, seeds, *a, tuning=None: calls.append(
        (study, [c.label for c in cells], list(seeds), tuning)) or 0)
    monkeypatch.setattr(studies, "plot", lambda *a: a[1])
    assert studies.main(["headline", "--workdir", str(tmp_path)]) == 0
    study, labels, seeds, tuning = calls.pop()
    assert (study, labels, seeds) == ("headline", TUNED + BEST, [0, 1, 2, 3, 4])
    assert [c.label for c in tuning.cells] == TUNED + BEST
    assert studies.main(["headline", "--seeds", "3,4", "--workdir", str(tmp_path)]) == 0
    assert calls.pop()[2] == [3, 4]
    monkeypatch.setattr(studies, "plot_gap", lambda *a: a[1])
    monkeypatch.setattr(studies, "plot_budgets", lambda *a: a[1])
    assert studies.main(["decompose", "--workdir", str(tmp_path)]) == 0
    assert calls.pop()[2:] == ([0, 1, 2], None)  # other studies: three seeds, untuned
    recorded = []
    monkeypatch.setattr(studies, "record_baselines", lambda out, cell: recorded.append((out, cell)) or out)
    assert studies.main(["headline", "--baselines"]) == 0
    (out, cell), = recorded
    assert out == REPO / headline.HEADLINE and cell.label == "ist_W2"  # the file the tables read


# A hand-made results file: two seeds a cell, the tuning record `istjax.launch.tuning.tune` writes, the baselines.
ACC = {"ist_W2": (0.80, 0.82), "data_parallel_W2": (0.86, 0.87), "local_sgd_W2": (0.85, 0.89),
       "ist_W2_best": (0.84, 0.86), "local_sgd_W2_best": (0.88, 0.88)}
CHOSEN = {"ist_W2": {"learning_rate": 0.1, "algorithm.optimizer_state": "carry"},
          "data_parallel_W2": {"learning_rate": 0.2},
          "local_sgd_W2": {"learning_rate": 0.1, "algorithm.optimizer_state": "reset"},
          "ist_W2_best": {}, "local_sgd_W2_best": {}}


def _doc() -> dict:
    cells = {c.label: c for c in studies.GRIDS["headline"]() if c.label in ACC}
    configs = {label: {"config": c.config, "overrides": [*c.overrides, *(f"--config.{k}={v}" for k, v in
                                                                         CHOSEN[label].items())]}
               for label, c in cells.items()}
    runs = [{"label": label, "seed": s, "test_accuracy": acc[s]} for label, acc in ACC.items() for s in (0, 1)]
    rows = [{"label": label, **c.info, "algorithm": _fields(c.overrides)["algorithm.name"], "num_workers": 2,
             "seeds": [0, 1], "test_accuracy_mean": sum(ACC[label]) / 2,
             "test_accuracy_std": abs(ACC[label][0] - ACC[label][1]) / 2 ** 0.5,
             "test_accuracy_min": min(ACC[label]), "test_accuracy_max": max(ACC[label]),
             "rounds": int(_fields(c.overrides)["num_rounds"]), "bytes_per_worker_per_round": 1_000_000.0,
             **({"tuned": CHOSEN[label]} if label in TUNED else {})} for label, c in cells.items()]
    grid = {"learning_rate": [0.05, 0.1, 0.2], "algorithm.optimizer_state": ["reset", "carry"]}
    grids = {"ist_W2": grid, "local_sgd_W2": grid, "data_parallel_W2": {"learning_rate": [0.05, 0.1, 0.2]},
             "ist_W2_best": {}, "local_sgd_W2_best": {}}
    tuning_runs = [{"arm": "ist_W2", "settings": {"learning_rate": 0.1, "algorithm.optimizer_state": "carry"},
                    "test_accuracy": 0.79},
                   {"arm": "ist_W2", "settings": {"learning_rate": 0.2, "algorithm.optimizer_state": "reset"},
                    "test_accuracy": None},
                   {"arm": "data_parallel_W2", "settings": {"learning_rate": 0.2}, "test_accuracy": 0.81},
                   {"arm": "local_sgd_W2", "settings": {"learning_rate": 0.1, "algorithm.optimizer_state": "reset"},
                    "test_accuracy": 0.8},
                   {"arm": "ist_W2_best", "settings": {}, "test_accuracy": 0.775},
                   {"arm": "local_sgd_W2_best", "settings": {}, "test_accuracy": 0.8125}]
    return {"configs": configs, "rows": rows, "runs": runs,
            "tuning": {"objective": {"metric": "test_accuracy", "direction": "max"}, "tuning_fraction": 0.1,
                       "seed": 0, "grids": grids, "runs": tuning_runs, "chosen": CHOSEN},
            "baselines": {"linear": {"test_accuracy": 0.841}},
            "regime": {"baseline": "linear", "metric": "test_accuracy", "direction": "max"}}


def _render(name: str, doc: dict) -> str:
    return tables.REGISTRY[name].render(doc)


def test_the_headline_table_shows_each_arm_at_its_settings_the_best_combination_as_such_and_the_linear_row():
    text = _render("images_headline", _doc())
    lines = text.splitlines()
    body = [x for x in lines if x.startswith("| 2 |")]
    assert [x.split(" | ")[1] for x in body] == [
        "IST", "data parallel", "local SGD",
        "IST, the decomposition's best (chosen on the reported split by an earlier study)",
        "local SGD, the decomposition's best (chosen on the reported split by an earlier study)"]
    assert body[0].split(" | ")[2:4] == ["lr 0.1, state carried, K = 20", "0.810 ± 0.014 (2 seeds)"]
    assert body[1].split(" | ")[2] == "lr 0.2"  # data parallel: neither a state nor K
    assert body[3].split(" | ")[2] == "lr 0.1, state carried, K = 40"
    # local SGD's mean (0.870) beats data parallel's (0.865): IST minus local SGD, per seed -0.05 and -0.07
    assert "-6.0 [-18.7, +6.7] points against local SGD (2 seeds)" in body[0]
    assert "-2.0 [-14.7, +10.7] points against local SGD (2 seeds)" in body[3]
    assert body[0].endswith("| 128 | 1.0 MB | 128.0 MB |") and body[3].endswith("| 64 | 1.0 MB | 64.0 MB |")
    assert lines[-1] == "| - | linear (trivial baseline, regime) | - | 0.841 | - | - | - | - | - |"
    assert "163,840 samples" in text


def test_the_tuning_table_shows_every_tuning_run_with_the_choice_and_the_best_combination_untuned():
    text = _render("images_headline_tuning", _doc())
    assert "seed 0, 163,840 images, trained on the first 90% of the training images" in text
    rows = [x for x in text.splitlines() if x.startswith("| IST") or x.startswith("| local") or x.startswith("| data")]
    assert rows == [
        "| IST, W = 2 | lr 0.1, state carried (chosen) | 0.790 |",
        "| IST, W = 2 | lr 0.2, state restarted | - |",
        "| data parallel, W = 2 | lr 0.2 (chosen) | 0.810 |",
        "| local SGD, W = 2 | lr 0.1, state restarted (chosen) | 0.800 |",
        "| IST, W = 2 | the decomposition's best, not tuned: lr 0.1, state carried, K = 40 | 0.775 |",
        "| local SGD, W = 2 | the decomposition's best, not tuned: lr 0.1, state carried, K = 40 | 0.812 |"]
    with pytest.raises(tables.ResultsError, match="records no 'tuning'"):
        _render("images_headline_tuning", {k: v for k, v in _doc().items() if k != "tuning"})


def test_the_headline_scalars_read_the_file():
    doc = _doc()
    assert _render("headline.ist_W2", doc) == "0.810 ± 0.014 (2 seeds)"
    assert _render("headline.gap_W2", doc) == "-6.0 [-18.7, +6.7] points against local SGD (2 seeds)"
    assert _render("headline.best_gap_W2", doc) == "-2.0 [-14.7, +10.7] points against local SGD (2 seeds)"
    assert _render("headline.choices", doc) == ("IST, W = 2: lr 0.1, state carried; data parallel, W = 2: lr 0.2; "
                                                "local SGD, W = 2: lr 0.1, state restarted")
    assert _render("headline.linear", doc) == "0.841"
    assert _render("headline.above_linear", doc) == "-3.1 to +2.9"
    assert _render("headline.best_above_linear", doc) == "+0.9 to +3.9"
    json.dumps(doc)  # the hand-made file is a results file
    with pytest.raises(tables.ResultsError, match="--baselines"):
        _render("images_headline", {k: v for k, v in doc.items() if k != "baselines"})
