"""A newcomer's text paths (issue 57): a validation file of its own (``data.kwargs.validation_path``), the ``own``
vocabulary built from the training text only, refusals naming file, line and column (each suggested fix applied and
passing), ``istjax sample`` on a trained run, and the text summary's validation nats/char."""

import random

import numpy as np
import pytest

from istjax.core.errors import ArgError
from istjax.data.text import Vocabulary, load_text
from istjax.launch import cli
from istjax.launch.config.fix_words import config_terms

WORDS = "to be or not that is the question whether tis nobler in mind suffer".split()


def _lines(n: int, seed: int) -> str:
    r = random.Random(seed)
    return "".join(" ".join(r.choice(WORDS) for _ in range(8)) + "\n" for _ in range(n))


def test_a_validation_file_is_the_validation_split_by_hand(tmp_path):
    (tmp_path / "t.txt").write_text("abcabc\nabcab\n", encoding="utf-8")  # 13 characters: 6 windows of 2
    (tmp_path / "v.txt").write_text("cab\nbca\n", encoding="utf-8")  # 8 characters: 3 windows of 2
    data = load_text(str(tmp_path / "t.txt"), context=2, validation_path=str(tmp_path / "v.txt"), vocabulary="own",
                     num_val_windows=0)
    assert data.vocabulary == "\nabc" and data.num_classes == 4  # the training file's characters, sorted
    np.testing.assert_array_equal(data.train_x, [[1, 2], [3, 1], [2, 3], [0, 1], [2, 3], [1, 2]])  # ab ca bc \na bc ab
    np.testing.assert_array_equal(data.train_y, [[2, 3], [1, 2], [3, 0], [1, 2], [3, 1], [2, 0]])
    np.testing.assert_array_equal(data.test_x, [[3, 1], [2, 0], [2, 3]])  # ca b\n bc
    np.testing.assert_array_equal(data.test_y, [[1, 2], [0, 2], [3, 1]])
    # With Shakespeare's vocabulary the split is the same: the whole training file trains, the other validates.
    plays = load_text(str(tmp_path / "t.txt"), context=2, validation_path=str(tmp_path / "v.txt"), num_val_windows=0)
    vocab = Vocabulary(plays.vocabulary)
    assert plays.num_classes == 84 and plays.train_x.shape == (6, 2) and plays.test_x.shape == (3, 2)
    assert "".join(vocab.decode(w) for w in plays.test_x) == "cab\nbc"


def test_the_own_vocabulary_is_the_training_parts_and_validation_only_characters_are_refused(tmp_path):
    one = tmp_path / "one.txt"
    one.write_text("abab\nabab\nabab\nab\n" + "bbbb\n", encoding="utf-8")  # 23 characters, the last 5 validate
    data = load_text(str(one), context=2, val_fraction=5 / 23, vocabulary="own", num_val_windows=0)
    assert data.vocabulary == "\nab" and data.train_x.shape == (8, 2) and data.test_x.shape == (2, 2)
    # 'X' occurs only in the validation part (line 5, column 3): it would have an embedding no step trains.
    one.write_text("abab\nabab\nabab\nab\n" + "bbXb\n", encoding="utf-8")
    with pytest.raises(ArgError, match=r"one.txt, line 5, column 3: character 'X' \(U\+0058\) is not in the training "
                                       r"vocabulary of 3 characters.*add text holding them before the file's last"):
        load_text(str(one), context=2, val_fraction=5 / 23, vocabulary="own")
    one.write_text("X" + "abab\nabab\nabab\nab\n" + "bbXb\n", encoding="utf-8")  # the fix: text holding it trains
    assert "X" in load_text(str(one), context=2, val_fraction=5 / 24, vocabulary="own").vocabulary
    # The same with a validation file: its own line and column.
    (tmp_path / "t.txt").write_text("abab\nba\n", encoding="utf-8")
    (tmp_path / "v.txt").write_text("ab\nba\nbXa\n", encoding="utf-8")
    with pytest.raises(ArgError, match=r"v.txt, line 3, column 2: character 'X'.*training vocabulary of 3 characters"
                                       r".*add text holding them to the training file"):
        load_text(str(tmp_path / "t.txt"), context=2, validation_path=str(tmp_path / "v.txt"), vocabulary="own")
    (tmp_path / "t.txt").write_text("abab\nbaX\n", encoding="utf-8")
    assert load_text(str(tmp_path / "t.txt"), context=2, validation_path=str(tmp_path / "v.txt"),
                     vocabulary="own").vocabulary == "\nXab"


