"""The text race on a shaped link at the tuned study's settings (`experiments.text.network`, issue 55): each arm
trains at what `experiments.text.tuned` chose for it at W = --ranks, the target sits below the trigram table's loss,
and the table says what each arm raced at. Nothing here trains or builds a network namespace."""

from __future__ import annotations

import json

import pytest

from experiments.network import common
from experiments.text import network

CHOSEN = {  # IST's scaling "none": the test checks the race takes it from here, not the "test" it used to hard-code
    "ist_width_w2": {"learning_rate": 0.004, "algorithm.optimizer_state": "carry", "model.scaling": "none"},
    "data_parallel_w2": {"learning_rate": 0.001},
    "local_sgd_w2": {"learning_rate": 0.002, "algorithm.optimizer_state": "carry"},
    "diloco_w2": {"learning_rate": 0.004, "algorithm.optimizer_state": "reset", "algorithm.outer_learning_rate": 0.7},
    "diloco_w4": {"learning_rate": 0.001, "algorithm.optimizer_state": "reset", "algorithm.outer_learning_rate": 1.0},
}
TRIGRAM = 2.064446893873769


def tuned_file(tmp_path, chosen=CHOSEN, trigram=TRIGRAM):
    doc = {"study": "text_tuned", "tuning": {"chosen": chosen}}
    if trigram is not None:
        doc["baselines"] = {"trigram": {"test_loss": trigram}}
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(doc))
    return path


def test_each_raced_arm_trains_at_its_own_tuned_choice_at_w_equal_to_ranks(tmp_path):
    """The ist cell takes ist_width's choice (its scaling, its state), each baseline its own; the choice comes after
    the cell's overrides and the resolved config holds it."""
    from istjax.launch import study as study_lib

    settings, trigram = network.tuned_settings(tuned_file(tmp_path), 2, list(network.ARMS))
    assert trigram == TRIGRAM and settings["diloco"]["learning_rate"] == 0.004  # W = 2's choice, not W = 4's
    cells = {a: network.cell(2, "100mbit", a, samples=1280, eval_every=1, settings=settings[a]) for a in network.ARMS}
    ist = cells["ist"]
    assert ist.overrides[-3:] == ("--config.learning_rate=0.004", "--config.algorithm.optimizer_state=carry",
                                  "--config.model.scaling=none")
    assert "--config.model.scaling=test" not in ist.overrides and ist.info["tuned"] == CHOSEN["ist_width_w2"]
    configs = {p.cell.info["algorithm"]: p.config for p in study_lib.plan(list(cells.values()), [0], tmp_path)}
    # a config's model.scaling=none reads as None, the model's "none" (istjax.models.transformer.Transformer)
    assert (configs["ist"].model.scaling, configs["ist"].model.split) == (None, "width")
    assert configs["ist"].algorithm.optimizer_state == "carry" and configs["ist"].learning_rate == 0.004
    assert configs["data_parallel"].learning_rate == 0.001
    assert configs["local_sgd"].algorithm.optimizer_state == "carry" and configs["local_sgd"].learning_rate == 0.002
    assert configs["diloco"].algorithm.outer_learning_rate == 0.7
    assert all(c.num_rounds == 2 and c.runtime.mode == "parameter_server" for c in configs.values())


def test_main_records_the_settings_and_the_tuned_file_of_every_cell(tmp_path, monkeypatch):
    """main's results file (its ``document``) names the tuned file, the trigram loss and each cell's settings; the
    cells it races carry them. The namespaces and the runs are replaced: only what main builds is checked."""
    seen = {}

    def run_to_file(name, cells, args, *, record, document, tag):
        seen["cells"], seen["doc"] = cells, document([])
        return []

    monkeypatch.setattr(common, "refused", lambda name, links: None)
    monkeypatch.setattr(common, "run_to_file", run_to_file)
    path = tuned_file(tmp_path)
    assert network.main(["--tuned", str(path), "--arms", "ist,diloco", "--out", str(tmp_path / "n.json")]) == 0
    doc = seen["doc"]
    assert doc["tuned"] == str(path.resolve()) and doc["trigram_loss"] == TRIGRAM and doc["target"] == network.TARGET
    assert doc["settings"] == {"r2-100mbit-ist": CHOSEN["ist_width_w2"], "r2-100mbit-diloco": CHOSEN["diloco_w2"]}
    assert doc["cells"]["r2-100mbit-diloco"][-1] == "--config.algorithm.outer_learning_rate=0.7"
    assert f"--config.num_rounds={network.SAMPLES // (2 * network.K * network.B)}" in seen["cells"][0].overrides


