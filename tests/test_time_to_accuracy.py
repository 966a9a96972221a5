"""The time-to-accuracy study over seeds (`experiments/network/time_to_accuracy.py`) and the report entries that
render it (`experiments/network/report.py`), on hand-made runs: no network namespaces, no training.

The runs: the 2-layer model, 2 ranks, on 1 Gbit/s, three seeds. Seconds to the target per seed (0, 1, 2):

    IST            10, 12, 14    mean 12, std 2
    data parallel  50, -, 84     seed 1 not reached; mean 67, std 17 * sqrt(2)
    local SGD      20, 24, 35    mean 79 / 3, std sqrt(181 / 3)

IST's speed-ups, each seed against its own: over data parallel 5.0 and 6.0 (seed 1 left out): mean 5.5, std
sqrt(0.5); over local SGD 2.0, 2.0, 2.5: mean 13 / 6, std sqrt(1 / 12).
"""

import json
import math

import pytest

from experiments import report, tables
from experiments.network import report as network_report
from experiments.network import time_to_accuracy as tta

SECONDS = {"ist": (10.0, 12.0, 14.0), "data_parallel": (50.0, None, 84.0), "local_sgd": (20.0, 24.0, 35.0)}


def _row(algorithm, seed, seconds, link="1gbit", **extra):
    row = {"model": "2", "ranks": 2, "link": link, "algorithm": algorithm, "seed": seed, "returncode": 0,
           "time_to_target_s": seconds, "round_to_target": 3 if seconds else None, "rounds": 3 if seconds else 30,
           "time_per_round_s": (seconds or 300.0) / 3, "compile_time_s": 4.0 + seed,
           "bytes_sent_per_worker_per_round": 2e6, "links": {"h0": {"tx_bytes": 5e6}, "h1": {"tx_bytes": 7e6}},
           "curve": [(1.0, 0.5), (seconds or 100.0, 0.92 if seconds else 0.8)]}
    return {**row, **extra}


def _rows():
    return [_row(a, seed, t) for a, ts in SECONDS.items() for seed, t in enumerate(ts)]


def _result(rows):
    return {"target": 0.9, "dataset": "fsdd", "runs": rows, "speedups": tta.speedups(rows),
            "catch_up": tta.catch_up(rows)}


def test_seconds_to_target_over_seeds():
    (e,) = tta.speedups(_rows())
    assert e["seeds"] == [0, 1, 2]
    assert e["seconds_to_target"]["ist"] == pytest.approx(12.0)
    assert e["seconds_to_target_std"]["ist"] == pytest.approx(2.0)
    assert e["seconds_to_target"]["data_parallel"] == pytest.approx(67.0)  # over the two seeds that reached it
    assert e["seconds_to_target_std"]["data_parallel"] == pytest.approx(17 * math.sqrt(2))
    assert e["seconds_to_target"]["local_sgd"] == pytest.approx(79 / 3)
    assert e["seconds_to_target_std"]["local_sgd"] == pytest.approx(math.sqrt(181 / 3))
    assert e["seconds_by_seed"]["data_parallel"] == [[0, 50.0], [1, None], [2, 84.0]]
    assert e["reached"] == {"ist": 3, "data_parallel": 2, "local_sgd": 3}


def test_speedups_are_paired_by_seed_and_leave_out_a_seed_that_missed_the_target():
    (e,) = tta.speedups(_rows())
    assert e["speedup_vs_data_parallel"] == pytest.approx(5.5)  # the mean, as readers of one-run files expect
    assert e["speedup_vs_data_parallel_std"] == pytest.approx(math.sqrt(0.5))
    assert (e["speedup_vs_data_parallel_min"], e["speedup_vs_data_parallel_max"]) == (5.0, 6.0)
    assert e["speedup_vs_data_parallel_seeds"] == [0, 2]
    assert e["speedup_vs_local_sgd"] == pytest.approx(13 / 6)
    assert e["speedup_vs_local_sgd_std"] == pytest.approx(math.sqrt(1 / 12))
    assert (e["speedup_vs_local_sgd_min"], e["speedup_vs_local_sgd_max"]) == (2.0, 2.5)
    assert e["speedup_vs_local_sgd_seeds"] == [0, 1, 2]
    assert e["paper"] == tta.PAPER["2"]


