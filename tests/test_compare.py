"""`istjax compare`: the table from hand-written metrics (hand-computed columns) and one tiny end-to-end run."""

import json

import pytest

from istjax.experiment import compare
from istjax.experiment import plot


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
    # IST reaches 0.85 >= 0.8 at its 2nd evaluation: round 4, 4 * 0.1 s, 4 * 50 bytes.
    assert (ist.rounds_to_target, ist.time_to_target_s, ist.bytes_to_target) == (4, pytest.approx(0.4), 200.0)
    assert (dp.rounds_to_target, dp.time_to_target_s, dp.bytes_to_target) == (4, pytest.approx(2.0), 4000.0)
    assert (lsgd.rounds_to_target, lsgd.time_to_target_s, lsgd.bytes_to_target) == (6, pytest.approx(1.2), 1200.0)
    assert ist.final_accuracy == 0.88 and dp.final_accuracy == 0.9 and ist.best_accuracy == 0.88
    assert ist.time_per_round_s == pytest.approx(0.1) and dp.bytes_per_round == pytest.approx(1000.0)
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
    assert rows[0]["bytes_to_target"] == 200.0
    assert (out / "comparison.md").read_text().startswith("| algorithm |")
    assert (out / "comparison.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_compare_trains_under_one_budget(tmp_path, capsys):
    """End to end on digits: two algorithms at W=2 with the same rounds, K and B, then the table."""
    argv = ["--algorithms", "ist,local_sgd", "--workers", "2", "--workdir", str(tmp_path),
            "--config.model.hidden=(8,)", "--config.num_rounds=2", "--config.eval_every=1",
            "--config.local_steps=2", "--config.batch_size=16", "--config.eval_train_examples=256"]
    assert compare.main(argv) == 0
    rows = json.loads((tmp_path / "comparison.json").read_text())
    assert [(r["algorithm"], r["num_workers"], r["samples_seen"]) for r in rows] == [
        ("ist", 2, 2 * 2 * 2 * 16), ("local_sgd", 2, 2 * 2 * 2 * 16)]
    assert (tmp_path / "ist_W2" / "metrics.jsonl").exists() and (tmp_path / "comparison.png").exists()
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
    argv = ["--algorithms", "ist,local_sgd", "--workers", "2", "--workdir", str(tmp_path),
            "--config.model.hidden=(8,)", "--config.num_rounds=3", "--config.eval_every=1",
            "--config.local_steps=1", "--config.batch_size=16", "--config.eval_train_examples=256",
            "--config.learning_rate=1e38"]  # the first update overflows to inf: round 2's loss is not finite
    assert compare.main(argv) == 1
    captured = capsys.readouterr()
    assert "ist W=2 failed: non-finite loss in round 2" in captured.err
    assert "local_sgd W=2 failed" in captured.err  # the second run still trained after the first failed
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
