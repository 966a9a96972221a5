"""Concept drift (`istjax.data.drift`, ``data.drift_round``): the permutation, the batches of each round, the
evaluation of each round's concept against labels renamed by hand, resume across the drift, the counts a record
sums, devices == simulate, and the refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import istjax.data as data_lib
from conftest import resumed_equals_uninterrupted
from istjax.core.errors import ArgError
from istjax.data.drift import drift_for, label_permutation
from istjax.launch import cli
from istjax.launch.evaluator import make_evaluator
from istjax.launch.metrics import read_metrics
from istjax.launch.restore import evaluate_run, restore_run


@pytest.mark.parametrize("classes", [2, 3, 10, 35])
def test_the_permutation_renames_every_class_and_is_a_function_of_its_seed(classes):
    perms = [label_permutation(classes, s) for s in range(6)]
    for p in perms:
        assert sorted(p.tolist()) == list(range(classes))
        assert not np.any(p == np.arange(classes))  # no class keeps its name
    np.testing.assert_array_equal(label_permutation(classes, 3), perms[3])
    if classes > 3:
        assert len({tuple(p) for p in perms}) > 1


def _dataset(n=64, classes=5):
    rng = np.random.default_rng(0)
    return data_lib.from_arrays(rng.normal(size=(n, 3)), np.arange(n) % classes, num_classes=classes)


def test_batches_carry_the_concept_of_their_round_traced_or_not():
    ds = _dataset()
    inner = data_lib.make_batch_fn(ds, num_workers=2, local_steps=2, batch_size=4, seed=1)
    drift = drift_for(ds, 3, seed=7)
    fn = data_lib.drifting(inner, drift)
    for r in range(6):
        plain, got = inner(r), fn(r)
        np.testing.assert_array_equal(got["x"], plain["x"])
        want = drift.permutation[np.asarray(plain["y"])] if r >= 3 else np.asarray(plain["y"])
        np.testing.assert_array_equal(got["y"], want)
        traced = jax.jit(fn.apply)(fn.data, jnp.int32(r))
        np.testing.assert_array_equal(traced["y"], want)
    assert fn.num_workers == 2 and fn.local_steps == 2  # the wrapped function's attributes
    padded = drift.relabel(jnp.array([-1, 0, 4]), 5)  # padding stays padding
    np.testing.assert_array_equal(padded, [-1, drift.permutation[0], drift.permutation[4]])


TINY = ["--config.model.hidden=(16,)", "--config.progress=False", "--config.eval_train_examples=256",
        "--config.num_workers=2", "--config.local_steps=2", "--config.eval_every=1", "--config.checkpoint_every=1",
        "--config.learning_rate=0.05", "--config.data.drift_seed=5"]


def _train(workdir, *flags):
    return cli.main(["istjax", "train", *TINY, *flags, f"--workdir={workdir}"])


def test_the_evaluation_follows_the_concept_equal_to_labels_renamed_by_hand(tmp_path, compilation_cache):
    """A run on digits drifting at round 4: from the state of round 4 on, its record equals the plain evaluator on a
    copy of the data whose labels were renamed by hand; before, the plain labels. The old concept's model fails the
    new one (its accuracy falls at the drift)."""
    assert _train(tmp_path, "--config.num_rounds=5", "--config.data.drift_round=4",
                  "--config.learning_rate=0.3") == 0
    records = read_metrics(tmp_path)
    config, experiment, state, _ = restore_run(tmp_path, checkpoint=4)
    perm = experiment.drift.permutation
    renamed = experiment.dataset._replace(train_y=perm[experiment.dataset.train_y],
                                          test_y=perm[experiment.dataset.test_y])
    by_hand = make_evaluator(experiment.task, renamed, batch_size=int(config.eval_batch_size),
                             train_examples=int(config.eval_train_examples))(state)
    assert evaluate_run(tmp_path, checkpoint=4)["test_loss"] == pytest.approx(by_hand["test_loss"], rel=1e-6)
    assert records[3]["test_accuracy"] == pytest.approx(by_hand["test_accuracy"], abs=1e-6)
    _, _, before, _ = restore_run(tmp_path, checkpoint=3)
    plain = make_evaluator(experiment.task, experiment.dataset, batch_size=int(config.eval_batch_size),
                           train_examples=int(config.eval_train_examples))(before)
    assert records[2]["test_accuracy"] == pytest.approx(plain["test_accuracy"], abs=1e-6)
    assert records[3]["test_accuracy"] < records[2]["test_accuracy"] - 0.3, records


def test_a_run_resumed_across_the_drift_equals_one_never_stopped(tmp_path, compilation_cache):
    resumed_equals_uninterrupted(_train, tmp_path, "--config.data.drift_round=3")


def test_a_record_sums_what_its_rounds_counted(tmp_path, compilation_cache):
    """Dynamic averaging at delta 0 (every worker synchronises every round), a record every 2 rounds: each record's
    ``model_transfers`` is its two rounds' (2 workers, to the coordinator and back: 4 a round)."""
    assert _train(tmp_path, "--config.num_rounds=4", "--config.eval_every=2", "--config.data.drift_round=3",
                  "--config.algorithm.name=dynamic_averaging", "--config.algorithm.delta=0.0") == 0
    records = read_metrics(tmp_path)
    assert [r["model_transfers"] for r in records] == [8.0, 8.0]
    assert [r["full_sync"] for r in records] == [2.0, 2.0]


def test_devices_equal_simulate_across_the_drift(tmp_path, compilation_cache):
    from conftest import final_state

    for runtime in ("simulate", "devices"):
        assert _train(tmp_path / runtime, "--config.num_rounds=3", "--config.data.drift_round=2",
                      f"--config.runtime.name={runtime}") == 0
    (a, _), (b, _) = final_state(tmp_path / "simulate"), final_state(tmp_path / "devices")
    for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-5)


@pytest.mark.parametrize("flag,words", [("--config.data.drift_round=-1", "data.drift_round=-1"),
                                        ("--config.data.drift_seed=-2", "data.drift_seed=-2")])
def test_bad_drift_fields_are_refused_naming_them(tmp_path, flag, words, capsys):
    assert _train(tmp_path, "--config.num_rounds=2", flag) != 0
    assert words in capsys.readouterr().err


def test_a_drift_of_data_without_one_class_per_example_is_refused():
    ds = _dataset()
    with pytest.raises(ArgError, match="single-label.*Drop data.drift_round"):
        drift_for(ds._replace(train_y=np.zeros((len(ds.train_y), 3), np.int32)), 2)
    with pytest.raises(ArgError, match="drift_round=0"):
        drift_for(ds, 0)