def test_no_seed_reaching_the_target_gives_none():
    rows = [_row("ist", s, None) for s in (0, 1)] + [_row("data_parallel", s, 20.0) for s in (0, 1)]
    (e,) = tta.speedups(rows)
    assert e["seconds_to_target"]["ist"] is None and e["seconds_to_target_std"]["ist"] is None
    assert e["speedup_vs_data_parallel"] is None and e["speedup_vs_data_parallel_seeds"] == []
    assert e["speedup_vs_data_parallel_min"] is None and e["reached"]["ist"] == 0
    assert e["speedup_vs_local_sgd"] is None  # local SGD did not run


def test_a_file_from_before_seeds_reads_as_one_run_of_seed_0():
    rows = [{k: v for k, v in _row(a, 0, ts[0]).items() if k not in ("seed", "compile_time_s")}
            for a, ts in SECONDS.items()]
    (e,) = tta.speedups(rows)
    assert e["seeds"] == [0] and e["speedup_vs_data_parallel"] == 5.0 and e["speedup_vs_data_parallel_std"] is None
    md = tta.markdown(_result(rows))
    assert "| 2-layer | 2 | 1gbit | 10.0 | 50.0 | 20.0 | 5.0x | 2.0x | 10.6x, 4.2x |" in md
    assert "±" not in md and "warm-up" not in md  # a one-run file renders as before


def test_catch_up_fits_the_mean_round_time_over_seeds():
    """IST 2 + 500/rate s per round, data parallel 1 + 10000/rate, each seed off the line by +d, -d, 0 (the means
    fall on it); a data parallel seed that missed the target (a round time far off) is left out. IST takes 3, 3
    and 4 rounds (mean 10/3), data parallel 3: 3 (1 + 10000/r) == 10/3 (2 + 500/r) at r = 85000/11 Mbit/s."""
    rows = []
    for link, mbit in (("100mbit", 100.0), ("1gbit", 1000.0)):
        for seed, d, ist_rounds in ((0, 0.5, 3), (1, -0.5, 3), (2, 0.0, 4)):
            t = 2.0 + 500.0 / mbit + d
            rows.append(_row("ist", seed, ist_rounds * t, link, rounds=ist_rounds, time_per_round_s=t))
            t = 1.0 + 10000.0 / mbit + 2 * d
            rows.append(_row("data_parallel", seed, 3 * t, link, rounds=3, time_per_round_s=t))
        rows.append(_row("data_parallel", 3, None, link, rounds=30, time_per_round_s=500.0))
    (got,) = tta.catch_up(rows)
    assert got["fits"]["ist"] == pytest.approx({"compute_s": 2.0, "megabits": 500.0})
    assert got["fits"]["data_parallel"] == pytest.approx({"compute_s": 1.0, "megabits": 10000.0})
    assert got["rounds"]["ist"] == pytest.approx(10 / 3) and got["rounds"]["data_parallel"] == 3
    assert isinstance(got["rounds"]["data_parallel"], int)  # a whole mean stays an int, as one seed gives
    assert got["catch_up_mbit"] == pytest.approx(85000 / 11)


def test_markdown_shows_mean_and_std_over_seeds_and_the_warm_up_round():
    md = tta.markdown(_result(_rows()))
    assert ("| 2-layer | 2 | 1gbit | 12.0 ± 2.0 | 67.0 ± 24.0 (2 of 3) | 26.3 ± 7.8 | 5.5 ± 0.7x (2 of 3 seeds) | "
            "2.2 ± 0.3x | 10.6x, 4.2x |") in md
    assert "Mean ± sample standard deviation over seeds 0, 1, 2" in md
    # compile_time_s is 4 + seed: a mean of 5 s per algorithm
    assert "one warm-up round" in md and "IST 5.0 s, data parallel 5.0 s, local SGD 5.0 s" in md
    assert "catches up" not in md  # one link: no fit


def test_cells_for_one_seed_and_for_an_algorithm_not_run():
    (e,) = tta.speedups([_row("ist", 0, 10.0), _row("data_parallel", 0, 40.0)])
    assert tta.seconds_cell(e, "ist") == "10.0" and tta.seconds_cell(e, "local_sgd") == "-"
    assert tta.ratio_cell(e, "speedup_vs_data_parallel") == "4.0x"
    assert tta.ratio_cell(e, "speedup_vs_local_sgd") == "not reached"


