"""The extreme study's tuning stage (`experiments.extreme.tuning`, ``--tune``): the tuning split of multi-label data
(the tail held out, the test split never read, the propensities the full training split's), the training points'
fixed permutation, each arm's grid and budget at one width, its choice applied to every width, and the tables that
render the record (`experiments.extreme.report`). No MPI: the trainer is replaced by one that writes a run's
metrics."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from experiments import tables
from experiments.extreme import report as extreme_report  # registers the extreme tables
from experiments.extreme import study
from experiments.extreme import tuning
from istjax.core.errors import ArgError
from istjax.data.extreme import load_synthetic_dataset
from istjax.data.tuning import tuning_split
from istjax.launch import study as study_lib
from istjax.launch.config import load_config_data

GiB = 1 << 30
TINY = dict(num_train=50, num_test=10, num_features=40, num_labels=12, features_per_label=2, nnz=8)


class Unreadable:
    """A split that fails the test on any read: the tuning split must drop it unread."""

    def __getattr__(self, name):
        raise AssertionError(f"the reported split was read ({name})")

    def __getitem__(self, index):
        raise AssertionError("the reported split was indexed")

    def __len__(self):
        raise AssertionError("the reported split's length was read")

    def __array__(self, *args, **kwargs):
        raise AssertionError("the reported split was converted")


def test_the_tuning_split_of_label_sets_holds_the_tail_out_and_never_reads_the_test_split():
    full = load_synthetic_dataset(**TINY)
    assert full.train_y.ndim == 2 and full.train_x.shape[1:] == (8, 2)  # label sets [N, L]; (id, value) pairs
    data = full._replace(test_x=Unreadable(), test_y=Unreadable())
    t = tuning_split(data, 0.2)
    np.testing.assert_array_equal(t.train_x, full.train_x[:40])
    np.testing.assert_array_equal(t.train_y, full.train_y[:40])
    np.testing.assert_array_equal(t.test_x, full.train_x[40:])  # the tail is what a tuning run evaluates
    np.testing.assert_array_equal(t.test_y, full.train_y[40:])
    assert t.label_weights is full.label_weights  # PSP@k's weights: the full training split's propensities
    assert (t.num_feature_ids, t.num_classes) == (full.num_feature_ids, full.num_classes)


def test_a_label_set_tail_with_labels_the_head_never_shows_is_not_refused():
    """Only class labels ``[N]`` are checked for a tail of unseen classes; a label set's tail may hold a label the
    head lacks (a rare label), as the test split does."""
    full = load_synthetic_dataset(**TINY)
    y = np.array(full.train_y)
    y[-1, 0] = full.num_classes - 1
    y[:-1][y[:-1] == full.num_classes - 1] = 0  # the last label only in the tail
    t = tuning_split(full._replace(train_y=y), 0.2)
    assert (t.test_y == full.num_classes - 1).any() and not (t.train_y == full.num_classes - 1).any()


def test_shuffled_order_permutes_the_training_points_only_the_same_way_every_time():
    listed, shuffled = load_synthetic_dataset(**TINY), load_synthetic_dataset(**TINY, order="shuffled")
    assert not np.array_equal(listed.train_y, shuffled.train_y)
    again = load_synthetic_dataset(**TINY, order="shuffled")
    np.testing.assert_array_equal(shuffled.train_x, again.train_x)  # one fixed permutation
    rows = {r.tobytes() for r in listed.train_x}
    assert {r.tobytes() for r in shuffled.train_x} == rows  # the same points
    np.testing.assert_array_equal(shuffled.test_x, listed.test_x)
    np.testing.assert_array_equal(shuffled.label_weights, listed.label_weights)
    with pytest.raises(ArgError, match="order='random' is not an order"):
        load_synthetic_dataset(**TINY, order="random")


def test_a_tuning_runs_config_loads_the_shuffled_tail_of_the_study_data():
    """The path a tuning run takes (`load_config_data`): ``data.kwargs.order`` and ``data.tuning_fraction``."""
    from istjax.launch.args import load_config

    flags = [f"--config.data.kwargs.{k}={v}" for k, v in TINY.items()]
    config = load_config(str(study.ROOT / "experiments/configs/xmc_synthetic_study_ist.py"),
                         flags + [tuning.ORDER, "--config.data.tuning_fraction=0.1"])
    t = load_config_data(config)
    shuffled = load_synthetic_dataset(**TINY, order="shuffled")
    np.testing.assert_array_equal(t.test_y, shuffled.train_y[45:])
    assert len(t.train_y) == 45


@pytest.mark.slow
@pytest.mark.skipif(not (pathlib.Path(__import__("os").environ.get("ISTJAX_DATA_DIR", "/nonexistent"))
                         / "xmc-debian-deps").is_dir(), reason="needs $ISTJAX_DATA_DIR/xmc-debian-deps")
def test_the_debian_sets_tail_is_the_end_of_the_alphabet_unless_shuffled():
    """The numbers `istjax.data.extreme.as_dataset` gives for ``order``: the share of the tail's label occurrences
    whose label the head never shows."""
    from istjax.data.extreme import load_debian_deps_dataset

    def unseen(order):
        t = tuning_split(load_debian_deps_dataset(order=order), 0.1)
        head = np.bincount(t.train_y[t.train_y >= 0], minlength=t.num_classes)
        return float(np.mean(head[t.test_y[t.test_y >= 0]] == 0))

    assert unseen("file") == pytest.approx(0.076, abs=0.001)
    assert unseen("shuffled") == pytest.approx(0.009, abs=0.001)


ARMS = [("ist", 2), ("data_parallel", 2), ("local_sgd", 2), ("tensor_parallel", 2), ("ist", 4)]


def test_each_arm_is_tuned_at_one_width_on_a_quarter_of_the_samples_over_the_grid_its_algorithm_reads():
    arms = tuning.tuning_arms(study.cells(ARMS, [256], GiB, samples=study.SAMPLES // 4))
    assert [a.label for a in arms] == ["ist_p2", "data_parallel_p2", "local_sgd_p2", "tensor_parallel_p2", "ist_p4"]
    configs = {p.cell.label: p.config for p in study_lib.plan(arms, [0], "w", root=study.ROOT)}
    assert {k: c.num_rounds for k, c in configs.items()} == {  # 25,600 samples of P x 10 x 128
        "ist_p2": 10, "data_parallel_p2": 10, "local_sgd_p2": 10, "tensor_parallel_p2": 10, "ist_p4": 5}
    assert all(c.model.hidden == (256,) and c.data.kwargs.order == "shuffled" and c.runtime.memory_limit == GiB
               for c in configs.values())
    grids = {a.label: tuning.grids(root=study.ROOT)(a) for a in arms}
    rates = (5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2)
    with_state = {"learning_rate": rates, "algorithm.optimizer_state": ("reset", "carry")}
    assert grids == {"ist_p2": with_state, "local_sgd_p2": with_state, "ist_p4": with_state,
                     "data_parallel_p2": {"learning_rate": rates}, "tensor_parallel_p2": {"learning_rate": rates}}


def test_the_tuning_width_is_the_largest_every_arm_fitted_at_in_the_committed_files(tmp_path):
    debian = study.ROOT / "experiments/extreme/results/debian.json"
    synthetic = study.ROOT / "experiments/extreme/results/synthetic.json"
    cap = json.loads(debian.read_text())["cap_bytes"]
    # tuned at the full budget: IST carries Adam's state and, like data parallel, holds no more than H = 256 on 2
    # ranks (local SGD, restarted, and tensor parallel hold 512); with IST restarted data parallel is the narrowest
    assert tuning.tuning_width(debian, ARMS, cap) == 256
    assert tuning.tuning_width(debian.with_name("debian_reset.json"), ARMS, cap) == 256
    assert tuning.tuning_width(synthetic, ARMS, json.loads(synthetic.read_text())["cap_bytes"]) == 512
    with pytest.raises(ValueError, match="give --tune-width"):
        tuning.tuning_width(debian, ARMS, cap + 1)  # another cap: the file cannot say
    with pytest.raises(ValueError, match="arm diloco:2 trained at no width"):
        tuning.tuning_width(debian, [("diloco", 2)], cap)
    with pytest.raises(ValueError, match="cannot be read"):
        tuning.tuning_width(tmp_path / "none.json", ARMS, cap)


def _p1(config) -> float:
    """The fake trainer's tuning P@1: best at rate 1e-3 with carried moments for IST, at 2e-3 for the others."""
    best = 1e-3 if config.algorithm.name == "ist" else 2e-3
    state = 0.01 if config.algorithm.get("optimizer_state") == "carry" and config.algorithm.name == "ist" else 0.0
    return 0.5 - abs(np.log2(config.learning_rate / best)) / 10 + state


