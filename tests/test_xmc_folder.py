"""Your own XMC folder (`istjax.data.extreme.folder`, ``data.name=xmc``): read defensively, named after its folder, with
``labels.txt`` optional; trained from the command line with a summary in the task's own metrics (P@1, P@5, PSP@1,
PSP@5) and no target unless the config sets one; and the docs' example ("Your own XMC files") as written."""

from __future__ import annotations

import gzip
import json
import pathlib
import re
import runpy
import shlex

import numpy as np
import pytest

import istjax.launch.config as config_lib
from conftest import persistent_compilation_cache
from istjax.data import DataNotFoundError, load_dataset
from istjax.data.extreme.folder import FOLDER_HOLDS, read_xmc_folder
from istjax.launch import cli
from istjax.launch.summary import summary_text

REPO = pathlib.Path(__file__).resolve().parents[1]
NUM_FEATURES, NUM_LABELS = 24, 6


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ISTJAX_CACHE_DIR", str(tmp_path / "cache"))


def _split_text(n: int, seed: int, header: str = "") -> str:
    """``n`` points of two labels each, label ``l`` told by one of its features ``4l .. 4l + 3``."""
    rng = np.random.default_rng(seed)
    lines = [header or f"{n} {NUM_FEATURES} {NUM_LABELS}"]
    for _ in range(n):
        labels = np.sort(rng.choice(NUM_LABELS, 2, replace=False))
        features = sorted({int(4 * l + rng.integers(4)) for l in labels})
        lines.append(",".join(map(str, labels)) + " " + " ".join(f"{f}:0.5" for f in features))
    return "\n".join(lines) + "\n"


def write_folder(folder: pathlib.Path, *, labels: bool = True, gz: bool = False) -> pathlib.Path:
    """A folder in the repository format: 64 training and 32 test points, and ``labels.txt`` when ``labels``."""
    folder.mkdir(parents=True)
    for split, n, seed in (("train", 64, 0), ("test", 32, 1)):
        raw = _split_text(n, seed).encode()
        (folder / f"{split}.txt{'.gz' if gz else ''}").write_bytes(gzip.compress(raw) if gz else raw)
    if labels:
        (folder / "labels.txt").write_text("".join(f"pkg-{i}\n" for i in range(NUM_LABELS)))
    return folder


def _train(folder, workdir, *extra) -> list[str]:
    return ["istjax", "train", f"--workdir={workdir}", "--config.data.name=xmc", f"--config.data.kwargs.path={folder}",
            "--config.model.name=sparse_mlp", "--config.model.hidden=(8,)", "--config.num_workers=2",
            "--config.local_steps=2", "--config.batch_size=8", "--config.num_rounds=2", "--config.eval_every=1",
            "--config.progress=False", *extra]


# --------------------------------------------------------------------------
# The reader
# --------------------------------------------------------------------------


def test_the_set_is_named_after_its_folder_and_its_labels_by_index_without_labels_txt(tmp_path):
    named = read_xmc_folder(write_folder(tmp_path / "my-xmc"))
    assert (named.name, named.train.name, named.test.name) == ("my-xmc", "my-xmc/train", "my-xmc/test")
    assert named.label_names == tuple(f"pkg-{i}" for i in range(NUM_LABELS))
    assert (named.train.num_points, named.test.num_points, named.train.num_features) == (64, 32, NUM_FEATURES)
    bare = read_xmc_folder(write_folder(tmp_path / "bare", labels=False, gz=True))  # gzipped, no labels.txt
    assert bare.name == "bare" and bare.label_names == tuple(str(i) for i in range(NUM_LABELS))
    assert np.array_equal(bare.train.labels.ids, named.train.labels.ids)
    data = load_dataset("xmc", path=str(tmp_path / "my-xmc"))
    assert (data.name, data.num_classes, data.num_feature_ids) == ("my_xmc", NUM_LABELS, NUM_FEATURES)
    assert data.train_x.shape == (64, 8, 2)  # the longest row (2 features) in the smallest bucket, not 256 wide
    assert data.label_weights.shape == (NUM_LABELS,)  # PSP@k's weights, from the training labels


