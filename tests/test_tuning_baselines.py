"""Comparisons that decide (issue 55): the study runner's tuning stage (`istjax.launch.tuning`: arms tuned on a split
carved from the training data, never on the reported one, finished tuning runs reused), the trivial baselines the
library computes (`istjax.data.ngram`, `istjax.xmc.baselines`, `istjax.launch.baselines`) and the regime gate of
``experiments.report --check`` (`experiments.claims`)."""

import io
import json
import math
import pathlib

import numpy as np
import pytest

from experiments import claims, report, tables
from istjax.data import ngram
from istjax.data.dataset import Dataset
from istjax.launch import baselines, study, tuning
from istjax.xmc import baselines as xmc_baselines

REPO = pathlib.Path(__file__).resolve().parents[1]
TINY = ("--config.num_rounds=2", "--config.eval_every=2", "--config.checkpoint_every=2", "--config.local_steps=1",
        "--config.num_workers=2", "--config.batch_size=16", "--config.model.hidden=(8,)",
        "--config.runtime.loss_split=False", "--config.eval_train_examples=256")
FRACTION = 0.2

# The study's data: digits with the *reported* split poisoned (its labels moved by one class), so a choice that read
# it would score differently from the hand computation on the training tail. ``carve=True`` cuts the tuning split by
# hand, for that computation.
DATA_MODULE = f'''
import numpy as np
import istjax

def load(carve=False):
    d = istjax.data.load_digits()
    d = d._replace(test_y=((np.asarray(d.test_y) + 1) % 10).astype(np.int32))
    if carve:
        n = len(d.train_y)
        cut = n - int(round(n * {FRACTION}))
        d = d._replace(train_x=d.train_x[:cut], train_y=d.train_y[:cut], test_x=d.train_x[cut:],
                       test_y=d.train_y[cut:])
    return d
'''


class Killed(Exception):
    """Stands for the study's process being killed between two runs."""


def _arms(tmp_path):
    module = tmp_path / "poisoned.py"
    module.write_text(DATA_MODULE)
    data = (f"--config.data.module={module}:load", "--config.data.name=poisoned_digits")
    return [study.Cell("ist", "experiments/configs/digits_ist.py", TINY + data),
            study.Cell("dp", "experiments/configs/digits_data_parallel.py", TINY + data)]


def test_the_tuning_split_is_the_training_tail_and_the_reported_split_is_not_read():
    from istjax.launch.config import default_config, load_config_data

    c = default_config()
    whole = load_config_data(c)
    c.data.tuning_fraction = FRACTION
    tuned = load_config_data(c)
    cut = len(whole.train_y) - int(round(len(whole.train_y) * FRACTION))
    np.testing.assert_array_equal(tuned.test_x, whole.train_x[cut:])
    np.testing.assert_array_equal(tuned.test_y, whole.train_y[cut:])
    np.testing.assert_array_equal(tuned.train_x, whole.train_x[:cut])
    assert len(tuned.train_y) + len(tuned.test_y) == len(whole.train_y)
    c.data.tuning_fraction = 1.0
    from istjax.launch.config import ConfigError, check

    with pytest.raises(ConfigError, match="data.tuning_fraction"):
        check(c)


def test_the_usual_grid_tunes_only_what_an_arm_reads():
    ist = study.Cell("ist", "experiments/configs/digits_ist.py")
    dp = study.Cell("dp", "experiments/configs/digits_data_parallel.py")
    diloco = study.Cell("diloco", "experiments/configs/digits_local_sgd.py", ("--config.algorithm.name=diloco",))
    kw = dict(outer_learning_rates=(0.5, 0.7), root=REPO)
    assert tuning.arm_grid(ist, (0.1, 0.2), variants={"model.batch_norm": (True, False)}, **kw) == {
        "learning_rate": (0.1, 0.2), "algorithm.optimizer_state": ("reset", "carry"),
        "model.batch_norm": (True, False)}
    assert tuning.arm_grid(dp, (0.1,), **kw) == {"learning_rate": (0.1,)}
    assert tuning.arm_grid(diloco, (0.1,), **kw)["algorithm.outer_learning_rate"] == (0.5, 0.7)
    assert len(tuning.grid_points({"a": (1, 2), "b": ("x", "y", "z")})) == 6


