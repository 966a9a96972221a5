"""A newcomer's wrong turns (issue 57, items 3 and 5): data checked where it enters, errors that point the right way.

* A ``data.module`` function's `Dataset` passes the checks `from_arrays` makes (finite features in every split), a
  spec without ``:function`` or with a misspelt name lists what the file defines, and ``exchange_values`` under a
  float32 exchange is refused as having no effect: each in the Python API's words and the command line's, before
  anything compiles.
* A model field's refusal on the command line names ``model.<field>`` and the flag that fixes it, with the closest
  choice; a transformer's heads that W workers cannot share are told a head count that builds.
* Every concrete fix a refusal suggests is applied, and the command then passes the check (`test_suggested_fix`).
"""

import re
import subprocess
import textwrap
import time

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
import istjax.launch.config as config_lib
from istjax.core import precision
from istjax.data import Dataset, Rows, check_dataset, load_module_dataset
from istjax.launch import cli
from istjax.launch import driver
from istjax.models import Transformer, build_model
from test_cli import istjax_command, subprocess_env
from test_refusals import _as_if_launched_by_mpiexec, refused

DATA_FILE = textwrap.dedent('''
    import numpy as np
    import istjax
    from istjax.data import Dataset

    def _arrays():
        rng = np.random.default_rng(0)
        x = rng.normal(size=(320, 4)).astype(np.float32)
        return x, (np.arange(320) % 2).astype(np.int32)

    def synth():
        x, y = _arrays()
        return Dataset("mine", x[:256], y[:256], x[256:], y[256:], 2)

    def bad(split="train_x", value="nan", row=3):
        x, y = _arrays()
        d = Dataset("mine", x[:256].copy(), y[:256], x[256:].copy(), y[256:], 2)
        getattr(d, split)[row, 1] = float(value)
        return d
''')
ONE_FUNCTION = "import istjax\n\n\ndef only():\n    from my_data import synth\n    return synth()\n"

# A one-layer transformer on Shakespeare: 4 heads of a width-128 stream, 2 workers.
TRANSFORMER = {"model.name": "transformer", "data.name": "shakespeare", "model.num_layers": 1, "model.embed_dim": 128,
               "model.num_heads": 4, "model.mlp_dim": 126, "model.context": 16, "data.kwargs.context": 16,
               "num_workers": 2}
DEPTH_RESNET = {"algorithm.name": "resist", "model.name": "depth_resnet", "model.stage_sizes": "(3,)",
                "model.widths": "(4,)", "model.image_shape": "(8,8,1)", "num_workers": 2}


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    (tmp_path / "my_data.py").write_text(DATA_FILE)
    (tmp_path / "one.py").write_text(ONE_FUNCTION)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _flags(fields: dict) -> list[str]:
    return [f"--config.{k}={v}" for k, v in fields.items()]


def _problems(fields: dict) -> list[str]:
    """The problems the command line's config check reports for ``fields`` ([] when it passes)."""
    try:
        config_lib.validate(cli.parse_train_args(["istjax", *_flags(fields)])[0])
    except config_lib.ConfigError as e:
        return e.problems
    return []


@pytest.fixture
def train_in_process(tmp_path, monkeypatch, capsys):
    """``istjax train FLAGS`` in this process with compilation forbidden: ``(exit code, stderr)``; the workdir given
    must not exist afterwards (a refusal writes nothing)."""
    def never(*args, **kwargs):
        raise AssertionError("the round step was compiled: the refusal came too late")

    monkeypatch.setattr(driver, "compile_step", never)

    def run(fields: dict):
        capsys.readouterr()
        code = cli.main(["istjax", "train", *_flags(fields), f"--workdir={tmp_path / 'run'}"])
        assert not (tmp_path / "run").exists()
        return code, capsys.readouterr().err

    return run


# --- Data checked where it enters ----------------------------------------------------------------------------


@pytest.mark.parametrize("split,value", [("train_x", "nan"), ("test_x", "inf"), ("test_x", "-inf"),
                                         ("train_x", "inf")])