@pytest.fixture
def tuned(tmp_path):
    """``tuning_record`` of a two-arm study with ``--tune --tune-width 256`` over three rates, trained by a fake
    trainer that writes each run's last evaluation (`_p1`) and records what it was asked to train."""
    seen = []

    def train(p):
        seen.append(p)
        p.run_dir.mkdir(parents=True)
        (p.run_dir / "metrics.jsonl").write_text(json.dumps({"round": int(p.config.num_rounds),
                                                             "test_precision_at_1": _p1(p.config)}) + "\n")
        return None

    args = study.parse_args(["--tune", "--tune-width", "256", "--tune-rates", "0.0005,0.001,0.002", "--workdir",
                             str(tmp_path), "--out", str(tmp_path / "out.json")])
    record = study.tuning_record(args, [("ist", 2), ("data_parallel", 2)], GiB, train)
    return record, seen


def test_the_tuning_stage_trains_every_grid_point_on_the_tuning_split_and_chooses_each_arms_best(tuned):
    record, seen = tuned
    assert len(seen) == 6 + 3  # IST: 3 rates x 2 states; data parallel: 3 rates
    assert all(p.seed == 0 and p.config.data.tuning_fraction == tuning.FRACTION and p.config.model.hidden == (256,)
               and p.config.data.kwargs.order == "shuffled" and p.config.num_rounds == 10 for p in seen)
    assert all(p.run_dir.parent.parent.name == "tuning" for p in seen)
    assert record["chosen"] == {"ist_p2": {"learning_rate": 1e-3, "algorithm.optimizer_state": "carry"},
                                "data_parallel_p2": {"learning_rate": 2e-3}}
    assert (record["width"], record["samples"], record["order"]) == (256, 25_600, "shuffled")
    assert record["objective"] == {"metric": "test_precision_at_1", "direction": "max"}
    json.dumps(record)  # the results file holds it


