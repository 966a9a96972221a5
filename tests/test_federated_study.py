"""The federated study (issue 58, item 6): its cells load as configs, its grids tune every arm alike, and its report
reads rounds to a target, ratios and equal-bytes readings off hand-made curves."""

import pytest

from experiments import tables
from experiments.federated import report, study
from experiments.grid import REPO
from istjax.launch.study import plan


def _curve(points, bytes_per_round=10.0):
    return [{"round": r, "bytes_total": r * bytes_per_round, "test_accuracy": a} for r, a in points]


def _run(label, seed, points, rounds, bytes_per_round=10.0, **extra):
    return {"label": label, "seed": seed, "rounds": rounds, "curve": _curve(points, bytes_per_round),
            "test_accuracy": points[-1][1], **extra}


def test_reached_is_the_first_evaluation_at_or_past_the_target():
    curve = _curve([(1, 0.5), (2, 0.84), (3, 0.85), (4, 0.9)])
    assert report.reached(curve, 0.85)["round"] == 3
    assert report.reached(curve, 0.95) is None
    assert report.at_round(curve, 2)["test_accuracy"] == 0.84 and report.at_round(curve, 7) is None
    assert report.at_bytes(curve, 25.0)["round"] == 3  # 30 bytes is the first evaluation past 25


def test_claim_ratios_by_seed_with_fedsgd_censored_at_its_budget():
    d = {"target": {"value": 0.85}, "runs": [
        _run("fedavg", 0, [(1, 0.6), (2, 0.86)], 10), _run("fedsgd", 0, [(10, 0.7), (30, 0.85)], 100),
        _run("fedavg", 1, [(1, 0.6), (4, 0.9)], 10), _run("fedsgd", 1, [(50, 0.7), (100, 0.8)], 100)]}
    pairs = report.claim_ratios(d)
    assert [(p["seed"], p["ratio"], p["bound"]) for p in pairs] == [(0, 15.0, False), (1, 25.0, True)]
    assert report.ratio_text(d).startswith("at least 20.0x ± 7.1x (2 seeds), range 15.0-25.0x")
    assert report.claim_verdict(d).startswith("met (lowest seed 15.0x")
    d["runs"][0] = _run("fedavg", 0, [(1, 0.6), (5, 0.86)], 10)  # seed 0: 30 / 5 = 6x
    assert report.claim_verdict(d).startswith("missed (lowest seed 6.0x")
    # Both arms ending below the trivial baseline: no verdict, whatever the ratios (the study's rule).
    d["baselines"] = {"linear": {"test_accuracy": 0.95}}
    d["rows"] = [{"label": "fedavg", "test_accuracy_mean": 0.88}, {"label": "fedsgd", "test_accuracy_mean": 0.9}]
    assert report.claim_verdict(d, "linear").startswith("no verdict: both arms end below the linear baseline (0.950)")
    d["baselines"]["linear"]["test_accuracy"] = 0.89  # FedSGD above it: the ratio decides
    assert report.claim_verdict(d, "linear").startswith("missed (lowest seed 6.0x")


def test_ist_readings_at_fedavg_rounds_and_bytes():
    d = {"runs": [_run("fedavg_iid", 0, [(10, 0.8), (20, 0.85)], 20, bytes_per_round=12.0),
                  _run("fedist_iid", 0, [(10, 0.6), (20, 0.7), (240, 0.82)], 240, bytes_per_round=1.0,
                       worker_train_loss=0.3, merged_train_loss=0.5)]}
    (seed,) = report.ist_readings(d, "iid")["seeds"]
    assert seed["fedavg"] == 0.85 and seed["equal_rounds"] == 0.7 and seed["equal_bytes"] == 0.82
    assert (seed["worker_train_loss"], seed["merged_train_loss"]) == (0.3, 0.5)


