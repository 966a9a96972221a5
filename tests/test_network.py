"""The slow network (`experiments/network/slow_net.py`): its pure parts, and a real run across two namespaces.

The integration tests build real network namespaces, veth pairs, a bridge and ``tc`` shaping, run ``mpiexec -n 2``
across them, and check the links' kernel byte counters against the bytes the MPI runtime says it handed to MPI.
They need root or CAP_NET_ADMIN (CI here has it) and are skipped, with the reason, elsewhere.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest

from experiments.network import slow_net as sn

ROOT = pathlib.Path(__file__).resolve().parent.parent
MPIEXEC = pathlib.Path(sys.executable).parent / "mpiexec"


def test_plan_names_and_addresses():
    plan = sn.make_plan(3, "t1")
    assert [h.namespace for h in plan.hosts] == ["isjt1-0", "isjt1-1", "isjt1-2"]
    assert [h.address for h in plan.hosts] == ["198.18.0.1/15", "198.18.0.2/15", "198.18.0.3/15"]
    assert plan.bridge == "isjt1br" and plan.bridge_address == "198.18.0.254/15"
    names = [plan.bridge] + [n for h in plan.hosts for n in (h.inner, h.outer)]
    assert all(len(n) <= 15 for n in names) and len(set(names)) == len(names)  # Linux interface-name limit
    assert all(sn.NETWORK.overlaps(__import__("ipaddress").ip_network(h.address, strict=False)) for h in plan.hosts)


@pytest.mark.parametrize("hosts,tag,match", [(0, "a", "--hosts=0"), (65, "a", "--hosts=65"), (2, "BAD", "tag"),
                                             (2, "toolong1", "tag"), (2, "a-b", "tag")])
def test_plan_rejects_bad_input(hosts, tag, match):
    with pytest.raises(ValueError, match=match):
        sn.make_plan(hosts, tag)


@pytest.mark.parametrize("field,value", [("rate", "fast"), ("rate", "100"), ("delay", "1"), ("delay", "1min"),
                                         ("loss", "0.1")])
def test_link_rejects_bad_units(field, value):
    with pytest.raises(ValueError, match=field):
        sn.Link(**{field: value})


def test_link_rate_in_bits():
    assert sn.Link("100mbit").bits_per_second() == 100e6
    assert sn.Link("1gbit").bits_per_second() == 1e9
    assert sn.Link("10mbps").bits_per_second() == 80e6


def test_tc_lines():
    lines = sn.shape_commands("veth0", sn.Link("100mbit", "0.5ms", "0.1%"), "ns0")
    assert lines[0] == ["ip", "netns", "exec", "ns0", "tc", "qdisc", "add", "dev", "veth0", "root", "handle", "1:",
                        "netem", "delay", "0.5ms", "loss", "0.1%"]
    assert lines[1][:12] == ["ip", "netns", "exec", "ns0", "tc", "qdisc", "add", "dev", "veth0", "parent", "1:",
                             "handle"]
    assert lines[1][13:16] == ["tbf", "rate", "100mbit"]
    assert int(lines[1][lines[1].index("burst") + 1]) >= 32 * 1024
    root_side = sn.shape_commands("veth1", sn.Link("10gbit"))
    assert root_side == [["tc", "qdisc", "add", "dev", "veth1", "root", "handle", "1:", "tbf", "rate", "10gbit",
                          "burst", str(int(10e9 / 8 / 250)), "latency", "100ms"]]  # rate only: no netem


def test_setup_and_teardown_cover_every_device():
    plan = sn.make_plan(2, "t2")
    setup = sn.setup_commands(plan, sn.Link())
    flat = [" ".join(c) for c in setup]
    for h in plan.hosts:
        assert f"ip netns add {h.namespace}" in flat
        assert f"ip link add {h.outer} type veth peer name {h.inner}" in flat
        assert f"ip netns exec {h.namespace} ip addr add {h.address} dev {h.inner}" in flat
        # shaped both ways: the host's egress inside its namespace, and the bridge side's egress
        assert any(c.startswith(f"ip netns exec {h.namespace} tc qdisc add dev {h.inner} root") for c in flat)
        assert any(c.startswith(f"tc qdisc add dev {h.outer} root") for c in flat)
    assert flat.index(f"ip link add {plan.bridge} type bridge") == 0
    down = sn.teardown_commands(plan)
    assert down == [["ip", "netns", "delete", "isjt2-0"], ["ip", "netns", "delete", "isjt2-1"],
                    ["ip", "link", "delete", "isjt2br"]]


def test_mpiexec_line():
    plan = sn.make_plan(2, "t3")
    argv = sn.mpiexec_command(plan, ["python", "x.py"], mpiexec="/bin/mpiexec")
    text = " ".join(argv)
    assert argv[0] == "/bin/mpiexec" and "-genv MPIR_CVAR_NOLOCAL 1" in text and "-genv UCX_TLS tcp,self" in text
    assert "-bind-to core" in text
    sections = " ".join(argv).split(" : ")
    assert len(sections) == 2
    for i, sec in enumerate(sections):
        assert f"-n 1 -env UCX_NET_DEVICES isjt3h{i} ip netns exec isjt3-{i} sh -c" in sec
        assert sec.endswith(f"rank{i} python x.py")  # the wrapper runs the command as "$@"
    wrapper = argv[argv.index("sh") + 2]
    assert subprocess.run(["sh", "-c", wrapper, "rank0", "true"]).returncode == 0
    failed = subprocess.run(["sh", "-c", wrapper, "rank0", "sh", "-c", "exit 3"], capture_output=True, text=True)
    assert failed.returncode == 3 and "rank 0 (namespace isjt3-0) ended with status 3" in failed.stderr
    assert "-bind-to" not in sn.mpiexec_command(plan, ["x"], bind=False)
    with pytest.raises(ValueError, match="no command"):
        sn.mpiexec_command(plan, [])


def test_cli_refuses_bad_input_before_creating_anything(capsys):
    with pytest.raises(SystemExit):
        sn.main(["--rate", "fast", "--", "true"])
    assert "rate='fast'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sn.main(["--hosts", "2"])
    assert "no command" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# Real namespaces

needs_net_admin = pytest.mark.skipif(sn.missing_privileges() is not None,
                                     reason=f"slow network not available here: {sn.missing_privileges()}")
needs_mpi = pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not installed (pip install mpich)")


def _slow_net(tmp_path, *args, timeout=300):
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "experiments.network.slow_net", "--report", str(report), *args]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return out, (json.loads(report.read_text()) if report.exists() else None)


@needs_net_admin
@needs_mpi
@pytest.mark.slow
def test_ist_across_two_namespaces_crosses_the_links(tmp_path):
    """Two rounds of IST under mpiexec -n 2, one rank per namespace: every byte the runtime hands to MPI crosses
    the shaped veth links (their kernel counters grow by at least that much), and nothing is left behind."""
    out, report = _slow_net(tmp_path, "--hosts", "2", "--rate", "1gbit", "--tag", "tst1", "--",
                            sys.executable, "tests/network/two_rounds.py", "1024")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "DONE" in out.stdout
    measured = {int(m[0]): (int(m[1]), int(m[2]))
                for m in re.findall(r"BYTES rank=(\d+) sent=(\d+) received=(\d+)", out.stdout)}
    assert set(measured) == {0, 1}
    links = report["links"]
    for rank, (sent, received) in measured.items():
        c = links[f"isjtst1-{rank}"]
        assert sent > 100_000  # a 64-1024-5 MLP's slices: not a trivial amount
        assert c["tx_bytes"] >= sent and c["rx_bytes"] >= received, (rank, c, sent, received)
    assert sn.leftovers(sn.make_plan(2, "tst1")) == []


@needs_net_admin
@needs_mpi
@pytest.mark.slow
def test_a_killed_rank_ends_the_job_and_the_namespaces_go(tmp_path):
    """A rank killed mid-run: the job ends within 30 s with a message naming the rank; the namespaces are removed."""
    # slow_net's own --timeout, not only subprocess's: past it slow_net prints what each rank was doing, kills the
    # job and removes the namespaces (a test killed from outside would leave them behind for the next run).
    out, report = _slow_net(tmp_path, "--hosts", "2", "--tag", "tst2", "--timeout", "150", "--",
                            sys.executable, "tests/mpi/crash.py", "kill", timeout=240)
    text = out.stdout + out.stderr
    assert out.returncode not in (0, 124), text[-3000:]  # failed, and not by running past the timeout
    assert report["wall_s"] < 90  # start-up, two rounds, the kill and the teardown of the other rank; not a hang
    assert "rank 1 (namespace isjtst2-1) ended with status 137, killed by signal 9" in text, text[-3000:]
    assert sn.leftovers(sn.make_plan(2, "tst2")) == []


@needs_net_admin
def test_nothing_is_left_after_a_failing_command(tmp_path):
    out, report = _slow_net(tmp_path, "--hosts", "2", "--tag", "tst3", "--", "false")
    assert out.returncode != 0
    assert sn.leftovers(sn.make_plan(2, "tst3")) == []


def test_time_to_accuracy_tables_and_plot(tmp_path):
    """The study's speed-ups, table and plot from made-up runs (the real runs need root and minutes)."""
    from experiments.network import time_to_accuracy as tta

    runs = [{"model": "2", "ranks": 2, "link": "1gbit", "algorithm": a, "time_to_target_s": t,
             "curve": [(t / 3, 0.5), (t, 0.92)]}
            for a, t in (("ist", 10.0), ("data_parallel", 50.0), ("local_sgd", 20.0))]
    runs.append({"model": "2", "ranks": 2, "link": "100mbit", "algorithm": "ist", "time_to_target_s": None})
    result = {"target": 0.9, "runs": runs, "speedups": tta.speedups(runs)}
    by_link = {e["link"]: e for e in result["speedups"]}
    assert by_link["1gbit"]["speedup_vs_data_parallel"] == 5.0 and by_link["1gbit"]["speedup_vs_local_sgd"] == 2.0
    assert by_link["100mbit"]["speedup_vs_data_parallel"] is None
    md = tta.markdown(result)
    assert "| 2-layer | 2 | 1gbit | 10.0 | 50.0 | 20.0 | 5.0x | 2.0x | 10.6x, 4.2x |" in md
    assert "not reached" in md
    png = tta.plot(result, tmp_path / "r.png")
    assert png.stat().st_size > 10_000


