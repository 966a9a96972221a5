"""A researcher's own model, end to end (issue "Your own model, end to end").

A model defined outside the package trains, resumes, evaluates, compares and plots from the command line in fresh
processes with no PYTHONPATH; each mistake a new user made is refused (or warned about) in the user's terms before
anything compiles, with the words of the fix and no traceback; the non-finite guard stops a diverging loop.
"""

import json
import os
import subprocess
import textwrap
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
import pytest

import istjax
import istjax.launch.config as config_lib
from istjax.core.model_checks import ModelCheckError, OutputWarning
from istjax.data import load_dataset, make_batch_fn
from conftest import cached_compiles_env
from test_cli import istjax_command, subprocess_env
from test_refusals import main_in_process, refused

MODEL_FILE = textwrap.dedent('''
    """A residual MLP with LayerNorm and GELU that istjax does not ship."""
    import flax.linen as nn


    def dense(n, names):
        return nn.Dense(n, kernel_init=nn.with_logical_partitioning(nn.initializers.lecun_normal(), names),
                        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, names[1:]))


    class ResMLP(nn.Module):
        width: int = 64
        depth: int = 2
        num_classes: int = 10

        def partition_rules(self):
            return {"features": None, "hidden": "hidden", "classes": None}

        def subnet(self, units):
            return self.clone(width=units["hidden"])

        def tied_axes(self):
            return (("hidden", "hidden"),)

        @nn.compact
        def __call__(self, x, train=True):
            h = dense(self.width, ("features", "hidden"))(x)
            for _ in range(self.depth):
                norm = nn.LayerNorm(scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("hidden",)),
                                    bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("hidden",)))
                h = h + dense(self.width, ("hidden", "hidden"))(nn.gelu(norm(h)))
            return dense(self.num_classes, ("hidden", "classes"))(h)
''')

FAST = ["--config.num_workers=2", "--config.local_steps=2", "--config.eval_every=2", "--config.checkpoint_every=2",
        "--config.progress=False", "--config.eval_train_examples=300"]


def fresh_env():
    env = subprocess_env()
    env.pop("PYTHONPATH", None)
    return env


def istjax_run(*args, cwd, cache=None):
    """The CLI in a child process; ``cache``: a folder for JAX's compilation cache, which later children read."""
    env = cached_compiles_env(fresh_env(), cache)
    return subprocess.run(istjax_command() + list(args), capture_output=True, text=True, env=env, timeout=300,
                          cwd=cwd)


@pytest.fixture
def user_dir(tmp_path):
    """A folder of the user's: their model file, and a config file that imports it by module name."""
    (tmp_path / "my_models.py").write_text(MODEL_FILE)
    (tmp_path / "resmlp_config.py").write_text(textwrap.dedent('''
        from istjax.launch.config import default_config, use_model
        from my_models import ResMLP  # beside this file: found with no PYTHONPATH

        def get_config():
            c = default_config()
            use_model(c, "resmlp", "my_models.py:" + ResMLP.__name__, width=32)
            c.num_rounds = 4
            return c
    '''))
    return tmp_path


