"""Runs a researcher can trust: resume as documented, checkpoints that verify, clean failures, honest evaluation.

Each test reproduces a failure a new user met (see the issue "Runs a researcher can trust") and checks what is
printed, the exit code, and that the last good checkpoint survives.
"""

import errno
import json
import os
import pathlib
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
import istjax.launch.config as config_lib
import istjax.launch.driver as driver
from istjax.launch import cli
from istjax.launch.checkpoint import Checkpointer
from istjax.launch.metrics import read_metrics
from istjax.models import MLP
from test_train import tiny_config  # the suite's small digits config

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = ["--config.model.hidden=(32,)", "--config.num_workers=2", "--config.local_steps=2",
        "--config.batch_size=16", "--config.eval_every=2", "--config.checkpoint_every=1",
        "--config.eval_train_examples=256", "--config.progress=False", "--config.target_accuracy=None"]


def tiny(**fields):
    return tiny_config(**{"num_rounds": 3, "eval_every": 1, "checkpoint_every": 1, "target_accuracy": None, **fields})


def final_params(workdir, config):
    alg = driver.build(config).algorithm
    like = jax.jit(alg.init)(jax.random.key(0))
    with Checkpointer(pathlib.Path(workdir) / "checkpoints", enabled=False) as ck:
        state, _, step = ck.restore_latest(like)
    return state, step