def test_claim_table_renders_from_a_results_file():
    rows = [{"label": label, "arm": label, "split": "shards", "algorithm": label, "num_workers": 10, "seeds": [0],
             "test_accuracy_mean": 0.87, "test_accuracy_std": None, "rounds": rounds, "tuned": {"learning_rate": 0.1}}
            for label, rounds in (("fedavg", 10), ("fedsgd", 100))]
    d = {"target": {"value": 0.85}, "rows": rows, "baselines": {"linear": {"test_accuracy": 0.84}},
         "runs": [_run("fedavg", 0, [(2, 0.86)], 10), _run("fedsgd", 0, [(40, 0.86)], 100)]}
    text = tables.REGISTRY["federated_claim"].render(d)
    assert "| FedAvg | lr 0.1 | 10 |" in text and "| 0 | 2 | 40 | 20.0x |" in text and "linear" in text


def test_every_cell_loads_and_every_arm_tunes_the_same_client_rates():
    for name in study.STUDIES:
        if name == "shakespeare":
            continue  # its arms each tune their one Adam (the next test)
        cells = study.cells(name)
        planned = plan(cells, [0], "/nonexistent", root=REPO)
        for c, p in zip(cells, planned):
            rates = study.CLAIM_LEARNING_RATES if name == "claim" else study.LEARNING_RATES  # every arm of a study
            assert study.grid(c)["learning_rate"] == rates
            assert p.config.clients.fraction == 0.1 and p.config.num_workers == 10
            assert p.config.runtime.loss_split == (name != "claim")  # a claim reads its accuracy alone
            if c.info["arm"] == "fedavgm":
                assert p.config.algorithm.server_momentum == 0.9
                assert study.grid(c)["algorithm.server_learning_rate"] == study.SERVER_LEARNING_RATES
        tuning = study.tuning_of(name)
        if name == "claim":  # judged on the curve: its tuning runs evaluate as the reported ones do
            assert tuning.cells == cells and tuning.objective.at == "mean"
            continue
        # a fixed-budget study judges the last point: its tuning runs evaluate once, at their end
        assert tuning.objective.at == "last"
        for c, t in zip(cells, tuning.cells):
            assert c.info == t.info and f"--config.eval_every={c.info['rounds']}" in t.overrides


def test_shakespeare_arms_tune_their_one_adam_at_a_quarter_budget_and_fedsgd_stops_at_the_target():
    cells = study.cells("shakespeare")
    planned = {p.cell.label: p.config for p in plan(cells, [0], "/nonexistent", root=REPO)}
    sgd, avg = planned["fedsgd"], planned["fedavg"]
    assert (sgd.optimizer, sgd.learning_rate, sgd.algorithm.server_optimizer) == ("sgd", 1.0, "adam")
    assert (avg.optimizer, avg.algorithm.server_optimizer, avg.algorithm.server_learning_rate) == ("adam", "sgd", 1.0)
    assert sgd.num_rounds == 10 * avg.num_rounds == study.TEXT_SGD_ROUNDS
    assert sgd.stop_at_target and not avg.stop_at_target
    assert not sgd.runtime.loss_split and not avg.runtime.loss_split  # the claim reads accuracy alone
    assert sgd.target_accuracy == avg.target_accuracy == study.TEXT_TARGET
    assert (sgd.clients.fraction, sgd.num_workers, sgd.data.name) == (0.0, 10, "shakespeare_roles")
    by_arm = {c.label: study.grid(c) for c in cells}
    assert by_arm == {"fedsgd": {"algorithm.server_learning_rate": study.TEXT_RATES},
                      "fedavg": {"learning_rate": study.TEXT_RATES}}
    tuning = study.tuning_of("shakespeare")
    assert tuning.objective == study.Objective("test_accuracy", "max", "mean")
    for c, t in zip(cells, tuning.cells):
        assert c.label == t.label and t.info["rounds"] * 4 == c.info["rounds"]
        assert f"--config.eval_every={t.info['rounds'] // study.TEXT_TUNING_EVALS}" in t.overrides
        assert not any("target" in f for f in t.overrides)  # the tuning runs train their whole quarter
    assert study.sections("shakespeare") == {"target": {"metric": "test_accuracy", "value": study.TEXT_TARGET}}


