"""Nothing lost (issue 57, items 1 and 2): a checkpoint is corrupt only when its bytes are, and every check that can
refuse a run runs before the workdir is touched.

A hand-edited width is a config problem, refused in one line with the checkpoints left byte for byte; restoring the
config resumes them exactly. A refused run (the memory cap, which compiles; a config another run's checkpoints do
not fit) leaves the workdir as it found it, and the corrected command then runs there. ``--workdir=`` is refused.
Damage is still damage: a flipped byte is caught and the checkpoint moved aside.
"""

import hashlib
import json
import pathlib
import shutil
import subprocess

import jax.numpy as jnp
import pytest

import istjax.launch.config as config_lib
from istjax.launch import checkpoint as ckpt_lib
from istjax.launch import cli, driver
from istjax.launch.checkpoint import Checkpointer, CheckpointMismatch
from conftest import persistent_compilation_cache
from test_checkpoint import assert_same, make_state
from test_cli import TINY, istjax_command, subprocess_env

RUN = [*TINY, "--config.checkpoint_every=1"]


def snapshot(folder: pathlib.Path) -> dict[str, str]:
    """Every path under ``folder`` (folders too) with its file's SHA-256; empty when ``folder`` does not exist."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


def train(capsys, *args) -> tuple[int, str]:
    """``istjax train ARGS`` in process: (exit code, stderr)."""
    capsys.readouterr()
    code = cli.main(["istjax", "train", *args])
    return code, capsys.readouterr().err


def one_line_refusal(code: int, err: str, *words: str) -> str:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, (w, err)
    return err


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One compilation cache for the module's runs: they differ only in their workdirs and round counts."""
    with persistent_compilation_cache(tmp_path_factory.mktemp("jax_cache")):
        yield


@pytest.fixture(scope="module")
def trained(tmp_path_factory, cache):
    """A 2-round run of the tiny digits MLP, checkpointed after each round (copy it before changing it)."""
    workdir = tmp_path_factory.mktemp("trained") / "run"
    assert cli.main(["istjax", "train", *RUN, "--config.num_rounds=2", f"--workdir={workdir}"]) == 0
    return workdir


@pytest.fixture
def run_copy(trained, tmp_path):
    shutil.copytree(trained, tmp_path / "run")
    return tmp_path / "run"


# --- 1. A checkpoint is corrupt only when its bytes are --------------------------------------------------------


def _edit_width(workdir: pathlib.Path, hidden: list[int]) -> str:
    """Hand-edits the run's ``config.json`` to another hidden width; returns the original text."""
    path = workdir / "config.json"
    original = path.read_text()
    edited = json.loads(original)
    edited["model"]["hidden"] = hidden
    path.write_text(json.dumps(edited, indent=2, sort_keys=True) + "\n")
    return original


def test_hand_edited_width_is_refused_in_one_line_and_nothing_moves(run_copy, capsys):
    _edit_width(run_copy, [16])
    before = snapshot(run_copy)
    err = one_line_refusal(*train(capsys, f"--workdir={run_copy}", "--resume", "--config.num_rounds=4"),
                           "model.hidden: [32] -> [16]", "checkpoint 2 (left in place)",
                           str(run_copy / "config.json"), "new --workdir")
    assert "--overwrite" not in err and "damaged" not in err and "Traceback" not in err
    # In Python, the same refusal is a ConfigError.
    with pytest.raises(config_lib.ConfigError, match=r"model.hidden: \[32\] -> \[16\]"):
        driver.train_and_evaluate(config_lib.load_run_config(run_copy), run_copy, resume=True)
    for step in (None, 1):  # `istjax eval`, its newest checkpoint or a given one
        with pytest.raises(config_lib.ConfigError, match=r"model.hidden: \[32\] -> \[16\]"):
            driver.evaluate_run(run_copy, checkpoint=step)
    assert snapshot(run_copy) == before  # the checkpoints' bytes, config.json and run.lock included
    assert not (run_copy / "checkpoints_corrupt").exists()


@pytest.mark.slow
def test_hand_edited_width_then_restored_config_resumes_exactly(run_copy, tmp_path, capsys, cache):
    """The issue's case as a user meets it: the real command (its stderr as the terminal sees it, interpreter
    shutdown included), then the original config back, resumed, identical to a run never stopped."""
    original = _edit_width(run_copy, [16])
    before = snapshot(run_copy / "checkpoints")
    p = subprocess.run(istjax_command() + ["train", f"--workdir={run_copy}", "--resume", "--config.num_rounds=4"],
                       capture_output=True, text=True, env=subprocess_env(), timeout=300)
    err = one_line_refusal(p.returncode, p.stderr, "model.hidden: [32] -> [16]")
    assert "Exception" not in err and "--overwrite" not in err
    assert snapshot(run_copy / "checkpoints") == before and not (run_copy / "checkpoints_corrupt").exists()

    (run_copy / "config.json").write_text(original)
    code, err = train(capsys, f"--workdir={run_copy}", "--resume", "--config.num_rounds=4")
    assert code == 0, err
    assert f"Resuming from {run_copy / 'checkpoints' / '2'}" in err
    whole = tmp_path / "whole"
    assert cli.main(["istjax", "train", *RUN, "--config.num_rounds=4", f"--workdir={whole}"]) == 0
    assert_same(driver.restore_run(run_copy)[2], driver.restore_run(whole)[2])


