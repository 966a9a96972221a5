"""The training driver end to end on tiny digits runs: metrics schema, bitwise resume, failures, workdir rules."""

import json

import jax
import numpy as np
import pytest
from conftest import persistent_compilation_cache

from istjax.launch import config as config_lib
from istjax.launch import driver as train
from istjax.launch.checkpoint import Checkpointer
from istjax.launch.metrics import RECORD_FIELDS, read_metrics


@pytest.fixture(scope="module", autouse=True)
def compilation_cache(tmp_path_factory):
    """Runs that differ only in their workdir compile identical programs: share them through JAX's persistent
    cache to keep these end-to-end tests fast."""
    with persistent_compilation_cache(tmp_path_factory.mktemp("jax_cache")):
        yield


def tiny_config(**overrides):
    c = config_lib.default_config()
    c.model.hidden = (32,)
    c.num_workers, c.local_steps, c.batch_size = 2, 2, 16
    c.num_rounds, c.eval_every, c.checkpoint_every = 4, 2, 2
    c.eval_train_examples = 256  # the smallest evaluation batch of a batch-statistics model
    c.progress = False
    for k, v in overrides.items():
        node = c
        *parents, leaf = k.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = v
    return c


def final_state(config, workdir):
    """The newest checkpoint of a run (restored with a fresh init as the abstract target)."""
    algorithm = train.build(config).algorithm
    like = jax.jit(algorithm.init)(jax.random.key(0))
    with Checkpointer(workdir / "checkpoints", enabled=False) as ckpt:
        state, _, step = ckpt.restore_latest(like)
    return state, step


def assert_states_equal(a, b):
    la, lb = jax.tree.leaves(a.params) + jax.tree.leaves(a.opt_state), jax.tree.leaves(b.params) + \
        jax.tree.leaves(b.opt_state)
    assert len(la) == len(lb) > 0
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))  # bitwise: exact equality, no tolerance
    np.testing.assert_array_equal(jax.random.key_data(a.key), jax.random.key_data(b.key))
    assert int(a.round) == int(b.round)


def test_end_to_end_metrics_schema(tmp_path):
    config = tiny_config(target_accuracy=0.01)
    summary = train.train_and_evaluate(config, tmp_path)
    algorithm = train.build(config).algorithm
    W, K, B = 2, 2, 16
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["round"] for r in records] == [2, 4]
    for r in records:
        assert set(RECORD_FIELDS) <= set(r), set(RECORD_FIELDS) - set(r)
        assert r["step"] == r["round"] * K
        assert r["samples_seen"] == r["round"] * W * K * B
        assert r["bytes_sent_per_worker"] == algorithm.comm.sent
        assert r["bytes_received_per_worker"] == algorithm.comm.received
        assert r["bytes_total"] == r["round"] * W * (algorithm.comm.sent + algorithm.comm.received)
        assert r["algorithm"] == "ist" and r["num_workers"] == W
        assert 0.0 <= r["test_accuracy"] <= 1.0 and np.isfinite(r["test_loss"]) and np.isfinite(r["train_loss"])
    assert records[1]["wall_time_s"] >= records[0]["wall_time_s"] > 0
    # IST moves a sub-network: hidden width 32 split in 2 -> each worker gets 64*16 + 16 + 16 + 16*10 floats.
    assert algorithm.comm.sent == 4 * (64 * 16 + 16 + 16 + 16 * 10)
    assert json.loads((tmp_path / "config.json").read_text()) == config_lib.to_dict(config)
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert summary["test_accuracy"] == records[-1]["test_accuracy"]
    assert summary["samples_seen"] == 4 * W * K * B
    (peak,) = summary["peak_rss_mib_per_process"]  # one process; its peak resident memory, measured
    assert 50 < peak < 24 * 1024
    assert summary["round_to_target"] == 2  # the first evaluation beats a 1% target
    assert json.loads((tmp_path / "summary.json").read_text())["rounds"] == 4
    assert [s for s in sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir())] == [2, 4]


@pytest.mark.parametrize("algorithm,extra", [
    ("ist", {"optimizer": "momentum", "algorithm.optimizer_state": "carry"}),
    ("data_parallel", {"optimizer": "momentum"}),
    ("diloco", {}),  # the outer optimizer's momentum is the checkpointed optimizer state
])
def test_interrupt_and_resume_is_bitwise(tmp_path, algorithm, extra):
    full = tiny_config(**{"algorithm.name": algorithm}, **extra)
    train.train_and_evaluate(full, tmp_path / "full")
    # "Interrupted" after 2 rounds, then resumed to 4 (a new num_rounds needs --resume).
    train.train_and_evaluate(tiny_config(**{"algorithm.name": algorithm}, num_rounds=2, **extra), tmp_path / "split")
    with pytest.raises(config_lib.ConfigError, match="--resume"):
        train.train_and_evaluate(full, tmp_path / "split")
    train.train_and_evaluate(full, tmp_path / "split", resume=True)
    a, step_a = final_state(full, tmp_path / "full")
    b, step_b = final_state(full, tmp_path / "split")
    assert step_a == step_b == 4
    assert_states_equal(a, b)
    ra, rb = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "split")
    assert [r["round"] for r in rb] == [2, 4]
    for x, y in zip(ra, rb):
        assert x["test_loss"] == y["test_loss"] and x["bytes_total"] == y["bytes_total"]


