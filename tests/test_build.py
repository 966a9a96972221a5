"""`istjax.launch.config.build`: each piece made once by the library call it stands for, every refusal the library
makes reported under the config field that set the argument refused, in the command line's words; from Python the
same refusal speaks Python."""

import re

import jax.numpy as jnp
import optax
import pytest

import istjax
import istjax.launch.config as config_lib
from istjax.core.errors import ArgError
from istjax.launch.config.collect import FAILED, Collector
from istjax.models import MLP

DEPTH = {"model.name": "depth_resnet", "model.stage_sizes": (3,), "model.widths": (4,), "model.image_shape": (8, 8, 1),
         "algorithm.name": "resist"}


def _config(**fields):
    c = config_lib.default_config()
    for field, value in fields.items():
        if field.startswith("model.") and "model.name" in fields:
            continue
        *parents, leaf = field.split(".")
        node = c
        for part in parents:
            node = node[part]
        with node.unlocked():
            node[leaf] = value
    if "model.name" in fields:
        config_lib.use_model(c, fields["model.name"], **{k.split(".", 1)[1]: v for k, v in fields.items()
                                                         if k.startswith("model.") and k != "model.name"})
    return c


@pytest.mark.parametrize("fields,starts,words", [
    ({"algorithm.name": "resist"}, "model.name='mlp'", "Use --config.model.name=depth_resnet"),
    ({"model.hidden": (30,)}, "model.hidden=(30,) with num_workers=4 and sampler.name='uniform'",
     "--config.sampler.name=uniform_pad"),
    ({"batch_size": 2000}, "batch_size=2000: sharding='disjoint' splits", "--config.data.sharding=shared"),
    ({"eval_batch_size": 7}, "eval_batch_size=7:", "at least 256"),
    ({"sampler.groups.nope": "overlapping"}, "sampler.groups.nope='overlapping'", "its groups are ['hidden_0']"),
    ({"sampler.name": "overlapping", "sampler.min_units": 1000}, "model.hidden=(512,) with sampler.min_units=1000",
     "use at most 512"),
    ({"data.augment": True}, "data.augment=True", "--config.data.augment=False"),
    ({"data.graph_batches": "clusters"}, "data.graph_batches='clusters'", "--config.data.graph_batches=full"),
    ({**DEPTH, "algorithm.min_depth": 9}, "model.stage_sizes=(3,)", "algorithm.min_depth=9: min_depth=9"),
    ({**DEPTH, "algorithm.model_state": "recompute"}, "algorithm.model_state='recompute' with "
     "algorithm.test_scale=True", "--config.algorithm.test_scale=False"),
])
def test_a_library_refusal_is_reported_under_the_field_that_set_it(fields, starts, words):
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.build(_config(**fields))
    assert len(e.value.problems) == 1, e.value.problems
    problem = e.value.problems[0]
    assert problem.startswith(starts) and words in problem, problem
    assert not re.search(r"istjax\.\w+\(|\w+=istjax", problem), problem  # no fix in the Python API's words


def test_the_same_refusal_from_python_speaks_python():
    task = istjax.classifier(MLP(hidden=(30,), num_classes=10), jnp.zeros((2, 64)), num_classes=10)
    with pytest.raises(ArgError) as e:
        istjax.ist(task, optax.sgd(0.1), num_workers=4, local_steps=1)
    assert e.value.args_named == ("group_sizes", "num_workers", "sampler")
    assert "istjax.uniform(pad=True)" in str(e.value) and "--config" not in str(e.value)


def test_schema_problems_and_library_refusals_are_reported_together_and_once():
    c = _config(**{"learning_rate": -1.0, "batch_size": 2000, "model.hidden": (30,)})
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.build(c)
    starts = sorted(p.split(":")[0].split(" ")[0] for p in e.value.problems)
    assert starts == ["batch_size=2000", "learning_rate=-1.0", "model.hidden=(30,)"], e.value.problems


def test_a_step_whose_input_failed_or_whose_field_the_schema_refused_is_skipped():
    c = Collector(config_lib.default_config(), ["num_workers=0: must be a positive integer."], {"num_workers"})
    calls = []
    assert c.step(lambda: calls.append(1), {"num_workers": "num_workers"}, "") is FAILED
    assert c.step(lambda: calls.append(2), {}, "", inputs=(FAILED,)) is FAILED
    assert c.step(lambda: calls.append(3) or "ok", {}, "") == "ok" and calls == [3]
    for _ in range(2):  # the same refusal from two steps is reported once
        c.step(lambda: istjax.uniform().slots({"hidden_0": 5}, 2), {"group_sizes": "model.hidden"}, "")
    assert len(c.problems) == 2, c.problems


def test_build_makes_each_piece_once_and_in_order(monkeypatch):
    import istjax.launch.config.experiment as experiment

    order = []
    for name in ("load_config_data", "make_task", "make_optimizer", "make_sampler", "batch_fn_for"):
        real = getattr(experiment, name)
        monkeypatch.setattr(experiment, name, lambda *a, _n=name, _r=real, **k: order.append(_n) or _r(*a, **k))
    exp = config_lib.build(_config(**{"model.hidden": (8,)}))
    assert order == ["load_config_data", "make_task", "make_optimizer", "make_sampler", "batch_fn_for"]
    assert exp.algorithm.task is exp.task and exp.batch_fn(0)["x"].shape[:2] == (4, 10)
