"""Bad input refused as the rest are: before anything compiles, exit 2, one or two lines naming what is wrong and the
fix in the terms of the interface called (issue 23), and one writer per run directory.

Each case of the issue (and each sibling found) is one test that checks the exit code, that no traceback is printed
and the words of the fix. The issue's own cases run the real ``istjax`` command; their siblings run ``cli.main`` in
process (the same code path, without a JAX start-up per case).
"""

import io
import json
import os
import pathlib
import signal
import subprocess
import sys
import tarfile
import time
import wave

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
import istjax.launch.config as config_lib
from istjax.data import keywords, speech
from istjax.launch import cli, lock
from istjax.launch.metrics import read_metrics
from istjax.models import MLP, build_model
from istjax.runtimes import mpi
from conftest import cached_compiles_env
from test_cli import TINY, istjax_command, subprocess_env

DATA = pathlib.Path(os.environ.get("ISTJAX_DATA_DIR", ""))
MPIEXEC = pathlib.Path(sys.executable).with_name("mpiexec")
REPO_CONFIG = str(pathlib.Path(__file__).resolve().parents[1] / "experiments" / "configs" / "digits_ist.py")
LONG_RUN = [*TINY, "--config.num_rounds=100000", "--config.eval_every=1", "--config.checkpoint_every=1"]


def run_istjax(*args, timeout=300, mpi_ranks=0, cwd=None, cache=None):
    """The CLI in a child process (under ``mpiexec -n mpi_ranks`` when given); ``cache``: a folder for JAX's
    compilation cache (one process at a time)."""
    prefix = [str(MPIEXEC), "-n", str(mpi_ranks)] if mpi_ranks else []
    env = cached_compiles_env(subprocess_env(), cache)
    return subprocess.run(prefix + istjax_command() + list(args), capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=cwd)


def refused(code_err, *fix_words, lines=2):
    """Asserts a refusal: exit 2, no traceback, at most ``lines`` lines, every one of ``fix_words`` in it."""
    code, err = code_err
    assert code == 2, err
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) <= lines, err
    for words in fix_words:
        assert words in err, (words, err)
    return err


def main_in_process(capsys, *args):
    capsys.readouterr()
    code = cli.main(["istjax", "train", *args])
    return code, capsys.readouterr().err


# --- Bad values that ended in a traceback --------------------------------------------------------------------


def test_zero_hidden_width_is_refused_before_compiling(tmp_path):
    p = run_istjax("train", "--config.model.hidden=(0,)", f"--workdir={tmp_path / 'run'}")
    refused((p.returncode, p.stderr), "model.hidden=(0,)", "positive ints", "hidden=(512,)")
    assert not (tmp_path / "run").exists()  # refused before the workdir was touched


@pytest.mark.parametrize("hidden", ["(32,0)", "(-4,)", "(2.5,)"])
def test_other_bad_mlp_widths_are_refused(capsys, hidden):
    refused(main_in_process(capsys, f"--config.model.hidden={hidden}"), "model.hidden=", "positive ints")


def test_zero_width_from_python_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"MLP.hidden=\(0,\): must be a sequence of positive ints"):
        MLP(hidden=(0,), num_classes=3)
    assert MLP(hidden=[8, 4]).hidden == (8, 4) and MLP(hidden=()).hidden == ()  # a linear model is fine


@pytest.mark.parametrize("name,fields,words", [
    ("cnn", {"widths": (0, 8)}, "CNN.widths=(0, 8)"),
    ("cnn", {"widths": (8,), "blocks": (1,), "inner": ((0,),)}, "CNN.inner[0]=(0,)"),
    ("resnet", {"widths": (0, 8, 8, 8)}, "ResNet.widths=(0, 8, 8, 8)"),
    ("resnet", {"width_multiplier": 0.0}, "ResNet.width_multiplier=0.0"),
    ("vgg", {"features": ((0,),)}, "VGG.features[0]=(0,)"),
    ("vgg", {"hidden": (0,)}, "VGG.hidden=(0,)"),
    ("depth_resnet", {"widths": (0, 8, 8)}, "DepthResNet.widths=(0, 8, 8)"),
    ("gcn", {"hidden": (0,)}, "GCN.hidden=(0,)"),
    ("graphsage", {"hidden": (0,)}, "GraphSAGE.hidden=(0,)"),
])
def test_every_models_zero_width_is_refused_naming_it(name, fields, words):
    """The siblings: every other model's widths (and a width multiplier of 0) are checked when it is built."""
    with pytest.raises(ValueError, match=r"positive|> 0") as e:
        build_model(name, fields, num_classes=3)
    assert words in str(e.value)