@pytest.mark.parametrize("case, argv, named", [
    ("no file", [], ["--tuned", "missing.json", "python -m experiments.text.tuned --workers 2"]),
    ("no choice at W", ["--ranks", "4"], ["--tuned", "ist_width_w4", "local_sgd_w4",
                                          "python -m experiments.text.tuned --workers 4"]),
    ("no trigram", [], ["--tuned", "baselines.trigram.test_loss", "experiments.text.study --baselines"]),
    ("target at the trigram", ["--target", str(TRIGRAM)], ["--target", "2.064", "baselines.trigram.test_loss"]),
    ("target above it", ["--target", "2.7"], ["--target 2.7", "2.064", "below 2.064"]),
])
def test_the_race_refuses_what_would_not_decide_naming_the_flag(tmp_path, capsys, case, argv, named):
    """Exit 2 before any namespace is built, the message naming the flag, the field and the fix."""
    path = tmp_path / "missing.json" if case == "no file" else tuned_file(
        tmp_path, trigram=None if case == "no trigram" else TRIGRAM)
    assert network.main(["--tuned", str(path), *argv, "--out", str(tmp_path / "n.json")]) == 2
    err = capsys.readouterr().err
    assert all(n in err for n in named), err
    assert not (tmp_path / "n.json").exists()


def test_the_race_table_shows_each_arms_settings_when_the_file_records_them():
    """A tuned race's table has a settings column and the windows each arm took to the target (mean over the seeds
    that reached it), and names the tuned file and the trigram loss; a file of the untuned race (committed before
    issue 55) renders as before, with neither column."""
    from experiments import tables
    from experiments.text import report

    render = tables.REGISTRY["text_network"].render  # registered when report is imported
    assert tables.REGISTRY["text_network"].sources == (report.NETWORK,)
    row = {"link": "100mbit", "seeds": [0, 1, 2], "reached": 3, "seconds_to_target": 50.0,
           "seconds_to_target_std": 5.0, "time_per_round_s": 1.4, "bytes_per_worker_per_round": 1.7e6}
    summary = [{**row, "algorithm": "ist", "tuned": CHOSEN["ist_width_w2"], "samples_to_target": 57600.0},
               {**row, "algorithm": "data_parallel", "tuned": {"learning_rate": 0.001}, "samples_to_target": None}]
    doc = {"ranks": 2, "target": 2.0, "samples": 128000, "tuned": "experiments/text/results/tuned.json",
           "trigram_loss": TRIGRAM, "summary": summary}
    text = render(doc)
    assert "| link | algorithm | settings (tuned) | seconds to target | windows to target |" in text
    assert "| IST | lr 0.004, state carried, scaling none | 50.0 ± 5.0 (3 seeds) | 57,600 |" in text
    assert "| data parallel | lr 0.001 | 50.0 ± 5.0 (3 seeds) | - |" in text
    assert "experiments/text/results/tuned.json" in text and "2.064" in text
    old = {k: v for k, v in doc.items() if k not in ("tuned", "trigram_loss")}  # the shape of the untuned race's
    old["summary"] = [{k: v for k, v in r.items() if k != "tuned"} for r in doc["summary"]]
    assert "settings" not in render(old) and "| link | algorithm | seconds to target |" in render(old)


def test_the_summary_averages_windows_to_target_over_the_seeds_that_reached_it():
    """Per arm: seconds and windows to the target are means over the seeds that reached it (a seed that did not is
    counted in ``reached``, not in the means)."""
    base = {"link": "100mbit", "algorithm": "ist", "time_per_round_s": 2.0, "bytes_sent_per_worker_per_round": 5e6,
            "tuned": {}}
    runs = [{**base, "seed": 0, "seconds_to_target": 100.0, "samples_to_target": 51200},
            {**base, "seed": 1, "seconds_to_target": 140.0, "samples_to_target": 64000},
            {**base, "seed": 2, "seconds_to_target": None, "samples_to_target": None}]
    (row,) = network.summarise(runs)
    assert row["reached"] == 2 and row["seeds"] == [0, 1, 2]
    assert row["seconds_to_target"] == pytest.approx(120.0) and row["samples_to_target"] == pytest.approx(57600.0)


def test_the_figure_draws_every_run_and_is_redrawn_from_the_file(tmp_path):
    """``--plot`` redraws the race's figure from its results file (next to a results file outside the repository:
    the committed figure is not touched); a run without a curve (killed before its first evaluation) is skipped."""
    curve = [[10.0, 3200, 2.7], [60.0, 19200, 2.2], [120.0, 38400, 1.99]]
    runs = [{"algorithm": a, "link": "100mbit", "seed": 0, "loss_curve": curve} for a in network.ARMS]
    doc = {"target": 2.0, "trigram_loss": TRIGRAM, "runs": [*runs, {**runs[0], "seed": 1, "loss_curve": []}]}
    out = tmp_path / "n.json"
    out.write_text(json.dumps(doc))
    assert network.main(["--plot", "--out", str(out)]) == 0
    figure = tmp_path / "n.png"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figure.stat().st_size > 10_000