def _hand_metric(run_dir: pathlib.Path, module: pathlib.Path) -> float:
    """The tuning run's final model scored by hand on the training tail cut by the data module itself."""
    import importlib.util

    from istjax.launch import driver

    config, experiment, state, _ = driver.restore_run(run_dir)
    spec = importlib.util.spec_from_file_location("poisoned_hand", module)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    evaluate = driver.make_evaluator(experiment.task, mod.load(carve=True), batch_size=int(config.eval_batch_size),
                                     train_examples=int(config.eval_train_examples))
    return evaluate(state)["test_loss"]


@pytest.mark.slow
def test_each_arm_gets_the_rate_best_on_the_tuning_split_and_a_killed_study_reuses_its_tuning_runs(tmp_path):
    """Also: a study killed mid-tuning keeps its finished tuning runs in the results file, whether or not their
    run directories survive."""
    arms, grid = _arms(tmp_path), {"learning_rate": (0.01, 0.5)}
    out, trained, seen = tmp_path / "results.json", [], []

    def trainer(limit=None):
        def train(p):
            if limit is not None and len(trained) >= limit:
                raise Killed
            trained.append(p.cell.label)
            seen.append(float(p.config.data.tuning_fraction))
            return study.train_in_process(p)
        return train

    kw = dict(grids={"ist": grid, "dp": grid}, objective=tuning.Objective("test_loss", "min"), fraction=FRACTION,
              root=REPO, out=out, command="pytest")
    with pytest.raises(Killed):
        tuning.tune_then_run("tiny", arms, [0], tmp_path / "runs", train=trainer(limit=2), **kw)
    assert trained == ["ist/learning_rate=0.01", "ist/learning_rate=0.5"]
    # the results file already holds the two finished tuning runs, nothing chosen; with their run directories gone
    # (a machine lost mid-tuning) they are not trained again
    partial = json.loads(out.read_text())["tuning"]
    assert partial["partial"] is True and partial["chosen"] == {}
    assert [(r["arm"], r["settings"]) for r in partial["runs"]] == [("ist", p) for p in tuning.grid_points(grid)]
    assert all(math.isfinite(r["test_loss"]) and r["error"] is None for r in partial["runs"])
    import shutil

    shutil.move(tmp_path / "runs" / "tuning" / "ist", tmp_path / "ist_aside")
    tuning.tune_then_run("tiny", arms, [0], tmp_path / "runs", train=trainer(), **kw)
    shutil.move(tmp_path / "ist_aside", tmp_path / "runs" / "tuning" / "ist")  # back, for the hand scores below
    assert trained[2:] == ["dp/learning_rate=0.01", "dp/learning_rate=0.5", "ist", "dp"]  # the two finished kept
    assert "partial" not in json.loads(out.read_text())["tuning"]
    assert seen == [FRACTION] * 4 + [0.0, 0.0]  # every tuning run on the tuning split, the reported ones not

    doc = json.loads(out.read_text())
    record = doc["tuning"]
    assert record["grids"] == {"ist": {"learning_rate": [0.01, 0.5]}, "dp": {"learning_rate": [0.01, 0.5]}}
    assert len(record["runs"]) == 4 and record["objective"] == {"metric": "test_loss", "direction": "min"}
    module = tmp_path / "poisoned.py"
    for arm in ("ist", "dp"):
        runs = [r for r in record["runs"] if r["arm"] == arm]
        hand = [_hand_metric(pathlib.Path(r["run_dir"]), module) for r in runs]
        for r, h in zip(runs, hand):
            assert math.isclose(r["test_loss"], h, rel_tol=1e-5), (arm, r["settings"], r["test_loss"], h)
        best = runs[int(np.argmin(hand))]["settings"]
        assert record["chosen"][arm] == best
        assert doc["configs"][arm]["resolved"]["learning_rate"] == best["learning_rate"]
        assert doc["configs"][arm]["resolved"]["data"]["tuning_fraction"] == 0.0
        assert f"--config.learning_rate={best['learning_rate']!r}" in doc["configs"][arm]["overrides"]

    # A third call trains nothing: every tuning run and reported run is finished.
    before = len(trained)
    tuning.tune_then_run("tiny", arms, [0], tmp_path / "runs", train=trainer(), **kw)
    assert len(trained) == before and json.loads(out.read_text())["tuning"]["chosen"] == record["chosen"]

    # The machine is gone (every run directory with it): the results file's records stand, nothing is retrained.
    shutil.rmtree(tmp_path / "runs")
    tuning.tune_then_run("tiny", arms, [0], tmp_path / "runs", train=trainer(), **kw)
    again = json.loads(out.read_text())
    assert len(trained) == before and again["tuning"] == record and len(again["runs"]) == 2