def test_a_data_module_dataset_with_nan_or_inf_is_refused_in_both_spellings(data_dir, train_in_process, split,
                                                                             value):
    spec = f"{data_dir / 'my_data.py'}:bad"
    with pytest.raises(istjax.ArgError) as e:  # the Python API
        load_module_dataset(spec, split=split, value=value, row=5)
    assert e.value.arg == f"data.{split}" and "\n" not in str(e.value)
    assert f"{split} holds NaN or infinite values in 1 example(s) (the first: row 5)" in str(e.value)
    fields = {"data.module": spec, "data.name": "mine", "data.kwargs.split": split, "data.kwargs.value": value}
    (problem,) = _problems(fields)  # the config check, which builds nothing that compiles
    assert problem.startswith(f"data.module={spec!r}: {split} holds NaN or infinite values"), problem
    refused(train_in_process(fields), f"{split} holds NaN or infinite", "fill or drop those examples", lines=1)


def test_a_dataset_built_by_hand_is_checked_like_from_arrays():
    x = np.random.default_rng(0).normal(size=(10, 3)).astype(np.float32)
    y = (np.arange(10) % 2).astype(np.int32)
    check_dataset(Dataset("ok", x, y, x, y, 2), "mine")  # finite: accepted
    test_x = x.copy()
    test_x[[2, 7], 0] = np.inf
    with pytest.raises(ValueError, match=r"^mine: test_x holds NaN or infinite values in 2 example\(s\) \(the first: "
                                         r"row 2\)"):
        check_dataset(Dataset("bad", x, y, test_x, y, 2), "mine")
    # A file-backed training split is read in chunks, row by row, like any other.
    raw = np.arange(30, dtype=np.float32).reshape(10, 3)
    raw[9, 2] = np.nan
    with pytest.raises(ValueError, match=r"train_x holds NaN or infinite values in 1 example\(s\) \(the first: row 9"):
        check_dataset(Dataset("rows", Rows(raw), y, x, y, 2), "mine")
    with pytest.raises(ValueError, match="from_arrays: test_x holds NaN or infinite values in 2 example"):
        istjax.data.from_arrays(x, y, test_x=test_x, test_y=y)


def test_the_cli_refuses_nan_data_at_once_in_one_line(data_dir, tmp_path):
    t0 = time.monotonic()
    p = subprocess.run(istjax_command() + ["train", f"--config.data.module={data_dir / 'my_data.py'}:bad",
                                           "--config.data.name=mine", f"--workdir={tmp_path / 'run'}"],
                       capture_output=True, text=True, env=subprocess_env(), timeout=300)
    refused((p.returncode, p.stderr), "train_x holds NaN or infinite values in 1 example(s)", lines=1)
    assert not (tmp_path / "run").exists()
    assert time.monotonic() - t0 < 60  # the import and the data, not a compile and a round


# --- A data.module spec without :function, or with a misspelt name ------------------------------------------


def test_a_data_module_without_function_lists_what_the_file_defines(data_dir, train_in_process):
    path = str(data_dir / "my_data.py")
    with pytest.raises(istjax.ArgError) as e:
        load_module_dataset(path)
    assert "give 'where:function'" in str(e.value) and "the functions it defines are ['bad', 'synth']" in str(e.value)
    code_err = train_in_process({"data.module": path, "data.name": "mine"})
    refused(code_err, f"data.module={path!r} names no function in it", f"--config.data.module={path}:function",
            "['bad', 'synth']", lines=1)
    assert "Traceback" not in code_err[1]


def test_a_misspelt_function_or_class_gets_a_did_you_mean(data_dir, train_in_process, tmp_path):
    path = str(data_dir / "my_data.py")
    with pytest.raises(istjax.ArgError, match=r"has no 'synthh' \(did you mean 'synth'\?\); the functions defined "
                                              r"there are \['bad', 'synth'\]\."):
        load_module_dataset(f"{path}:synthh")
    refused(train_in_process({"data.module": f"{path}:synthh", "data.name": "mine"}), "did you mean 'synth'",
            f"use --config.data.module={path}:synth.", lines=1)
    (tmp_path / "my_models.py").write_text("import flax.linen as nn\n\n\nclass ResMLP(nn.Module):\n    pass\n")
    refused(train_in_process({"model.name": "resmlp", "model.module": f"{tmp_path / 'my_models.py'}:ResMlp"}),
            "has no 'ResMlp' (did you mean 'ResMLP'?)", "the flax modules defined there are ['ResMLP']", lines=1)


# --- An option with no effect -------------------------------------------------------------------------------


def _mlp_task():
    return istjax.classifier(istjax.models.MLP(hidden=(8,), num_classes=3), jnp.zeros((4, 5)), num_classes=3)