def test_a_layout_mismatch_moves_nothing_and_names_the_array(tmp_path):
    """At the checkpointer: another layout raises before orbax reads an array, for checkpoints that record their
    layout and for those written before they did (orbax's own metadata)."""
    with Checkpointer(tmp_path / "ck") as ck:
        ck.save(make_state(1, 1), {"config": {"model": {"hidden": [3]}}})
    wider = make_state(0, 0)
    wider = wider._replace(params={**wider.params, "bias": jnp.zeros(4)})
    before = snapshot(tmp_path)
    for layout in (ckpt_lib.tree_layout, lambda tree: None):  # recorded; not recorded (an older checkpoint)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ckpt_lib, "tree_layout", layout)
            with Checkpointer(tmp_path / "ck") as ck:
                ck.save(make_state(2, 2), {"config": {"model": {"hidden": [3]}}})
        with Checkpointer(tmp_path / "ck") as ck, pytest.raises(CheckpointMismatch) as e:
            ck.restore_latest(wider, log=pytest.fail)
        assert (e.value.leaf, e.value.stored, e.value.wanted) == ("params/bias", "float32[3]", "float32[4]")
        assert e.value.config == {"model": {"hidden": [3]}}
        assert {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("ck/2")} == before
        assert not (tmp_path / "ck_corrupt").exists()
        shutil.rmtree(tmp_path / "ck" / "2")
    with Checkpointer(tmp_path / "ck") as ck:
        assert_same(ck.restore_latest(make_state(0, 0))[0], make_state(1, 1))


def test_a_flipped_byte_is_still_damage(tmp_path):
    with Checkpointer(tmp_path / "ck") as ck:
        ck.save(make_state(1, 1))
        ck.save(make_state(2, 2))
    data = max((f for f in (tmp_path / "ck" / "2").rglob("*") if f.is_file()), key=lambda f: f.stat().st_size)
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    messages = []
    with Checkpointer(tmp_path / "ck") as ck:
        state, _, step = ck.restore_latest(make_state(0, 0), log=messages.append)
        assert step == 1 and ck.steps() == [1]
    assert_same(state, make_state(1, 1))
    assert len(messages) == 1 and "damaged" in messages[0] and (tmp_path / "ck_corrupt" / "2").is_dir()


def test_overwrite_names_the_checkpoints_it_deletes(run_copy, capsys, cache):
    code, err = train(capsys, *RUN, "--config.num_rounds=1", f"--workdir={run_copy}", "--overwrite")
    assert code == 0, err
    assert f"--overwrite: deleting the run in {run_copy}, with its checkpoints at steps 1, 2." in err
    assert sorted(p.name for p in (run_copy / "checkpoints").iterdir()) == ["1"]


@pytest.mark.parametrize("override,words", [
    ("--config.learning_rate=0.5", "learning_rate: 0.1 -> 0.5"),  # another config
    ("--config.num_rounds=5", "Pass --resume"),  # this run's, with other run-control values
])
def test_no_advice_to_overwrite_good_checkpoints(run_copy, capsys, override, words):
    before = snapshot(run_copy)
    err = one_line_refusal(*train(capsys, *RUN, "--config.num_rounds=2", override, f"--workdir={run_copy}"), words,
                           "another --workdir")
    assert "--overwrite" not in err
    assert snapshot(run_copy) == before


# --- 2. Checked before touched ---------------------------------------------------------------------------------


def test_memory_cap_refusal_leaves_the_workdir_as_it_was(run_copy, tmp_path, capsys, cache):
    # A workdir that did not exist (nor its parent) does not exist after.
    new = tmp_path / "new" / "run"
    one_line_refusal(*train(capsys, *RUN, "--config.num_rounds=1", "--config.runtime.memory_limit=1",
                            f"--workdir={new}"), "runtime.memory_limit=1")
    assert not (tmp_path / "new").exists()
    # A run's workdir, resumed with the cap: byte for byte as it was, its lock file's record included.
    before = snapshot(run_copy)
    one_line_refusal(*train(capsys, f"--workdir={run_copy}", "--resume", "--config.num_rounds=3",
                            "--config.runtime.memory_limit=1"), "runtime.memory_limit=1")
    assert snapshot(run_copy) == before
    # The corrected commands run in the same workdirs.
    assert train(capsys, *RUN, "--config.num_rounds=1", f"--workdir={new}")[0] == 0
    code, err = train(capsys, f"--workdir={run_copy}", "--resume", "--config.num_rounds=3")
    assert code == 0 and "round 2" in err, err


def test_an_existing_folder_gets_no_lock_file_from_a_refused_run(tmp_path, capsys):
    (tmp_path / "mine.txt").write_text("the user's own file")
    before = snapshot(tmp_path)
    one_line_refusal(*train(capsys, *RUN, "--resume", f"--workdir={tmp_path}"), "holds no run")
    one_line_refusal(*train(capsys, *RUN, "--config.runtime.memory_limit=1", f"--workdir={tmp_path}"),
                     "runtime.memory_limit=1")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("args", [["--workdir="], ["--workdir", ""], ["--workdir=", "--resume"]])
def test_an_empty_workdir_is_refused(tmp_path, monkeypatch, capsys, args):
    monkeypatch.chdir(tmp_path)
    one_line_refusal(*train(capsys, *TINY, *args), "workdir='' is empty", "--workdir=DIR",
                     "./runs/<name>-<timestamp>")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(config_lib.ConfigError, match="is empty"):
        driver.train_and_evaluate(config_lib.default_config(), "")
    assert list(tmp_path.iterdir()) == []
