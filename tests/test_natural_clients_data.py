"""Natural clients as data (issue 58): Shakespeare by speaking role as a data set (``shakespeare_roles``), FSDD's
speakers as its training clips' clients, ``clients.split=natural`` from the command line, and the splits drawn."""

from __future__ import annotations

import io
import json
import os
import pathlib
import tarfile
import wave

import numpy as np
import pytest

import istjax
from istjax.core.errors import ArgError
from istjax.data import arrays, natural_clients, speech
from istjax.data.dataset import finalise
from istjax.data.natural_clients import MIN_CHARS, TEST_FRACTION, load_shakespeare_roles, natural_split
from istjax.data.text import shakespeare_plays, shakespeare_vocabulary, windows
from istjax.data.tuning import tuning_split
from istjax.launch import cli

DATA = pathlib.Path(os.environ.get("ISTJAX_DATA_DIR", ""))
ARCHIVE = DATA / speech.FSDD_ARCHIVE
needs_fsdd = pytest.mark.skipif(not ARCHIVE.exists(), reason=f"FSDD archive not found at {ARCHIVE}")


@pytest.fixture(scope="module")
def roles_data():
    """The data set at its defaults, and every role `shakespeare_roles` parses at the same settings."""
    roles = natural_clients.shakespeare_roles(shakespeare_plays(), MIN_CHARS, TEST_FRACTION)
    return load_shakespeare_roles(num_test_windows=0), roles


def _text(x_row, y_row, chars: np.ndarray) -> str:
    """A window and its last next character, decoded: the ``context + 1`` characters it was cut from."""
    return "".join(chars[x_row]) + chars[y_row[-1]]


# ---------------------------------------------------------------- Shakespeare by role


def test_roles_data_set_clients_are_the_roles_with_a_window(roles_data):
    data, roles = roles_data
    kept = [r for r in roles if len(r.train_text) > 64]  # one window of 64 and its next character
    assert len(roles) == 1054 and len(kept) == 1022 == len(data.client_names)  # the docstring's numbers
    assert list(data.client_names) == [f"{r.play}/{r.name}" for r in kept]  # plays, then roles, in order
    assert data.train_x.shape == data.train_y.shape == (51142, 64) and data.train_x.dtype == np.int32
    assert data.vocabulary == shakespeare_vocabulary().chars and data.num_classes == 84
    assert data.train_clients.shape == (51142,) and data.train_clients.dtype == np.int32
    split = natural_split(data)
    assert split.num_clients == 1022 and split.kind == "groups" and split.params["data"] == "shakespeare_roles"
    assert split.names == data.client_names and int(np.median(split.sizes)) == 18 and split.sizes.max() == 829
    assert split.names[int(split.sizes.argmax())] == "hamlet/Ham"


def test_every_training_window_is_cut_from_its_own_roles_training_text(roles_data):
    data, roles = roles_data
    kept = [r for r in roles if len(r.train_text) > 64]
    chars = np.array(list(data.vocabulary))
    for c, role in enumerate(kept):
        rows = np.flatnonzero(data.train_clients == c)
        text = role.train_text
        assert len(rows) == (len(text) - 1) // 64 and np.all(np.diff(rows) == 1)  # contiguous, every window
        for j, i in enumerate(rows):  # non-overlapping: window j is text[64 j : 64 j + 65], y x shifted by one
            assert _text(data.train_x[i], data.train_y[i], chars) == text[64 * j: 64 * j + 65]
            assert np.array_equal(data.train_x[i, 1:], data.train_y[i, :-1])


def test_test_windows_come_from_the_roles_test_texts_only(roles_data):
    data, roles = roles_data
    kept = [r for r in roles if len(r.train_text) > 64]
    vocab = shakespeare_vocabulary()
    expected = [windows(vocab.encode(r.test_text), 64) for r in kept if len(r.test_text) > 64]
    np.testing.assert_array_equal(data.test_x, np.concatenate([x for x, _ in expected]))
    np.testing.assert_array_equal(data.test_y, np.concatenate([y for _, y in expected]))
    # The cap keeps windows spread evenly over them, in role order, and none from a training text.
    capped = load_shakespeare_roles(num_test_windows=100)
    keep = np.linspace(0, len(data.test_x) - 1, 100).round().astype(np.int64)
    np.testing.assert_array_equal(capped.test_x, data.test_x[keep])
    chars = np.array(list(data.vocabulary))
    tests = "\0".join(r.test_text for r in kept)
    assert all(_text(x, y, chars) in tests for x, y in zip(capped.test_x, capped.test_y))
    np.testing.assert_array_equal(capped.train_x, data.train_x)  # the cap changes the test split only


