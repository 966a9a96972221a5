"""The ``istjax`` command: config errors and exit codes, subcommand dispatch, a real SIGTERM."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import types

import jax
import numpy as np
import pytest

from istjax.launch import cli
from istjax.launch import config as config_lib
from istjax.launch import driver as train
from istjax.launch.checkpoint import Checkpointer
from conftest import FAST_COMPILE

REPO = pathlib.Path(__file__).resolve().parents[1]
TINY = ["--config.model.hidden=(32,)", "--config.num_workers=2", "--config.local_steps=2",
        "--config.batch_size=16", "--config.eval_train_examples=256", "--config.progress=False"]


def istjax_command() -> list[str]:
    script = pathlib.Path(sys.executable).with_name("istjax")
    return [str(script)] if script.exists() else [sys.executable, "-m", "istjax.launch.cli"]


def subprocess_env() -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = FAST_COMPILE  # the default device count
    return env


def test_unknown_field_exits_2_naming_it():
    p = subprocess.run(istjax_command() + ["train", "--config.nonexistent=1"], capture_output=True, text=True,
                       env=subprocess_env(), timeout=120)
    assert p.returncode == 2, p.stderr
    assert "--config.nonexistent: unknown config field" in p.stderr
    assert "Traceback" not in p.stderr


def test_misspelt_field_lists_close_matches(capsys):
    assert cli.main(["istjax", "train", "--config.model.hiden=(8,)"]) == 2
    assert "--config.model.hiden: unknown config field (did you mean 'model.hidden'?)" in capsys.readouterr().err


def test_every_config_problem_reported_before_training(capsys, tmp_path):
    code = cli.main(["istjax", "--config.algorithm.name=isst", "--config.batch_size=0", "--config.num_workers=3",
                     f"--workdir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2
    assert "algorithm.name='isst'" in err and "batch_size=0" in err and "2 problem(s)" in err
    assert not (tmp_path / "config.json").exists()  # nothing ran
    assert cli.main(["istjax", "--config.num_workers=3", f"--workdir={tmp_path}"]) == 2
    assert "not divisible by num_workers=3" in capsys.readouterr().err
    assert cli.main(["istjax", "--config.num_workers=many"]) == 2
    assert "num_workers=many" in capsys.readouterr().err
    assert cli.main(["istjax", "--wrkdir=x"]) == 2
    assert "workdir" in capsys.readouterr().err
    assert cli.main(["istjax", "--config=/no/such/config.py"]) == 2
    assert "--config=/no/such/config.py: no such file" in capsys.readouterr().err


def test_subcommands_dispatch(monkeypatch):
    calls = []
    for name in ("plot", "compare"):
        fake = types.ModuleType(f"istjax.launch.{name}")
        fake.main = lambda argv, name=name: calls.append((name, argv)) or 0
        monkeypatch.setitem(sys.modules, f"istjax.launch.{name}", fake)
    assert cli.main(["istjax", "plot", "runs/a", "runs/b"]) == 0
    assert cli.main(["istjax", "compare", "--x=1"]) == 0
    assert calls == [("plot", ["runs/a", "runs/b"]), ("compare", ["--x=1"])]
    assert cli.main(["istjax", "frobnicate"]) == 2


@pytest.mark.parametrize("path", sorted((REPO / "experiments" / "configs").glob("*.py")), ids=lambda p: p.stem)
def test_experiment_configs_load_and_validate(path):
    config, workdir, resume, overwrite = cli.parse_train_args(["istjax", f"--config={path}",
                                                               "--config.num_rounds=3"])
    assert config.num_rounds == 3 and workdir is None and not resume and not overwrite
    config_lib.validate(config, load_data=False)
    assert path.stem == "default" or config.name == path.stem


def test_default_workdir_and_exit_codes(tmp_path, monkeypatch, capsys):
    """The driver's outcomes map to exit codes (the outcomes themselves are tested in test_train.py)."""
    seen = []
    outcome = {"raise": None}

    def fake_train(config, workdir, *, resume=False, overwrite=False):
        seen.append((config.name, str(workdir), resume, overwrite))
        if outcome["raise"] is not None:
            raise outcome["raise"]
        return {}

    monkeypatch.setattr(train, "train_and_evaluate", fake_train)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["istjax"]) == 0  # no arguments: the default study in ./runs/<name>-<timestamp>
    name, workdir, resume, overwrite = seen[-1]
    assert name == config_lib.default_config().name and not resume and not overwrite
    assert pathlib.Path(workdir).parent == pathlib.Path("runs") and pathlib.Path(workdir).name.startswith(name + "-")
    # --resume reads the run's own config.json (here a run of the default config).
    pathlib.Path("w").mkdir()
    pathlib.Path("w/config.json").write_text(json.dumps(config_lib.to_dict(config_lib.default_config())))
    assert cli.main(["istjax", "train", "--workdir=w", "--resume"]) == 0 and seen[-1][1:] == ("w", True, False)
    for exc, code in [(train.TrainingError("non-finite loss in round 3"), 1),
                      (train.Interrupted(signal.SIGTERM, "stopped"), 143),
                      (train.Interrupted(signal.SIGINT, "stopped"), 130),
                      (KeyboardInterrupt(), 130),
                      (config_lib.ConfigError(["workdir holds a different config"]), 2)]:
        outcome["raise"] = exc
        assert cli.main(["istjax", "--workdir=w"]) == code, exc
    assert "non-finite loss in round 3" in capsys.readouterr().err