def test_a_tiny_width_multiplier_rounds_widths_up_to_one():
    assert set(build_model("vgg", {"width_multiplier": 1e-9}, num_classes=3).hidden_widths()) == {1}


@pytest.mark.parametrize("kwarg,words", [("num_samples=0", "num_samples=0 must be >= 10"),
                                         ("train_split=1.0", "train_split=1.0: a fraction in (0, 1) that leaves")])
def test_mnist1d_sizes_that_leave_a_split_empty_are_refused(capsys, kwarg, words):
    refused(main_in_process(capsys, "--config.data.name=mnist1d", f"--config.data.kwargs.{kwarg}"), words)


def _fsdd_archive(path: pathlib.Path, clips: int = 20) -> pathlib.Path:
    """A small FSDD-like archive of synthetic recordings."""
    with tarfile.open(path, "w:gz") as tar:
        for i in range(clips):
            buf = io.BytesIO()
            with wave.open(buf, "wb") as w:
                w.setnchannels(1), w.setsampwidth(2), w.setframerate(8000)
                w.writeframes(np.random.default_rng(i).integers(-3000, 3000, 4000).astype("<i2").tobytes())
            info = tarfile.TarInfo(f"recordings/{i % 10}_alice_{i // 10 * 7}.wav")
            info.size = len(buf.getvalue())
            tar.addfile(info, io.BytesIO(buf.getvalue()))
    return path