def test_roles_data_set_is_deterministic_and_read_only():
    a, b = (load_shakespeare_roles(plays=("hamlet", "macbeth"), num_test_windows=50) for _ in range(2))
    for f in ("train_x", "train_y", "test_x", "test_y", "train_clients"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
        assert not getattr(a, f).flags.writeable
    assert a.client_names == b.client_names
    assert {n.split("/")[0] for n in a.client_names} == {"hamlet", "macbeth"}


def test_stride_min_chars_and_plays():
    tight = load_shakespeare_roles(plays="macbeth", context=32, stride=8, min_chars=2000)
    roles = [r for r in natural_clients.shakespeare_roles({"macbeth": shakespeare_plays()["macbeth"]}, 2000)
             if len(r.train_text) > 32]
    assert list(tight.client_names) == [f"macbeth/{r.name}" for r in roles]
    sizes = np.bincount(tight.train_clients)
    assert sizes.tolist() == [(len(r.train_text) - 1 - 32) // 8 + 1 for r in roles]  # a window every 8 characters
    first = roles[0].train_text
    chars = np.array(list(tight.vocabulary))
    assert _text(tight.train_x[1], tight.train_y[1], chars) == first[8:8 + 33]
    for kwargs, arg in [({"stride": 65}, "stride"), ({"stride": -1}, "stride"), ({"plays": ("hamlet", "king_lear")}, "plays"),
                        ({"context": 0}, "context"), ({"num_test_windows": -1}, "num_test_windows"),
                        ({"test_fraction": 0.0, "plays": "macbeth"}, "test_fraction")]:
        with pytest.raises(ArgError) as e:
            load_shakespeare_roles(**kwargs)
        assert e.value.arg == arg


def test_registered_and_loaded_by_name():
    data = istjax.data.load_dataset("shakespeare_roles", plays=["macbeth"], context=16, num_test_windows=8)
    assert data.name == "shakespeare_roles" and data.train_x.shape[1] == 16 and len(data.test_x) == 8
    assert natural_split(data).num_clients == len(data.client_names)


# ---------------------------------------------------------------- clients a data set carries


def _clients_of(data, ids, names):
    return data._replace(train_clients=np.asarray(ids), client_names=names)


def test_natural_split_names_its_clients_and_refuses_data_without():
    x, y = np.random.default_rng(0).normal(size=(12, 3)), np.arange(12) % 2
    data = istjax.data.from_arrays(x, y, test_x=x[:4], test_y=y[:4])
    with pytest.raises(ArgError, match="has no clients of its own") as e:
        natural_split(data)
    assert e.value.arg == "dataset"
    own = _clients_of(data, [2, 0, 2, 2, 0, 0, 2, 2, 0, 2, 2, 0], ("ann", "bob", "cy"))  # "bob" holds none
    split = natural_split(own)
    assert split.names == ("ann", "cy") and split.indices[0].tolist() == [1, 4, 5, 8, 11]
    # A tuning split keeps the clients of the examples it trains on.
    head = tuning_split(own, 0.25)
    assert head.train_clients.tolist() == own.train_clients[:9].tolist()
    assert natural_split(head).sizes.tolist() == [4, 5]


@pytest.mark.parametrize("ids,names,field", [
    ([0] * 11, ("a",), "data.train_clients"),  # one short
    ([0] * 12, None, "data.train_clients"),  # no names
    ([0.5] * 12, ("a",), "data.train_clients"),  # not integers
    ([0] * 11 + [3], ("a", "b"), "data.train_clients"),  # an id without a name
])
def test_check_dataset_refuses_clients_that_do_not_fit(ids, names, field):
    x, y = np.random.default_rng(0).normal(size=(12, 3)), np.arange(12) % 2
    data = istjax.data.from_arrays(x, y, test_x=x[:4], test_y=y[:4])
    with pytest.raises(ArgError) as e:
        arrays.check_dataset(_clients_of(data, ids, names), "mine")
    assert e.value.arg == field and str(e.value).startswith("mine: ")
    assert arrays.check_dataset(_clients_of(data, [1] * 12, ("a", "b")), "mine").train_clients.tolist() == [1] * 12


# ---------------------------------------------------------------- FSDD by speaker


def _wav(seed: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes((np.random.default_rng(seed).normal(size=4000) * 3000).astype("<i2").tobytes())
    return buf.getvalue()


def test_fsdd_clients_are_the_speakers_of_its_training_clips(tmp_path, monkeypatch):
    """A small archive of three speakers: every training clip's client is its file's speaker; the features and
    labels are those the loader made before it kept speakers; loaded fresh, from the cache, and from the cache with
    the speakers kept beside it, the same."""
    monkeypatch.setenv("ISTJAX_CACHE_DIR", str(tmp_path / "cache"))
    names = [f"{d}_{s}_{k}.wav" for s in ("zoe", "alice", "bo") for d in (3, 7) for k in (0, 6, 12)]
    with tarfile.open(tmp_path / speech.FSDD_ARCHIVE, "w:gz") as tar:
        for i, name in enumerate(names):
            data = _wav(i)
            info = tarfile.TarInfo(f"recordings/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    waves, digits, takes, _ = speech.read_fsdd(tmp_path / speech.FSDD_ARCHIVE)
    x = speech._features(waves, speech.FSDD_MEL)
    test = takes < 5
    before = finalise("fsdd", x[~test], digits[~test], x[test], digits[test], 10)
    train_speakers = [n.split("_")[1] for n in sorted(names) if int(n.split("_")[2][:-4]) >= 5]
    for _ in range(3):  # fresh; cached features, speakers listed; cached features and speakers
        data = speech.load_fsdd(tmp_path)
        for f in ("train_x", "train_y", "test_x", "test_y"):
            np.testing.assert_array_equal(getattr(data, f), getattr(before, f))
        assert data.client_names == ("alice", "bo", "zoe")
        assert [data.client_names[i] for i in data.train_clients] == train_speakers
        assert data.train_clients.dtype == np.int32 and not data.train_clients.flags.writeable
    assert len(list((tmp_path / "cache").glob("fsdd-*-speakers.npz"))) == 1
    assert natural_split(data).sizes.tolist() == [4, 4, 4]


@needs_fsdd
def test_real_fsdd_clients_are_the_speakers_in_its_file_names(tmp_path, monkeypatch):
    monkeypatch.setenv("ISTJAX_CACHE_DIR", str(tmp_path))
    data = istjax.data.load_dataset("fsdd")
    with tarfile.open(ARCHIVE) as tar:
        files = sorted(os.path.basename(m.name) for m in tar if m.isreg() and m.name.endswith(".wav"))
    parts = [f[:-4].split("_") for f in files]
    train = [speaker for _, speaker, take in parts if int(take) >= 5]
    assert len(train) == len(data.train_y) == 2700
    assert [data.client_names[i] for i in data.train_clients] == train
    assert natural_split(data).sizes.tolist() == [450] * 6
    assert natural_split(data).names == ("george", "jackson", "lucas", "nicolas", "theo", "yweweler")
    # The digits are the files' digits: the arrays keep the order of the sorted file names.
    assert data.train_y.tolist() == [int(d) for d, _, take in parts if int(take) >= 5]


# ---------------------------------------------------------------- the config's clients.split=natural


TINY = ["--config.model.hidden=(16,)", "--config.progress=False", "--config.eval_train_examples=256"]
NATURAL = ["--config.algorithm.name=fedavg", "--config.clients.split=natural", "--config.num_workers=2"]


@needs_fsdd
def test_fedavg_on_fsdd_speakers_trains_one_round(tmp_path):
    assert cli.main(["istjax", "train", *TINY, *NATURAL, "--config.data.name=fsdd", "--config.clients.batch_size=150",
                     "--config.num_rounds=1", "--config.eval_every=1", f"--workdir={tmp_path}"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    split = summary["clients"]["split"]
    assert split["kind"] == "groups" and split["num_clients"] == 6 and split["sizes"] == [450] * 6
    assert split["names"] == ["george", "jackson", "lucas", "nicolas", "theo", "yweweler"]
    assert summary["clients"]["local_steps"] == 3 and summary["rounds"] == 1  # 450 / 150
    assert np.isfinite(summary["test_loss"])


@pytest.mark.parametrize("flags,named,fix", [
    (["--config.data.name=digits"], "data.name='digits': data set 'digits' has no clients of its own",
     "use --config.data.name=fsdd or shakespeare_roles (a data set with clients), or draw its clients: "
     "--config.clients.split=iid."),
    (["--config.data.name=fsdd", "--config.clients.num_clients=6"], "clients.num_clients=6: clients.split='natural' "
     "takes its clients from the data set", "drop clients.num_clients"),
])
def test_natural_split_refusals_name_the_field_and_the_fix(tmp_path, capsys, flags, named, fix):
    assert cli.main(["istjax", "train", *TINY, *NATURAL, *flags, f"--workdir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert named in err and fix in err


# ---------------------------------------------------------------- the figures


def test_splits_script_draws_every_figure(tmp_path):
    pytest.importorskip("matplotlib")
    from experiments.federated import splits
    from istjax.data.images import fashion_mnist_dir

    if not fashion_mnist_dir().is_dir():
        pytest.skip(f"Fashion-MNIST not found at {fashion_mnist_dir()}")

    paths = splits.main(["--out", str(tmp_path), "--num-clients", "20", "--num-examples", "4000"])
    assert sorted(p.name for p in paths) == sorted(["federated_split_dirichlet_0_1.png", "federated_split_iid.png",
                                                    "federated_split_dirichlet_0_5.png",
                                                    "federated_split_shards.png", "federated_shakespeare_roles.png"])
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