def test_every_width_of_an_arm_trains_at_its_choice(tuned):
    record, _ = tuned
    cells = study.cells([("ist", 2), ("data_parallel", 2)], [128, 1024], GiB, samples=study.SAMPLES)
    configs = {p.cell.label: p for p in study_lib.plan(tuning.applied(cells, record), [0], "w", root=study.ROOT)}
    for width in (128, 1024):
        ist, dp = configs[f"ist_p2_h{width}"], configs[f"data_parallel_p2_h{width}"]
        assert (ist.config.learning_rate, ist.config.algorithm.optimizer_state) == (1e-3, "carry")
        assert dp.config.learning_rate == 2e-3 and dp.config.model.hidden == (width,)
        assert ist.cell.info["tuned"] == record["chosen"]["ist_p2"]
        assert not ist.config.data.tuning_fraction and "order" not in ist.config.data.kwargs  # reported: whole split
    with pytest.raises(ValueError, match="arm 'local_sgd_p2' of cell 'local_sgd_p2_h128' was not tuned"):
        tuning.applied(study.cells([("local_sgd", 2)], [128], GiB, rounds=4), record)


def test_rewrite_applies_the_files_tuning_record_and_refuses_tune_without_one(tuned, tmp_path):
    record, _ = tuned
    out = tmp_path / "study.json"
    args = study.parse_args(["--rewrite", "--tune", "--out", str(out)])
    with pytest.raises(ValueError, match="records no tuning stage"):
        study.tuning_record(args, ARMS, GiB, train=None)
    out.write_text(json.dumps({"tuning": record}))
    assert study.tuning_record(study.parse_args(["--rewrite", "--out", str(out)]), ARMS, GiB, None) == record


def test_a_tuning_runs_memory_group_is_one_directory_named_after_its_label():
    """The cgroup is ``istjax-<name>-<pid>`` under the memory controller: a tuning run's label holds a '/'."""
    assert study.group_name("ist_p2/learning_rate=0.0005,optimizer_state=carry") == \
        "ist-p2-learning-rate-0.0005-optimizer-state-carry"
    assert study.group_name("ist_p2_h512-unchecked") == "ist-p2-h512-unchecked"  # a reported cell's, as before


def _doc(record: dict) -> dict:
    """A results file of the tuned two-arm study: the committed Debian file's rows for those arms at H = 256 with
    the choice beside each, and the tuning record."""
    doc = json.loads((study.ROOT / extreme_report.DEBIAN).read_text())
    rows = [{**r, "tuned": record["chosen"][f"{r['algorithm']}_p{r['ranks']}"]} for r in doc["rows"]
            if r["ranks"] == 2 and r["algorithm"] in ("ist", "data_parallel") and r["hidden"] == 256]
    return {**doc, "rows": rows, "tuning": record}