def test_catch_up_rate_from_two_links():
    """Hand-computed: IST 2 + 500/rate s per round, data parallel 1 + 10000/rate, both 3 rounds to the target.
    3 (1 + 10000/r) == 3 (2 + 500/r) at r = 9500 Mbit/s; with IST's compute the faster one, never."""
    from experiments.network import time_to_accuracy as tta

    def rows(ist, dp):
        out = []
        for link, mbit in (("100mbit", 100.0), ("1gbit", 1000.0)):
            for a, (c, m) in (("ist", ist), ("data_parallel", dp)):
                out.append({"model": "2", "ranks": 2, "link": link, "algorithm": a, "rounds": 3,
                            "time_per_round_s": c + m / mbit, "time_to_target_s": 3 * (c + m / mbit)})
        return out

    (got,) = tta.catch_up(rows((2.0, 500.0), (1.0, 10000.0)))
    assert got["catch_up_mbit"] == pytest.approx(9500.0)
    assert got["fits"]["data_parallel"]["compute_s"] == pytest.approx(1.0)
    assert got["fits"]["ist"]["megabits"] == pytest.approx(500.0)
    (never,) = tta.catch_up(rows((1.0, 500.0), (2.0, 10000.0)))
    assert never["catch_up_mbit"] is None
    md = tta.markdown({"target": 0.9, "speedups": [], "catch_up": [got, never]})
    assert "9.5 Gbit/s" in md and "never" in md


