"""Listings that cannot go stale: `istjax train --help` reads the registries, `istjax configs` every shipped config's
``Result:`` line, and `istjax plot` a language model's own metric with a legend of the fields that apply."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

import istjax.data as data_lib
import istjax.models as models_lib
from istjax.algorithms import ALGORITHMS
from istjax.core.partition import SAMPLERS
from istjax.launch import catalog, cli, plot
from istjax.launch.config import default_config, to_dict
from istjax.launch.metrics import format_mean_std
from istjax.runtimes import RUNTIMES

REPO = pathlib.Path(__file__).resolve().parent.parent


def _help(capsys) -> str:
    assert cli.main(["istjax", "train", "--help"]) == 0
    return capsys.readouterr().out


def _listed(text: str, field: str) -> list[str]:
    """The names the help's "registered names" section gives ``field`` (a line of names, or one name a line)."""
    section = text.split("registered names", 1)[1]
    block = re.search(rf"\n  {re.escape(field)} \([\w.]+\):(.*?)(?=\n  \S|\Z)", section, re.S).group(1)
    if block.startswith("\n"):  # one name a line, with its description (wrapped lines indented further)
        return [line.split()[0] for line in block.splitlines()
                if re.match(r"    \S", line) and not line.startswith("    or ")]
    return [n.strip() for n in " ".join(block.split()).split(";")[0].rstrip(".").split(",")]


def test_train_help_lists_every_registered_name(capsys):
    text = _help(capsys)
    for field, registry in (("algorithm.name", ALGORITHMS), ("sampler.name", SAMPLERS),
                            ("model.name", models_lib.MODELS), ("data.name", data_lib.DATASETS),
                            ("runtime.name", RUNTIMES)):
        assert _listed(text, field) == registry.names(), field
    # The three the hand-written list lacked.
    assert "text" in _listed(text, "data.name") and "shakespeare" in _listed(text, "data.name")
    assert "transformer" in _listed(text, "model.name")
    # An entry's description comes from the registry too.
    assert ALGORITHMS.get("diloco").description.split(":")[0] in text.split("registered names", 1)[1]


def test_train_help_compiles_nothing():
    env = {**os.environ, "JAX_LOG_COMPILES": "1", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", "import sys; from istjax.launch.cli import main; "
                           "sys.exit(main(['istjax', 'train', '--help']))"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "registered names" in done.stdout
    assert "ompil" not in done.stderr, done.stderr  # JAX logs every compilation under JAX_LOG_COMPILES


class _ProbeMLP(models_lib.MLP):
    """A throwaway model: the stock MLP under a name of its own."""


def _probe_data(num_train: int = 40):
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(num_train + 10, 3)).astype("float32")
    return data_lib.from_arrays(x, (x[:, 0] > 0).astype("int32"), test_fraction=0.2, name="listing_probe_data")


@pytest.fixture
def throwaway():
    """A data set and a model registered through the public API, removed again afterwards."""
    data_lib.register_dataset("listing_probe_data", _probe_data)
    models_lib.register_model("listing_probe_model", _ProbeMLP)
    yield
    data_lib.DATASETS._entries.pop("listing_probe_data", None)
    models_lib.MODELS._entries.pop("listing_probe_model", None)


def test_help_lists_a_data_set_and_a_model_registered_by_user_code(throwaway, capsys):
    text = _help(capsys)
    assert "listing_probe_data" in _listed(text, "data.name")
    assert "listing_probe_model" in _listed(text, "model.name")
    # The registered loader is what data.name now loads, with its keyword arguments, its result checked.
    assert data_lib.load_dataset("listing_probe_data", num_train=60).train_x.shape[1] == 3
    with pytest.raises(ValueError, match="bogus"):
        data_lib.load_dataset("listing_probe_data", bogus=1)


def test_register_dataset_refusals(throwaway):
    with pytest.raises(ValueError, match="names a dataset istjax ships"):
        data_lib.register_dataset("digits", _probe_data)
    with pytest.raises(ValueError, match="not a function"):
        data_lib.register_dataset("listing_probe_other", 3)
    data_lib.register_dataset("listing_probe_other", lambda: [1, 2])
    try:
        with pytest.raises(ValueError, match="not an istjax.data.Dataset"):
            data_lib.load_dataset("listing_probe_other")
    finally:
        data_lib.DATASETS._entries.pop("listing_probe_other", None)


# ------------------------------------------------------------------------------------------ istjax configs


def test_every_shipped_config_has_a_result_line_the_catalog_shows(capsys):
    entries = catalog.shipped_configs()
    assert len(entries) == sum(1 for d in catalog.CONFIG_DIRS for p in (REPO / d).glob("*.py")
                               if p.name != "__init__.py")
    assert catalog.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    for entry, line in zip(entries, lines):
        assert entry.result, f"{entry.path}: no paragraph beginning with {catalog.RESULT_PREFIX!r} in its docstring"
        assert line.startswith(entry.path) and line.endswith(f"| result: {entry.result}"), line
        # A figure, or a results file that exists, or an explicit "not measured".
        named = re.findall(r"experiments/[\w./-]+\.json", entry.result)
        assert entry.result.startswith("not measured") or re.search(r"\d", entry.result) or named, entry
        for path in named:
            assert (REPO / path).is_file(), (entry.path, path)