@pytest.mark.slow
def test_sigterm_checkpoints_and_exits_143(tmp_path):
    workdir = tmp_path / "run"
    args = [*TINY, "--config.num_rounds=100000", "--config.eval_every=1", "--config.checkpoint_every=1000000",
            f"--workdir={workdir}"]
    proc = subprocess.Popen(istjax_command() + ["train", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=subprocess_env())
    try:
        deadline = time.monotonic() + 240
        while not (workdir / "metrics.jsonl").exists():  # the first round is done
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no round finished in time"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert "SIGTERM" in err and "checkpoint" in err
    config, *_ = cli.parse_train_args(["istjax", *args])
    algorithm = train.build(config).algorithm
    with Checkpointer(workdir / "checkpoints", enabled=False) as ckpt:
        state, meta, step = ckpt.restore_latest(jax.jit(algorithm.init)(jax.random.key(0)))
    assert step >= 1 and int(state.round) == step and meta["wall_time_s"] > 0


@pytest.mark.mpi
@pytest.mark.skipif(not pathlib.Path(sys.executable).with_name("mpiexec").exists(), reason="mpiexec not installed")
@pytest.mark.slow
def test_mpiexec_run_matches_simulate(tmp_path):
    """``mpiexec -n 2 istjax train --config.runtime.name=mpi``: rank 0 records and checkpoints; the result is the
    simulate backend's, and the bytes recorded are the ones the MPI runtime measured."""
    args = [*TINY, "--config.num_rounds=3", "--config.eval_every=3", "--config.checkpoint_every=3"]
    mpiexec = str(pathlib.Path(sys.executable).with_name("mpiexec"))
    p = subprocess.run([mpiexec, "-n", "2", *istjax_command(), "train", *args, "--config.runtime.name=mpi",
                        f"--workdir={tmp_path / 'mpi'}"], capture_output=True, text=True, env=subprocess_env(),
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.count("Finished 3 rounds") == 1  # only the primary prints
    cli.main(["istjax", *args, f"--workdir={tmp_path / 'sim'}"])
    config, *_ = cli.parse_train_args(["istjax", *args])
    algorithm = train.build(config).algorithm
    like = jax.jit(algorithm.init)(jax.random.key(0))
    states = []
    for run in ("mpi", "sim"):
        with Checkpointer(tmp_path / run / "checkpoints", enabled=False) as ckpt:
            states.append(ckpt.restore_latest(like)[0])
    for a, b in zip(jax.tree.leaves(states[0].params), jax.tree.leaves(states[1].params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    (record,) = json.loads((tmp_path / "mpi" / "metrics.jsonl").read_text().splitlines()[0]),
    assert record["bytes_sent_per_worker"] == algorithm.comm.sent
    assert record["bytes_received_per_worker"] == algorithm.comm.received
    peaks = json.loads((tmp_path / "mpi" / "summary.json").read_text())["peak_rss_mib_per_process"]
    assert len(peaks) == 2 and all(50 < m < 24 * 1024 for m in peaks), peaks  # every rank's, rank 0 first
    assert "peak resident memory" in p.stdout and "per process, rank 0 first" in p.stdout


def test_new_dataset_kwargs_from_the_command_line():
    config, *_ = cli.parse_train_args(["istjax", "--config.data.name=synthetic_speech",
                                       "--config.data.kwargs.num_train=500", "--config.data.kwargs.seed=3",
                                       "--config.data.kwargs.data_dir=/some/path"])
    assert dict(config.data.kwargs) == {"num_train": 500, "seed": 3, "data_dir": "/some/path"}
    with pytest.raises(config_lib.ConfigError, match=r"unknown argument\(s\) \['data_dir'\]"):
        config_lib.validate(config)


def test_none_unsets_a_field_from_the_command_line():
    config, *_ = cli.parse_train_args(["istjax", "--config.target_accuracy=None", "--config.num_rounds=7"])
    assert config.target_accuracy is None and config.num_rounds == 7
    config_lib.validate(config, load_data=False)  # None is a valid target: report no time to target
    config, *_ = cli.parse_train_args(["istjax", "--config.learning_rate=None"])
    with pytest.raises(config_lib.ConfigError, match="learning_rate"):
        config_lib.validate(config, load_data=False)