def _recorded_tuning(arms, grid, values, objective):
    """A results file's tuning record of ``arms`` over ``grid`` as `tuning.tune` writes it, each run's metric from
    ``values`` in grid order, its run directory long gone."""
    runs = []
    for c in arms:
        for point, value in zip(tuning.grid_points(grid), values[c.label]):
            label = f"{c.label}/{tuning.point_label(point)}"
            run = tuning.with_settings(c, {**point, "data.tuning_fraction": FRACTION}, label, {})
            runs.append({"arm": c.label, "settings": point, "run_dir": f"/gone/{label}", objective.metric: value,
                         "error": None, "commit": "abc1234", "clean": True, "config": study.config_name(run),
                         "overrides": list(run.overrides)})
    return {"objective": objective.to_record(), "tuning_fraction": FRACTION, "seed": 0, "runs": runs}


def test_tuning_runs_a_results_file_records_are_not_retrained_unless_their_overrides_changed(tmp_path):
    arms, grid, trained = _arms(tmp_path), {"learning_rate": (0.01, 0.5)}, []
    objective = tuning.Objective("test_loss", "min")
    earlier = _recorded_tuning(arms, grid, {"ist": (0.9, 0.4), "dp": (0.3, 0.6)}, objective)

    def train(p):  # a run that is trained fails: the choice then rests on the records alone
        trained.append(p.cell.label)
        return "not trained in this test"

    kw = dict(objective=objective, fraction=FRACTION, root=REPO, train=train)
    record = tuning.tune(arms, {"ist": grid, "dp": grid}, tmp_path, earlier=earlier, **kw)
    assert trained == [] and record["chosen"] == {"ist": {"learning_rate": 0.5}, "dp": {"learning_rate": 0.01}}
    assert record["runs"] == earlier["runs"]
    # a run recorded with other overrides (its cell changed since), one recorded before overrides were, another
    # split: trained again
    earlier["runs"][0]["overrides"] = earlier["runs"][0]["overrides"][:-1]
    del earlier["runs"][3]["overrides"]
    record = tuning.tune(arms, {"ist": grid, "dp": grid}, tmp_path, earlier=earlier, **kw)
    assert trained == ["ist/learning_rate=0.01", "dp/learning_rate=0.5"]
    assert record["chosen"] == {"ist": {"learning_rate": 0.5}, "dp": {"learning_rate": 0.01}}
    with pytest.raises(tuning.TuningError, match="none of its 2 grid points"):  # every run trained, and failed
        tuning.tune(arms, {"ist": grid, "dp": grid}, tmp_path, earlier={**earlier, "tuning_fraction": 0.5}, **kw)
    assert len(trained) == 2 + 4


# ----------------------------------------------------------------------------------------------------------------
# Trivial baselines

TEXT = "abracadabra abracada"  # 20 characters


