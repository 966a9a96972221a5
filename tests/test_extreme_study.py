"""The extreme study's bookkeeping (`experiments.extreme.study`): the cells' overrides, a row per cell from its runs'
summaries and limit records (fits, peaks, P@k over seeds, the refusal and what the kernel did), the seed-0 failure
that spares the other seeds, and the page's table (`experiments.extreme.report`)."""

from __future__ import annotations

import json

import pytest

from experiments.extreme import study
from istjax.launch import study as study_lib

GiB = 1 << 30


def _summary(p1: float) -> dict:
    return {"test_accuracy": p1, "test_loss": 5.0, "train_loss": 5.0, "rounds": 4, "samples_seen": 4 * 2560,
            "time_per_round_s": 2.56, "bytes_sent_per_worker_per_round": 10, "bytes_received_per_worker_per_round": 10,
            "algorithm": "x", "num_workers": 2, "code": {"commit": "abc", "clean": True}}


def _limit(ok: bool, peak: int, predicted: str = "") -> dict:
    run = {"returncode": 0 if ok else 9, "oom_killed": not ok, "summary": "finished" if ok else "rank 0 killed",
           "peak_rss_bytes": {"rank 0": peak, "rank 1": peak - 1, "mpiexec 1": 5}}
    return {"run": run, **({"predicted": predicted} if predicted else {})}


@pytest.fixture
def planned(tmp_path):
    cells = study.cells([("ist", 2), ("data_parallel", 2)], [256, 1024], cap=GiB, rounds=4)
    return cells, study_lib.plan(cells, [0, 1], tmp_path, root=study.ROOT)


def _write(p, *, p1=None, limit):
    p.run_dir.mkdir(parents=True, exist_ok=True)
    if p1 is not None:
        (p.run_dir / "summary.json").write_text(json.dumps(_summary(p1)))
        (p.run_dir / "metrics.jsonl").write_text(json.dumps({"test_precision_at_1": p1, "test_precision_at_3": p1 / 2,
                                                             "test_precision_at_5": p1 / 3, "test_ndcg_at_5": p1}) + "\n")
    study_lib.write_json(study._limit_file(p.run_dir), limit)


def test_cells_carry_the_cap_the_mode_and_equal_samples(planned):
    cells, _ = planned
    ist = next(c for c in cells if c.label == "ist_p2_h1024")
    assert "--config.runtime.mode=sharded" in ist.overrides and "--config.model.hidden=(1024,)" in ist.overrides
    assert f"--config.runtime.memory_limit={GiB}" in ist.overrides and "--config.num_rounds=4" in ist.overrides
    dp = next(c for c in cells if c.label == "data_parallel_p2_h256")
    assert "--config.runtime.mode=parameter_server" in dp.overrides and dp.info == {
        "algorithm": "data_parallel", "hidden": 256, "ranks": 2}


def test_samples_give_every_arm_the_same_samples_whatever_its_ranks():
    """``--samples``: 4 ranks (W = 4) train half the rounds of 2 ranks; a count that is not whole rounds is refused
    with the multiple to use; ``rounds`` and ``samples`` exclude each other."""
    cells = study.cells([("ist", 2), ("ist", 4), ("tensor_parallel", 2)], [512], cap=GiB, samples=102_400)
    rounds = {c.label: next(o for o in c.overrides if o.startswith("--config.num_rounds=")) for c in cells}
    assert rounds == {"ist_p2_h512": "--config.num_rounds=40", "ist_p4_h512": "--config.num_rounds=20",
                      "tensor_parallel_p2_h512": "--config.num_rounds=40"}  # Debian config: K = 10, B = 128
    with pytest.raises(ValueError, match="use a multiple of 5120"):
        study.cells([("ist", 4)], [512], cap=GiB, samples=102_400 + 2560)
    with pytest.raises(ValueError, match="one of rounds"):
        study.cells([("ist", 2)], [512], cap=GiB, rounds=4, samples=102_400)