def test_truncated_latest_checkpoint_falls_back_and_resumes_exactly(tmp_path, capsys):
    config = tiny_config(num_rounds=3, checkpoint_every=1, eval_every=3)
    train.train_and_evaluate(config, tmp_path / "ref")
    train.train_and_evaluate(config, tmp_path / "run")
    # Damage the newest checkpoint (round 3): truncate every data file of its state item.
    for f in (tmp_path / "run" / "checkpoints" / "3" / "state").rglob("*"):
        if f.is_file():
            f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 3])
    train.train_and_evaluate(config, tmp_path / "run")  # same config: resumes from round 2, reruns round 3
    err = capsys.readouterr().err
    assert "damaged" in err and "Resuming from" in err and "(round 2)" in err
    assert (tmp_path / "run" / "checkpoints_corrupt" / "3").is_dir()
    a, _ = final_state(config, tmp_path / "ref")
    b, step = final_state(config, tmp_path / "run")
    assert step == 3
    assert_states_equal(a, b)
    assert [r["round"] for r in read_metrics(tmp_path / "run")] == [3]


def test_non_finite_loss_stops_with_round_and_worker(tmp_path):
    # Without BatchNorm nothing bounds the activations: lr=1e6 overflows within a few rounds.
    config = tiny_config(learning_rate=1e6, num_rounds=20, checkpoint_every=1, eval_every=1, **{
        "model.batch_norm": False, "model.output_batch_norm": False})
    with pytest.raises(train.TrainingError, match=r"non-finite loss in round (\d+) of 20 at worker\(s\) \[") as e:
        train.train_and_evaluate(config, tmp_path)
    bad_round = int(e.value.args[0].split("round ")[1].split(" ")[0])
    steps = sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir())
    assert steps[-1] == bad_round - 1  # the last good state is kept, the bad one never saved
    assert all(r["round"] < bad_round for r in read_metrics(tmp_path))


@pytest.mark.slow
def test_workdir_with_different_config_is_refused(tmp_path):
    train.train_and_evaluate(tiny_config(num_rounds=2), tmp_path)
    other = tiny_config(num_rounds=2, learning_rate=0.05)
    for resume in (False, True):
        with pytest.raises(config_lib.ConfigError, match=r"different config.*learning_rate: 0\.1 -> 0\.05"):
            train.train_and_evaluate(other, tmp_path, resume=resume)
    train.train_and_evaluate(other, tmp_path, overwrite=True)
    assert json.loads((tmp_path / "config.json").read_text())["learning_rate"] == 0.05
    assert [r["round"] for r in read_metrics(tmp_path)] == [2]  # the old run's records are gone


def test_resume_without_a_run_is_a_config_error(tmp_path):
    with pytest.raises(config_lib.ConfigError, match="nothing|no run to resume"):
        train.train_and_evaluate(tiny_config(), tmp_path, resume=True)


def test_validate_reports_every_problem_at_once():
    c = tiny_config(**{"algorithm.name": "isst", "runtime.name": "gpu", "sampler.name": "unifrom"}, num_rounds=0,
                    learning_rate=-1.0, batch_size=1000)
    c.num_workers = 3  # 32 hidden units do not split in 3 (reported only when the algorithm/sampler are known)
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.validate(c)
    msg = str(e.value)
    for field in ("algorithm.name='isst'", "num_rounds=0", "learning_rate=-1.0", "runtime.name='gpu'",
                  "batch_size=1000", "sampler.name='unifrom'"):
        assert field in msg, (field, msg)
    assert "did you mean 'ist'" in msg and "did you mean 'uniform'" in msg
    assert len(e.value.problems) == 6

    c = tiny_config()
    c.num_workers = 3
    with pytest.raises(config_lib.ConfigError, match=r"model.hidden=\(32,\) with num_workers=3.*not divisible"):
        config_lib.validate(c)
    c.sampler.name = "uniform_pad"
    config_lib.validate(c)  # padding accepts it
    c = tiny_config(num_workers=64)  # wider than the 32-unit group
    with pytest.raises(config_lib.ConfigError, match="larger than neuron group"):
        config_lib.validate(c)
    c = tiny_config(batch_size=800)  # 1437 examples / 2 workers = 718 per shard
    with pytest.raises(config_lib.ConfigError, match=r"batch_size=800: .* shards of 718, fewer than batch_size=800"):
        config_lib.validate(c)
    c = tiny_config()
    c.data.kwargs.test_sise = 100
    with pytest.raises(config_lib.ConfigError, match="test_sise"):
        config_lib.validate(c)
    c = tiny_config()
    c.unlock()
    c.learnig_rate = 0.1  # a typo in a config file is an error, not silently ignored
    with pytest.raises(config_lib.ConfigError, match="learnig_rate: unknown config field.*'learning_rate'"):
        config_lib.validate(c)


def test_stop_at_target_ends_the_run_at_the_first_evaluation_that_reaches_it(tmp_path):
    """stop_at_target: training stops after the first evaluation at or above the target, with a checkpoint there
    and a summary whose rounds and time-to-target are that evaluation's; without a target it is a config error."""
    c = tiny_config(num_rounds=40, eval_every=1, checkpoint_every=100, target_accuracy=0.5, stop_at_target=True)
    summary = train.train_and_evaluate(c, tmp_path / "run")
    assert summary["round_to_target"] == summary["rounds"] < 40
    assert summary["test_accuracy"] >= 0.5
    _, step = final_state(c, tmp_path / "run")
    assert step == summary["rounds"]
    bad = tiny_config(stop_at_target=True, target_accuracy=None)
    with pytest.raises(config_lib.ConfigError, match="stop_at_target=True: needs a target"):
        config_lib.validate(bad)