@pytest.mark.parametrize("damage, message", [
    ({"labels.txt": "a\nb\nc\nd\ne\n"}, r"labels.txt: 5 label names, but the data files declare 6 labels"),
    ({"labels.txt": b"a\n\xff\nc\nd\ne\nf\n"}, r"labels.txt: line 2: not UTF-8"),
    ({"labels.txt": "a\nb\n \nd\ne\nf\n"}, r"labels.txt: line 3: an empty label name"),
    ({"train.txt.gz": gzip.compress(_split_text(64, 0).encode())}, r"holds both train.txt and train.txt.gz"),
    ({"test.txt": _split_text(32, 1, f"32 {NUM_FEATURES} 7")}, rf"declares {NUM_FEATURES} features and 7 labels, but"),
    ({"test.txt": f"0 {NUM_FEATURES} {NUM_LABELS}\n"}, r"test.txt: the test split holds no points"),
    ({"test.txt": f"1 {NUM_FEATURES} {2**31}\n0 1:1\n"}, r"test.txt: line 1: .*ids are int32"),
    ({"test.txt": _split_text(32, 1).replace("\n0,", "\n6,", 1)}, r"test.txt: line \d+: label id 6 is past"),
    ({"test.txt": _split_text(32, 1).rsplit("\n", 2)[0] + "\n"}, r"test.txt: line 33: the file ends after 31 of"),
])
def test_what_comes_from_outside_is_checked_as_it_is_read(tmp_path, damage, message):
    folder = write_folder(tmp_path / "mine")
    for name, content in damage.items():
        path = folder / name
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    with pytest.raises(ValueError, match=message) as e:
        read_xmc_folder(folder)
    assert "\n" not in str(e.value) and "Debian" not in str(e.value)


@pytest.mark.parametrize("case", ["no folder", "a file", "no test.txt", "empty folder"])
def test_a_missing_folder_or_file_is_refused_in_one_line_naming_the_path_and_what_it_must_hold(tmp_path, capsys,
                                                                                                 case):
    folder = tmp_path / "mine"
    if case == "a file":
        folder.write_text("not a folder")
    elif case == "no test.txt":
        write_folder(folder)
        (folder / "test.txt").unlink()
    elif case == "empty folder":
        folder.mkdir()
    with pytest.raises(DataNotFoundError):
        read_xmc_folder(folder)
    assert cli.main(_train(folder, tmp_path / "run")) == 2
    err = capsys.readouterr().err
    (line,) = [l for l in err.splitlines() if str(folder) in l]  # one line names the path ...
    assert FOLDER_HOLDS in line  # ... and what the folder must hold
    expected = {"no folder": "does not exist", "a file": "is a file, not a folder",
                "no test.txt": "has no test.txt or test.txt.gz (found: ['labels.txt', 'train.txt'])",
                "empty folder": "has no train.txt or train.txt.gz (found: nothing)"}[case]
    assert expected in line
    assert "Traceback" not in err and "Debian" not in err and "build.py" not in err
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------
# Training from the command line, and the summary
# --------------------------------------------------------------------------

METRICS_LINE = re.compile(r"  test P@1 (\d\.\d{4}), P@5 (\d\.\d{4}), PSP@1 (\d\.\d{4}), PSP@5 (\d\.\d{4}), "
                          r"test loss \d+\.\d{4}, train loss \d+\.\d{4}")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """One compilation cache for the module: the folders below hold the same arrays, so their runs compile the same
    programs and the second loads them."""
    return tmp_path_factory.mktemp("jax-cache")


@pytest.mark.parametrize("labels", [False, True], ids=["without labels.txt", "with labels.txt"])
def test_your_folder_trains_from_the_command_line_and_the_summary_shows_p_at_k_and_psp_at_k(tmp_path, capsys,
                                                                                              compiled, labels):
    folder = write_folder(tmp_path / "mine", labels=labels)
    with persistent_compilation_cache(compiled):
        assert cli.main(_train(folder, tmp_path / "run")) == 0
    out = capsys.readouterr().out
    (line,) = [l for l in out.splitlines() if METRICS_LINE.fullmatch(l)]
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    last = json.loads((tmp_path / "run/metrics.jsonl").read_text().splitlines()[-1])
    shown = [float(v) for v in METRICS_LINE.fullmatch(line).groups()]
    keys = ("test_precision_at_1", "test_precision_at_5", "test_psp_at_1", "test_psp_at_5")
    assert shown == [round(last[k], 4) for k in keys] == [round(summary[k], 4) for k in keys]
    assert summary["test_accuracy"] == last["test_precision_at_1"]  # what a target would read
    assert "test accuracy" not in out and "reached" not in out  # no target line: the config sets none
    assert "target_accuracy" not in summary and summary["dataset"] == "xmc"


