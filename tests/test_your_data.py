"""Your own data: `istjax.data.from_arrays`, `data.module` (a user's function named in a config), the checks on what
it returns, and one launch under mpiexec with one writer."""

import json
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import istjax
import istjax.launch.config as config_lib
from istjax.data import check_dataset, from_arrays, load_module_dataset
from istjax.launch.config import ConfigError
from test_cli import istjax_command, subprocess_env

DATA_FILE = textwrap.dedent('''
    import numpy as np
    import istjax

    def blobs(n=240, classes=3, seed=0):
        rng = np.random.default_rng(seed)
        y = np.arange(n) % classes
        x = rng.normal(size=(n, 6)) + 3.0 * np.eye(classes, 6)[y]
        return istjax.data.from_arrays(x * 10 + 5, y, test_fraction=0.25, seed=seed, name="blobs")

    def flat_features():
        d = blobs()
        return d._replace(train_x=d.train_x[:, 0])

    def labels_out_of_range():
        d = blobs()
        return d._replace(test_y=(d.test_y + 5).astype(np.int32))

    def empty_test_split():
        d = blobs()
        return d._replace(test_x=d.test_x[:0], test_y=d.test_y[:0])

    def arrays_not_a_dataset():
        d = blobs()
        return d.train_x, d.train_y, d.test_x, d.test_y
''')


@pytest.fixture
def data_dir(tmp_path):
    (tmp_path / "my_data.py").write_text(DATA_FILE)
    return tmp_path


