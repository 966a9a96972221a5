"""Federated runs from the command line (issue 58): the ``clients`` section and the server's fields of
``algorithm``, ``istjax train`` of FedAvg and FedSGD on digits' clients, the split recorded, every refusal in
``--config.`` words, and a resumed run equal bit for bit to one never stopped."""

import json
import math

import jax
import numpy as np
import pytest
from conftest import persistent_compilation_cache

import istjax
from istjax.data import clients as clients_lib
from istjax.launch import cli
from istjax.launch import config as config_lib
from istjax.launch.args import parse_train_args
from istjax.launch.checkpoint import Checkpointer
from istjax.launch.metrics import read_metrics


@pytest.fixture(scope="module", autouse=True)
def compilation_cache(tmp_path_factory):
    """A run and its resume compile the same programs: share them through JAX's persistent cache."""
    with persistent_compilation_cache(tmp_path_factory.mktemp("jax_cache")):
        yield


TINY = ["--config.model.hidden=(16,)", "--config.progress=False", "--config.eval_train_examples=256"]
# The command: FedAvg over 20 Dirichlet(0.1) clients of digits, 4 (a fifth) a round, 10 examples a step.
FEDAVG = ["--config.algorithm.name=fedavg", "--config.clients.split=dirichlet", "--config.clients.alpha=0.1",
          "--config.clients.num_clients=20", "--config.clients.fraction=0.2", "--config.num_workers=4",
          "--config.clients.batch_size=10"]


def _train(tmp_path, *flags) -> int:
    return cli.main(["istjax", "train", *TINY, *flags, f"--workdir={tmp_path}"])


def _digits_labels():
    return np.asarray(istjax.data.load_dataset("digits").train_y)


def test_batch_size_from_the_command_line_is_a_number_or_all():
    base = ["istjax", "--config.algorithm.name=fedavg"]
    assert parse_train_args([*base, "--config.clients.batch_size=all"])[0].clients.batch_size == "all"
    b = parse_train_args([*base, "--config.clients.batch_size=10"])[0].clients.batch_size
    assert b == 10 and isinstance(b, int)
    assert parse_train_args(base)[0].clients.batch_size == 0  # the run's batch_size


def test_fedavg_on_dirichlet_clients_trains_and_records_the_split(tmp_path, capsys):
    assert _train(tmp_path, *FEDAVG, "--config.num_rounds=3", "--config.eval_every=3") == 0
    err = capsys.readouterr().err
    summary = json.loads((tmp_path / "summary.json").read_text())
    record = summary["clients"]
    # The split the run drew is the library's split of the training labels with the config's settings and seed.
    labels = _digits_labels()
    split = clients_lib.dirichlet(labels, 20, alpha=0.1, seed=0, min_size=10)
    assert record["split"] == split.to_record()
    assert record["split"]["kind"] == "dirichlet" and sum(record["split"]["sizes"]) == len(labels)
    assert record["sampler"] == {"clients_per_round": 4, "num_clients": 20, "fraction": 0.2, "seed": 0, "slots": 4}
    # K is the clients' (E * ceil(largest client / B)), not the config's local_steps (10).
    k = math.ceil(int(split.sizes.max()) / 10)
    assert record["local_steps"] == summary["local_steps"] == k != 10
    assert summary["batch_size"] == record["batch_size"] == 10 and summary["num_workers"] == 4
    assert summary["algorithm"] == "fedavg" and summary["rounds"] == 3
    assert summary["samples_seen"] == 3 * 4 * k * 10
    assert np.isfinite(summary["test_loss"]) and 0 <= summary["test_accuracy"] <= 1
    # The run says which clients it trains, at its start and in its summary.
    assert err.count("clients: dirichlet(alpha=0.1, min_size=10), seed 0: 20 clients") == 1
    assert "4 of 20 a round (fraction 0.2)" in err and f"K={k} local steps" in err
    assert json.loads((tmp_path / "config.json").read_text())["clients"]["batch_size"] == 10


def test_fedsgd_takes_one_full_batch_step_per_client(tmp_path):
    assert _train(tmp_path, "--config.algorithm.name=fedsgd", "--config.clients.num_clients=10",
                  "--config.num_workers=3", "--config.clients.batch_size=all", "--config.num_rounds=2",
                  "--config.eval_every=2") == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    record = summary["clients"]
    largest = max(record["split"]["sizes"])
    assert record["split"]["kind"] == "iid" and record["sampler"]["clients_per_round"] == 3
    assert record["sampler"]["fraction"] is None  # num_workers clients a round
    assert summary["local_steps"] == record["local_steps"] == 1 and record["batch_size"] == largest
    assert summary["algorithm"] == "fedsgd" and np.isfinite(summary["train_loss"])