def test_result_lines_copy_their_results_files():
    by_path = {e.path: e for e in catalog.shipped_configs()}
    debian = json.loads((REPO / "experiments/extreme/results/debian.json").read_text())
    (row,) = [r for r in debian["rows"] if r["label"] == "ist_p2_h256"]
    p1 = format_mean_std(row["precision_at_1_mean"], row["precision_at_1_std"], len(row["seeds"]))
    assert by_path["experiments/configs/xmc_debian_ist.py"].result.startswith(f"P@1 {p1}")
    text = json.loads((REPO / "experiments/text/results/tuned.json").read_text())
    (row,) = [r for r in text["rows"] if r["label"] == "ist_width_w2"]
    shakespeare = by_path["experiments/configs/shakespeare_transformer.py"].result
    assert f"{row['val_loss_mean']:.3f} ± {row['val_loss_std']:.3f} nats/char" in shakespeare
    # A result line naming a row of its results file shows that row's accuracy.
    rows = json.loads((REPO / "experiments/mlp/results/breast_cancer.json").read_text())["rows"]
    (row,) = [r for r in rows if r["label"] == "ist"]
    acc = format_mean_std(row["test_accuracy_mean"], row["test_accuracy_std"], len(row["seeds"]))
    assert by_path["experiments/configs/breast_cancer.py"].result == (
        f"test accuracy {acc} in experiments/mlp/results/breast_cancer.json")


# ------------------------------------------------------------------------------------------ istjax plot


def _fake_run(path: pathlib.Path, *, algorithm="ist", model=None, losses=(3.1, 2.6, 2.4), **fields) -> pathlib.Path:
    """A run directory as the driver writes it: ``config.json`` and one ``metrics.jsonl`` record per evaluation."""
    config = to_dict(default_config())
    config["algorithm"]["name"] = algorithm
    config["model"] = model or {"name": "transformer", "module": "", "num_layers": 1, "embed_dim": 16,
                                "num_heads": 2, "mlp_dim": 32, "context": 8, "split": "width", "scaling": "test"}
    config["data"]["name"] = "shakespeare" if config["model"]["name"] == "transformer" else "digits"
    for dotted, value in fields.items():
        section, key = dotted.split("__") if "__" in dotted else (None, dotted)
        (config[section] if section else config)[key] = value
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    records = [{"round": 2 * (i + 1), "test_loss": loss, "test_accuracy": 0.2 + 0.01 * i, "train_loss": loss,
                "wall_time_s": 1.0 + i, "bytes_total": 1e6 * (i + 1), "num_workers": 2, "algorithm": algorithm}
               for i, loss in enumerate(losses)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_plot_of_a_language_model_draws_validation_nats_per_char(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    runs = [_fake_run(tmp_path / "test", model__scaling="test"),
            _fake_run(tmp_path / "train", model__scaling="train", losses=(3.2, 2.8, 2.7))]
    assert plot.main([str(d) for d in runs] + ["--out", str(tmp_path / "lm.png")]) == 0
    fig = figures[0]
    rounds_panel = fig.axes[0]
    assert rounds_panel.get_ylabel() == "validation loss (nats/char)"
    assert sorted(list(line.get_ydata()) for line in rounds_panel.get_lines()) == [[3.1, 2.6, 2.4], [3.2, 2.8, 2.7]]
    assert fig._suptitle.get_text().startswith("validation loss (nats/char) of transformer on shakespeare")
    assert "%" not in rounds_panel.yaxis.get_major_formatter().format_data(2.5)  # a loss, not a percentage
    # A classifier's run beside a language model's is refused: one y axis cannot show both.
    mlp = _fake_run(tmp_path / "mlp", model={"name": "mlp", "module": "", "hidden": [8]})
    assert plot.main([str(runs[0]), str(mlp), "--out", str(tmp_path / "mixed.png")]) == 2
    assert plot.y_metric([plot.load_run(mlp)]) == ("test_accuracy", "test accuracy")


def test_legend_names_only_the_fields_that_apply_to_each_run(tmp_path):
    dirs = [_fake_run(tmp_path / "ist_test", model__scaling="test"),
            _fake_run(tmp_path / "ist_train", model__scaling="train"),
            _fake_run(tmp_path / "diloco_a", algorithm="diloco", algorithm__outer_learning_rate=0.5),
            _fake_run(tmp_path / "diloco_b", algorithm="diloco", algorithm__outer_learning_rate=0.7),
            _fake_run(tmp_path / "mlp", model={"name": "mlp", "module": "", "hidden": [8]})]
    labels = plot.legend_labels(plot.group_runs([plot.load_run(d) for d in dirs]))
    ist_test, ist_train, diloco_a, diloco_b, mlp = labels
    assert "model.scaling=test" in ist_test and "model.scaling=train" in ist_train
    assert "outer_learning_rate" not in ist_test + ist_train + mlp  # DiLoCo's option, not IST's
    assert "algorithm.outer_learning_rate=0.5" in diloco_a and "algorithm.outer_learning_rate=0.7" in diloco_b
    assert "scaling" not in mlp and mlp.startswith("ist model=mlp")  # a transformer's field, not an MLP's
    # A sampler's option names a run only under a sampler that takes it.
    uniform = [_fake_run(tmp_path / f"u{m}", sampler__min_units=m) for m in (0, 2)]
    assert not any("min_units" in t for t in plot.legend_labels(plot.group_runs(map(plot.load_run, uniform))))
    overlapping = [_fake_run(tmp_path / f"o{m}", sampler__name="overlapping", sampler__min_units=m) for m in (1, 2)]
    assert [t.split()[-1] for t in plot.legend_labels(plot.group_runs(map(plot.load_run, overlapping)))] == [
        "sampler.min_units=1", "sampler.min_units=2"]