@pytest.mark.slow
def test_a_model_in_the_users_file_trains_resumes_evaluates_compares_and_plots(user_dir, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # every command from another folder, with no PYTHONPATH
    run = user_dir / "runs" / "a"
    cache = tmp_path_factory.mktemp("jax_cache")  # the resume and eval load the first run's compiles
    p = istjax_run("train", f"--config={user_dir / 'resmlp_config.py'}", f"--workdir={run}", *FAST, cwd=elsewhere,
                   cache=cache)
    assert p.returncode == 0, p.stderr[-3000:]
    recorded = json.loads((run / "config.json").read_text())["model"]
    assert recorded["module"] == f"{user_dir / 'my_models.py'}:ResMLP" and recorded["width"] == 32
    p = istjax_run("train", f"--workdir={run}", "--resume", "--config.num_rounds=6", *FAST[4:], cwd=elsewhere,
                   cache=cache)
    assert p.returncode == 0, p.stderr[-3000:]
    assert [json.loads(line)["round"] for line in (run / "metrics.jsonl").read_text().splitlines()][-1] == 6
    p = istjax_run("eval", f"--workdir={run}", cwd=elsewhere, cache=cache)
    assert p.returncode == 0 and "(round 6)" in p.stdout, p.stderr[-3000:]
    stock = user_dir / "runs" / "b"
    p = istjax_run("train", f"--workdir={stock}", "--config.num_rounds=4", "--config.model.hidden=(32,)", *FAST,
                   cwd=elsewhere, cache=cache)
    assert p.returncode == 0, p.stderr[-3000:]
    p = istjax_run("plot", str(run), str(stock), "--out", str(user_dir / "cmp.png"), cwd=elsewhere)
    assert p.returncode == 0 and (user_dir / "cmp.png").stat().st_size > 0, p.stderr[-3000:]
    p = istjax_run("compare", "--runs", str(run), str(stock), f"--workdir={user_dir / 'cmp'}", cwd=elsewhere,
                   cache=cache)
    assert p.returncode == 0 and "resmlp" in p.stdout + (user_dir / "cmp" / "comparison.md").read_text(), p.stderr


def test_the_model_file_on_the_command_line_needs_no_pythonpath(user_dir, capsys, monkeypatch, tmp_path):
    """--config.model.module=FILE:Class loads the user's file; the run records its absolute path."""
    monkeypatch.chdir(user_dir)
    code, err = main_in_process(capsys, "--config.model.name=resmlp", "--config.model.module=my_models.py:ResMLP",
                                "--config.model.width=16", "--config.num_rounds=2", *FAST,
                                f"--workdir={tmp_path / 'run'}")
    assert code == 0, err
    assert json.loads((tmp_path / "run" / "config.json").read_text())["model"] == {
        "name": "resmlp", "module": f"{user_dir / 'my_models.py'}:ResMLP", "width": 16}


@pytest.mark.parametrize("module,words", [
    ("nowhere.py:ResMLP", ["no such file", "--config.model.module=path/to/file.py:ClassName"]),
    ("no_such_package.models:ResMLP", ["no module named 'no_such_package'", "(a file, no PYTHONPATH needed)"]),
    ("my_models.py:ResMlp", ["has no 'ResMlp'", "['ResMLP']"]),
    ("my_models.py", ["give 'where:ClassName'"]),
])
def test_a_model_that_cannot_be_found_says_how_to_name_it(user_dir, capsys, monkeypatch, module, words):
    monkeypatch.chdir(user_dir)
    refused(main_in_process(capsys, "--config.model.name=resmlp", f"--config.model.module={module}"), *words)


def test_switching_models_in_a_config_file_reports_every_stale_field_at_once(tmp_path, capsys):
    (tmp_path / "my_models.py").write_text(MODEL_FILE)
    (tmp_path / "cfg.py").write_text(textwrap.dedent('''
        from istjax.launch.config import default_config

        def get_config():
            c = default_config()
            c.model.name = "resmlp"
            c.model.module = "my_models.py:ResMLP"
            return c
    '''))
    err = refused(main_in_process(capsys, f"--config={tmp_path / 'cfg.py'}"), "model.batch_norm=True",
                  "model.hidden=(512,)", "model.output_batch_norm=True", "use_model(config, 'resmlp'")
    assert err.count("has no field") == 1


def test_switching_models_on_the_command_line_drops_the_old_models_fields(tmp_path, capsys):
    code, err = main_in_process(capsys, "--config.model.name=cnn", "--config.model.widths=(4,8)",
                                "--config.model.image_shape=(8,8,1)", "--config.num_rounds=2", *FAST,
                                f"--workdir={tmp_path / 'run'}")
    assert code == 0, err
    model = json.loads((tmp_path / "run" / "config.json").read_text())["model"]
    assert model["name"] == "cnn" and model["widths"] == [4, 8] and "hidden" not in model


def test_a_model_file_inside_a_package_loads_as_a_member_of_it(tmp_path):
    """A file spec naming a module of a package that imports its neighbour relatively: imported under its dotted
    name, so the relative import works, the recorded spec loads the same class again, and so does a nested class."""
    from istjax.models import user

    pkg = tmp_path / "lab" / "mynets"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "widths.py").write_text("HIDDEN = 8\n")
    (pkg / "nets.py").write_text(textwrap.dedent("""
        import flax.linen as nn
        from .widths import HIDDEN

        class Net(nn.Module):
            class Head(nn.Module):
                @nn.compact
                def __call__(self, x):
                    return nn.Dense(HIDDEN)(x)

            @nn.compact
            def __call__(self, x):
                return nn.Dense(HIDDEN)(x)
        """))
    cls = user.load(f"{pkg / 'nets.py'}:Net")
    assert cls.__module__ == "mynets.nets" and cls.__qualname__ == "Net"
    assert user.spec_of(cls) == f"{pkg / 'nets.py'}:Net" and user.load(user.spec_of(cls)) is cls
    head = user.load(f"{pkg / 'nets.py'}:Net.Head")
    assert head is cls.Head and user.load(user.spec_of(head)) is head
    shadowed = tmp_path / "json"  # a package whose name another one (the standard library's) holds: read by path
    shadowed.mkdir()
    (shadowed / "__init__.py").write_text("")
    (shadowed / "net.py").write_text("import flax.linen as nn\n\nclass Net(nn.Module):\n    pass\n")
    assert user.load(f"{shadowed / 'net.py'}:Net").__module__.startswith("istjax_user_net_")