def test_ngram_tables_equal_hand_counts_on_a_twenty_character_text():
    assert len(TEXT) == 20
    chars = sorted(set(TEXT))
    V, ids = len(chars), np.array([chars.index(c) for c in TEXT])
    tables_ = [ngram.fit_ngram([ids], V, k) for k in (1, 2, 3)]
    for k, table in zip((1, 2, 3), tables_):
        grams = [TEXT[i:i + k] for i in range(len(TEXT) - k + 1)]
        for g in set(grams):
            assert table.count([chars.index(c) for c in g]) == grams.count(g)
        assert table.count([chars.index("d")] * k) == grams.count("d" * k)  # "dd" never occurs
    assert tables_[1].count([chars.index("a")]) == 8  # 'a' 9 times, the last one followed by nothing

    # Cross-entropy on two windows of 9 characters (x, then y shifted by one), by hand with add-one smoothing.
    x = np.stack([ids[0:9], ids[10:19]])
    y = np.stack([ids[1:10], ids[11:20]])

    def p(history: str, c: str) -> float:
        k = len(history) + 1
        grams = [TEXT[i:i + k] for i in range(len(TEXT) - k + 1)]
        followed = sum(g[:-1] == history for g in grams)
        return (grams.count(history + c) + 1) / (followed + V)

    for order in (1, 2, 3):
        logs = []
        for w in range(2):
            for t in range(9):
                h = "".join(chars[i] for i in x[w, max(0, t - order + 2):t + 1]) if order > 1 else ""
                logs.append(math.log(p(h, chars[y[w, t]])))
        scores = ngram.ngram_scores(tables_[:order], x, y)
        assert math.isclose(scores["test_loss"], -sum(logs) / len(logs), rel_tol=1e-12)
    assert ngram.ngram_scores(tables_, x, y)["test_loss"] < ngram.ngram_scores(tables_[:1], x, y)["test_loss"]

    data = Dataset("text", x, y, x, y, V, vocabulary="".join(chars))
    found = ngram.ngram_baselines(data)
    assert list(found) == ["unigram", "bigram", "trigram"]
    assert found["trigram"]["test_loss"] < found["bigram"]["test_loss"] < found["unigram"]["test_loss"]


TRAIN = np.array([[0, 1, -1], [0, 2, -1], [0, 1, 3], [1, 4, -1], [0, -1, -1]])  # label 0: 4, 1: 3, 2-4: 1, 5: 0
TEST = np.array([[0, -1], [1, 2], [3, -1], [5, -1], [0, 1]])
PROPENSITY = np.array([0.5, 0.25, 0.8, 0.4, 1.0, 0.2])  # weights 2, 4, 1.25, 2.5, 1, 5


def test_the_most_frequent_labels_predictor_scores_as_by_hand_on_five_points():
    assert list(xmc_baselines.most_frequent_labels(TRAIN, 5, 6)) == [0, 1, 2, 3, 4]  # equal counts: lower id first
    s = xmc_baselines.constant_predictor_scores(TRAIN, TEST, PROPENSITY, num_labels=6)
    # Every point is ranked 0, 1, 2, 3, 4. Hits at 1: points 0 and 4; in the top 3: 1 + 2 + 0 + 0 + 2; top 5: 6.
    assert s["test_accuracy"] == s["test_precision_at_1"] == pytest.approx(2 / 5)
    assert s["test_precision_at_3"] == pytest.approx(5 / 15)
    assert s["test_precision_at_5"] == pytest.approx(6 / 25)
    # PSP@k: weighted hits of the top k over the best any ranking gets (each point's k largest true weights).
    assert s["test_psp_at_1"] == pytest.approx((2 + 2) / (2 + 4 + 2.5 + 5 + 4))
    assert s["test_psp_at_3"] == pytest.approx((2 + 5.25 + 0 + 0 + 6) / (2 + 5.25 + 2.5 + 5 + 6))
    assert set(s) >= {"test_ndcg_at_5", "test_psp_at_5"}
    data = Dataset("xmc", np.zeros((5, 3, 2), np.float32), TRAIN, np.zeros((5, 3, 2), np.float32), TEST, 6,
                   num_feature_ids=4, label_weights=(1 / PROPENSITY).astype(np.float32))
    assert baselines.dataset_baselines(data)["most_frequent_labels"]["test_psp_at_3"] == pytest.approx(
        s["test_psp_at_3"], rel=1e-6)