def test_exchange_values_under_a_float32_exchange_is_refused_in_both_spellings(train_in_process):
    with pytest.raises(istjax.ArgError) as e:  # the Python API: every factory makes its wire with precision.wire
        istjax.ist(_mlp_task(), optax.sgd(0.1), num_workers=2, local_steps=1, exchange_values="params")
    assert e.value.arg == "exchange_values" and e.value.value == "params"
    assert str(e.value).startswith("exchange_values='params' with exchange_dtype='float32':")
    assert "would change nothing. Drop it, or set exchange_dtype='bfloat16'." in str(e.value)
    with pytest.raises(istjax.ArgError, match="would change nothing"):
        istjax.local_sgd(_mlp_task(), optax.sgd(0.1), num_workers=2, local_steps=1, exchange_values="params")
    assert precision.wire("bfloat16", "params") == precision.Wire("bfloat16", "params")  # where it means something
    assert precision.wire("float32", "delta").exact
    refused(train_in_process({"exchange_values": "params"}), "exchange_values='params' with exchange_dtype='float32'",
            "Drop it, or set --config.exchange_dtype=bfloat16.", lines=1)


# --- Model fields named as the command line sets them --------------------------------------------------------


def test_a_model_choice_refusal_names_the_flag_and_the_closest_choice(train_in_process):
    with pytest.raises(istjax.ArgError, match=r"^Transformer.scaling='tset': unknown \(did you mean 'test'\?\); "
                                              r"choose one of \['none', 'train', 'test'\]\.$"):
        Transformer(scaling="tset")  # the Python API names the class's field
    err = refused(train_in_process({**TRANSFORMER, "model.scaling": "tset"}), "model.scaling='tset': unknown "
                  "(did you mean 'test'?); choose one of ['none', 'train', 'test']: --config.model.scaling=test.",
                  lines=1)
    assert "Transformer.scaling" not in err


def test_an_unknown_model_field_gets_the_flag_it_probably_meant(train_in_process):
    with pytest.raises(istjax.ArgError, match=r"has no field model.scalingg='test' \(did you mean 'scaling'\?\)"):
        build_model("transformer", {"scalingg": "test"}, num_classes=5)
    refused(train_in_process({**TRANSFORMER, "model.scalingg": "test"}), "(did you mean 'scaling'?)",
            "If misspelt, use --config.model.scaling=test;", lines=1)


# --- Heads that W workers cannot share -----------------------------------------------------------------------


def _lm_task(**fields):
    model = Transformer(num_classes=5, num_layers=1, mlp_dim=6, context=4, **fields)
    return istjax.classifier(model, jnp.zeros((2, 4), jnp.int32), num_classes=5)


@pytest.mark.parametrize("width,fix,builds", [
    (128, "Use num_heads=3 with head_dim=32 (no multiple of 3 divides embed_dim=128: give each head its width)",
     [{"num_heads": 3, "head_dim": 32}]),
    (96, "Use num_heads=3 or 6 (a multiple of 3 that divides embed_dim=96)", [{"num_heads": 3}, {"num_heads": 6}]),
])
def test_heads_on_three_workers_are_told_a_head_count_that_builds(width, fix, builds):
    with pytest.raises(istjax.ArgError) as e:
        istjax.ist(_lm_task(embed_dim=width, num_heads=4), optax.sgd(0.1), num_workers=3, local_steps=1)
    assert fix in str(e.value) and "or sample with istjax.uniform(pad=True)" in str(e.value), str(e.value)
    for fields in builds:  # each suggestion builds the model and IST on 3 workers
        istjax.ist(_lm_task(embed_dim=width, **fields), optax.sgd(0.1), num_workers=3, local_steps=1)
    istjax.ist(_lm_task(embed_dim=width, num_heads=4), optax.sgd(0.1), num_workers=3, local_steps=1,
               sampler=istjax.uniform(pad=True))


def test_feed_forward_units_keep_the_samplers_own_fix():
    with pytest.raises(istjax.ArgError, match=r"'mlp_0' has 5 units.*multiple of 2 \(e.g. 4 or 6\)"):
        istjax.ist(istjax.classifier(Transformer(num_classes=5, num_layers=1, embed_dim=8, num_heads=2, mlp_dim=5,
                                                 context=4), jnp.zeros((2, 4), jnp.int32), num_classes=5),
                   optax.sgd(0.1), num_workers=2, local_steps=1)