def test_shakespeare_table_shows_the_ngram_tables_and_a_run_stopped_at_the_target():
    rows = [{"label": label, "arm": label, "split": "natural", "seeds": [0], "test_accuracy_mean": acc,
             "test_accuracy_std": None, "rounds": rounds, "tuned": {"learning_rate": 0.003}}
            for label, rounds, acc in (("fedavg", 40, 0.45), ("fedsgd", 150, 0.42))]
    rows[1]["overrides"] = ["--config.num_rounds=400", "--config.stop_at_target=True"]
    d = {"target": {"value": 0.42}, "rows": rows,
         "baselines": {"trigram": {"test_accuracy": 0.39}, "bigram": {"test_accuracy": 0.3}},
         "runs": [_run("fedavg", 0, [(10, 0.3), (20, 0.43), (40, 0.45)], 40),
                  _run("fedsgd", 0, [(100, 0.3), (150, 0.42)], 150)]}  # stopped at its target, round 150
    text = tables.REGISTRY["federated_shakespeare"].render(d)
    assert "| 0 | 20 | 150 | 7.5x |" in text and "trigram" in text and "bigram" in text
    assert "| FedSGD | lr 0.003 | 400 | 0.420 (1 seed) (where 1 of 1 stopped, at the target) | 150.0 (1 seed) |" in text
    assert report.claim_verdict(d).startswith("missed (lowest seed 7.5x")
    assert tables.REGISTRY["federated.shakespeare.trigram"].render(d) == "0.390"


def test_the_config_refuses_an_unknown_cell():
    from istjax.launch.args import load_config

    path = str(REPO / study.CONFIG)
    with pytest.raises(Exception, match=r"ARM\[,SPLIT\] with ARM one of"):
        load_config(path + ":fedavg,dir0.3", ())
    c = load_config(path + ":fedavgm,dir0.1", ())
    assert (c.clients.split, c.clients.alpha, c.clients.batch_size) == ("dirichlet", 0.1, 50)


def test_a_tuning_objective_at_the_mean_reads_the_whole_curve(tmp_path):
    """``Objective(at="mean")``: the mean over a run's evaluations, so the run that gets there sooner wins where
    the last point would tie (and a non-finite point anywhere rules the run out); ``at="last"`` reads the end."""
    import json as json_lib

    from istjax.launch import tuning

    def run(name, accs):
        d = tmp_path / name
        d.mkdir()
        (d / "metrics.jsonl").write_text("".join(json_lib.dumps({"round": i + 1, "test_accuracy": a}) + "\n"
                                                 for i, a in enumerate(accs)))
        return d

    fast, slow = run("fast", [0.6, 0.8, 0.8]), run("slow", [0.2, 0.4, 0.8])
    assert tuning._metric(fast, "test_accuracy", "last") == tuning._metric(slow, "test_accuracy", "last") == 0.8
    assert tuning._metric(fast, "test_accuracy", "mean") == pytest.approx(2.2 / 3)
    assert tuning._metric(slow, "test_accuracy", "mean") == pytest.approx(1.4 / 3)
    assert tuning._metric(run("nan", [0.5, float("nan"), 0.9]), "test_accuracy", "mean") is None
    with pytest.raises(ValueError, match="Objective.at='median'"):
        tuning._check_objective(tuning.Objective("test_accuracy", "max", "median"))
    assert tuning.Objective("test_loss", "min").to_record() == {"metric": "test_loss", "direction": "min"}
    assert tuning.Objective("test_accuracy", "max", "mean").to_record()["at"] == "mean"


def test_the_claim_figures_draw_from_a_results_file_alone(tmp_path):
    import json as json_lib

    for study_name, (_, baseline) in report.CLAIMS.items():
        rows = [{"label": arm, "arm": arm, "split": "natural" if study_name == "shakespeare" else "shards"}
                for arm in ("fedavg", "fedsgd")]
        d = {"target": {"value": 0.42}, "rows": rows, "baselines": {baseline: {"test_accuracy": 0.39}},
             "runs": [_run("fedavg", 0, [(10, 0.3), (20, 0.43)], 20), _run("fedsgd", 0, [(50, 0.3), (150, 0.42)], 200)]}
        source = tmp_path / f"{study_name}.json"
        source.write_text(json_lib.dumps(d))
        out = report.plot(study_name, source, tmp_path / f"{study_name}.png")
        assert out.stat().st_size > 1000
