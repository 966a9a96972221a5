"""`istjax configs`: the shipped config files, their descriptions and stated results, read without running them."""

import json
import pathlib

from istjax.launch import catalog
from istjax.launch.metrics import format_mean_std

REPO = pathlib.Path(__file__).resolve().parent.parent


def test_lists_every_shipped_config_with_a_description():
    entries = catalog.shipped_configs()
    by_path = {e.path: e for e in entries}
    for folder in catalog.CONFIG_DIRS:
        for path in sorted((REPO / folder).glob("*.py")):
            entry = by_path[path.relative_to(REPO).as_posix()]
            assert entry.description and not entry.description.startswith("("), entry
    # A docstring pointing to a committed results file shows what that file holds for the config as it is.
    digits = json.loads((REPO / "experiments/mlp/results/digits.json").read_text())
    (row,) = [r for r in digits["rows"] if r["config"] == "experiments/configs/digits_ist.py" and not r["overrides"]]
    assert by_path["experiments/configs/digits_ist.py"].result == (
        f"test accuracy {format_mean_std(row['test_accuracy_mean'], row['test_accuracy_std'], len(row['seeds']))} "
        f"in experiments/mlp/results/digits.json")
    # One with no committed result says so; one with figures of its own shows them.
    assert by_path["experiments/configs/csbm_gist.py"].result.startswith("not measured")
    assert by_path["experiments/theory/configs/quadratic.py"].result.startswith("all 30 per-coordinate z-scores")
    # A first line that does not end the sentence: the whole first paragraph.
    assert by_path["experiments/speech/configs/speech_mlp.py"].description.endswith("local-step counts K.")


def test_main_text_and_markdown(capsys):
    assert catalog.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(catalog.shipped_configs())
    default = next(line for line in lines if line.startswith("experiments/configs/default.py "))
    assert "The default study" in default and "| result: test accuracy " in default
    assert default.endswith("in experiments/mlp/results/digits.json")
    assert not [line for line in lines if line.endswith("| result: -")]
    assert catalog.main(["--format=markdown"]) == 0
    md = capsys.readouterr().out.splitlines()
    assert md[0] == "| config | description | result |" and md[2].startswith("| `experiments/configs/")


def test_reads_docstrings_without_running_the_files(tmp_path, capsys):
    folder = tmp_path / "experiments" / "configs"
    folder.mkdir(parents=True)
    (folder / "boom.py").write_text('"""A config that must not run.\n\nResult: test accuracy 0.5 after 3 rounds; '
                                    'slow.\n"""\nraise SystemExit("executed")\n')
    (folder / "plain.py").write_text("x = 1\n")
    (folder / "broken.py").write_text("def (\n")
    entries = {e.path: e for e in catalog.shipped_configs(tmp_path)}
    assert entries["experiments/configs/boom.py"] == ("experiments/configs/boom.py", "A config that must not run.",
                                                      "test accuracy 0.5 after 3 rounds")
    assert entries["experiments/configs/plain.py"].description == "(no docstring)"
    assert entries["experiments/configs/broken.py"].description.startswith("(unreadable: SyntaxError")
    assert catalog.main(["--root", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "no config folders under" in err and "experiments/configs" in err and "--root" in err


def test_describe():
    # The result is the paragraph that begins with "Result:", to its first clause; nothing else is read as one.
    assert catalog.describe("Title.\n\nResult: test accuracy 0.9 (60 rounds;\nW=4). About 1 s.") == (
        "Title.", "test accuracy 0.9 (60 rounds; W=4)")
    assert catalog.describe("Title.\n\nExpected result (measured on a CPU):\ntest accuracy 0.9.") == ("Title.", None)
    assert catalog.describe("Title.\n\nReaches test accuracy 0.8 quickly.") == ("Title.", None)
    assert catalog.describe("Title.\n\nThe Result: of this line is prose.") == ("Title.", None)
    assert catalog.describe(None) == ("(no docstring)", None)