def test_the_linear_baseline_is_deterministic_for_a_seed_and_learns():
    import istjax

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 6))
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64) + 2 * (x[:, 2] > 0.5)
    data = istjax.data.from_arrays(x, y, test_fraction=0.3, seed=0)
    kw = dict(max_steps=300, chunk=100)
    a, b = baselines.linear_baseline(data, seed=3, **kw), baselines.linear_baseline(data, seed=3, **kw)
    assert a == b and a["steps"] <= 300
    majority = np.bincount(np.asarray(data.test_y)).max() / len(data.test_y)
    assert a["test_accuracy"] > majority + 0.2 and a["train_loss"] < math.log(4)


# ----------------------------------------------------------------------------------------------------------------
# The regime gate of experiments.report --check

def _study_tree(tmp_path, rows, baseline_loss=2.0):
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "study.md").write_text("# A study\n\n<!-- report:toy_table -->\n<!-- /report:toy_table -->\n")
    doc = {"rows": rows, "runs": [{"label": r["label"], "seed": 0, "commit": "abc", "clean": True} for r in rows],
           "baselines": {"bigram": {"test_loss": 2.5}, "trigram": {"test_loss": baseline_loss}},
           "regime": {"baseline": "trigram", "metric": "test_loss", "direction": "min"}}
    (root / "results.json").write_text(json.dumps(doc))

    def render(data):
        return tables.markdown_table(["cell", "validation loss"],
                                     [[r["label"], r["test_loss_mean"]] for r in data["rows"]])
    registry = {"toy_table": tables.Entry("toy_table", ("results.json",), render, shows=("test_loss",))}
    return root, registry


def _gate(root, registry, claim_list):
    out = io.StringIO()
    report.run(root, False, registry, io.StringIO(), claims=[])  # render the table first
    return report.run(root, True, registry, out, claims=claim_list), out.getvalue()


def test_report_check_fails_on_arms_that_do_not_beat_the_regime_baseline(tmp_path):
    root, registry = _study_tree(tmp_path, [{"label": "ist_w4", "test_loss_mean": 2.3},
                                            {"label": "local_sgd_w4", "test_loss_mean": 1.8}])
    c = claims.Claim("ist_near_local", "toy_table", ("ist_w4", "local_sgd_w4"), "test_loss")
    status, out = _gate(root, registry, [c])
    assert status == 1
    assert "cell 'ist_w4' (test_loss 2.3) does not beat the regime baseline 'trigram' (2)" in out
    assert "cell 'local_sgd_w4'" not in out


def test_report_check_fails_on_a_claim_resting_on_a_metric_the_table_does_not_show(tmp_path):
    root, registry = _study_tree(tmp_path, [{"label": "a", "test_loss_mean": 1.5}, {"label": "b",
                                                                                    "test_loss_mean": 1.6}])
    c = claims.Claim("a_more_accurate", "toy_table", ("a", "b"), "test_accuracy")
    status, out = _gate(root, registry, [c])
    assert status == 1 and "test_accuracy, which table 'toy_table' does not show (it shows test_loss)" in out


def test_report_check_passes_a_claim_whose_arms_beat_the_baseline_on_a_shown_metric(tmp_path):
    root, registry = _study_tree(tmp_path, [{"label": "a", "test_loss_mean": 1.5}, {"label": "b",
                                                                                    "test_loss_mean": 1.6}])
    c = claims.Claim("a_beats_b", "toy_table", ("a", "b"), "test_loss")
    status, out = _gate(root, registry, [c])
    assert status == 0, out
    doc = json.loads((root / "results.json").read_text())
    doc.pop("regime")
    (root / "results.json").write_text(json.dumps(doc))
    status, out = _gate(root, registry, [c])
    assert status == 1 and "declares no regime baseline" in out


def test_baseline_sections_are_recorded_into_a_results_file(tmp_path):
    out = study.write_json(tmp_path / "r.json", {"study": "s", "rows": []})
    sections = {"baselines": {"trigram": {"test_loss": 2.0}},
                "regime": {"baseline": "trigram", "metric": "test_loss", "direction": "min"}}
    baselines.record_sections(out, sections)
    doc = json.loads(out.read_text())
    assert doc["study"] == "s" and doc["regime"]["baseline"] == "trigram"
    assert tables.baseline_rows(doc, ["test_loss"]) == [["trigram (trivial baseline, regime)", "2.000"]]