# --- Every concrete fix a refusal suggests passes the check --------------------------------------------------

DROP = None  # a fix that removes the flag
MPI = "two MPI ranks"  # the case runs as if mpiexec launched two processes

# (refused flags, [(the words of the fix in the refusal, the flags it changes), ...], needs)
SUGGESTIONS = {
    "mlp_zero_width": ({"model.hidden": "(0,)"}, [
        ("e.g. hidden=(512,)", {"model.hidden": "(512,)"}),
        ("or hidden=() for a linear classifier (trained by data_parallel or local_sgd",
         {"model.hidden": "()", "algorithm.name": "local_sgd"})], None),
    "width_not_divisible_by_w": ({"model.hidden": "(100,)", "num_workers": 3}, [
        ("(e.g. 99 or 102)", {"model.hidden": "(99,)"}), ("(e.g. 99 or 102)", {"model.hidden": "(102,)"}),
        ("--config.sampler.name=uniform_pad", {"sampler.name": "uniform_pad"})], None),
    "heads_on_3_workers": ({**TRANSFORMER, "num_workers": 3}, [
        ("--config.model.num_heads=3 --config.model.head_dim=32", {"model.num_heads": 3, "model.head_dim": 32}),
        ("--config.sampler.name=uniform_pad", {"sampler.name": "uniform_pad"})], None),
    "heads_on_3_workers_width_96": ({**TRANSFORMER, "num_workers": 3, "model.embed_dim": 96}, [
        ("--config.model.num_heads=3 or 6", {"model.num_heads": 3}),
        ("--config.model.num_heads=3 or 6", {"model.num_heads": 6}),
        ("--config.sampler.name=uniform_pad", {"sampler.name": "uniform_pad"})], None),
    "head_dim_not_whole": ({**TRANSFORMER, "num_workers": 3, "model.num_heads": 3}, [
        ("--config.model.head_dim=42", {"model.head_dim": 42})], None),
    "model_choice_typo": ({**TRANSFORMER, "model.scaling": "tset"}, [
        ("--config.model.scaling=test", {"model.scaling": "test"})], None),
    "model_field_typo": ({**TRANSFORMER, "model.scalingg": "test"}, [
        ("--config.model.scaling=test", {"model.scalingg": DROP, "model.scaling": "test"})], None),
    "exchange_values_float32": ({"exchange_values": "params"}, [
        ("--config.exchange_dtype=bfloat16", {"exchange_dtype": "bfloat16"}),
        ("Drop it", {"exchange_values": DROP})], None),
    "data_module_typo": ({"data.module": "{dir}/my_data.py:synthh", "data.name": "mine"}, [
        ("--config.data.module={dir}/my_data.py:synth", {"data.module": "{dir}/my_data.py:synth"})], None),
    "data_module_without_its_one_function": ({"data.module": "{dir}/one.py", "data.name": "mine"}, [
        ("--config.data.module={dir}/one.py:only", {"data.module": "{dir}/one.py:only"})], None),
    "data_name_of_a_shipped_set": ({"data.module": "{dir}/my_data.py:synth"}, [
        ("--config.data.name=synth", {"data.name": "synth"})], None),
    "mnist1d_train_split": ({"data.name": "mnist1d", "data.kwargs.train_split": 1.0}, [
        ("e.g. 0.8", {"data.kwargs.train_split": 0.8})], None),
    "digits_test_size": ({"data.kwargs.test_size": 1790}, [("(default 360)", {"data.kwargs.test_size": 360})], None),
    "speech_class_sep": ({"data.name": "synthetic_speech", "data.kwargs.class_sep": 0.0}, [
        ("try the default 0.25", {"data.kwargs.class_sep": 0.25})], None),
    "group_sampler_typo": ({"sampler.groups.hidden_0": "overlaping"}, [
        ("did you mean 'overlapping'", {"sampler.groups.hidden_0": "overlapping"})], None),
    "stop_at_target_without_one": ({"stop_at_target": True, "target_accuracy": None}, [
        ("--config.target_accuracy=0.9", {"target_accuracy": 0.9}), ("--config.target_loss=2.0", {"target_loss": 2.0}),
        ("leave stop_at_target False", {"stop_at_target": False})], None),
    "two_targets": ({"target_accuracy": 0.9, "target_loss": 2.0}, [
        ("--config.target_accuracy=None", {"target_accuracy": None}),
        ("--config.target_loss=None", {"target_loss": None})], None),
    "learning_rate": ({"learning_rate": -1.0}, [("e.g. 0.1", {"learning_rate": 0.1})], None),
    "momentum": ({"momentum": 1.5}, [("e.g. 0.9", {"momentum": 0.9})], None),
    "section_given_a_value": ({**DEPTH_RESNET, "algorithm.name": DROP, "algorithm": "resist"}, [
        ("--config.algorithm.name=resist", {"algorithm": DROP, "algorithm.name": "resist"})], None),
    "flat_backend": ({"backend": "mpi"}, [("--config.runtime.name=mpi", {"backend": DROP, "runtime.name": "mpi"})],
                     MPI),
    "sharded_needs_stratified": ({"runtime.name": "mpi", "runtime.mode": "sharded"}, [
        ("--config.sampler.name=stratified --config.sampler.num_owners=2",
         {"sampler.name": "stratified", "sampler.num_owners": 2}),
        ("--config.runtime.mode=parameter_server", {"runtime.mode": "parameter_server"})], MPI),
    "sharded_resist_needs_owners": ({**DEPTH_RESNET, "runtime.name": "mpi", "runtime.mode": "sharded",
                                     "model.stage_sizes": "(5,)"}, [
        ("Add --config.sampler.num_owners=2", {"sampler.num_owners": 2}),
        ("--config.runtime.mode=parameter_server", {"runtime.mode": "parameter_server"})], MPI),
    "sharded_resist_stages_too_short": ({**DEPTH_RESNET, "runtime.name": "mpi", "runtime.mode": "sharded"}, [
        ("Use --config.runtime.mode=parameter_server", {"runtime.mode": "parameter_server"}),
        ("deepen the stages (model.stage_sizes) to a multiple of 4 partitioned blocks and add "
         "--config.sampler.num_owners=2", {"model.stage_sizes": "(5,)", "sampler.num_owners": 2})], MPI),
    "sharded_resist_recompute": ({**DEPTH_RESNET, "runtime.name": "mpi", "runtime.mode": "sharded",
                                  "sampler.num_owners": 2, "algorithm.model_state": "recompute",
                                  "algorithm.test_scale": False, "model.stage_sizes": "(5,)"}, [
        ("--config.algorithm.model_state=carry", {"algorithm.model_state": "carry"}),
        ("--config.runtime.mode=parameter_server", {"runtime.mode": "parameter_server"})], MPI),
}