def test_a_config_file_importing_a_missing_module_names_the_fix(tmp_path, capsys):
    (tmp_path / "cfg.py").write_text("import not_beside_me\n\ndef get_config():\n    return None\n")
    refused(main_in_process(capsys, f"--config={tmp_path / 'cfg.py'}"), "'not_beside_me'",
            "Put the module beside the config file", "c.model.module = 'path/to/file.py:ClassName'")


# --- Construction-time checks (the Python API: istjax.classifier) --------------------------------------------


def _dense(n, names, bias=True):
    return nn.Dense(n, use_bias=bias, kernel_init=nn.with_logical_partitioning(nn.initializers.lecun_normal(), names),
                    bias_init=nn.with_logical_partitioning(nn.initializers.zeros, names[1:]))


class Wide(nn.Module):
    """An MLP whose output can be changed to each mistake of the issue."""

    width: int = 128
    other: int = 128
    num_classes: int = 10
    mistake: str = ""

    def partition_rules(self):
        rules = {"features": None, "hidden": "hidden", "other": "other", "classes": None}
        if self.mistake == "rules typo":  # 'class' for the model's 'classes'
            rules["class"] = rules.pop("classes")
        return rules

    def subnet(self, units):
        if self.mistake == "subnet key":
            return self.clone(width=units["hiden"])
        if self.mistake == "subnet get":  # a key that is no group: the default, the full width, is kept
            return self.clone(width=units.get("hidden_0", self.width))
        if self.mistake == "subnet swapped":
            return self.clone(width=units["other"], other=units["hidden"])
        if self.mistake == "one width, two groups":
            return self.clone(width=units["hidden"])
        return self.clone(width=units["hidden"], other=units.get("other", self.other))

    @nn.compact
    def __call__(self, x, train=True):
        if self.mistake == "reshape":
            x = x.reshape(x.shape[0], 7, 7)  # a model for 49 features given 20
        h = nn.relu(_dense(self.width, ("features", "hidden"))(x))
        if self.mistake == "two groups added":  # a residual joining two groups (no tied_axes declared)
            h = h + nn.relu(_dense(self.other, ("features", "other"))(x))
        if self.mistake == "one width, two groups":
            h = h + nn.relu(_dense(self.width, ("features", "other"))(x))
        if self.mistake == "bias unnamed":
            h = nn.Dense(self.width, name="unnamed")(h)
        out = _dense(self.num_classes, ("hidden", "classes"))(h)
        if self.mistake == "subnet swapped":  # a second branch of the other group, joined after the last layer
            out = out + _dense(self.num_classes, ("other", "classes"))(nn.relu(_dense(self.other, ("features",
                                                                                                "other"))(x)))
        if self.mistake == "softmax":
            return nn.softmax(out)
        if self.mistake == "scalar":
            return out.sum()
        return out


X = jnp.zeros((4, 20))


def test_a_correct_model_passes_every_check():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        task = istjax.classifier(Wide(), X, num_classes=10)
    assert dict(task.spec.group_sizes) == {"hidden": 128}


