"""The per-rank memory cap (``runtime.memory_limit``, `istjax.core.memory`) and the OS limit the study runs under
(`experiments.extreme.limits`): predicted bytes by hand, the refusal naming both numbers and the fix, the config
field, the driver refusing before training (one process and mpiexec -n 2), a rank over a cgroup limit ending the job
in one line."""

import os
import pathlib
import signal
import subprocess
import sys
import time
import types

import jax
import jax.numpy as jnp
import pytest

from istjax.core import memory
from istjax.core.errors import ArgError
from istjax.launch import config as config_lib
from istjax.launch import driver
from istjax.launch.config.fix_words import config_terms
from conftest import FAST_COMPILE

ROOT = pathlib.Path(__file__).resolve().parents[1]
MPIEXEC = pathlib.Path(sys.executable).parent / "mpiexec"
MiB = 1 << 20


def tiny_config(**fields):
    c = config_lib.default_config()
    c.model.hidden = (16,)
    c.num_workers, c.local_steps, c.batch_size, c.num_rounds = 2, 1, 8, 1
    c.eval_every = c.checkpoint_every = 1
    c.eval_train_examples, c.progress = 256, False
    for k, v in fields.items():
        *parents, leaf = k.split(".")
        node = c
        for p in parents:
            node = node[p]
        node[leaf] = v
    return c


# ----------------------------------------------------------------------------------------------------------------
# The prediction and the check


def test_tree_bytes_by_hand_with_shapes_arrays_and_a_key():
    tree = {"w": jax.ShapeDtypeStruct((3, 4), jnp.float32), "b": jnp.zeros((5,), jnp.int8),
            "h": jax.ShapeDtypeStruct((2, 2), jnp.bfloat16), "key": jax.eval_shape(lambda: jax.random.key(0)),
            "none": ()}
    assert memory.tree_bytes(tree) == 3 * 4 * 4 + 5 * 1 + 4 * 2 + 8


def test_prediction_adds_step_outputs_and_temporaries_not_its_arguments():
    stats = types.SimpleNamespace(argument_size_in_bytes=10_000, output_size_in_bytes=3000, alias_size_in_bytes=1000,
                                  temp_size_in_bytes=500)
    p = memory.predict({"w": jax.ShapeDtypeStruct((100,), jnp.float32)}, stats, baseline=7000)
    assert (p.baseline, p.state, p.step, p.exact) == (7000, 400, 2500, True)
    assert p.total == 7000 + 400 + 2500
    lower = memory.predict({"w": jax.ShapeDtypeStruct((100,), jnp.float32)}, None, baseline=7000)
    assert lower.total == 7400 and not lower.exact and "at least" in lower.describe()
    # A runtime's own estimate of its round (the MPI runtime: several device steps around MPI calls).
    own = memory.predict({"w": jax.ShapeDtypeStruct((100,), jnp.float32)}, None, baseline=7000, round_bytes=900)
    assert (own.step, own.exact, own.total) == (900, True, 8300) and "at least" not in own.describe()
    assert "the round's compiled device steps and exchange buffers 0.9 KiB" in own.describe(), own.describe()
    # A real compiled step: its analysis is what step_bytes reads.
    comp = jax.jit(lambda s: s * 2).lower(jax.ShapeDtypeStruct((256,), jnp.float32)).compile()
    assert memory.step_bytes(comp.memory_analysis()) >= 256 * 4


def test_check_refuses_naming_predicted_and_allowed_bytes_and_the_fix():
    p = memory.MemoryPrediction(baseline=300 * MiB, state=200 * MiB, step=12 * MiB, exact=True)
    memory.check_memory(p, 0)  # no cap
    memory.check_memory(p, 600 * MiB)  # fits
    with pytest.raises(ArgError) as e:
        memory.check_memory(p, 400 * MiB, what="rank 1 of 2")
    text = str(e.value)
    assert e.value.arg == "memory_limit"
    assert "rank 1 of 2 would hold 512.0 MiB" in text and "memory_limit of 400.0 MiB" in text, text
    assert f"{512 * MiB:,} > {400 * MiB:,} bytes" in text
    assert "more ranks" in text and "smaller hidden width" in text and "larger memory_limit" in text
    assert "--config.runtime.memory_limit" in config_terms(e.value)