def test_the_target_line_appears_only_when_the_config_sets_one_and_names_the_tasks_accuracy():
    assert config_lib.default_config().target_accuracy is None  # a custom run inherits no target
    digits = runpy.run_path(str(REPO / "experiments/configs/digits_ist.py"))["get_config"]()
    assert digits.target_accuracy == 0.95  # the digits study sets its own
    base = {"rounds": 2, "algorithm": "ist", "dataset": "xmc", "num_workers": 2, "local_steps": 2, "batch_size": 8,
            "test_accuracy": 0.5, "test_loss": 1.0, "train_loss": 1.0, "samples_seen": 64, "time_per_round_s": 0.1,
            "wall_time_s": 0.2, "compile_time_s": 1.0, "bytes_received_per_worker_per_round": 10,
            "bytes_sent_per_worker_per_round": 10, "bytes_total": 80, "workdir": "w"}
    assert "reached" not in summary_text(base)
    xmc = {**base, "metric_labels": {"test_accuracy": "test P@1", "test_loss": "test loss"}}
    assert "  test P@1 0.6 not reached" in summary_text({**xmc, "target_accuracy": 0.6, "round_to_target": None})
    hit = {"target_accuracy": 0.4, "round_to_target": 1, "samples_to_target": 32, "time_to_target_s": 0.1}
    assert "  reached test P@1 0.4 at round 1 (32 samples, 0.1 s of training)" in summary_text({**xmc, **hit})
    assert "  reached test accuracy 0.4 at round 1" in summary_text({**base, **hit})  # a classifier's


def test_a_run_on_your_own_data_without_a_target_prints_no_target(tmp_path, capsys):
    (tmp_path / "mine.py").write_text(
        "import numpy as np\nimport istjax\n\n\ndef table():\n"
        "    rng = np.random.default_rng(0)\n    x = rng.normal(size=(96, 4)).astype(np.float32)\n"
        "    return istjax.data.from_arrays(x, (x[:, 0] > 0).astype(np.int32), test_fraction=0.25)\n")
    argv = ["istjax", "train", f"--workdir={tmp_path / 'run'}", f"--config.data.module={tmp_path / 'mine.py'}:table",
            "--config.data.name=table", "--config.model.hidden=(8,)", "--config.num_workers=2", "--config.local_steps=1",
            "--config.batch_size=8", "--config.num_rounds=1", "--config.model.batch_norm=False",
            "--config.model.output_batch_norm=False", "--config.progress=False"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "  test accuracy " in out and "reached" not in out


# --------------------------------------------------------------------------
# The docs' example
# --------------------------------------------------------------------------


def _docs_section() -> str:
    text = (REPO / "docs/extreme.md").read_text()
    return text[text.index("## Your own XMC files"):text.index("## A memory limit per rank")]


def test_the_docs_example_writes_a_folder_whose_command_builds(tmp_path, monkeypatch):
    """The section's Python writes the folder it describes, and its command is a valid config on it (built
    whole: data, model, algorithm; training it is the summary the section shows)."""
    section = _docs_section()
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    (command,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/extreme.md", "exec"), {"__name__": "docs_example"})  # noqa: S102 - our own docs
    data = read_xmc_folder("my-xmc")
    assert (data.train.num_points, data.test.num_points, data.train.num_labels) == (800, 200, 20)
    assert data.label_names[:2] == ("label-0", "label-1")
    first = (tmp_path / "my-xmc/train.txt").read_text().splitlines()[:3]
    assert "`my-xmc/train.txt` then begins " + ", ".join(f"`{l}`" for l in first) in section
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[:2] == ["istjax", "train"]
    config, workdir, *_ = cli.parse_train_args(["istjax train", *argv[2:]])
    assert workdir == "runs/my-xmc" and config.target_accuracy is None
    config_lib.validate(config)