def test_seeds_option_train_command_and_append_key(tmp_path):
    args = tta.parser().parse_args(["--seeds", "0,1,2"])
    assert args.seeds == [0, 1, 2] and tta.parser().parse_args([]).seeds == [0]
    for bad in ("0,x", "1,1"):
        with pytest.raises(SystemExit):
            tta.parser().parse_args(["--seeds", bad])
    assert "--config.seed=2" in tta.train_command("2", "ist", 2, tmp_path, target=0.9, max_rounds=9, seed=2)
    before = [_row("ist", 0, 10.0), _row("ist", 1, 11.0), {k: v for k, v in _row("ist", 0, 9.0).items() if k != "seed"}]
    merged = tta.merge(before, [_row("ist", 1, 13.0)])
    assert [(tta.seed_of(r), r["time_to_target_s"]) for r in merged] == [(0, 10.0), (0, 9.0), (1, 13.0)]
    assert tta.merge(before[2:], [_row("ist", 0, 8.0)]) == [_row("ist", 0, 8.0)]  # no seed: seed 0, replaced



def test_main_runs_every_seed_and_append_replaces_the_same_seed(tmp_path, monkeypatch):
    """main with the runs faked (the study runner launches them; `launch` and `row` stand in for slow_net and the
    files a run leaves): one run per (link, seed, algorithm), each row naming its seed; --append of seed 1 again
    replaces seed 1's runs and keeps seed 0's."""
    calls, made = [], {}

    def fake_launch(p, **_):
        info = p.cell.info
        calls.append((info["link"], p.seed, info["algorithm"]))
        made[p.run_dir] = _row(info["algorithm"], p.seed, {"ist": 10.0, "data_parallel": 40.0}[info["algorithm"]]
                               + p.seed + len(calls) / 100, info["link"])
    monkeypatch.setattr(tta, "launch", fake_launch)
    monkeypatch.setattr(tta, "row", lambda p: made.get(p.run_dir))
    monkeypatch.setattr(tta.slow_net, "missing_privileges", lambda: None)
    monkeypatch.setenv("ISTJAX_DATA_DIR", str(tmp_path))
    out = tmp_path / "r.json"
    common = ["--links", "1gbit", "--algorithms", "ist,data_parallel", "--out", str(out),
              "--workdir", str(tmp_path / "runs")]
    result = tta.main([*common, "--seeds", "0,1"])
    assert calls == [("1gbit", 0, "ist"), ("1gbit", 0, "data_parallel"), ("1gbit", 1, "ist"),
                     ("1gbit", 1, "data_parallel")]
    assert [r["seed"] for r in result["runs"]] == [0, 0, 1, 1] and result["speedups"][0]["seeds"] == [0, 1]
    assert result["command"].startswith("python -m experiments.network.time_to_accuracy --links 1gbit")
    again = tta.main([*common, "--seeds", "1", "--append"])
    assert [(r["seed"], r["time_to_target_s"]) for r in again["runs"]] == [
        (0, 10.01), (0, 40.02), (1, 11.05), (1, 41.06)]
    assert json.loads(out.read_text())["speedups"][0]["speedup_vs_data_parallel_seeds"] == [0, 1]
    assert "± " in (tmp_path / "r.md").read_text() and (tmp_path / "r.png").exists()


def test_a_run_is_istjax_train_behind_slow_net(tmp_path):
    """The study's cells: the config of the model on the MPI runtime, one worker per rank, stopping at the target;
    `launch` runs the study runner's ``istjax train`` line behind slow_net's command."""
    c = tta.cell("3", "ist", 4, "100mbit", target=0.9, max_rounds=7)
    assert c.label == "m3-r4-100mbit-ist" and c.config == "experiments/configs/fsdd_speech.py:3"
    assert {"--config.runtime.name=mpi", "--config.num_workers=4", "--config.stop_at_target=True"} <= set(c.overrides)
    cmd = tta.train_command("3", "ist", 4, tmp_path / "w", target=0.9, max_rounds=7, seed=1)
    assert cmd[1:4] == ["-m", "istjax.launch.cli", "train"] and "--config.seed=1" in cmd
    assert cmd[-1] == f"--workdir={tmp_path / 'w'}"