@pytest.mark.parametrize("value,expected", [(0, 0), (123, 123), ("800MiB", 800 * MiB), ("1.5GiB", 3 << 29),
                                            ("2GB", 2 * 10**9), ("64 kb", 64_000), ("1e6", 10**6), ("512", 512)])
def test_sizes_parse(value, expected):
    assert memory.parse_bytes(value) == expected


@pytest.mark.parametrize("value,why", [(-1, ">= 0"), ("-2GiB", ">= 0"), ("1.5XB", "not a size"),
                                       ("lots", "not a size"), (True, "not a size"), ([1], "not a size")])
def test_bad_sizes_are_refused_naming_the_argument(value, why):
    with pytest.raises(ArgError) as e:
        memory.parse_bytes(value)
    assert e.value.arg == "memory_limit" and why in str(e.value) and "1.5GiB" in str(e.value)


def test_bad_config_field_is_reported_under_its_name_before_anything_compiles():
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.build(tiny_config(**{"runtime.memory_limit": "1.5XB"}))
    assert "runtime.memory_limit='1.5XB' is not a size" in str(e.value), str(e.value)
    assert "--config.runtime.memory_limit=" in str(e.value)
    config_lib.build(tiny_config(**{"runtime.memory_limit": "8GiB"}))  # every runtime reads it: not refused as unread


# ----------------------------------------------------------------------------------------------------------------
# The driver


def test_driver_refuses_a_run_over_the_cap_before_any_state_or_round(tmp_path):
    with pytest.raises(config_lib.ConfigError) as e:
        driver.train_and_evaluate(tiny_config(**{"runtime.memory_limit": "1MiB"}), tmp_path / "run")
    text = str(e.value)
    assert "runtime.memory_limit='1MiB': this process would hold" in text, text
    assert "memory_limit of 1.0 MiB" in text and f"> {MiB:,} bytes" in text and "this rank's state" in text
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_driver_trains_under_a_cap_it_fits(tmp_path):
    summary = driver.train_and_evaluate(tiny_config(**{"runtime.memory_limit": "16GiB"}), tmp_path / "run")
    assert summary["rounds"] == 1


@pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not installed (pip install mpich)")
@pytest.mark.parametrize("mode", [
    ("--config.runtime.mode=sharded", "--config.sampler.name=stratified", "--config.sampler.num_owners=2"),
    ("--config.algorithm.name=data_parallel",),  # the gradients' round: the MPI calls inside the compiled step
], ids=["ist_sharded", "data_parallel"])
def test_every_rank_checks_its_share_and_all_stop_together_under_mpiexec(tmp_path, mode):
    istjax = pathlib.Path(sys.executable).parent / "istjax"
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), XLA_FLAGS=FAST_COMPILE)
    out = subprocess.run([str(MPIEXEC), "-n", "2", str(istjax), "train", "--config.runtime.name=mpi", *mode,
                          "--config.model.hidden=(16,)", "--config.num_workers=2",
                          "--config.progress=False", "--config.runtime.memory_limit=1MiB",
                          f"--workdir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=300, env=env)
    text = out.stdout + out.stderr
    assert out.returncode == 2, text
    for rank in (0, 1):  # the round estimated by the runtime (its local step compiled ahead, its buffers), not a
        # lower bound
        assert text.count(f"rank {rank} of 2 would hold ") == 1 and "at least" not in text, text
        line = next(x for x in text.splitlines() if f"rank {rank} of 2 would hold" in x)
        assert "the round's compiled device steps and exchange buffers" in line, line
    assert "memory_limit of 1.0 MiB" in text and "every one of the 2 ranks stopped" in text, text


# ----------------------------------------------------------------------------------------------------------------
# The OS limit (cgroup v1)


def _limits():
    from experiments.extreme import limits

    why = limits.missing_privileges()
    if why:
        pytest.skip(f"no writable cgroup v1 memory controller: {why}")
    return limits


def test_a_process_over_the_cgroup_limit_is_killed_and_reported_in_one_line():
    limits = _limits()
    r = limits.run_limited([sys.executable, "-c", "b = bytearray(400 << 20)"], 100 * MiB, timeout=60,
                           name="test-over")
    assert r.returncode == 137 and r.oom_killed and not r.timed_out, r
    assert r.summary.startswith("killed by the kernel at the 100.0 MiB cgroup limit (exit 137), peak ")
    assert "\n" not in r.summary and r.elapsed_s < 30
    assert not list(limits.CGROUP_ROOT.glob(f"istjax-test-over-{os.getpid()}"))


def test_a_process_within_the_limit_reports_a_plausible_peak():
    limits = _limits()
    r = limits.run_limited([sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(0.5)"],
                           400 * MiB, timeout=60, name="test-within")
    assert r.returncode == 0 and not r.oom_killed and not r.timed_out, r
    assert 64 * MiB <= r.peak_bytes <= 400 * MiB, r
    assert any(64 * MiB <= v < 200 * MiB for v in r.peak_rss_bytes.values()), r.peak_rss_bytes
    assert r.summary.startswith("finished within the 400.0 MiB cgroup limit (exit 0)")
    assert not list(limits.CGROUP_ROOT.glob(f"istjax-test-within-{os.getpid()}"))


def test_a_command_past_its_timeout_is_killed_and_the_group_removed():
    limits = _limits()
    r = limits.run_limited(["sleep", "30"], 50 * MiB, timeout=0.5, name="test-timeout")
    assert r.timed_out and r.returncode == 137 and r.elapsed_s < 10, r
    assert r.summary.startswith("timed out")
    assert not list(limits.CGROUP_ROOT.glob(f"istjax-test-timeout-{os.getpid()}"))


def test_the_cli_prints_one_line_and_exits_with_the_command_code():
    _limits()
    out = subprocess.run([sys.executable, "-m", "experiments.extreme.limits", "--limit", "100MiB", "--timeout", "60",
                          "--", sys.executable, "-c", "b = bytearray(400 << 20)"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 137, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("killed by the kernel at the 100.0 MiB cgroup limit")


def test_a_limit_per_rank_kills_only_the_rank_over_it_under_mpiexec(tmp_path):
    """`run_ranks`: each rank in its own child group; rank 1 allocates 400 MiB under a 200 MiB limit per rank and is
    the one the kernel kills; the job ends (no hang) and every group is removed. Rank 1 starts only once rank 0 holds
    its 50 MiB (a file says so): killed first, it would take rank 0 down before a loaded machine let it allocate."""
    limits = _limits()
    mpiexec = pathlib.Path(sys.executable).parent / "mpiexec"
    if not mpiexec.exists():
        pytest.skip("mpiexec not installed (pip install mpich)")
    flag = tmp_path / "rank0_holds_its_memory"
    code = (f"import os, pathlib, time; flag = pathlib.Path({str(flag)!r}); rank = os.environ['PMI_RANK']\n"
            "while rank == '1' and not flag.exists(): time.sleep(0.01)\n"
            "b = bytearray((400 if rank == '1' else 50) << 20); b[::4096] = b'x' * len(b[::4096])\n"
            "if rank == '0': flag.touch()")
    r = limits.run_ranks(2, [sys.executable, "-c", code], 200 * MiB, mpiexec=str(mpiexec), timeout=120,
                         name="test-ranks", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert r.oom_killed and r.killed == ("rank 1",) and not r.timed_out and r.returncode != 0, r
    assert r.summary.startswith("rank 1 killed by the kernel at the 200.0 MiB cgroup limit per rank"), r.summary
    assert 50 * MiB <= r.rank_peak_bytes["rank 0"] < 200 * MiB <= r.rank_peak_bytes["rank 1"] + MiB, r
    assert not list(limits.CGROUP_ROOT.glob(f"istjax-test-ranks-{os.getpid()}"))
    fine = limits.run_ranks(2, [sys.executable, "-c", "b = bytearray(64 << 20)"], 200 * MiB, mpiexec=str(mpiexec),
                            timeout=120, name="test-ranks-fine")
    assert fine.returncode == 0 and not fine.oom_killed and set(fine.rank_peak_bytes) == {"rank 0", "rank 1"}, fine


def test_a_sigterm_to_the_caller_removes_the_group_and_its_command():
    """A study stopped with SIGTERM (``kill``, a CI timeout) leaves no memory group and no process behind."""
    limits = _limits()
    code = ("from experiments.extreme import limits; "
            "limits.run_limited(['sleep', '30'], 50 << 20, name='test-term')")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    group = limits.CGROUP_ROOT / f"istjax-test-term-{proc.pid}"
    for _ in range(200):
        if group.exists() and (group / "cgroup.procs").read_text().strip():
            break
        time.sleep(0.05)
    sleeper = int((group / "cgroup.procs").read_text().split()[0])
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert not group.exists() and not pathlib.Path(f"/proc/{sleeper}").exists()