def test_overlap_summary_and_table(tmp_path, monkeypatch):
    """The overlap study's medians and ratio from made-up runs (the real runs need root and minutes)."""
    from experiments.network import overlap

    fake = {("1gbit", "leaves"): [2.0, 2.2, 2.1], ("1gbit", "one"): [2.4, 2.5, 2.6]}
    monkeypatch.setattr(overlap.slow_net, "missing_privileges", lambda: None)
    monkeypatch.setattr(overlap, "one_run", lambda rate, v, reps, tag, timeout: {
        "link": rate, "variant": v, "round_s": sorted(fake[rate, v])[1], "rounds_s": fake[rate, v]})
    result = overlap.main(["--links", "1gbit", "--repeats", "1", "--out", str(tmp_path / "o.json")])
    (e,) = result["summary"]
    assert (e["leaves"], e["one"]) == (2.1, 2.5) and e["one_over_leaves"] == pytest.approx(2.5 / 2.1)
    assert "| 1gbit | 2.10 | 2.50 | 1.190 |" in (tmp_path / "o.md").read_text()
    assert "--gradient-buffers" in overlap.worker_command("one", 3)


def test_time_to_accuracy_dataset_option(tmp_path):
    """--dataset picks the config every rank trains; --append refuses to mix data sets or targets in one file."""
    from experiments.network import time_to_accuracy as tta

    line = tta.train_command("3", "ist", 2, tmp_path, target=0.4, max_rounds=9, dataset="keywords")
    assert any(a.endswith("keywords_speech.py:3") for a in line) and "--config.target_accuracy=0.4" in line
    assert any(a.endswith("fsdd_speech.py:2") for a in tta.train_command("2", "ist", 2, tmp_path, target=0.9,
                                                                        max_rounds=9))
    out = tmp_path / "r.json"
    out.write_text(json.dumps({"target": 0.9, "dataset": "fsdd", "runs": []}))
    if sn.missing_privileges():  # the refusal needs no privileges, but main checks them first
        pytest.skip(sn.missing_privileges())
    with pytest.raises(SystemExit):
        tta.main(["--dataset", "keywords", "--target", "0.4", "--append", "--out", str(out)])
    md = tta.markdown({"target": 0.4, "dataset": "keywords", "speedups": []})
    assert md.startswith("Time to 0.4 test accuracy on the synthesised keywords")


