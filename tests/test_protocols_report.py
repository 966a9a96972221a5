"""The protocols report's readings (`experiments.protocols.report`) on hand-built curves: transfers and bytes to
periodic averaging's loss, the claim's verdict, transfers a round across a drift, rounds to a target, churn groups,
and every table and the figure rendering from a results file."""

import math

import pytest

from experiments.protocols import report


def _curve(losses, transfers, every=5, per_byte=10.0):
    out, moved = [], 0.0
    for i, (loss, t) in enumerate(zip(losses, transfers)):
        moved += t * per_byte
        out.append({"round": every * (i + 1), "test_loss": loss, "test_accuracy": 1 - loss / 4,
                    "model_transfers": t, "bytes_total": moved})
    return out


def _run(label, seed, losses, transfers):
    return {"label": label, "seed": seed, "curve": _curve(losses, transfers)}


def _row(label, **extra):
    return {"label": label, "seeds": [0, 1], "num_workers": 2, "test_loss_mean": 1.0, "test_loss_std": 0.1,
            "test_accuracy_mean": 0.7, "test_accuracy_std": 0.01, "rounds": 20, "bytes_per_worker_per_round": 100.0,
            "overrides": ["--config.data.drift_round=10", "--config.target_accuracy=0.5"], **extra}


def _file():
    # periodic: 16 transfers every window; its final loss 1.0 (reached first at round 20).
    # dynamic_1: 2 transfers a window, reaches 1.0 * 1.02 at round 15 (6 transfers): ratio 64 / 6... per seed below.
    runs = [_run("periodic", 0, [3.0, 2.0, 1.5, 1.0], [16, 16, 16, 16]),
            _run("periodic", 1, [3.0, 2.0, 1.01, 1.0], [16, 16, 16, 16]),
            _run("dynamic_1", 0, [3.0, 2.0, 1.02, 0.9], [2, 2, 2, 2]),
            _run("dynamic_1", 1, [3.0, 2.0, 1.5, 1.2], [0, 0, 0, 0]),
            _run("dynamic_3", 0, [2.0, 1.0, 1.0, 1.0], [0, 0, 0, 0]),
            _run("dynamic_3", 1, [2.0, 1.5, 1.0, 1.0], [1, 0, 0, 0])]
    return {"rows": [_row("periodic"), _row("dynamic_1"), _row("dynamic_3")], "runs": runs,
            "baselines": {"linear": {"test_accuracy": 0.3, "test_loss": 2.5}}}


def test_transfers_to_periodic_averagings_loss_by_hand():
    d = _file()
    seed0, seed1 = report.same_loss(d, "dynamic_1")
    # seed 0: the goal 1.02; periodic first at or below it at round 20 (64 transfers), dynamic at round 15 (6)
    assert seed0["loss"] == pytest.approx(1.02)
    assert seed0["periodic"] == {"round": 20, "transfers": 64, "bytes": 640.0}
    assert seed0["arm"] == {"round": 15, "transfers": 6, "bytes": 60.0}
    assert seed0["ratio"] == pytest.approx(64 / 6)
    # seed 1: periodic reaches 1.02 at round 15 (48 transfers); dynamic never gets below 1.2
    assert seed1["periodic"]["transfers"] == 48 and seed1["arm"] is None and seed1["ratio"] is None
    assert "1 of 2 seeds never reached it" in report.transfer_ratios(d, "dynamic_1")
    # delta 3: reached with no transfer (seed 0: infinite) and with one (seed 1: 48 / 1)
    ratios = [s["ratio"] for s in report.same_loss(d, "dynamic_3")]
    assert ratios[0] == math.inf and ratios[1] == pytest.approx(48.0)  # periodic's seed 1 reaches 1.02 at round 15


def test_the_verdict_needs_every_seed_at_the_claimed_ratio():
    d = _file()
    assert report.claim_verdict(d).startswith("met at dynamic averaging, delta 3")
    d["runs"][-1]["curve"][0]["model_transfers"] = 10  # seed 1 of delta 3: 48 / 10 = 4.8x, under 10x
    verdict = report.claim_verdict(d)
    assert verdict.startswith("missed") and "4.8x" in verdict


def test_transfers_a_round_are_each_windows_mean_over_seeds():
    d = _file()
    assert report.transfers_per_round(d, "periodic") == [(5, 3.2), (10, 3.2), (15, 3.2), (20, 3.2)]
    assert report.transfers_per_round(d, "dynamic_3")[0] == (5, pytest.approx(0.1))  # (0 + 1) / 2 seeds / 5 rounds


def test_every_table_and_the_figure_render(tmp_path):
    import json

    d = _file()
    dynamic = report._averaging(d)
    assert "64" in dynamic and "linear (trivial baseline" in dynamic
    drift = report._averaging(d, report._drift_round(d))
    assert "before round 10" in drift and "3.200" in drift  # periodic: 3.2 a round before and after
    d["churn"] = [{"arm": "data_parallel", "pair": "seeds 0-1", "churn": 0.2},
                  {"arm": "codistillation", "pair": "groups, seed 0", "churn": 0.05},
                  {"arm": "codistillation", "pair": "groups, seed 1", "churn": 0.07}]
    d["runs"] += [_run("data_parallel", 0, [3.0, 1.6, 1.0, 1.0], [0] * 4),
                  _run("codistillation", 0, [3.0, 3.0, 3.0, 1.9], [0] * 4)]
    d["rows"] += [_row("data_parallel"), _row("codistillation")]
    codistill = report._codistill(d)
    # accuracy 1 - loss / 4 >= 0.5 at loss <= 2.0: data parallel at round 10, codistillation at round 20
    assert "10.0 (1 seed)" in codistill and "20.0 (1 seed)" in codistill
    assert "| the two groups of one codistilled run | 2 | 0.060 ± 0.014 |" in codistill
    every = report._all(d, {"rows": [], "runs": []}, d)
    assert "| periodic averaging (delta 0) | 2 | 20 |" in every and "data parallel" in every
    # accuracy 1 - loss / 4 >= 0.5 first at loss 2.0: periodic at round 10, 32 transfers of 10 bytes = 320 bytes
    assert report.to_target(d, "periodic")["seeds"][0] == {"seed": 0, "bytes": 320.0, "round": 10}
    source = tmp_path / "drift.json"
    source.write_text(json.dumps(_file()))
    assert report.plot(source, tmp_path / "drift.png").stat().st_size > 1000