def _with(fields: dict, change: dict) -> dict:
    """``fields`` with ``change`` applied (a `DROP` removes the flag)."""
    return {k: v for k, v in {**fields, **change}.items() if v is not DROP}


@pytest.mark.parametrize("case", sorted(SUGGESTIONS))
def test_suggested_fix_passes_the_check(case, data_dir, monkeypatch):
    """The refusal names each fix; each, applied to the refused command, passes the config check; and every
    ``--config.FIELD=`` the refusal names is one the fixes set (a new suggestion shows up here untested)."""
    flags, fixes, needs = SUGGESTIONS[case]
    if needs == MPI:
        _as_if_launched_by_mpiexec(monkeypatch, 2)
    here = lambda v: v.replace("{dir}", str(data_dir)) if isinstance(v, str) else v  # noqa: E731
    flags = {k: here(v) for k, v in _with(flags, {}).items()}
    problems = _problems(flags)
    assert len(problems) == 1, problems
    for words, change in fixes:
        assert here(words) in problems[0], (words, problems[0])
        assert _problems(_with(flags, {k: here(v) for k, v in change.items()})) == [], (case, change)
    named = set(re.findall(r"--config\.([\w.]+)=", problems[0]))
    assert named <= {k for _, change in fixes for k in change}, (named, problems[0])


@pytest.mark.xfail(strict=True, reason="mpi.check_fit suggests multiples of the process count without asking the "
                                       "model's groups: num_workers=4 does not divide hidden=(6,)")
def test_worker_count_misfit_suggests_counts_the_model_fits(monkeypatch):
    _as_if_launched_by_mpiexec(monkeypatch, 2)
    flags = {"runtime.name": "mpi", "num_workers": 3, "model.hidden": "(6,)"}
    (problem,) = _problems(flags)
    assert "Use --config.num_workers=2 or 4" in problem
    for w in (2, 4):
        assert _problems({**flags, "num_workers": w}) == [], w
