"""`istjax compare`: the table from hand-written metrics (hand-computed columns) and one tiny end-to-end run."""

import json

import pytest

from istjax.launch import compare
from istjax.launch import plot


def _write_run(path, algorithm, w, accs, wall_per_round, bytes_per_round, k=5, b=10, every=2):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"algorithm": algorithm, "num_workers": w, "local_steps": k,
                                                  "dataset": "digits"}))
    lines = []
    for i, acc in enumerate(accs):
        r = (i + 1) * every
        lines.append(json.dumps({"round": r, "step": r * k, "samples_seen": r * w * k * b,
                                 "wall_time_s": r * wall_per_round, "test_accuracy": acc, "test_loss": 1 - acc,
                                 "train_loss": 1 - acc, "bytes_sent_per_worker": bytes_per_round / (2 * w),
                                 "bytes_received_per_worker": bytes_per_round / (2 * w),
                                 "bytes_total": r * bytes_per_round, "algorithm": algorithm, "num_workers": w}))
    (path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def runs(tmp_path):
    return [
        plot.load_run(_write_run(tmp_path / "dp", "data_parallel", 2, [0.5, 0.8, 0.9], 0.5, 1000.0)),
        plot.load_run(_write_run(tmp_path / "ist", "ist", 2, [0.6, 0.85, 0.88], 0.1, 50.0)),
        plot.load_run(_write_run(tmp_path / "lsgd", "local_sgd", 2, [0.4, 0.7, 0.86], 0.2, 200.0)),
    ]


def test_rows_hand_computed(runs):
    table = compare.rows(runs, target=0.8)
    assert [r.algorithm for r in table] == ["ist", "data_parallel", "local_sgd"]
    ist, dp, lsgd = table
    # IST reaches 0.85 >= 0.8 at its 2nd evaluation: round 4, 4 * 0.1 s, 4 * 50 bytes by all workers both ways, so
    # 4 * 50 / (2 W) = 50 bytes per worker each way (the convention of summary.json).
    assert (ist.rounds_to_target, ist.time_to_target_s, ist.bytes_to_target) == (4, pytest.approx(0.4), 50.0)
    assert (dp.rounds_to_target, dp.time_to_target_s, dp.bytes_to_target) == (4, pytest.approx(2.0), 1000.0)
    assert (lsgd.rounds_to_target, lsgd.time_to_target_s, lsgd.bytes_to_target) == (6, pytest.approx(1.2), 300.0)
    assert ist.final_accuracy == 0.88 and dp.final_accuracy == 0.9 and ist.best_accuracy == 0.88
    # Per worker per round, each way: the records' bytes_sent_per_worker (1000 / (2 W)), not all workers' 1000.
    assert ist.time_per_round_s == pytest.approx(0.1) and dp.bytes_per_round == pytest.approx(250.0)
    assert (dp.bytes_sent_per_round, dp.bytes_received_per_round, dp.bytes_total) == (250.0, 250.0, 6000.0)
    assert ist.samples_seen == 6 * 2 * 5 * 10 and ist.local_steps == 5
    never = compare.rows(runs, target=0.95)
    assert all(r.rounds_to_target is None and r.time_to_target_s is None for r in never)
    assert "not reached" in compare.format_table(never)


def test_default_target_is_the_lowest_final_accuracy(runs):
    assert compare.default_target(runs) == 0.86
    table = compare.rows(runs)
    assert table[0].target == 0.86 and all(r.rounds_to_target is not None for r in table)


def test_compare_runs_writes_table_and_plot(runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = ["--runs", *[str(r.path) for r in runs], "--target", "0.8", "--workdir", str(out)]
    assert compare.main(argv) == 0
    printed = capsys.readouterr().out
    assert "| ist | 2 | 5 | 6 | 0.8800 |" in printed and "rounds to 80.00%" in printed
    rows = json.loads((out / "comparison.json").read_text())
    assert [r["algorithm"] for r in rows] == ["ist", "data_parallel", "local_sgd"]
    assert rows[0]["bytes_to_target"] == 50.0  # per worker, each way: 4 rounds * 50 B / (2 W)
    md = (out / "comparison.md").read_text()
    assert md.startswith("budget: ") and "target 80.00%: given by --target" in md and "\n\n| algorithm |" in md
    assert (out / "comparison.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_compare_trains_under_one_budget(tmp_path, capsys):
    """End to end on digits: two algorithms at W=2 with the same rounds, K and B, then the table (one seed: the
    default is three)."""
    argv = ["--algorithms", "ist,local_sgd", "--workers", "2", "--seeds", "0", "--workdir", str(tmp_path),
            "--config.model.hidden=(8,)", "--config.num_rounds=2", "--config.eval_every=1", "--budget=rounds",
            "--config.local_steps=2", "--config.batch_size=16", "--config.eval_train_examples=256"]
    assert compare.main(argv) == 0
    rows = json.loads((tmp_path / "comparison.json").read_text())
    assert [(r["algorithm"], r["num_workers"], r["samples_seen"]) for r in rows] == [
        ("ist", 2, 2 * 2 * 2 * 16), ("local_sgd", 2, 2 * 2 * 2 * 16)]
    assert (tmp_path / "ist_W2_s0" / "metrics.jsonl").exists() and (tmp_path / "comparison.png").exists()
    # The bytes columns are summary.json's convention: per worker per round, each way.
    summary = json.loads((tmp_path / "ist_W2_s0" / "summary.json").read_text())
    assert rows[0]["bytes_per_round"] == summary["bytes_sent_per_worker_per_round"]
    # Rerunning reuses the finished runs (same config): the table is the same.
    assert compare.main(argv) == 0
    assert json.loads((tmp_path / "comparison.json").read_text())[0]["final_accuracy"] == rows[0]["final_accuracy"]


def test_compare_errors(tmp_path, capsys):
    assert compare.main(["--config.num_rounds=2"]) == 2
    assert "--workdir is required" in capsys.readouterr().err
    assert compare.main(["--workdir", str(tmp_path), "--target", "1.5"]) == 2
    assert "--target=1.5" in capsys.readouterr().err
    # A width that does not split over W=3 fails for IST before anything trains.
    assert compare.main(["--workdir", str(tmp_path), "--workers", "3", "--config.model.hidden=(8,)"]) == 2
    err = capsys.readouterr().err
    assert "num_workers=3" in err and "hidden" in err and not (tmp_path / "ist_W3").exists()
    assert compare.main(["--workdir", str(tmp_path), "--algorithms", "ist,sgd"]) == 2
    assert "unknown ['sgd']" in capsys.readouterr().err


@pytest.mark.slow
def test_compare_keeps_going_when_a_run_fails(tmp_path, capsys):
    """A diverging run is reported and kept in the table with a note; the others still train; exit 1."""
    argv = ["--algorithms", "ist,local_sgd", "--workers", "2", "--seeds", "0", "--budget", "rounds",
            "--workdir", str(tmp_path), "--config.model.hidden=(8,)", "--config.num_rounds=3", "--config.eval_every=1",
            "--config.local_steps=1", "--config.batch_size=16", "--config.eval_train_examples=256",
            "--config.learning_rate=1e38"]  # the first update overflows to inf: round 2's loss is not finite
    assert compare.main(argv) == 1
    captured = capsys.readouterr()
    assert "ist W=2 seed=0 failed: non-finite loss in round 2" in captured.err
    assert "local_sgd W=2 seed=0 failed" in captured.err  # the second run still trained after the first failed
    rows = json.loads((tmp_path / "comparison.json").read_text())
    assert [(r["algorithm"], r["rounds"]) for r in rows] == [("ist", 1), ("local_sgd", 1)]
    assert all(r["note"].startswith("failed: non-finite loss in round 2") for r in rows)
    assert "| note |" in (tmp_path / "comparison.md").read_text()


def _seed_run(path, algorithm, seed, accs, wall_per_round=0.1, bytes_per_round=100.0, w=2, k=5, every=2, **config):
    """A hand-written run whose config.json carries a seed (and ``config``'s other fields)."""
    _write_run(path, algorithm, w, accs, wall_per_round, bytes_per_round, k=k, every=every)
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(seed=seed, learning_rate=0.1, name=f"{algorithm}-s{seed}", **config)
    (path / "config.json").write_text(json.dumps(cfg))
    return plot.load_run(path)


def test_cells_mean_std_n_over_seeds(tmp_path):
    """Three seeds of IST and one local SGD run: one cell per config, sample std, "to target" over the seeds that
    reached it."""
    ist = [_seed_run(tmp_path / f"ist_s{s}", "ist", s, accs, wall_per_round=0.1 * (s + 1))
           for s, accs in enumerate([[0.5, 0.8, 0.9], [0.6, 0.7, 0.84], [0.7, 0.82, 0.86]])]
    lsgd = _seed_run(tmp_path / "lsgd_s0", "local_sgd", 0, [0.4, 0.7, 0.81])
    table = compare.cells([*ist, lsgd], target=0.8)
    assert [(c.algorithm, c.n, c.seeds) for c in table] == [("ist", 3, [0, 1, 2]), ("local_sgd", 1, [0])]
    cell = table[0]
    assert cell.stat("final_accuracy").mean == pytest.approx((0.9 + 0.84 + 0.86) / 3)
    assert cell.stat("final_accuracy").std == pytest.approx(0.030550504633038926)  # sample std (n - 1)
    # Seeds 0 and 2 reach 0.8 at round 4 (times 0.4 s and 1.2 s); seed 1 only at round 6 (0.84).
    assert cell.reached == 3 and cell.stat("rounds_to_target") == (pytest.approx(14 / 3), pytest.approx(1.1547005),
                                                                   3)
    never = compare.cells([*ist, lsgd], target=0.88)
    assert never[0].reached == 1 and never[0].stat("time_to_target_s").n == 1 and never[1].reached == 0
    text = compare.format_table(never)
    assert "0.8667 ± 0.0306 (3)" in text and "| 1/3 |" in text and "| 0/1 |" in text and "not reached" in text
    assert "| seeds |" in text and "| 0,1,2 |" in text
    record = never[0].as_dict()
    assert (record["final_accuracy_n"], record["rounds_to_target_n"], record["rounds_to_target"]) == (3, 1, 6)
    assert record["final_accuracy_std"] == pytest.approx(0.030550504633038926) and record["seeds"] == [0, 1, 2]


def test_cells_leave_out_a_failed_seed(tmp_path):
    runs = [_seed_run(tmp_path / f"ist_s{s}", "ist", s, accs)
            for s, accs in enumerate([[0.5, 0.8, 0.9], [0.1], [0.7, 0.82, 0.86]])]
    failed = {str(tmp_path / "ist_s1"): "non-finite loss in round 3; the learning rate ..."}
    (cell,) = compare.cells(runs, failed=failed)
    assert cell.n == 2 and cell.seeds == [0, 2] and [r.seed for r in cell.excluded] == [1]
    assert cell.stat("final_accuracy").mean == pytest.approx(0.88) and cell.target == 0.86  # failed seed ignored
    assert cell.note == "seed 1 failed and is left out: non-finite loss in round 3"
    assert "0.8800 ± 0.0283 (2)" in compare.format_table([cell])
    # Every seed failed: the failed runs make the row, as for a single run.
    (only,) = compare.cells(runs[1:2], failed=failed)
    assert only.n == 1 and only.note == "failed: non-finite loss in round 3"


def test_compare_runs_groups_seeds_and_writes_csv(tmp_path, capsys):
    dirs = []
    for s, accs in enumerate([[0.5, 0.8, 0.9], [0.6, 0.7, 0.84]]):
        dirs.append(str(_seed_run(tmp_path / f"ist_s{s}", "ist", s, accs).path))
        dirs.append(str(_seed_run(tmp_path / f"dp_s{s}", "data_parallel", s, [a - 0.1 for a in accs]).path))
    out = tmp_path / "cmp"
    assert compare.main(["--runs", *dirs, "--target", "0.7", "--workdir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| ist | 2 | 5 | 6 | 0,1 | 0.8700 ± 0.0424 (2) |" in printed
    import csv

    with open(out / "comparison.csv") as f:
        table = list(csv.DictReader(f))
    assert [(r["algorithm"], r["n"], r["seeds"]) for r in table] == [("ist", "2", "0 1"), ("data_parallel", "2", "0 1")]
    assert float(table[0]["final_accuracy"]) == pytest.approx(0.87) and table[0]["final_accuracy_std"]
    assert {"rounds_to_target_n", "time_to_target_s_std", "bytes_to_target_n", "reached"} <= set(table[0])
    rows = json.loads((out / "comparison.json").read_text())
    assert [r["seed"] for r in rows[0]["runs"]] == [0, 1]
    assert compare.main(["--runs", *dirs, "--seeds", "0,1"]) == 2
    assert "--seeds trains" in capsys.readouterr().err


@pytest.mark.slow
def test_compare_trains_seeds(tmp_path, capsys):
    """End to end on digits: IST at W=2 with two seeds: two runs, one cell with mean, std and n, one band."""
    argv = ["--algorithms", "ist", "--workers", "2", "--seeds", "0,1", "--workdir", str(tmp_path),
            "--config.model.hidden=(8,)", "--config.num_rounds=2", "--config.eval_every=1",
            "--config.local_steps=2", "--config.batch_size=16", "--config.eval_train_examples=256"]
    assert compare.main(argv) == 0
    err = capsys.readouterr().err
    assert "== ist W=2 seed=0" in err and "== ist W=2 seed=1" in err
    (cell,) = json.loads((tmp_path / "comparison.json").read_text())
    finals = [r["final_accuracy"] for r in cell["runs"]]
    assert cell["n"] == 2 and cell["seeds"] == [0, 1] and cell["final_accuracy_n"] == 2
    assert cell["final_accuracy"] == pytest.approx(sum(finals) / 2) and cell["final_accuracy_std"] is not None
    for s in (0, 1):
        assert json.loads((tmp_path / f"ist_W2_s{s}" / "config.json").read_text())["seed"] == s
    runs = [plot.load_run(tmp_path / f"ist_W2_s{s}") for s in (0, 1)]
    assert len(plot.group_runs(runs)) == 1  # one mean curve with a band in comparison.png
    assert (tmp_path / "comparison.png").read_bytes()[:4] == b"\x89PNG"
    assert "(2)" in (tmp_path / "comparison.md").read_text() and (tmp_path / "comparison.csv").exists()
    assert compare.main(["--workdir", str(tmp_path), "--seeds", "0,0"]) == 2
    assert "given twice" in capsys.readouterr().err


def _target_run(path, algorithm, accs, target, *, in_config=True, every=2):
    """A hand-written run with its own ``target_accuracy`` (in config.json, or only in summary.json) and the
    summary.json the driver writes: ``round_to_target``, the first evaluation at or above the target."""
    _write_run(path, algorithm, 2, accs, 0.1, 100.0, every=every)
    if in_config:
        cfg = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**cfg, "target_accuracy": target}))
    hit = next(((i + 1) * every for i, a in enumerate(accs) if a >= target), None)
    (path / "summary.json").write_text(json.dumps({"target_accuracy": target, "round_to_target": hit,
                                                   "test_accuracy": accs[-1]}))
    return path


def test_compare_runs_counts_to_the_runs_own_target(tmp_path, capsys):
    """Runs trained with target_accuracy 0.95 are tabulated against 0.95 (not the lowest final accuracy, 0.96), so
    the table's rounds to target are summary.json's; the second run names its target only in summary.json."""
    dirs = [_target_run(tmp_path / "ist", "ist", [0.5, 0.94, 0.955, 0.97], 0.95),
            _target_run(tmp_path / "lsgd", "local_sgd", [0.6, 0.952, 0.958, 0.96], 0.95, in_config=False)]
    runs = [plot.load_run(d) for d in dirs]
    assert [compare.run_target(r) for r in runs] == [0.95, 0.95] and compare.default_target(runs) == 0.96
    out = tmp_path / "cmp"
    assert compare.main(["--runs", *map(str, dirs), "--workdir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "rounds to 95.00%" in printed and "targets differ" not in printed and "| target |" not in printed
    table = {r["algorithm"]: r for r in json.loads((out / "comparison.json").read_text())}
    for d in dirs:
        summary = json.loads((d / "summary.json").read_text())
        row = table[json.loads((d / "config.json").read_text())["algorithm"]]
        assert (row["target"], row["rounds_to_target"]) == (0.95, summary["round_to_target"])
    assert (table["ist"]["rounds_to_target"], table["local_sgd"]["rounds_to_target"]) == (6, 4)
    # An explicit --target still overrides the runs' own.
    assert compare.main(["--runs", *map(str, dirs), "--target", "0.96"]) == 0
    assert "rounds to 96.00%" in capsys.readouterr().out


def test_compare_runs_with_different_targets_says_so(tmp_path, capsys):
    """Runs whose own targets differ are each measured against their own: a target column and a line saying so."""
    dirs = [_target_run(tmp_path / "ist", "ist", [0.5, 0.94, 0.955, 0.97], 0.95),
            _target_run(tmp_path / "lsgd", "local_sgd", [0.6, 0.85, 0.91, 0.93], 0.9)]
    table = compare.cells([plot.load_run(d) for d in dirs])
    assert {(c.algorithm, c.target, c.rows[0].rounds_to_target) for c in table} == {("ist", 0.95, 6),
                                                                                      ("local_sgd", 0.9, 6)}
    assert compare.main(["--runs", *map(str, dirs)]) == 0
    printed = capsys.readouterr().out
    assert "| target | rounds to target |" in printed
    assert "| 95.00% | 6 |" in printed and "| 90.00% | 6 |" in printed
    assert "targets differ (90.00%, 95.00%)" in printed and "--target" in printed
    # A run without a target of its own beside them: the lowest final accuracy (0.93) for it.
    _write_run(tmp_path / "dp", "data_parallel", 2, [0.7, 0.93], 0.1, 100.0)
    targets = compare.run_targets([plot.load_run(p) for p in (*dirs, tmp_path / "dp")])
    assert sorted(targets.values()) == [0.9, 0.93, 0.95]


def _fake_training(monkeypatch, accuracy):
    """Replaces training by hand-written runs: ``accuracy(config, i, n)`` is the test accuracy of the i-th of n
    evaluations (every ``eval_every`` rounds up to ``num_rounds``); config.json is the config as the driver writes it.
    Returns the configs "trained"."""
    from istjax.launch import config as config_lib
    from istjax.launch import driver

    trained = []

    def train_and_evaluate(c, run_dir, overwrite=False):
        trained.append(c)
        n = int(c.num_rounds) // int(c.eval_every)
        _write_run(run_dir, c.algorithm.name, int(c.num_workers), [accuracy(c, i, n) for i in range(n)], 0.1, 100.0,
                   k=int(c.local_steps), b=int(c.batch_size), every=int(c.eval_every))
        (run_dir / "config.json").write_text(json.dumps(config_lib.to_dict(c)))

    monkeypatch.setattr(driver, "train_and_evaluate", train_and_evaluate)
    return trained


def _climbing(c, i, n):
    """0.955 at first, up to 0.985 (IST) / 0.98 (local SGD): every run is above the default target 0.95 at once."""
    return 0.955 + 0.03 * (i + 1) / n - (0.005 if c.algorithm.name == "local_sgd" else 0.0) + 0.0001 * int(c.seed)


def test_compare_defaults_to_three_seeds_equal_samples_and_a_target_that_separates(tmp_path, monkeypatch, capsys):
    """Without --seeds, --budget or --target: seeds 0,1,2; W=2 trains twice the rounds of W=4 (the config's
    num_rounds * num_workers worker-rounds, eval_every alike); the config's target_accuracy (0.95, set), which every run
    reaches at its first evaluation, gives way to one derived from the runs, and the output says which and why."""
    trained = _fake_training(monkeypatch, _climbing)
    argv = ["--algorithms", "ist,local_sgd", "--workdir", str(tmp_path), "--config.num_rounds=4",
            "--config.eval_every=1", "--config.model.hidden=(8,)", "--config.target_accuracy=0.95"]
    assert compare.main(argv) == 0
    captured = capsys.readouterr()
    assert sorted((c.algorithm.name, c.num_workers, c.seed) for c in trained) == sorted(
        (a, w, s) for a in ("ist", "local_sgd") for w in (2, 4) for s in (0, 1, 2))
    # The default config: num_workers=4, K=10, B=32; num_rounds=4 is 4 * 4 * 10 * 32 = 5,120 samples per run.
    assert {(c.num_workers, c.num_rounds, c.eval_every) for c in trained} == {(2, 8, 2), (4, 4, 1)}
    line = "budget: equal samples, 5,120 per run: W=2 runs 8 rounds, W=4 runs 4 rounds"
    assert f"== {line}" in captured.err and captured.out.startswith(line + "\n")
    table = json.loads((tmp_path / "comparison.json").read_text())
    assert [(c["algorithm"], c["num_workers"], c["seeds"], c["samples_seen"]) for c in table] == [
        ("ist", 2, [0, 1, 2], 5120), ("local_sgd", 2, [0, 1, 2], 5120),
        ("ist", 4, [0, 1, 2], 5120), ("local_sgd", 4, [0, 1, 2], 5120)]
    assert (tmp_path / "ist_W2_s2" / "metrics.jsonl").exists()
    # Every run is at 0.9625 or more at its first evaluation (round 2 at W=2, 1 at W=4): 0.95 says nothing. Every run
    # reaches 0.98 (local SGD's lowest best), and none at its first evaluation.
    assert ("target 98.00%: derived from the runs, the highest 0.01 step that every run reaches (the config's "
            "target_accuracy 95.00% is reached at the first evaluation by every run)") in captured.out
    first_round = {2: 2, 4: 1}
    for cell in table:
        assert cell["target"] == 0.98 and cell["reached"] == 3
        assert all(r["rounds_to_target"] > first_round[cell["num_workers"]] for r in cell["runs"])
    assert "wall time: one process computes every worker, no communication (runtime=simulate)" in captured.out
    assert line in (tmp_path / "comparison.md").read_text()


def test_compare_budget_rounds_and_a_target_that_separates(tmp_path, monkeypatch, capsys):
    """--budget=rounds: the config's num_rounds at every W, and the line says the samples differ; a config
    target_accuracy that separates the runs is kept, and said to be the config's."""
    trained = _fake_training(monkeypatch, lambda c, i, n: 0.8 + 0.1 * i)
    argv = ["--algorithms", "ist", "--seeds", "0", "--budget", "rounds", "--workdir", str(tmp_path),
            "--config.num_rounds=4", "--config.eval_every=1", "--config.target_accuracy=0.9"]
    assert compare.main(argv) == 0
    out = capsys.readouterr().out
    assert {(c.num_workers, c.num_rounds, c.eval_every) for c in trained} == {(2, 4, 1), (4, 4, 1)}
    assert out.startswith("budget: equal rounds, 4 per run: training samples W=2 sees 2,560, W=4 sees 5,120 "
                          "(unequal; --budget=samples gives every W the same samples)\n")
    assert "target 90.00%: the config's target_accuracy" in out and "rounds to 90.00%" in out
    assert compare.main(["--runs", str(tmp_path / "ist_W2_s0"), "--budget", "rounds"]) == 2
    assert "--budget=rounds trains" in capsys.readouterr().err


def test_plan_budget_scales_rounds_per_w(tmp_path):
    from istjax.launch import config as config_lib

    config = config_lib.default_config()  # W=4, 60 rounds, K=10, B=32: 76,800 samples
    plan = compare.plan_budget(config, [2, 4])
    assert plan.line == "budget: equal samples, 76,800 per run: W=2 runs 120 rounds, W=4 runs 60 rounds"
    assert plan.fields[2]["num_rounds"] == 120 and plan.fields[2]["eval_every"] == 10 and plan.samples[2] == 76_800
    config.warmup_rounds = 6  # a schedule counted in rounds follows the samples too
    assert compare.plan_budget(config, [2, 4]).fields[2]["warmup_rounds"] == 12
    with pytest.raises(config_lib.ConfigError, match=r"num_rounds=60 .* W=7 .* multiple of 7 \(e\.g\. 63\).*"
                                                     r"--budget=rounds"):
        compare.plan_budget(config, [2, 7])
    assert compare.plan_budget(config, [2, 7], "rounds").samples == {2: 38_400, 7: 134_400}


def test_derived_target_when_every_run_is_flat(runs, tmp_path):
    """Runs at their best from the first evaluation: a step above the lowest first evaluation that some run reaches
    later; when none does, the phrase says the runs do not separate."""
    flat = [plot.load_run(_write_run(tmp_path / "a", "ist", 2, [0.97, 0.975], 0.1, 100.0)),
            plot.load_run(_write_run(tmp_path / "b", "local_sgd", 2, [0.98, 0.985], 0.1, 100.0))]
    target, how = compare.derive_target(flat)
    assert target == 0.98 and how.startswith("the lowest 0.01 step above the lowest first evaluation")
    still = [plot.load_run(_write_run(tmp_path / "c", "ist", 2, [0.971, 0.972], 0.1, 100.0)),
             plot.load_run(_write_run(tmp_path / "d", "local_sgd", 2, [0.975, 0.975], 0.1, 100.0))]
    target, how = compare.derive_target(still)
    assert target == 0.97 and "do not separate" in how and "--config.eval_every" in how
    choice = compare.choose_target(runs)  # no target_accuracy in their configs
    assert choice.target == 0.86 and choice.line.startswith("target 86.00%: derived from the runs, the highest")
    assert "no run's config names a target_accuracy" in choice.how


def test_compare_runs_states_budget_target_and_per_worker_bytes(runs, tmp_path, capsys):
    """--runs: the budget read from the runs and the target's origin above the table; the bytes columns per
    worker, each way."""
    assert compare.main(["--runs", *[str(r.path) for r in runs]]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "budget: equal samples, 600 per run: W=2 ran 6 rounds"
    assert lines[1].startswith("target 86.00%: derived from the runs")
    assert "| bytes to target (per worker, each way) |" in out and "| bytes per worker per round, each way |" in out
    # Data parallel: 1000 B per round by all workers both ways is 250 B per worker each way; 0.86 at round 6.
    assert "| data_parallel | 2 | 5 | 6 | 0.9000 | 0.9000 | 6 | 600 | 3.00 | 1.5 kB | 500.0 | 250 B |" in out
    w4 = plot.load_run(_write_run(tmp_path / "w4", "ist", 4, [0.5], 0.1, 1.0))
    assert compare.runs_budget([runs[0], w4]) == ("budget: neither rounds nor samples are the same for every run: "
                                                  "W=2 ran 6 rounds, 600 samples; W=4 ran 2 rounds, 400 samples")
    w4_long = plot.load_run(_write_run(tmp_path / "w4_long", "ist", 4, [0.5, 0.6, 0.7], 0.1, 1.0))
    assert compare.runs_budget([runs[0], w4_long]) == (
        "budget: equal rounds, 6 per run: W=2 saw 600 samples, W=4 saw 1,200 samples")


def test_bytes_match_the_summary_of_a_real_run(tmp_path, monkeypatch):
    """One tiny real run: the table's bytes per round is summary.json's per-worker value, "to target" and the
    figure's bytes axis are bytes_total / (2 W), and the wall-time axis says the run was simulated."""
    from istjax.launch import config as config_lib
    from istjax.launch import driver

    c = config_lib.default_config()
    c.num_workers, c.local_steps, c.batch_size, c.model.hidden, c.num_rounds, c.eval_every = 2, 2, 16, (8,), 2, 1
    c.progress, c.eval_train_examples = False, 256
    summary = driver.train_and_evaluate(c, tmp_path / "ist")
    run = plot.load_run(tmp_path / "ist")
    (r,) = compare.rows([run], target=0.0)
    assert r.bytes_per_round == summary["bytes_sent_per_worker_per_round"] == r.bytes_sent_per_round
    assert r.bytes_received_per_round == summary["bytes_received_per_worker_per_round"]
    assert r.bytes_to_target == pytest.approx(summary["bytes_sent_per_worker_per_round"])  # reached at round 1
    assert summary["bytes_total"] == pytest.approx(2 * 2 * 2 * r.bytes_per_round)  # 2 rounds, W=2, both ways
    from istjax.launch.metrics import format_bytes

    assert f"| {format_bytes(summary['bytes_sent_per_worker_per_round'])} |" in compare.format_table([r])
    import matplotlib.pyplot as plt

    kept = []
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    plot.plot_runs([tmp_path / "ist"], tmp_path / "fig.png")
    axes = kept[0].axes
    assert axes[2].get_xlabel() == "bytes per worker, each way, so far (log scale)"
    assert max(axes[2].lines[0].get_xdata()) == pytest.approx(2 * summary["bytes_sent_per_worker_per_round"])
    assert axes[1].get_xlabel().replace("\n", " ") == (
        "training wall time (s): one process computes every worker, no communication (runtime=simulate)")