def test_validation_file_refusals_name_the_field_and_their_fixes_pass(tmp_path):
    train, valid = tmp_path / "t.txt", tmp_path / "v.txt"
    train.write_text(_lines(20, 0), encoding="utf-8")
    valid.write_text("to be\nor not \u20ac\n", encoding="utf-8")
    with pytest.raises(ArgError, match=r"v.txt, line 2, column 8: character '\u20ac'.*'shakespeare' vocabulary of 84 "
                                       r"characters.*add text holding them to the training file .*vocabulary='own'") as e:
        load_text(str(train), context=4, validation_path=str(valid))
    assert e.value.arg == "validation_path" and "--config.data.kwargs.vocabulary=own" in config_terms(e.value)
    train.write_text(_lines(20, 0) + "\u20ac\n", encoding="utf-8")  # the fix, applied: it passes
    assert "\u20ac" in load_text(str(train), context=4, validation_path=str(valid), vocabulary="own").vocabulary
    with pytest.raises(ArgError, match=r"val_fraction=0.2 with validation_path=.*drop val_fraction") as e:
        load_text(str(train), validation_path=str(valid), val_fraction=0.2)
    assert e.value.args_named == ("val_fraction", "validation_path")
    with pytest.raises(ArgError, match="is the training file"):
        load_text(str(train), validation_path=str(train))
    valid.write_bytes("caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ArgError, match=r"v.txt, line 1 \(byte 3\): not UTF-8") as e:
        load_text(str(train), validation_path=str(valid), vocabulary="own")
    assert e.value.arg == "validation_path"
    valid.write_text("to be\n", encoding="utf-8")
    with pytest.raises(ArgError, match="validation split holds 6 characters.*longer validation file") as e:
        load_text(str(train), context=8, validation_path=str(valid), vocabulary="own")
    assert e.value.arg == "validation_path"
    with pytest.raises(ArgError, match="validation_path='nowhere.txt': no such file"):
        load_text(str(train), validation_path="nowhere.txt")


def test_a_validation_character_refusal_is_one_line_naming_the_config_field(tmp_path, capsys):
    (tmp_path / "t.txt").write_text(_lines(20, 0), encoding="utf-8")
    (tmp_path / "v.txt").write_text("to be\nor Q\n", encoding="utf-8")
    code = cli.main(["istjax", "--config.model.name=transformer", "--config.data.name=text",
                     f"--config.data.kwargs.path={tmp_path / 't.txt'}", "--config.data.kwargs.vocabulary=own",
                     f"--config.data.kwargs.validation_path={tmp_path / 'v.txt'}", f"--workdir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "run").exists()
    (problem,) = err.strip().splitlines()
    assert "data.kwargs.validation_path=" in problem and "v.txt, line 2, column 4: character 'Q'" in problem


# ----------------------------------------------------------------------------------------------------------------
# istjax sample on a tiny trained run

TINY = ("--config.model.name=transformer", "--config.model.num_layers=1", "--config.model.embed_dim=8",
        "--config.model.num_heads=2", "--config.model.mlp_dim=8", "--config.model.context=8",
        "--config.data.name=text", "--config.data.kwargs.context=8", "--config.data.kwargs.vocabulary=own",
        "--config.num_rounds=2", "--config.num_workers=2", "--config.local_steps=1", "--config.batch_size=4",
        "--config.eval_every=1", "--config.eval_batch_size=8", "--config.progress=False")


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    """A 2-round run of a tiny transformer on a text file with a validation file; its summary's printout."""
    root = tmp_path_factory.mktemp("text_run")
    (root / "t.txt").write_text(_lines(60, 0), encoding="utf-8")
    (root / "v.txt").write_text(_lines(10, 1), encoding="utf-8")
    code = cli.main(["istjax", *TINY, f"--config.data.kwargs.path={root / 't.txt'}",
                     f"--config.data.kwargs.validation_path={root / 'v.txt'}", f"--workdir={root / 'run'}"])
    assert code == 0
    return root / "run"


def _sample(capsys, *args):
    code = cli.main(["istjax", "sample", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_sample_prints_exactly_n_characters_after_the_prompt_seeded(text_run, capsys):
    import json

    from istjax.launch.summary import summary_text

    summary = json.loads((text_run / "summary.json").read_text())
    assert summary["metric_labels"]["test_loss"] == "validation nats/char"
    line = summary_text(summary).splitlines()[2]
    assert line.startswith(f"  validation nats/char {summary['test_loss']:.4f}, train nats/char") and "test" not in line
    vocab = set("".join(WORDS) + " \n")
    texts = {}
    for seed in (0, 0, 1, 2):
        code, out, err = _sample(capsys, f"--workdir={text_run}", "--prompt=to be", "--length=25", f"--seed={seed}")
        assert code == 0 and out.startswith("to be") and out.endswith("\n"), err
        continuation = out[len("to be"):-1]
        assert len(continuation) == 25 and set(continuation) <= vocab
        assert "checkpoints/2 (round 2)" in err
        assert texts.setdefault(seed, continuation) == continuation  # the same seed, the same text
    assert len(set(texts.values())) > 1  # another seed draws other characters (near-uniform, untrained model)


@pytest.mark.slow
def test_sample_refusals_are_one_line_exit_2(text_run, tmp_path, capsys):
    code, out, err = _sample(capsys, f"--workdir={text_run}", "--prompt=to bZ", "--length=5")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--prompt, line 1, column 5: character 'Z'" in err and "use only the run's characters" in err
    for bad, words in (("--length=0", "at least 1"), ("--temperature=0", "must be a number > 0")):
        code, out, err = _sample(capsys, f"--workdir={text_run}", "--prompt=to", "--length=3", bad)
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err
    code, _, err = _sample(capsys, f"--workdir={text_run}", "--prompt=", "--length=3")
    assert code == 2 and "at least one character" in err
    code, _, err = _sample(capsys, f"--workdir={tmp_path / 'none'}", "--prompt=to", "--length=3")
    assert code == 2 and len(err.strip().splitlines()) == 1
    # A run of another model on other data: refused, naming both.
    digits = tmp_path / "digits"
    assert cli.main(["istjax", "--config.num_rounds=1", "--config.eval_every=1", "--config.model.hidden=(8,)",
                     "--config.progress=False", f"--workdir={digits}"]) == 0
    capsys.readouterr()
    code, out, err = _sample(capsys, f"--workdir={digits}", "--prompt=to", "--length=3")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "model.name='mlp' on data.name='digits', not a character-level language model" in err