def test_from_arrays_splits_stratified_and_standardises_with_training_statistics():
    rng = np.random.default_rng(0)
    x, y = rng.normal(3.0, 5.0, size=(200, 4)), np.arange(200) % 4
    d = from_arrays(x, y, test_fraction=0.25, seed=1, name="mine")
    assert (len(d.train_y), len(d.test_y), d.num_classes, d.name) == (150, 50, 4, "mine")
    assert d.train_x.dtype == np.float32 and d.train_y.dtype == np.int32
    np.testing.assert_allclose(d.train_x.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(d.train_x.std(0), 1, atol=1e-4)
    assert np.bincount(d.test_y).tolist() == [13, 13, 12, 12] or sorted(np.bincount(d.test_y)) == [12, 12, 13, 13]
    # The test split is standardised with the training split's statistics, not its own.
    assert np.abs(d.test_x.mean(0)).max() > 1e-3
    mine = from_arrays(x[:150], y[:150], test_x=x[150:], test_y=y[150:], num_classes=5)
    assert (len(mine.test_y), mine.num_classes) == (50, 5)


@pytest.mark.parametrize("call,words", [
    (lambda x, y: from_arrays(x[:, 0], y), "x has shape (60,); give [N, ...]"),
    (lambda x, y: from_arrays(x, y + 1, num_classes=2), "y holds labels in [1, 2] but num_classes=2"),
    (lambda x, y: from_arrays(x, y + 0.5), "y holds float64 values; give integer class labels"),
    (lambda x, y: from_arrays(x, y[:-1]), "x has 60 examples but y has 59"),
    (lambda x, y: from_arrays(x, y, test_fraction=0.001), "leaves an empty split"),
    (lambda x, y: from_arrays(np.where(x > 1, np.nan, x), y), "NaN or infinite"),
    (lambda x, y: from_arrays(x, y, test_x=x), "give test_x and test_y together"),
])
def test_from_arrays_refuses_bad_arrays_naming_the_argument_and_the_fix(call, words):
    x, y = np.random.default_rng(0).normal(size=(60, 3)), np.arange(60) % 2
    with pytest.raises(ValueError) as e:
        call(x, y)
    assert words in str(e.value)


def test_a_data_module_loads_a_users_function_with_its_kwargs(data_dir):
    d = load_module_dataset(f"{data_dir / 'my_data.py'}:blobs", n=120)
    assert (len(d.train_y) + len(d.test_y), d.num_classes) == (120, 3)
    with pytest.raises(ValueError, match=r"blobs takes no argument\(s\) \['rows'\].*\['classes', 'n', 'seed'\]"):
        load_module_dataset(f"{data_dir / 'my_data.py'}:blobs", rows=3)
    with pytest.raises(ValueError, match=r"has no 'nothing'; the functions defined there are \["):
        load_module_dataset(f"{data_dir / 'my_data.py'}:nothing")


@pytest.mark.parametrize("fn,words", [
    ("flat_features", "train_x has shape (180,); each split needs [N, ...] features"),
    ("labels_out_of_range", "test_y holds labels in [5, 7] but num_classes=3"),
    ("empty_test_split", "test_x has no example"),
    ("arrays_not_a_dataset", "returned a tuple, not an istjax.data.Dataset; return istjax.data.from_arrays(x, y)"),
])
def test_a_data_module_returning_bad_data_is_refused_in_one_or_two_lines(data_dir, fn, words):
    config = config_lib.default_config()
    config.data.name, config.data.module = "blobs", f"{data_dir / 'my_data.py'}:{fn}"
    with pytest.raises(ConfigError) as e:
        config_lib.build(config)
    assert len(e.value.problems) == 1, e.value.problems
    problem = e.value.problems[0]
    assert problem.startswith(f"data.module='{data_dir / 'my_data.py'}:{fn}'") and words in problem, problem
    assert problem.count("\n") <= 1


def test_a_data_module_needs_a_name_of_its_own_and_is_recorded_absolute(data_dir, monkeypatch):
    monkeypatch.chdir(data_dir)
    config = config_lib.default_config()
    config.data.module = "my_data.py:blobs"
    with pytest.raises(ConfigError, match=r"'digits' names a dataset istjax ships.*--config.data.name=blobs"):
        config_lib.build(config)
    config.data.name = "blobs"
    checked = config_lib.build(config)
    assert config.data.module == f"{data_dir / 'my_data.py'}:blobs"
    assert checked.dataset.name == "blobs" and checked.task is not None


def test_check_dataset_names_where_the_data_came_from():
    d = from_arrays(np.ones((40, 2)) * np.arange(40)[:, None], np.arange(40) % 2)
    assert check_dataset(d, "mine") is d
    with pytest.raises(ValueError, match="mine: train_x is float64, not float32"):
        check_dataset(d._replace(train_x=np.asarray(d.train_x, np.float64)), "mine")


def test_a_small_test_split_evaluates_as_one_batch_and_a_tiny_one_is_refused_with_the_models_fix(data_dir):
    config = config_lib.default_config()
    config.data.name, config.data.module = "blobs", f"{data_dir / 'my_data.py'}:blobs"
    config.data.kwargs, config.batch_size = {"n": 100}, 8  # 75 / 25: a test split under MIN_BATCH_STATISTICS_SPLIT
    with pytest.raises(ConfigError, match=r"a split of 25 examples.*--config.model.batch_norm=False "
                                          r"--config.model.output_batch_norm=False"):
        config_lib.build(config)
    config.model.batch_norm = config.model.output_batch_norm = False
    config_lib.build(config)


def _run(*args, cwd):
    env = subprocess_env()
    env.pop("PYTHONPATH", None)
    return subprocess.run(istjax_command() + list(args), capture_output=True, text=True, env=env, timeout=300,
                          cwd=cwd)


FAST = ["--config.num_workers=2", "--config.local_steps=2", "--config.batch_size=16", "--config.eval_every=2",
        "--config.checkpoint_every=2", "--config.progress=False", "--config.model.hidden=(64,)"]


@pytest.mark.slow
def test_a_data_module_trains_resumes_evaluates_and_plots_from_another_folder(data_dir, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    run = data_dir / "runs" / "blobs"
    p = _run("train", "--config.data.module=my_data.py:blobs", "--config.data.name=blobs", f"--workdir={run}",
             "--config.num_rounds=4", *FAST, cwd=data_dir)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "evaluated as one batch" in p.stderr and "on blobs" in p.stdout
    assert json.loads((run / "config.json").read_text())["data"]["module"] == f"{data_dir / 'my_data.py'}:blobs"
    p = _run("train", f"--workdir={run}", "--resume", "--config.num_rounds=6", cwd=elsewhere)
    assert p.returncode == 0, p.stderr[-3000:]
    assert [json.loads(line)["round"] for line in (run / "metrics.jsonl").read_text().splitlines()][-1] == 6
    p = _run("eval", f"--workdir={run}", cwd=elsewhere)
    assert p.returncode == 0 and "(round 6)" in p.stdout, p.stderr[-3000:]
    p = _run("plot", str(run), "--out", str(elsewhere / "blobs.png"), cwd=elsewhere)
    assert p.returncode == 0 and (elsewhere / "blobs.png").stat().st_size > 0, p.stderr[-3000:]
    p = _run("compare", "--runs", str(run), f"--workdir={elsewhere / 'cmp'}", cwd=elsewhere)
    assert p.returncode == 0 and "| ist | 2 |" in (elsewhere / "cmp" / "comparison.md").read_text(), p.stderr[-3000:]


MPIEXEC = pathlib.Path(sys.executable).parent / "mpiexec"


@pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not installed (pip install mpich)")
def test_mpiexec_without_the_mpi_runtime_is_refused_on_every_rank_writing_nothing(tmp_path):
    run = tmp_path / "run"
    env = subprocess_env()
    p = subprocess.run([str(MPIEXEC), "-n", "2", *istjax_command(), "train", f"--workdir={run}",
                        "--config.num_rounds=2"], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    out = p.stdout + p.stderr
    assert "mpiexec launched 2 processes" in out and "--config.runtime.name=mpi" in out, out
    assert "every one of the 2 ranks stopped" in out, out
    assert not run.exists()


@pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec not installed (pip install mpich)")
def test_the_sharded_mode_for_an_algorithm_that_holds_replicas_is_refused(tmp_path):
    env = subprocess_env()
    p = subprocess.run([str(MPIEXEC), "-n", "2", *istjax_command(), "train", f"--workdir={tmp_path / 'run'}",
                        "--config.runtime.name=mpi", "--config.runtime.mode=sharded",
                        "--config.algorithm.name=data_parallel", "--config.num_rounds=2"],
                       capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "'data_parallel' exchanges gradients" in p.stdout + p.stderr
    assert "--config.runtime.mode=parameter_server" in p.stdout + p.stderr
    assert not (tmp_path / "run").exists()  # refused before anything was written: not even the lock is left


def test_the_run_summary_names_the_runtime_and_the_process_count():
    from istjax.launch.summary import summary_text

    base = {"rounds": 2, "algorithm": "ist", "dataset": "digits", "num_workers": 4, "local_steps": 2, "batch_size": 8,
            "test_accuracy": 0.5, "test_loss": 1.0, "train_loss": 1.0, "samples_seen": 128, "time_per_round_s": 0.1,
            "wall_time_s": 0.2, "compile_time_s": 1.0, "eval_compile_time_s": 0.5,
            "bytes_received_per_worker_per_round": 10, "bytes_sent_per_worker_per_round": 10, "bytes_total": 80,
            "workdir": "w"}
    assert "runtime simulate, 1 process\n" in summary_text({**base, "runtime": "simulate", "num_processes": 1})
    assert "runtime mpi (sharded), 2 processes" in summary_text(
        {**base, "runtime": "mpi", "runtime_mode": "sharded", "num_processes": 2})
    assert "compiling the step 1.0 s, the evaluation 0.5 s" in summary_text({**base, "runtime": "simulate"})


def test_the_dataset_of_arrays_reaches_the_python_api_end_to_end():
    import jax
    import optax

    from istjax.data import make_batch_fn
    from istjax.models import MLP

    rng = np.random.default_rng(0)
    y = np.arange(200) % 2
    data = from_arrays(rng.normal(size=(200, 5)) + 2.0 * y[:, None], y)
    task = istjax.classifier(MLP(hidden=(16,), num_classes=2, batch_norm=False, output_batch_norm=False), data)
    alg = istjax.ist(task, optax.sgd(0.1), num_workers=2, local_steps=2)
    batches = make_batch_fn(data, num_workers=2, local_steps=2, batch_size=8, seed=0)
    state = alg.init(jax.random.key(0))
    for r in range(10):
        state, metrics = alg.round(state, batches(r))
        istjax.check_finite(metrics, r)
    _, aux = task.evaluate(state.params, state.model_state, {"x": data.test_x, "y": data.test_y})
    assert float(aux["accuracy"]) > 0.8


def test_a_config_importing_a_missing_module_says_where_python_looked(tmp_path, monkeypatch):
    """The console script puts neither the current folder nor the config's on sys.path by itself: the message says
    what was searched, not "the current folder"."""
    from istjax.core.user_code import searched

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    assert f"does NOT include the current folder {tmp_path}" in searched()
    with pytest.raises(ValueError, match=r"no module named 'nowhere_pkg' here \(searched sys.path, which does NOT "
                                         r"include the current folder"):
        load_module_dataset("nowhere_pkg.data:load")


def test_workers_that_do_not_split_a_width_under_mpi_get_the_command_line_fix(monkeypatch):
    """W = 3 on 2 ranks: both refusals speak the command line (--config.sampler.name=uniform_pad), never the Python
    istjax.uniform(pad=True); from Python the sampler's refusal names the Python fix."""
    from test_refusals import _as_if_launched_by_mpiexec

    _as_if_launched_by_mpiexec(monkeypatch, 2)
    config = config_lib.default_config()
    config.runtime.name, config.num_workers = "mpi", 3
    with pytest.raises(ConfigError) as e:
        config_lib.build(config)
    text = str(e.value)
    assert "--config.num_workers=2 or 4" in text and "--config.sampler.name=uniform_pad" in text, text
    assert "istjax.uniform(pad=True)" not in text
    with pytest.raises(istjax.ArgError, match=r"istjax.uniform\(pad=True\)"):
        istjax.uniform().slots({"hidden_0": 512}, 3)


def test_a_runtime_option_the_runtime_does_not_read_is_refused():
    config = config_lib.default_config()
    config.runtime.mode = "sharded"
    with pytest.raises(ConfigError, match=r"runtime.mode='sharded': runtime.name='simulate' does not read it, so it "
                                          r"would change nothing.*--config.runtime.name=mpi"):
        config_lib.validate(config, load_data=False)
