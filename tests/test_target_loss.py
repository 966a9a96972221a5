"""A loss target (``target_loss``): a run races to a test loss at or below it, as a language model is judged.

``stop_at_target`` ends the run after the first evaluation that reaches it; the summary records it under
``target_loss`` with the same round, samples and seconds to the target an accuracy target has; a target that is never
reached leaves the run to train every round. One rule (`istjax.launch.config.target.reached`) decides "reached" for
the stop and the summary. The refusals (two targets, a stop without one, a loss that is not positive and finite) come
from the config check, before anything is compiled or written.
"""

from __future__ import annotations

import math

import pytest
from conftest import persistent_compilation_cache

from istjax.data.text import METRIC_LABELS as TEXT_LABELS
from istjax.launch import cli, driver
from istjax.launch import config as config_lib
from istjax.launch.config.target import reached, target_of
from istjax.launch.metrics import read_metrics
from istjax.launch.summary import summary_text


@pytest.fixture(scope="module", autouse=True)
def compilation_cache(tmp_path_factory):
    """The two runs differ only in their target and workdir: they share compiled programs."""
    with persistent_compilation_cache(tmp_path_factory.mktemp("jax_cache")):
        yield


def tiny_config(**fields):
    """Digits on a 16-unit MLP, 2 workers, evaluated every 2 rounds: a run of a few seconds."""
    c = config_lib.default_config()
    c.model.hidden = (16,)
    c.num_workers, c.local_steps, c.batch_size = 2, 2, 16
    c.num_rounds, c.eval_every, c.checkpoint_every = 6, 2, 100
    c.eval_train_examples, c.progress = 256, False
    for k, v in fields.items():
        c[k] = v
    return c


def test_a_reachable_loss_target_stops_the_run_at_its_first_evaluation(tmp_path):
    """A target far above any loss is reached at the first evaluation (round 2 of 6): the run stops there, with one
    record, and the summary says so under target_loss (no target_accuracy key) in the data's own words."""
    summary = driver.train_and_evaluate(tiny_config(target_loss=50.0, stop_at_target=True), tmp_path / "run")
    assert summary["rounds"] == summary["round_to_target"] == 2 < 6
    assert summary["target_loss"] == 50.0 and "target_accuracy" not in summary
    assert summary["samples_to_target"] == 2 * 2 * 2 * 16 and summary["time_to_target_s"] > 0
    assert [r["round"] for r in read_metrics(tmp_path / "run")] == [2]
    assert "  reached test loss 50.0 (at or below) at round 2 (128 samples" in summary_text(summary)
    text = summary_text({**summary, "metric_labels": TEXT_LABELS})
    assert "reached validation nats/char 50.0 (at or below) at round 2" in text


def test_an_unreachable_loss_target_runs_every_round_and_says_not_reached(tmp_path):
    """A target below any loss a model reaches (1e-6 nats) is never met: all 6 rounds, three evaluations, and the
    summary records the target with no round, samples or time to it."""
    summary = driver.train_and_evaluate(tiny_config(target_loss=1e-6, stop_at_target=True), tmp_path / "run")
    assert summary["rounds"] == 6 and summary["round_to_target"] is None
    assert summary["samples_to_target"] is None and summary["time_to_target_s"] is None
    assert [r["round"] for r in read_metrics(tmp_path / "run")] == [2, 4, 6]
    assert "  test loss 1e-06 (at or below) not reached" in summary_text(summary)


def test_reached_is_one_rule_for_both_targets():
    """An accuracy is reached at or above its target, a loss at or below; a missing record, metric or a NaN never
    reaches; a config (or an old config.json's dict) without a target reaches nothing."""
    acc, loss = tiny_config(target_accuracy=0.9), tiny_config(target_loss=2.0)
    assert [reached(acc, {"test_accuracy": a}) for a in (0.9, 0.95, 0.89)] == [True, True, False]
    assert [reached(loss, {"test_loss": v}) for v in (2.0, 1.5, 2.01, math.nan)] == [True, True, False, False]
    assert not reached(loss, {"test_accuracy": 1.0}) and not reached(loss, None)
    assert not reached(tiny_config(), {"test_loss": 0.0}) and target_of({"target_accuracy": None}) is None
    assert target_of({"target_accuracy": 0.5}).metric == "test_accuracy"  # a summary written before target_loss


@pytest.fixture
def refused(tmp_path, monkeypatch, capsys):
    """``istjax train FLAGS`` on tiny digits with compilation forbidden: its exit code and stderr; the workdir must
    not exist afterwards."""
    def never(*args, **kwargs):
        raise AssertionError("the round step was compiled: the refusal came too late")

    monkeypatch.setattr(driver, "compile_step", never)

    def run(*flags: str):
        capsys.readouterr()
        code = cli.main(["istjax", "train", "--config.num_rounds=2", "--config.progress=False", *flags,
                         f"--workdir={tmp_path / 'run'}"])
        assert not (tmp_path / "run").exists()
        return code, capsys.readouterr().err

    return run


@pytest.mark.parametrize("flags, named", [
    (("--config.target_accuracy=0.9", "--config.target_loss=2.0"),
     ["target_loss=2.0", "target_accuracy=0.9", "--config.target_accuracy=None", "--config.target_loss=None"]),
    (("--config.stop_at_target=True",),
     ["stop_at_target=True: needs a target", "--config.target_accuracy=0.9", "--config.target_loss=2.0"]),
    (("--config.target_loss=0.0",), ["target_loss=0.0: must be a positive finite loss"]),
    (("--config.target_loss=-1.5", "--config.stop_at_target=True"), ["target_loss=-1.5: must be a positive"]),
    (("--config.target_loss=inf",), ["target_loss=inf: must be a positive finite loss"]),
])
def test_a_bad_target_is_refused_naming_the_field_before_anything_compiles(refused, flags, named):
    code, err = refused(*flags)
    assert code == 2, err
    problem = [line for line in err.splitlines() if "target" in line]
    assert len(problem) == 1, err  # one line, naming each field and the fix
    for words in named:
        assert words in problem[0], (words, err)
    with pytest.raises(config_lib.ConfigError, match=named[0].split(":")[0]):
        config_lib.check(cli.parse_train_args(["istjax", *flags])[0])  # the schema check alone, no data