def test_the_tuning_table_shows_every_run_each_arms_best_first_and_the_study_table_the_choice(tuned):
    record, _ = tuned
    doc = _doc(record)
    text = tables.REGISTRY["extreme_tuning_debian"].render(doc)
    lines = [line for line in text.splitlines() if line.startswith("| IST") or line.startswith("| data")]
    assert len(lines) == 9
    assert lines[0] == "| IST (sharded), 2 ranks | lr 0.001, state carried (chosen) | 0.510 |"
    assert lines[6] == "| data parallel, 2 ranks | lr 0.002 (chosen) | 0.500 |"
    assert "Every arm at H = 256" in text and "25,600 points" in text and "first 90% of the training points" in text
    assert "`data.kwargs.order=shuffled`" in text
    study_table = tables.REGISTRY["extreme_debian"].render(doc)
    assert "| chosen on the tuning split |" in study_table.splitlines()[2]
    assert "| IST (sharded) | 2 | 256 | lr 0.001, state carried | yes |" in study_table
    assert "| most frequent labels (trivial baseline) | - | - | - | - | - | - | 0.443 |" in study_table


def test_a_file_without_a_tuning_stage_renders_as_before_and_its_tuning_table_asks_for_one():
    doc = json.loads((study.ROOT / extreme_report.DEBIAN).read_text())
    doc.pop("tuning", None)  # the committed file as a study run without --tune writes it
    doc["rows"] = [{k: v for k, v in r.items() if k != "tuned"} for r in doc["rows"]]
    assert "chosen on the tuning split" not in tables.REGISTRY["extreme_debian"].render(doc)
    with pytest.raises(tables.ResultsError, match="records no tuning stage; fix: run python -m "
                                                  "experiments.extreme.study with --tune"):
        tables.REGISTRY["extreme_tuning_debian"].render(doc)


def test_the_transformer_cell_tunes_each_arm_on_a_quarter_of_the_rounds_and_trains_at_its_choice(tmp_path,
                                                                                                  monkeypatch):
    from experiments.extreme import transformer

    seen = []

    def trainer(cap, timeout, mpiexec):
        def train(p):
            seen.append(p)
            p.run_dir.mkdir(parents=True, exist_ok=True)
            best = 2e-3 if p.config.algorithm.name == "ist" else 4e-3
            loss = 2.0 + abs(np.log2(p.config.learning_rate / best))
            (p.run_dir / "metrics.jsonl").write_text(json.dumps({"round": 1, "test_loss": loss}) + "\n")
        return train

    monkeypatch.setattr(transformer.extreme, "trainer", trainer)
    monkeypatch.setattr(transformer, "baseline_sections", lambda config: {})  # the n-gram tables: not the subject
    out = tmp_path / "transformer.json"
    transformer.main(["--tune", "--rounds", "8", "--seeds", "0", "--workdir", str(tmp_path), "--out", str(out)])
    t = json.loads(out.read_text())["tuning"]
    assert t["chosen"] == {"ist_p2": {"learning_rate": 2e-3, "algorithm.optimizer_state": "reset"},
                           "tensor_parallel_p2": {"learning_rate": 4e-3}}
    tuning_runs = [p for p in seen if p.config.data.tuning_fraction]
    assert len(tuning_runs) == 6 + 3 and all(p.config.num_rounds == 2 and p.seed == 0 for p in tuning_runs)
    reported = {p.cell.label: p.config for p in seen if not p.config.data.tuning_fraction}
    assert reported["tensor_parallel_p2"].learning_rate == 4e-3 and reported["ist_p2"].num_rounds == 8


def test_the_prose_names_a_state_none_of_whose_tuning_runs_trained_and_refuses_one_never_tried(tuned):
    """A state whose every tuning run the kernel killed reads "none of its N runs trained" (the tuning table says
    why); a state the record never tried is an error naming it, not a blank in the prose."""
    record, _ = tuned
    metric = record["objective"]["metric"]
    runs = [{**r, metric: None} if r["settings"].get("algorithm.optimizer_state") == "carry" else r
            for r in record["runs"]]
    doc = _doc({**record, "runs": runs})
    carried = sum(1 for r in runs if r["arm"] == "ist_p2" and r["settings"].get("algorithm.optimizer_state") == "carry")
    assert tables.REGISTRY["extreme.tuning.ist_p2_carry"].render(doc) == f"none of its {carried} runs trained"
    assert tables.REGISTRY["extreme.tuning.ist_p2_reset"].render(doc).startswith("0.")
    with pytest.raises(tables.ResultsError, match="no run of local_sgd_p2 with optimizer_state=carry"):
        tables.REGISTRY["extreme.tuning.local_sgd_p2_carry"].render(doc)