@pytest.mark.parametrize("flags,named,fix", [
    # num_workers must be the clients drawn a round (0.2 of 20 is 4).
    (["--config.num_workers=3"], "num_workers=3, but the sampler draws 4 clients a round",
     "--config.num_workers=4 or --config.clients.fraction=0.15"),
    (["--config.clients.alpha=0.0"], "clients.alpha=0.0", "--config.clients.alpha=0.1"),
    (["--config.clients.alpha=-1.0"], "clients.alpha=-1.0", "--config.clients.alpha=0.1"),
    (["--config.algorithm.name=fedsgd", "--config.clients.batch_size=all", "--config.clients.epochs=2"],
     "fedsgd takes one full-batch step per client", "--config.clients.batch_size=all --config.clients.epochs=1"),
    (["--config.clients.batch_size=ten"], "clients.batch_size='ten'", "--config.clients.batch_size=all or 10"),
    (["--config.clients.batch_size=-2"], "clients.batch_size=-2", "--config.clients.batch_size=10"),
    (["--config.clients.batch_size=5000"], "clients.batch_size=5000 is more than the largest client's",
     "--config.clients.batch_size=all or"),
    (["--config.clients.fraction=1.5"], "clients.fraction=1.5", "--config.clients.fraction=0.1"),
    (["--config.clients.split=dirichlett"], "clients.split='dirichlett'", "did you mean 'dirichlet'"),
    (["--config.clients.fraction=0.0", "--config.clients.num_clients=3", "--config.clients.min_size=1"],
     "num_workers=4 is more than the split's 3 clients", "--config.num_workers=3"),
    (["--config.clients.min_size=100"], "min_size=100 x num_clients=20 is more than the",
     "--config.clients.min_size=71 or --config.clients.num_clients=14"),
    (["--config.clients.split=shards", "--config.clients.alpha=0.5", "--config.clients.shards_per_client=3",
      "--config.clients.num_clients=7"], "num_clients=7 x shards_per_client=3 = 21 shards do not divide the 1437",
     "--config.clients.num_clients=1 or 479"),
    (["--config.clients.split=iid", "--config.clients.alpha=0.3"], "clients.alpha=0.3: clients.split='iid' does not "
     "read it", "--config.clients.split=dirichlet"),
    (["--config.algorithm.name=ist"], "clients.split='dirichlet': algorithm.name='ist' does not read the clients "
     "section", "--config.algorithm.name=fedavg"),
    (["--config.data.sharding=shared"], "data.sharding='shared'", "--config.data.sharding=disjoint"),
])
def test_every_refusal_names_the_field_and_the_fix(tmp_path, capsys, flags, named, fix):
    base = [f for f in FEDAVG if not any(f.split("=")[0] == g.split("=")[0] for g in flags)]
    assert _train(tmp_path / "run", *base, *flags) == 2
    err = capsys.readouterr().err
    assert named in err and fix in err, err
    assert not (tmp_path / "run" / "config.json").exists()  # refused before anything was written


def test_the_fix_a_refusal_names_passes():
    """The num_workers refusal's two fixes each build."""
    for fix in (["--config.num_workers=4"], ["--config.num_workers=3", "--config.clients.fraction=0.15"]):
        config = parse_train_args(["istjax", *FEDAVG, *TINY, *fix])[0]
        experiment = config_lib.build(config)
        assert experiment.algorithm.num_workers == experiment.clients.sampler.clients_per_round


def test_a_process_of_several_draws_only_its_own_client_slots():
    """What an MPI rank gets (`own_rows`): the client batch function rebuilt for its slots, equal to those rows of
    every slot's batches."""
    from istjax.launch.config.collect import Collector
    from istjax.launch.config.federated import client_batches

    config = parse_train_args(["istjax", *FEDAVG, *TINY])[0]
    experiment = config_lib.build(config)
    full = experiment.batch_fn
    assert full.rows is None and full.local_steps == experiment.algorithm.local_steps
    collector = Collector(config)
    mine = client_batches(config, experiment.dataset, experiment.clients, experiment.task, (2, 4), collector)
    assert collector.problems == [] and mine.rows == (2, 4)
    for key, value in mine(3).items():
        np.testing.assert_array_equal(np.asarray(value), np.asarray(full(3)[key][2:4]))