@pytest.mark.parametrize("mistake,words", [
    ("two groups added", ["joins tensors of two different neuron groups", "'hidden'", "'other'", "tied_axes()"]),
    ("one width, two groups", ["Group 'other' took group 'hidden''s width", "one width field serves both",
                               "tied_axes()"]),
    ("scalar", ["returns shape ()", "logits of shape [4, 10]"]),
    ("subnet key", ["subnet(units) read units['hiden'] (did you mean 'hidden'?)", "the groups ['hidden']"]),
    ("subnet get", ["subnet(units) does not build the widths it is given", "given units={'hidden': 64}",
                    "group 'hidden' at width 128 (its full width", "field(s) ['other', 'width'] left unchanged",
                    "units.get('wrong', default)"]),
    ("subnet swapped", ["group 'hidden' at width 65 (units['other']; given units['hidden']=64)",
                        "group 'other' at width 64 (units['hidden']; given units['other']=65)"]),
    ("bias unnamed", ["'unnamed/bias': full (128,)", "subnet() gives (64,)", "nn.with_logical_partitioning"]),
    ("reshape", ["example input (shape (4, 20)", "cannot reshape", "[B, ...]"]),
])
def test_model_mistakes_are_named_in_the_users_terms(mistake, words):
    with pytest.raises(ModelCheckError) as e:
        istjax.classifier(Wide(mistake=mistake), X, num_classes=10)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    assert e.value.__context__ is None or e.value.__suppress_context__  # no chained Flax/JAX traceback


def test_batches_of_another_example_shape_are_refused_before_tracing():
    alg = istjax.ist(istjax.classifier(Wide(width=8, other=8), X, num_classes=10), optax.sgd(0.1), num_workers=2,
                     local_steps=1)
    state = alg.init(jax.random.key(0))
    with pytest.raises(ValueError, match=r"examples of shape \(21,\).*example input whose examples have shape "
                                         r"\(20,\).*istjax.classifier\(model, data\)"):
        alg.round(state, {"x": jnp.zeros((2, 1, 4, 21)), "y": jnp.zeros((2, 1, 4), jnp.int32)})


def test_an_output_width_other_than_the_datas_classes_is_refused():
    with pytest.raises(ModelCheckError, match=r"returns 5 logits per example but the data has 10 classes"):
        istjax.classifier(Wide(num_classes=5), X, num_classes=10)


def test_the_class_count_is_checked_however_the_task_is_built():
    """The issue's silent NaN: 5 logits for 10 classes, built from the data set or from an array."""
    data = load_dataset("digits")
    with pytest.raises(ModelCheckError, match=r"returns 5 logits per example but the data has 10 classes"):
        istjax.classifier(Wide(num_classes=5), data)
    task = istjax.classifier(Wide(width=8), data)
    assert task.num_classes == 10 and task.example_x.shape == (2, 64)
    with pytest.raises(TypeError) as e:  # an array without num_classes: refused before anything is traced
        istjax.classifier(Wide(num_classes=5), jnp.asarray(data.train_x[:2]))
    for w in ["an example input (shape (2, 64)) needs num_classes=", "istjax.classifier(model, data, ...)",
              "num_classes=data.num_classes"]:
        assert w in str(e.value), (w, str(e.value))
    with pytest.raises(ValueError, match=r"num_classes=3 but the data set has 10 classes"):
        istjax.classifier(Wide(), data, num_classes=3)


def test_an_unbatched_example_is_told_to_pass_a_batch():
    with pytest.raises(ModelCheckError) as e:
        istjax.classifier(Wide(), jnp.zeros((64,)), num_classes=10)
    for w in ["shape (64,) is one unbatched example (64 features), not a batch", "x[:2] (shape (2, 64))",
              "istjax.classifier(model, data)"]:
        assert w in str(e.value), (w, str(e.value))
    assert "example batch of 64" not in str(e.value)


def test_a_typo_in_the_rules_says_did_you_mean_and_keeps_the_class_axis_whole():
    with pytest.raises(ValueError) as e:
        istjax.classifier(Wide(mistake="rules typo"), X, num_classes=10)
    for w in ["unknown logical axis name(s) 'classes'", "the rules key 'class' is no logical axis name of the "
              "model (did you mean 'classes'?)", "e.g. {'classes': None}"]:
        assert w in str(e.value), (w, str(e.value))
    assert "'hidden'}" not in str(e.value)  # not "map the class axis to a neuron group"