def assert_same(a, b):
    for x, y in zip(jax.tree.leaves((a.params, a.model_state, a.opt_state)),
                    jax.tree.leaves((b.params, b.model_state, b.opt_state))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# --- 1. Resume means resume ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_resume_reads_the_runs_own_config(tmp_path, capsys):
    workdir = str(tmp_path / "m1d")
    assert cli.main(["istjax", "train", f"--workdir={workdir}", "--config.num_rounds=2", *TINY]) == 0
    # The README's line: no --config, no overrides but a run-control one.
    assert cli.main(["istjax", "train", f"--workdir={workdir}", "--resume", "--config.num_rounds=4"]) == 0
    assert [r["round"] for r in read_metrics(pathlib.Path(workdir) / "metrics.jsonl")] == [2, 4]
    capsys.readouterr()
    # An override that changes what the run computes is refused, listing it; --overwrite is not the advice.
    assert cli.main(["istjax", "train", f"--workdir={workdir}", "--resume", "--config.learning_rate=0.5"]) == 2
    err = capsys.readouterr().err
    assert "learning_rate: 0.1 -> 0.5" in err and "--overwrite" not in err and "own config" in err
    assert cli.main(["istjax", "train", "--resume"]) == 2
    assert "--resume needs --workdir" in capsys.readouterr().err


def test_eval_subcommand_evaluates_a_saved_run(tmp_path, capsys):
    workdir = str(tmp_path / "run")
    assert cli.main(["istjax", "train", f"--workdir={workdir}", "--config.num_rounds=2", *TINY]) == 0
    summary = json.loads((pathlib.Path(workdir) / "summary.json").read_text())
    capsys.readouterr()
    assert cli.main(["istjax", "eval", f"--workdir={workdir}"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["round"] == 2 and result["test_accuracy"] == summary["test_accuracy"]
    assert cli.main(["istjax", "eval", f"--workdir={workdir}", "--checkpoint=1"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["round"] == 1
    assert cli.main(["istjax", "eval", f"--workdir={workdir}", "--checkpoint=9"]) == 2
    assert "holds steps [1, 2]" in capsys.readouterr().err


# --- 2. Checkpoints that prove themselves --------------------------------------------------------------------


def _flip_bytes(step_dir: pathlib.Path, count: int = 400):
    files = [f for f in (step_dir / "state").rglob("*") if f.is_file()]
    target = max(files, key=lambda f: f.stat().st_size)  # the array data file
    data = bytearray(target.read_bytes())
    start = len(data) // 2
    for i in range(start, min(start + count, len(data))):
        data[i] ^= 0x5A
    target.write_bytes(bytes(data))


@pytest.mark.slow
def test_flipped_bytes_are_caught_and_training_resumes_from_the_previous_checkpoint(tmp_path, capsys):
    config = tiny(num_rounds=3)
    driver.train_and_evaluate(config, tmp_path / "ref")
    driver.train_and_evaluate(config, tmp_path / "run")
    _flip_bytes(tmp_path / "run" / "checkpoints" / "3")
    capsys.readouterr()
    driver.train_and_evaluate(config, tmp_path / "run")  # same config: resumes from round 2, reruns round 3
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if "checkpoint" in l and "/3" in l]
    assert len(lines) == 1 and "does not match the digest" in lines[0] and "moved to" in lines[0], err
    assert "Resuming from" in err and "(round 2); it verified" in err
    assert (tmp_path / "run" / "checkpoints_corrupt" / "3").is_dir()
    a, _ = final_params(tmp_path / "ref", config)
    b, step = final_params(tmp_path / "run", config)
    assert step == 3
    assert_same(a, b)  # equal to the uninterrupted run: round 3 was recomputed from the verified round 2


@pytest.mark.slow
def test_truncated_checkpoint_is_one_line_not_pages(tmp_path):
    workdir = tmp_path / "run"
    args = [str(ROOT / ".venv/bin/istjax") if (ROOT / ".venv/bin/istjax").exists() else sys.executable, "train",
            f"--workdir={workdir}", "--config.num_rounds=2", *TINY]
    if not args[0].endswith("istjax"):
        args = [sys.executable, "-m", "istjax.launch.cli"] + args[1:]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    assert subprocess.run(args, capture_output=True, text=True, env=env, timeout=300).returncode == 0
    for f in (workdir / "checkpoints" / "2" / "state").rglob("*"):
        if f.is_file():
            f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 3])
    out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.strip().splitlines()
    assert sum("damaged" in l for l in lines) == 1, out.stderr
    assert len(lines) <= 6, out.stderr  # the fallback line and the resume line, not ~315 lines of TensorStore


def test_non_finite_loss_right_after_a_restore_names_the_checkpoint(tmp_path):
    config = tiny(num_rounds=2)
    driver.train_and_evaluate(config, tmp_path)
    state, step = final_params(tmp_path, config)
    # A checkpoint that verifies but holds a state that diverges at once (finite, but huge weights).
    bad = state._replace(params=jax.tree.map(lambda p: p * 1e30, state.params), round=jnp.asarray(3, jnp.int32))
    with Checkpointer(tmp_path / "checkpoints") as ck:
        ck.save(bad, {"config": config_lib.to_dict(config)})
    with pytest.raises(driver.TrainingError, match=r"first round after restoring checkpoint .*checkpoints/3"):
        driver.train_and_evaluate(tiny(num_rounds=5), tmp_path, resume=True)


# --- 4. Clean failures ---------------------------------------------------------------------------------------


def test_workdir_under_a_file_is_bad_input(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert cli.main(["istjax", "train", f"--workdir={tmp_path / 'file' / 'run'}", *TINY]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a directory" in err and len(err.splitlines()) <= 3


def _mount_tmpfs(path: pathlib.Path, options: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def _umount(path: pathlib.Path):
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_unwritable_workdir_is_an_environment_failure(tmp_path, capsys, monkeypatch):
    ro = tmp_path / "ro"
    if _mount_tmpfs(ro, "ro,size=64k"):  # a real read-only file system (root ignores permission bits)
        try:
            assert cli.main(["istjax", "train", f"--workdir={ro / 'run'}", *TINY]) == 3
        finally:
            _umount(ro)
    else:  # no mount permission here: the same failure, injected
        real = pathlib.Path.write_bytes

        def refuse(self, data):
            if self.name == ".istjax-write-probe":
                raise OSError(errno.EROFS, "Read-only file system", str(self))
            return real(self, data)

        monkeypatch.setattr(pathlib.Path, "write_bytes", refuse)
        assert cli.main(["istjax", "train", f"--workdir={tmp_path / 'run'}", *TINY]) == 3
    err = capsys.readouterr().err
    assert "cannot be written (Read-only file system)" in err and len(err.splitlines()) <= 2, err


def test_full_disk_keeps_the_last_good_checkpoint(tmp_path, capsys, monkeypatch):
    """An injected ENOSPC on the third save: exit 3, one line naming the directory, checkpoint 2 intact."""
    import orbax.checkpoint as ocp

    real_save, calls = ocp.CheckpointManager.save, []

    def save(self, step, *args, **kwargs):
        calls.append(step)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.directory))
        return real_save(self, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "save", save)
    workdir = tmp_path / "run"
    assert cli.main(["istjax", "train", f"--workdir={workdir}", "--config.num_rounds=4", *TINY]) == 3
    err = capsys.readouterr().err
    assert "No space left on device" in err and "checkpoints/2 is intact" in err and len(err.splitlines()) <= 2, err
    monkeypatch.setattr(ocp.CheckpointManager, "save", real_save)
    config = config_lib.load_run_config(workdir)
    state, step = final_params(workdir, config)
    assert step == 2  # and it verifies: restore_latest checked its digests


@pytest.mark.slow
def test_full_disk_on_a_real_small_file_system(tmp_path, capsys):
    small = tmp_path / "small"
    if not _mount_tmpfs(small, "size=400k"):
        pytest.skip("mounting a tmpfs needs root; the injected ENOSPC test covers the same path")
    try:
        code = cli.main(["istjax", "train", f"--workdir={small / 'run'}", "--config.num_rounds=6",
                         "--config.model.hidden=(512,)", *TINY[1:]])
        err = capsys.readouterr().err
        assert code == 3, err
        assert "No space left on device" in err, err
        steps = sorted(int(p.name) for p in (small / "run" / "checkpoints").iterdir() if p.name.isdigit())
        assert steps, err  # the checkpoints written before the disk filled are still there and verify
        config = config_lib.load_run_config(small / "run")
        assert final_params(small / "run", config)[1] == steps[-1]
    finally:
        _umount(small)


def test_mpi_backend_without_mpiexec_says_how_to_launch(tmp_path, capsys):
    assert cli.main(["istjax", "train", f"--workdir={tmp_path}", "--config.runtime.name=mpi", *TINY]) == 2
    err = capsys.readouterr().err
    assert "mpiexec -n 2 istjax train --config.runtime.name=mpi" in err
    task = istjax.classifier(MLP(hidden=(8,), num_classes=3), jnp.zeros((4, 5)), num_classes=3)
    with pytest.raises(ValueError, match="one process.*mpiexec -n 2"):
        istjax.ist(task, optax.sgd(0.1), num_workers=2, local_steps=1, backend="mpi")


# --- 5. Honest evaluation ------------------------------------------------------------------------------------


def test_small_eval_batches_are_refused_for_batch_statistics_models():
    config = tiny(eval_batch_size=7)
    with pytest.raises(config_lib.ConfigError, match=r"eval_batch_size=7: .*at least 256"):
        config_lib.validate(config)
    task = istjax.classifier(MLP(hidden=(8,), num_classes=3), jnp.zeros((4, 5)), num_classes=3)
    params = task.init(jax.random.key(0))
    one = {"x": jnp.ones((1, 5)), "y": jnp.zeros((1,), jnp.int32)}
    with pytest.raises(ValueError, match="a batch of 1 example.*one example: chance"):
        task.evaluate(params, {}, one)
    no_bn = istjax.classifier(MLP(hidden=(8,), num_classes=3, batch_norm=False, output_batch_norm=False),
                              jnp.zeros((4, 5)), num_classes=3)
    assert no_bn.min_eval_batch == 1  # a model without batch statistics predicts single examples
    no_bn.evaluate(no_bn.init(jax.random.key(0)), {}, one)


def test_module_without_subnet_is_refused_before_tracing():
    class NoSubnet(nn.Module):
        def partition_rules(self):
            return {"input": None, "h": "h"}

        @nn.compact
        def __call__(self, x):
            return nn.Dense(3)(nn.Dense(4, kernel_init=nn.with_logical_partitioning(
                nn.initializers.lecun_normal(), ("input", "h")))(x))

    task = istjax.classifier(NoSubnet(), jnp.zeros((2, 5)), num_classes=3)
    with pytest.raises(TypeError, match="no subnet\\(units\\) method"):
        istjax.ist(task, optax.sgd(0.1), num_workers=2, local_steps=1)
    istjax.local_sgd(task, optax.sgd(0.1), num_workers=2, local_steps=1)  # the full-width baselines need none