def test_descendants_finds_children_and_grandchildren():
    """`slow_net.descendants`: what `snapshot` signals under a job that ran past its timeout."""
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        def names():
            return {pathlib.Path(f"/proc/{p}/comm").read_text().strip() for p in found}

        for _ in range(200):  # until both children exist and have exec'd `sleep` (a fork is `sh` until then)
            found = sn.descendants(proc.pid)
            if len(found) >= 2 and names() == {"sleep"}:
                break
            subprocess.run(["sleep", "0.05"])
        names = names()
        assert len(found) == 2 and names == {"sleep"}
        assert proc.pid not in found and sn.descendants(found[0]) == []
    finally:
        proc.kill()
        proc.wait()
        for p in found:
            subprocess.run(["kill", str(p)])


def test_a_training_loop_prints_its_stacks_on_sigusr1_and_goes_on(capfd):
    """A run that seems stuck says where it is: SIGUSR1 inside the training loop's signal scope prints every
    thread's stack (faulthandler) without stopping it; outside it, the handler is gone again."""
    import os
    import signal

    from istjax.launch.train_loop import _stop_on_signals

    with _stop_on_signals(lambda msg: None) as stop:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop["signum"] is None
    err = capfd.readouterr().err
    assert "Current thread" in err and "test_a_training_loop_prints_its_stacks_on_sigusr1" in err
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_the_training_loop_runs_where_stderr_has_no_file_descriptor(capsys):
    """In a notebook or under captured output there is no stderr descriptor for the stack dump: the loop's signal
    scope still opens (without the dump) and SIGINT/SIGTERM still stop it."""
    import signal
    import sys

    from istjax.launch.train_loop import _stop_on_signals

    with pytest.raises(Exception):
        sys.stderr.fileno()  # capsys: no descriptor
    with _stop_on_signals(lambda msg: None) as stop:
        signal.raise_signal(signal.SIGTERM)
        assert stop["signum"] == signal.SIGTERM