def _cut_short(source: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    data = source.read_bytes()
    target.write_bytes(data[: len(data) // 2])  # as an interrupted copy leaves it
    return target


def test_fsdd_archive_cut_short_is_refused(tmp_path):
    real = DATA / speech.FSDD_ARCHIVE
    source = real if real.exists() else _fsdd_archive(tmp_path / "whole.tar.gz")
    _cut_short(source, tmp_path / "fsdd" / speech.FSDD_ARCHIVE)
    p = run_istjax("train", "--config.data.name=fsdd", f"--config.data.kwargs.data_dir={tmp_path / 'fsdd'}",
                   f"--workdir={tmp_path / 'run'}")
    err = refused((p.returncode, p.stderr), f"{speech.FSDD_ARCHIVE}: not a complete tar archive (EOFError",
                  "truncated or corrupt", "Copy it again")
    assert "data.kwargs=" in err


def test_fsdd_archive_that_is_not_an_archive_is_refused(tmp_path, capsys):
    (tmp_path / speech.FSDD_ARCHIVE).write_bytes(b"<html>404 Not Found</html>" * 40)
    refused(main_in_process(capsys, "--config.data.name=fsdd", f"--config.data.kwargs.data_dir={tmp_path}"),
            "not a complete tar archive (ReadError", "Copy it again")


def test_fsdd_feature_cache_cut_short_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ISTJAX_CACHE_DIR", str(tmp_path / "cache"))
    _fsdd_archive(tmp_path / speech.FSDD_ARCHIVE)
    speech.load_fsdd(tmp_path)  # writes the cache
    (cached,) = (tmp_path / "cache").glob("fsdd-*.npz")
    _cut_short(cached, cached)
    refused(main_in_process(capsys, "--config.data.name=fsdd", f"--config.data.kwargs.data_dir={tmp_path}"),
            f"{cached}: not a complete istjax cache file", "Delete it; the next load rebuilds it.")


def test_keywords_cache_cut_short_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ISTJAX_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(0)

    def generate(per_word, test_fraction, seed):  # stands in for a minute of speech synthesis
        y = np.repeat(np.arange(len(keywords.WORDS)), per_word).astype(np.int32)
        return rng.normal(size=(len(y), 4096)).astype(np.float32), y, np.tile([True] + [False] * (per_word - 1),
                                                                               len(keywords.WORDS))

    monkeypatch.setattr(keywords, "_generate", generate)
    keywords.load_spoken_keywords(per_word=4, test_fraction=0.25)
    (cached,) = tmp_path.glob("keywords-*.npz")
    _cut_short(cached, cached)
    refused(main_in_process(capsys, "--config.data.name=spoken_keywords", "--config.data.kwargs.per_word=4",
                            "--config.data.kwargs.test_fraction=0.25"),
            "not a complete istjax cache file", "Delete it; the next load rebuilds it.")


def test_tfds_shard_cut_short_is_refused(tmp_path, capsys):
    pytest.importorskip("tensorflow_datasets")
    pytest.importorskip("array_record")
    from istjax.data import tfds as tfds_data
    from test_tfds_data import _clip, _write_shard

    version = tmp_path / "speech_commands" / "0.0.3"
    version.mkdir(parents=True)
    (version / "dataset_info.json").write_text(json.dumps({"name": "speech_commands", "fileFormat": "array_record"}))
    clips = [_clip(300 + 100 * i, 16000) for i in range(4)]
    _write_shard(version / "speech_commands-train.array_record-00000-of-00001", clips, [0, 1, 2, 3])
    _write_shard(version / "speech_commands-test.array_record-00000-of-00001", clips[:2], [0, 1])
    shard = version / "speech_commands-train.array_record-00000-of-00001"
    _cut_short(shard, shard)
    tfds_data.load_tfds.cache_clear()
    refused(main_in_process(capsys, "--config.data.name=tfds:speech_commands",
                            f"--config.data.kwargs.data_dir={tmp_path}"),
            "not a set of complete array_record shards (RuntimeError", "re-prepare it:", "download_and_prepare",
            lines=3)  # the preparation command is on a line of its own, to copy


def test_run_config_cut_short_is_refused(tmp_path, capsys):
    (tmp_path / "config.json").write_text('{"name": "digits_ist", "algorithm": "i')
    refused(main_in_process(capsys, f"--workdir={tmp_path}", *TINY), "config.json: not a readable run config",
            "cut short", "--overwrite")
    capsys.readouterr()
    assert cli.main(["istjax", "eval", f"--workdir={tmp_path}"]) == 2
    assert "not a readable run config" in capsys.readouterr().err


# --- Refusals in the wrong language --------------------------------------------------------------------------


class _World:
    """Rank 0 of a ``ranks``-process MPI world, as far as building a run asks (its size and rank): the MPI runtime
    makes its refusals while it is built, before any message is sent."""

    def __init__(self, ranks: int):
        self.ranks = ranks

    def Get_size(self):
        return self.ranks

    def Get_rank(self):
        return 0

    def allgather(self, value):
        return [value] * self.ranks

    def allreduce(self, value, op=None):
        return value * self.ranks


def _as_if_launched_by_mpiexec(monkeypatch, ranks: int):
    monkeypatch.setattr("istjax.launch.metrics.process_count", lambda: ranks)
    monkeypatch.setattr("istjax.runtimes.mpi._world", lambda: _World(ranks))
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # the runtime installs its abort hook


@pytest.mark.mpi
@pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not installed")
@pytest.mark.slow
def test_sharded_mpi_with_the_default_sampler_says_the_command_line_fix(tmp_path):
    args = ["train", "--config.runtime.name=mpi", "--config.runtime.mode=sharded", "--config.progress=False"]
    p = run_istjax(*args, f"--workdir={tmp_path / 'a'}", mpi_ranks=2)
    err = refused((p.returncode, p.stdout + p.stderr), "--config.sampler.name=stratified --config.sampler.num_owners=2",
                  "--config.runtime.mode=parameter_server", "every one of the 2 ranks stopped")
    assert "istjax.ist(" not in err
    # The fix it names runs (and the two ranks of one job are one writer of the workdir).
    p = run_istjax(*args, "--config.sampler.name=stratified", "--config.sampler.num_owners=2", *TINY,
                   "--config.num_rounds=2", f"--workdir={tmp_path / 'b'}", mpi_ranks=2)
    assert p.returncode == 0, p.stderr[-3000:]
    assert [r["round"] for r in read_metrics(tmp_path / "b")] == [2]


def test_sharded_mpi_fix_speaks_python_from_python_and_flags_from_the_cli(monkeypatch):
    task = istjax.classifier(MLP(hidden=(8,), num_classes=3), jnp.zeros((4, 5)), num_classes=3)
    with pytest.raises(ValueError, match=r"istjax.ist\(\.\.\., sampler=istjax.stratified\(num_owners=2\)\)"):
        mpi.sharded_layout(istjax.ist(task, optax.sgd(0.1), num_workers=2, local_steps=1), 2, 0)
    _as_if_launched_by_mpiexec(monkeypatch, 2)
    config = config_lib.default_config()
    config.runtime.name, config.runtime.mode = "mpi", "sharded"
    with pytest.raises(config_lib.ConfigError, match="--config.sampler.name=stratified --config.sampler.num_owners=2"):
        config_lib.build(config)
    config.sampler.name, config.sampler.num_owners = "stratified", 2
    config_lib.build(config)  # the fix it names passes


def test_sharded_recompute_runs_from_owner_statistics_and_is_refused_without_them():
    """Channel IST on a ResNet recomputes its statistics from each rank's channels (`owner_statistics`); ResIST's
    depth-split ResNet gives no such method and is refused with the fix."""
    from istjax.models import DepthResNet, ResNet

    x = jnp.zeros((2, 8, 8, 1))
    resnet = istjax.classifier(ResNet(stage_sizes=(1,), widths=(4,), num_classes=3), x, num_classes=3)
    alg = istjax.ist(resnet, optax.sgd(0.1), num_workers=2, local_steps=1, model_state="recompute",
                     sampler=istjax.stratified(num_owners=2))
    assert mpi.sharded_layout(alg, 2, 0).owned == frozenset(resnet.spec.group_sizes)
    depth = istjax.classifier(DepthResNet(stage_sizes=(5,), widths=(4,), num_classes=3), x, num_classes=3)
    resist = istjax.resist(depth, optax.sgd(0.1), num_workers=2, local_steps=1, model_state="recompute",
                           test_scale=False, num_owners=2)
    with pytest.raises(ValueError, match=r"DepthResNet gives no owner_statistics .* Use model_state='carry'"):
        mpi.sharded_layout(resist, 2, 0)


# ResIST's depth-split ResNet on digits' 8x8 images.
DEPTH_RESNET = {"algorithm.name": "resist", "model.name": "depth_resnet", "model.stage_sizes": "(3,)",
                "model.widths": "(4,)", "model.image_shape": "(8,8,1)"}


@pytest.mark.parametrize("fields,words", [
    ({"sampler.name": "stratified", "sampler.num_owners": 3, "model.hidden": "(24,)"}, "with num_owners=3, which deals none that way. Add --config.sampler.name=stratified"),
    ({**DEPTH_RESNET, "sampler.num_owners": 2, "algorithm.model_state": "recompute", "algorithm.test_scale": False,
      "num_workers": 2, "model.stage_sizes": "(5,)"},
     "Use --config.algorithm.model_state=carry or --config.runtime.mode=parameter_server"),
    ({**DEPTH_RESNET, "num_workers": 2, "model.stage_sizes": "(5,)"},
     "Add --config.sampler.num_owners=2, or --config.runtime.mode=parameter_server"),
    ({"sampler.groups.hidden_0": "uniform"}, "deals none that way. Add --config.sampler.name=stratified"),
])
def test_other_sharded_mpi_misfits_speak_the_command_line(monkeypatch, capsys, fields, words):
    _as_if_launched_by_mpiexec(monkeypatch, 2)
    flags = [f"--config.{k}={v}" for k, v in fields.items()]
    refused(main_in_process(capsys, "--config.runtime.name=mpi", "--config.runtime.mode=sharded", *flags), words, lines=4)


def test_worker_count_misfit_speaks_each_interfaces_terms(monkeypatch, capsys):
    with pytest.raises(ValueError, match=r"Use num_workers=2 or 4, or launch"):
        mpi.check_fit(3, 2)
    _as_if_launched_by_mpiexec(monkeypatch, 2)
    refused(main_in_process(capsys, "--config.runtime.name=mpi", "--config.num_workers=3", "--config.model.hidden=(6,)"),
            "does not fit 2 MPI processes", "Use --config.num_workers=2 or 4")


def test_override_before_the_config_file_says_to_move_it(tmp_path):
    config = REPO_CONFIG
    p = run_istjax("train", "--config.progress=False", f"--config={config}", f"--workdir={tmp_path / 'run'}")
    refused((p.returncode, p.stderr), "--config.progress=False comes before --config=", "put --config=FILE first",
            f"istjax train --config={config} --config.progress=False")
    assert "Found --config.progress=False in argv" not in p.stderr


def test_missing_config_file_says_no_such_file(tmp_path):
    p = run_istjax("train", "--config=experiments/configs/no_such.py", cwd=tmp_path)
    refused((p.returncode, p.stderr), "--config=experiments/configs/no_such.py: no such file",
            str(tmp_path / "experiments/configs/no_such.py"), "get_config()", "istjax configs")
    assert "earlier failure" not in p.stderr and "Attempted" not in p.stderr


def test_config_that_is_a_directory_is_named_so(tmp_path, capsys):
    refused(main_in_process(capsys, f"--config={tmp_path}"), "is a directory, not a file")


# --- The documented override that did not work ---------------------------------------------------------------


def test_group_samplers_from_the_command_line_as_the_help_shows(capsys):
    assert cli.main(["istjax", "--help"]) == 0
    assert "--config.sampler.groups.block_0_0=overlapping" in capsys.readouterr().out
    config, *_ = cli.parse_train_args(["istjax", "--config.sampler.groups.hidden_0=overlapping",
                                       "--config.sampler.min_units=200"])
    assert dict(config.sampler.groups) == {"hidden_0": "overlapping"}
    config_lib.validate(config)
    assert config_lib.make_sampler(config).name == "per_group(hidden_0=overlapping,*=uniform)"


def test_group_sampler_for_a_group_the_model_lacks_names_its_groups(tmp_path):
    p = run_istjax("train", "--config.sampler.groups.block_0_0=overlapping", f"--workdir={tmp_path / 'run'}")
    err = refused((p.returncode, p.stderr), "sampler.groups.block_0_0='overlapping'",
                  "has no neuron group 'block_0_0'; its groups are ['hidden_0']")
    assert "unknown config field" not in err


def test_unknown_sampler_for_a_group_lists_the_samplers(capsys):
    refused(main_in_process(capsys, "--config.sampler.groups.hidden_0=overlaping"),
            "sampler.groups.hidden_0='overlaping'", "did you mean 'overlapping'", "choose one of")


@pytest.mark.slow
def test_resume_takes_a_tuple_override_like_a_new_run(tmp_path, capsys):
    """A resumed config comes from JSON (lists); a tuple override of it was refused in ml_collections' words."""
    assert cli.main(["istjax", "train", f"--workdir={tmp_path}", "--config.num_rounds=1", *TINY]) == 0
    code, err = main_in_process(capsys, f"--workdir={tmp_path}", "--resume", "--config.model.hidden=(32,)",
                                "--config.num_rounds=2")
    assert code == 0 and "not supported for overriding" not in err, err
    refused(main_in_process(capsys, f"--workdir={tmp_path}", "--resume", "--config.model.hidden=(64,)"),
            "model.hidden: [32] -> [64]")


# --- One writer per run directory ----------------------------------------------------------------------------


def _start(workdir: pathlib.Path, cache=None) -> subprocess.Popen:
    """A long run in ``workdir``, returned once its first round is recorded and checkpointed. Its output goes to
    files beside the workdir, never to a pipe nobody reads (a full pipe would stall the run)."""
    log = workdir.parent / "first.log"
    env = cached_compiles_env(subprocess_env(), cache)
    with log.open("w") as err:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(istjax_command() + ["train", *LONG_RUN, f"--workdir={workdir}"],
                                stdout=subprocess.DEVNULL, stderr=err, text=True, env=env)
    proc.log = log
    deadline = time.monotonic() + 600  # a first round (compilation included) on a loaded 2-core CI machine
    try:
        # Any committed checkpoint: with checkpoint_every=1 the first one is deleted again once newer ones are kept
        # (max_to_keep), so a poll on a loaded machine may never see checkpoints/1 itself.
        while not _committed_checkpoints(workdir):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no round finished in time: " + log.read_text()[-3000:]
            time.sleep(0.2)
    except BaseException:
        proc.kill()  # never leave a 100,000-round run behind
        raise
    return proc


def _committed_checkpoints(workdir: pathlib.Path) -> list[int]:
    folder = workdir / "checkpoints"
    return sorted(int(d.name) for d in folder.iterdir() if d.name.isdigit()) if folder.is_dir() else []


@pytest.mark.slow
def test_a_second_train_on_a_running_workdir_is_refused(tmp_path):
    workdir = tmp_path / "run"
    first = _start(workdir)
    try:
        t0 = time.monotonic()
        second = run_istjax("train", *LONG_RUN, f"--workdir={workdir}")
        refused((second.returncode, second.stderr), f"process {first.pid} on ", "running since ",
                "holds its lock run.lock", f"kill {first.pid}", "choose another --workdir")
        assert time.monotonic() - t0 < 120  # refused at once, not after training
        overwrite = run_istjax("train", *TINY, "--overwrite", f"--workdir={workdir}")
        refused((overwrite.returncode, overwrite.stderr), f"process {first.pid} on ")
        assert read_metrics(workdir)[0]["round"] == 1 and (workdir / "checkpoints").is_dir()  # nothing deleted
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=120)
        err = first.log.read_text()
    finally:
        first.kill()
    assert first.returncode == 143, err
    rounds = [r["round"] for r in read_metrics(workdir)]
    assert rounds == list(range(1, len(rounds) + 1)), rounds  # each round once, in order: one writer


@pytest.mark.slow
def test_a_lock_left_by_a_killed_run_does_not_block_resume(tmp_path):
    workdir, cache = tmp_path / "run", tmp_path / "jax_cache"  # the resume loads the killed run's compiles
    first = _start(workdir, cache)
    first.kill()  # kill -9: no handler runs, the lock file stays behind
    first.wait(timeout=60)
    stale = json.loads((workdir / lock.LOCK_FILE).read_text())
    assert stale["pid"] == first.pid
    last = max(int(d.name) for d in (workdir / "checkpoints").iterdir() if d.name.isdigit())
    p = run_istjax("train", *TINY, f"--config.num_rounds={last + 2}", "--resume", f"--workdir={workdir}",
                   cache=cache)
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"Resuming from {workdir / 'checkpoints' / str(last)}" in p.stderr and "in use" not in p.stderr
    assert [r["round"] for r in read_metrics(workdir)][-1] == last + 2


@pytest.mark.slow
def test_eval_reads_a_workdir_a_run_holds_and_train_waits_its_turn(tmp_path, capsys):
    assert cli.main(["istjax", "train", f"--workdir={tmp_path}", "--config.num_rounds=1", *TINY]) == 0
    held = lock.lock_workdir(tmp_path)
    try:
        capsys.readouterr()
        assert cli.main(["istjax", "eval", f"--workdir={tmp_path}"]) == 0  # reading is fine
        refused(main_in_process(capsys, f"--workdir={tmp_path}", "--resume", "--config.num_rounds=2"),
                f"process {os.getpid()} on ", "holds its lock run.lock")
    finally:
        held.release()
    code, err = main_in_process(capsys, f"--workdir={tmp_path}", "--resume", "--config.num_rounds=2")
    assert code == 0, err  # released: the next run goes in, and releases it in turn
    lock.lock_workdir(tmp_path).release()