def test_launch_wraps_the_run_in_slow_net_and_row_reads_what_it_left(tmp_path, monkeypatch):
    """`launch` with subprocess faked: slow_net's command around the run's line, the job file beside the run;
    `row` then reads the run's summary, the links' report and the job."""
    import subprocess

    c = tta.cell("2", "ist", 2, "1gbit", target=0.9, max_rounds=5)
    p = tta.study.Planned(c, 1, tmp_path / c.label / "s1", None)
    seen = []

    def fake_run(cmd, **kw):
        seen.append(cmd)
        p.run_dir.mkdir(parents=True)
        (p.run_dir / "summary.json").write_text(json.dumps({"rounds": 3, "time_to_target_s": 7.0,
                                                            "code": {"commit": "abc", "clean": True}}))
        tta._files(p)[0].write_text(json.dumps({"links": {"h0": {"tx_bytes": 1}}}))
        return subprocess.CompletedProcess(cmd, 0, "", "")
    monkeypatch.setattr(tta.subprocess, "run", fake_run)
    assert tta.launch(p, timeout=60, tag="tta1") is None
    (cmd,) = seen
    assert cmd[1:3] == ["-m", "experiments.network.slow_net"] and cmd[cmd.index("--tag") + 1] == "tta1"
    assert cmd[cmd.index("--") + 1:] == tta.study.child_command(p, tta.ROOT)
    r = tta.row(p)
    assert (r["seed"], r["rounds"], r["time_to_target_s"], r["returncode"]) == (1, 3, 7.0, 0)
    assert (r["commit"], r["clean"], r["links"]) == ("abc", True, {"h0": {"tx_bytes": 1}}) and "error" not in r

# ----------------------------------------------------------------------------------------------------------------
# experiments/network/report.py on a file of three seeds, and on the committed one-run files

def _entry(name, data):
    return tables.REGISTRY[name].render(data)


def test_report_speedups_show_the_spread_over_seeds():
    d = _result(_rows())
    assert _entry("fsdd.dp.2layer.2ranks.1gbit", d) == "5.5x ± 0.7 (2 of 3 seeds)"
    assert _entry("fsdd.lsgd.2layer.4ranks.1gbit", {**d, "speedups": [{**d["speedups"][0], "ranks": 4}]}) \
        == "2.2x ± 0.3 (3 seeds)"
    assert _entry("fsdd.lsgd_range", d) == "2.2x (means over 3 seeds; 2.0x-2.5x seed by seed)"
    # data parallel's seconds per round over IST's, seed by seed: 50/10 = 5.0, 300/12 = 25.0 (its 30 rounds are
    # counted here: the round time is measured either way), 84/14 = 6.0
    ratios = [5.0, 25.0, 6.0]
    mean, std = sum(ratios) / 3, math.sqrt(sum((r - 12.0) ** 2 for r in ratios) / 2)
    assert network_report._per_round_speedup(d, "2", 2, "1gbit") == f"{mean:.1f}x ± {std:.1f} (3 seeds)"


def test_report_rounds_table_over_seeds():
    table = _entry("network_fsdd_rounds", _result(_rows()))
    assert "s per round (mean ± std over seeds)" in table and "(range over seeds)" in table
    # rounds: 3 for every seed that reached it; data parallel 2 of 3; seconds per round 4.0 ± 0.67 for IST
    assert "| 2-layer | 2 | 1 Gbit/s | 3 / 3 (2 of 3) / 3 | 4.00 ± 0.67 / " in table
    assert "| 2.0 / 2.0 / 2.0 | 12 / 12 / 12 |" in table


def test_report_headline_says_one_run_or_the_seeds():
    (fsdd,) = [h for h in tables.HEADLINE if h[2] == network_report.FSDD]
    what, _, _, fn = fsdd
    assert "one run each" in what(_one_run_result())
    d = _result(_rows())
    assert "mean ± std over 3 seeds" in what(d)
    assert "2-layer, 2 ranks: 5.5x ± 0.7 (2 of 3 seeds) at 1 Gbit/s" in fn(d)
    assert "sooner than local SGD 2.2x (means over 3 seeds; 2.0x-2.5x seed by seed)" in fn(d)


def _one_run_result():
    """A file as written before ``--seeds``: one run per cell, no ``seed``, no ``compile_time_s``."""
    rows = [{k: v for k, v in r.items() if k not in ("seed", "compile_time_s")} for r in _rows() if r["seed"] == 0]
    return _result(rows)


def test_report_renders_one_run_files_as_before():
    for d in (_one_run_result(),):
        d = {**d, "baselines": {"linear": {"test_accuracy": 0.5}}}
        # both races' tables: the runner's markdown, then the linear baseline against the target
        assert _entry("network_keywords", d).startswith(tta.markdown(d).strip() + "\n\nThe data's trivial baseline")
        assert "±" not in tta.markdown(d) and "±" not in _entry("network_fsdd_rounds", d)
    one = _one_run_result()
    e = one["speedups"][0]
    assert _entry("fsdd.dp.2layer.2ranks.1gbit", one) == f"{e['speedup_vs_data_parallel']:.1f}x"  # no spread