def _final_state(workdir):
    config = config_lib.load_run_config(workdir)
    algorithm = config_lib.build(config).algorithm
    like = jax.jit(algorithm.init)(jax.random.key(0))
    with Checkpointer(workdir / "checkpoints", enabled=False) as ckpt:
        state, _, step = ckpt.restore_latest(like)
    return state, step


def test_a_resumed_run_ends_bit_identical_to_one_never_stopped(tmp_path):
    """The sampler is a pure function of (seed, round): a run stopped after round 2 and resumed draws the same
    clients and examples as one never stopped, and its server momentum (the checkpointed optimizer state) carries
    on; so the two end bit for bit equal."""
    flags = [*FEDAVG, "--config.algorithm.server_momentum=0.9", "--config.eval_every=2", "--config.checkpoint_every=2"]
    assert _train(tmp_path / "full", *flags, "--config.num_rounds=4") == 0
    assert _train(tmp_path / "split", *flags, "--config.num_rounds=2") == 0
    assert _train(tmp_path / "split", *flags, "--config.num_rounds=4", "--resume") == 0
    (a, step_a), (b, step_b) = _final_state(tmp_path / "full"), _final_state(tmp_path / "split")
    assert step_a == step_b == 4
    la = jax.tree.leaves(a.params) + jax.tree.leaves(a.opt_state) + jax.tree.leaves(a.model_state)
    lb = jax.tree.leaves(b.params) + jax.tree.leaves(b.opt_state) + jax.tree.leaves(b.model_state)
    assert len(la) == len(lb) > 0
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert any(np.any(np.asarray(m) != 0) for m in jax.tree.leaves(a.opt_state))  # the momentum is there
    ra, rb = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "split")
    assert [r["round"] for r in ra] == [r["round"] for r in rb] == [2, 4]
    assert [r["test_loss"] for r in ra] == [r["test_loss"] for r in rb]
    summaries = [json.loads((tmp_path / d / "summary.json").read_text()) for d in ("full", "split")]
    assert summaries[0]["clients"] == summaries[1]["clients"]


def test_train_help_lists_the_clients_and_the_server_fields(capsys):
    assert cli.main(["istjax", "train", "--help"]) == 0
    out = capsys.readouterr().out
    for field in ("clients.split = \"iid\"", "clients.num_clients = 100", "clients.alpha = 0.5",
                  "clients.min_size = 10", "clients.shards_per_client = 2", "clients.fraction = 0.0",
                  "clients.epochs = 1", "clients.batch_size", "algorithm.server_optimizer = \"sgd\"",
                  "algorithm.server_learning_rate = 1.0", "algorithm.server_momentum = 0.0", "algorithm.prox_mu = 0.0"):
        assert field in out, field
    assert "local_steps is not used" in out


def test_a_sigterm_between_rounds_checkpoints_and_the_resumed_run_ends_bit_identical(tmp_path, monkeypatch):
    """A real SIGTERM to this process after round 1 (of 4): the run checkpoints round 1 and stops; resumed, it ends
    bit for bit equal to a run never stopped (clients sampled, examples drawn and server momentum alike)."""
    import os
    import signal

    from istjax.launch import run as run_lib

    flags = [*FEDAVG, "--config.algorithm.server_momentum=0.9", "--config.eval_every=4",
             "--config.checkpoint_every=4", "--config.num_rounds=4"]
    assert _train(tmp_path / "full", *flags) == 0
    add, seen = run_lib._SplitWindow.add, []

    def add_then_stop(self, metrics, due):  # every round's split window: a SIGTERM after the first
        add(self, metrics, due)
        seen.append(1)
        if len(seen) == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(run_lib._SplitWindow, "add", add_then_stop)
    assert _train(tmp_path / "stopped", *flags) == 143
    assert [p.name for p in (tmp_path / "stopped" / "checkpoints").iterdir()] == ["1"]
    monkeypatch.setattr(run_lib._SplitWindow, "add", add)
    assert _train(tmp_path / "stopped", *flags, "--resume") == 0
    (a, step_a), (b, step_b) = _final_state(tmp_path / "full"), _final_state(tmp_path / "stopped")
    assert step_a == step_b == 4
    for x, y in zip(jax.tree.leaves((a.params, a.opt_state)), jax.tree.leaves((b.params, b.opt_state))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