NOUT_MODEL = MODEL_FILE.replace("num_classes: int = 10", "n_out: int = 10").replace("self.num_classes", "self.n_out")


def test_a_model_without_a_num_classes_field_is_told_to_name_it_so(tmp_path, capsys, monkeypatch):
    """The library passes num_classes from the data: an output width called n_out is refused with the fix."""
    (tmp_path / "nout.py").write_text(NOUT_MODEL)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as e:
        istjax.models.build_model("nout", {}, num_classes=10, module="nout.py:ResMLP")
    for w in ["has no field num_classes", "builds the model with num_classes=",
              "a field `num_classes: int`", "rename its output-width field (n_out?) to num_classes"]:
        assert w in str(e.value), (w, str(e.value))
    refused(main_in_process(capsys, "--config.model.name=nout", "--config.model.module=nout.py:ResMLP",
                            f"--workdir={tmp_path / 'run'}"), "has no field num_classes", "`num_classes: int`",
            lines=3)


def test_a_softmax_output_is_warned_about():
    with pytest.warns(OutputWarning, match=r"ends in a softmax.*expects logits"):
        istjax.classifier(Wide(mistake="softmax"), X, num_classes=10)


def test_a_model_without_logical_names_is_told_the_real_cause():
    class Plain(nn.Module):
        num_classes: int = 3

        def partition_rules(self):
            return {"hidden": "hidden"}

        def subnet(self, units):
            return self

        @nn.compact
        def __call__(self, x, train=True):
            return nn.Dense(self.num_classes)(nn.relu(nn.Dense(16)(x)))

    task = istjax.classifier(Plain(), X, num_classes=3)
    with pytest.raises(ValueError, match=r"carry no logical axis names.*nn.with_logical_partitioning"):
        istjax.ist(task, optax.sgd(0.1), num_workers=2, local_steps=1)


def test_the_non_finite_guard_stops_a_diverging_loop_with_the_round_and_workers():
    data = load_dataset("digits")
    task = istjax.classifier(Wide(width=16), data)
    alg = istjax.ist(task, optax.sgd(0.1), num_workers=2, local_steps=2)
    batches = make_batch_fn(data, num_workers=2, local_steps=2, batch_size=16, seed=0)

    def bad_labels(r):  # labels past the 10 logits (a data bug the task cannot see): a NaN loss
        b = batches(r)
        return {**b, "y": b["y"] + 10}

    state = alg.init(jax.random.key(0))
    with pytest.raises(istjax.NonFiniteLoss, match=r"non-finite loss in round 0 at worker\(s\) \[0, 1\] of 2") as e:
        for r in range(5):
            state, metrics = alg.round(state, bad_labels(r))
            istjax.check_finite(metrics, r)
    assert e.value.round_index == 0 and e.value.workers == [0, 1]
    ok = {"worker_loss": jnp.ones(2), "finite": jnp.asarray(True)}
    assert istjax.check_finite(ok, 3) is ok


def test_eval_of_a_run_that_does_not_record_its_model_is_told_where_it_lives(user_dir, capsys, monkeypatch, tmp_path):
    """A run of an earlier version (its config.json without model.module) evaluates with --model-module."""
    from istjax.launch import cli

    monkeypatch.chdir(user_dir)
    run = tmp_path / "run"
    code, err = main_in_process(capsys, "--config.model.name=resmlp", "--config.model.module=my_models.py:ResMLP",
                                "--config.num_rounds=2", *FAST, f"--workdir={run}")
    assert code == 0, err
    config = json.loads((run / "config.json").read_text())
    del config["model"]["module"]
    (run / "config.json").write_text(json.dumps(config))
    monkeypatch.setitem(istjax.models.MODELS._entries, "resmlp", None)  # a fresh process: the class unknown
    istjax.models.MODELS._entries.pop("resmlp")
    assert cli.main(["istjax", "eval", f"--workdir={run}"]) == 2
    assert "--model-module=path/to/file.py:ClassName" in capsys.readouterr().err
    assert cli.main(["istjax", "eval", f"--workdir={run}", "--model-module=my_models.py:ResMLP"]) == 0