def test_rows_say_what_fit_with_peaks_and_precision_over_seeds(planned):
    cells, plan = planned
    by = {(p.cell.label, p.seed): p for p in plan}
    for seed, p1 in ((0, 0.5), (1, 0.6)):
        _write(by[("ist_p2_h1024", seed)], p1=p1, limit=_limit(True, GiB + seed))
        _write(by[("data_parallel_p2_h256", seed)], p1=p1 - 0.1, limit=_limit(True, GiB // 2))
    refused = "rank 0 of 2 would hold at least 2.0 GiB"
    _write(by[("data_parallel_p2_h1024", 0)], limit={**_limit(False, 0, refused), "observed": {
        "summary": "rank 0 killed by the kernel", "peak_rss_bytes": {"rank 0": 2 * GiB}}})
    assert study._first_seed_failure(by[("data_parallel_p2_h1024", 1)]).startswith("not run: seed 0")
    assert study._first_seed_failure(by[("ist_p2_h1024", 1)]) is None
    runs = [r for p in plan if (r := study.record(p)) is not None]
    rows = {r["label"]: r for r in study.rows(cells, plan, runs)}
    ist = rows["ist_p2_h1024"]
    assert ist["fits"] and ist["seeds"] == [0, 1] and ist["peak_rss_bytes"] == GiB + 1
    assert ist["precision_at_1_mean"] == pytest.approx(0.55) and ist["precision_at_1_std"] == pytest.approx(0.0707, 1e-3)
    assert ist["time_per_sample_s"] == pytest.approx(2.56 / 2560)
    dp = rows["data_parallel_p2_h1024"]
    assert not dp["fits"] and dp["predicted"] == refused and dp["observed"] == "rank 0 killed by the kernel"
    assert dp["peak_rss_bytes"] == 2 * GiB and dp["precision_at_1_mean"] is None
    assert "ist_p2_h256" not in rows  # never ran: no row


def test_the_page_table_lists_misfits_with_the_kernels_line(planned):
    from experiments.extreme import report

    cells, plan = planned
    by = {(p.cell.label, p.seed): p for p in plan}
    _write(by[("ist_p2_h1024", 0)], p1=0.5, limit=_limit(True, GiB))
    _write(by[("data_parallel_p2_h1024", 0)], limit=_limit(False, 0))
    runs = [r for p in plan if (r := study.record(p)) is not None]
    doc = {"cap": "1.00 GiB", "rows": study.rows(cells, plan, runs)}
    text = report._study(doc)
    assert "| IST (sharded) | 2 | 1,024 | yes | 1.0 GiB | - | 0.500 (1 seed) |" in text
    assert "data parallel, 2 ranks, H = 1024: rank 0 killed" in text


def test_bytes_a_sample_and_the_crossover_k_by_hand():
    """IST's round over K x B samples against tensor parallel's 7 H floats a sample (all shards, both ways), with the
    crossover K where IST's bytes a sample fall below; measured where a cell trained."""
    from experiments.extreme import report

    shape = {"features": 90, "labels": 10, "local_steps": 2, "batch_size": 4}
    rows = [{"algorithm": "ist", "ranks": 2, "hidden": 8, "label": "ist_p2_h8", "fits": True,
             "bytes_per_worker_per_round": 1000.0},
            {"algorithm": "tensor_parallel", "ranks": 2, "hidden": 8, "label": "tp", "fits": True,
             "bytes_per_worker_per_round": 500.0}]
    runs = [{"label": "ist_p2_h8", "samples_seen": 160, "rounds": 10}, {"label": "tp", "samples_seen": 160,
                                                                          "rounds": 10}]
    (r,) = report.bytes_rows({"shape": shape, "rows": rows, "runs": runs})
    ist_round = 2 * 4 * ((90 + 10) * 4 + 4 + 10)  # a worker's 4 units' bag columns and rows, biases, output bias
    assert r["ist_analytic"] == ist_round / (2 * 4)
    # A shard's step of 2 examples at H = 8: sends 2*8/2 + 2*8 + 6, receives 2*2*8 + 6 floats; x 2 shards / 2 examples.
    assert r["tp_analytic"] == 4 * ((8 + 16 + 6) + (32 + 6))
    assert r["ist_measured"] == 1000.0 * 2 / 16 and r["tp_measured"] == 500.0 * 2 / 16
    assert r["crossover_k"] == -(-ist_round // (4 * r["tp_analytic"]))
    assert ist_round / (r["crossover_k"] * 4) < r["tp_analytic"] <= ist_round / ((r["crossover_k"] - 1) * 4)


def test_the_network_study_cells_train_equal_samples_and_stop_at_the_target(tmp_path):
    from experiments.extreme import network

    ist = network.cell(512, 2, "100mbit", "ist", 40, target=0.5, samples=204800)
    tp = network.cell(512, 2, "100mbit", "tensor_parallel", 10, target=0.5, samples=204800)
    assert "--config.num_rounds=20" in ist.overrides and "--config.num_rounds=80" in tp.overrides
    for c in (ist, tp):
        assert {"--config.stop_at_target=True", "--config.target_accuracy=0.5", "--config.eval_every=1"} <= set(
            c.overrides)
    assert "--config.runtime.mode=sharded" in ist.overrides and "--config.runtime.mode=sharded" in tp.overrides
    runs = [{"link": "100mbit", "algorithm": "ist", "local_steps": 40, "seed": s, "time_to_target_s": t,
             "samples_to_target": 1000, "time_per_round_s": 2.0, "bytes_sent_per_worker_per_round": 7}
            for s, t in ((0, 10.0), (1, 14.0), (2, None))]
    (row,) = network.summarise(runs)
    assert row["reached"] == 2 and row["seconds_to_target"] == pytest.approx(12.0) and row["seeds"] == [0, 1, 2]
    assert row["seconds_to_target_std"] == pytest.approx(2 ** 0.5 * 2)


def test_the_memory_accounting_sees_the_bags_gathered_block_and_what_an_initialiser_makes():
    """`experiments.extreme.memory`: with all slots at once the evaluation's temporaries grow with the chunk (the
    bag's [n, slots, H] block), summed a slot chunk at a time they are under half of that; slicing flax's
    initialised leaf does not shrink what XLA generates, a tiled leaf's half drawn alone needs no more than about
    itself."""
    from experiments.extreme import memory

    rows = {(r["program"], r.get("points")): r for r in memory.measure(256, [400, 100], 32)}
    big, small = (rows[("evaluate, all slots at once", n)]["temp_bytes"] for n in (400, 100))
    assert big >= 400 * memory.SLOTS * 256 * 4 and 3.5 < big / small < 4.5
    assert rows[("evaluate", 400)]["temp_bytes"] < 0.5 * big  # what is left is mostly the [n, labels] logits
    whole, half = rows[("init bag kernel, flax, whole", None)], rows[("init bag kernel, flax, half its columns", None)]
    assert half["output_bytes"] * 2 == whole["output_bytes"] and half["temp_bytes"] >= whole["temp_bytes"]
    alone = rows[("init bag kernel, tiled, half its columns drawn alone", None)]
    assert alone["output_bytes"] == half["output_bytes"] and alone["temp_bytes"] <= 1.25 * alone["output_bytes"]


def test_a_cell_at_the_edge_of_the_cap_says_how_many_seeds_trained(planned):
    from experiments.extreme import report

    cells, plan = planned
    by = {(p.cell.label, p.seed): p for p in plan}
    _write(by[("ist_p2_h1024", 0)], p1=0.5, limit=_limit(True, GiB))
    _write(by[("ist_p2_h1024", 1)], limit=_limit(False, GiB))
    runs = [r for p in plan if (r := study.record(p)) is not None]
    row = next(r for r in study.rows(cells, plan, runs) if r["label"] == "ist_p2_h1024")
    assert not row["fits"] and row["seeds"] == [0] and row["attempted"] == 2 and row["observed"] == "rank 0 killed"
    text = report._study({"cap": "1.00 GiB", "rows": [row]})
    assert "| IST (sharded) | 2 | 1,024 | no (1 of 2 seeds trained) |" in text and "H = 1024: rank 0 killed" in text


def test_the_target_is_met_only_by_a_width_p_times_wider_that_scores_higher():
    from experiments.extreme import report

    def row(algorithm, ranks, hidden, p1):
        return {"algorithm": algorithm, "ranks": ranks, "hidden": hidden, "fits": True, "precision_at_1_mean": p1}

    rows = [row("data_parallel", 2, 256, 0.58), row("local_sgd", 2, 512, 0.53), row("ist", 2, 1024, 0.57),
            row("ist", 4, 2048, 0.61), row("ist", 4, 512, 0.50)]
    assert report._target({"rows": rows}, 4) == "met"
    assert report._target({"rows": rows}, 2) == "missed (P@1)"
    rows[3] = row("ist", 4, 512, 0.70)
    rows.pop()
    assert report._target({"rows": rows}, 4) == "missed (width)"


def test_the_network_studys_record_and_results_document(tmp_path):
    """A finished run's record carries the cell's label (the study runner's results need it) and its K."""
    from experiments.extreme import network

    c = network.cell(512, 2, "1gbit", "tensor_parallel", 10, target=0.5, samples=25600)
    (p,) = study_lib.plan([c], [0], tmp_path, root=network.ROOT)
    net, job = network.tta._files(p)
    p.run_dir.mkdir(parents=True)
    study_lib.write_json(job, {"returncode": 0, "job_wall_s": 5.0, "error": None})
    study_lib.write_json(p.run_dir / "summary.json", {**_summary(0.55), "time_to_target_s": 3.0})
    r = network.record(p)
    assert r["label"] == c.label and r["local_steps"] == 10 and r["time_to_target_s"] == 3.0
    assert r["commit"] == "abc" and r["clean"] and network.summarise([r])[0]["reached"] == 1


def test_a_failed_run_says_why_in_the_commands_words_not_only_its_exit_code():
    from experiments.extreme import limits

    def ended(code: int, killed: bool) -> limits.Limited:
        return limits.Limited(code, GiB, GiB // 2, killed, False, {"rank 0": GiB // 2}, 1.0, {"rank 0": GiB // 2})

    said = ("W0 some warning\nistjax train: workdir='/r/s0' holds a run with a different config; differing fields"
            " (workdir -> now): learning_rate: 0.002 -> 0.016.\n")
    refused = "   - rank 0 of 2 would hold 2.52 GiB: ...\nistjax train: runtime.memory_limit=...\n"
    assert study.failure(ended(2, False), said) == (
        ended(2, False).summary + ": istjax train: workdir='/r/s0' holds a run with a different config; differing"
        " fields (workdir -> now): learning_rate: 0.002 -> 0.016.")
    assert study.failure(ended(2, False), refused) == "rank 0 of 2 would hold 2.52 GiB: ..."
    # the kernel's kill is the reason, whatever the command wrote before it
    assert study.failure(ended(137, True), said) == ended(137, True).summary
    assert study.failure(ended(1, False), "Traceback ...\n") == ended(1, False).summary


def test_the_per_metric_table_puts_ists_widest_cells_against_the_best_replicated_cell_on_every_metric():
    from experiments.extreme import report

    def row(algorithm, ranks, hidden, p1, psp1, fits=True, seeds=(0, 1, 2)):
        return {"algorithm": algorithm, "ranks": ranks, "hidden": hidden, "fits": fits, "seeds": list(seeds),
                "attempted": 3, "precision_at_1_mean": p1, "precision_at_1_std": 0.0, "psp_at_1_mean": psp1,
                "psp_at_1_std": 0.0}

    doc = {"rows": [row("data_parallel", 2, 128, 0.50, 0.20), row("local_sgd", 2, 256, 0.55, 0.10),
                    row("data_parallel", 2, 256, 0.70, 0.30, fits=False, seeds=(0, 1)),
                    row("ist", 2, 512, 0.56, 0.15), row("ist", 2, 256, 0.90, 0.90), row("ist", 4, 1024, 0.52, 0.25),
                    row("tensor_parallel", 2, 512, 0.60, 0.30)],
           "baselines": {"most_frequent_labels": {"test_precision_at_1": 0.4, "test_psp_at_1": 0.05}}}
    lines = report._per_metric(doc).splitlines()
    assert lines[0].split(" | ")[3:5] == ["IST, 2 ranks, H = 512 (widest)", "IST, 4 ranks, H = 1,024 (widest)"]
    p1, psp1 = (line.split(" | ") for line in lines[2:4])
    # P@1: local SGD's 0.55 is the replicated best (the 2-of-3 cell is not counted); IST at 512 above, at 1024 below
    assert p1[1:5] == ["0.400", "0.550 ± 0.000 (3 seeds) (local SGD, H = 256)", "0.560 ± 0.000 (3 seeds): above",
                       "0.520 ± 0.000 (3 seeds): below"]
    assert psp1[2:5] == ["0.200 ± 0.000 (3 seeds) (data parallel, H = 128)", "0.150 ± 0.000 (3 seeds): below",
                         "0.250 ± 0.000 (3 seeds): above"]
    assert "2 of 3 seeds trained" in p1[-1] and len(lines) == 4  # metrics the rows do not carry are left out


def test_the_network_race_at_the_tuned_studys_choices_and_its_refusals(tmp_path, monkeypatch):
    """``--tuned``: each raced arm takes its own choice on --ranks ranks from the tuned study's file, after the pinned
    untuned settings (so the choice wins); a missing file, an arm without a choice and a target the constant
    predictor reaches are refused naming the flag, before any namespace is built."""
    from experiments.extreme import network
    from istjax.core.errors import ArgError

    chosen = {"ist_p2": {"learning_rate": 0.008, "algorithm.optimizer_state": "carry"},
              "tensor_parallel_p2": {"learning_rate": 0.004}, "ist_p4": {"learning_rate": 0.5}}
    path = tmp_path / "debian.json"
    path.write_text(json.dumps({"tuning": {"chosen": chosen},
                                "baselines": {"most_frequent_labels": {"test_precision_at_1": 0.443}}}))
    settings = network.tuned_settings(path, 2, ["ist", "tensor_parallel"], 0.5)
    assert settings == {"ist": chosen["ist_p2"], "tensor_parallel": chosen["tensor_parallel_p2"]}  # not p4's
    ist = network.cell(512, 2, "100mbit", "ist", 40, target=0.5, samples=204800, settings=settings["ist"])
    (p,) = study_lib.plan([ist], [0], tmp_path / "runs", root=network.ROOT)
    assert (p.config.learning_rate, p.config.algorithm.optimizer_state) == (0.008, "carry")
    assert ist.info["tuned"] == chosen["ist_p2"]
    untuned = network.cell(512, 2, "100mbit", "ist", 40, target=0.5, samples=204800)
    (q,) = study_lib.plan([untuned], [0], tmp_path / "runs2", root=network.ROOT)
    assert (q.config.learning_rate, q.config.algorithm.optimizer_state) == (0.001, "reset")
    for args, words in (((tmp_path / "none.json", 2, ["ist"], 0.5), "no such file"),
                        ((path, 4, ["ist", "tensor_parallel"], 0.5), "no tuning.chosen for tensor_parallel_p4"),
                        ((path, 2, ["ist"], 0.44), "most-frequent-labels predictor")):
        with pytest.raises(ArgError, match=words) as e:
            network.tuned_settings(*args)
        assert e.value.arg in ("--tuned", "--target")
    monkeypatch.setattr(network.common, "refused", lambda *a: None)
    monkeypatch.setattr(network.common, "run_to_file", lambda *a, **k: pytest.fail("trained despite a refusal"))
    assert network.main(["--tuned", str(tmp_path / "none.json"), "--workdir", str(tmp_path / "w")]) == 2
