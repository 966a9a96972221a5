"""The FSDD loader (`istjax.data.speech`): the real archive, and files from outside read defensively."""

from __future__ import annotations

import io
import os
import pathlib
import tarfile
import wave

import numpy as np
import pytest

from istjax.data import DataNotFoundError, audio, registry, speech

DATA = pathlib.Path(os.environ.get("ISTJAX_DATA_DIR", ""))
ARCHIVE = DATA / speech.FSDD_ARCHIVE


def _wav(samples, rate=8000, channels=1, width=2) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(np.asarray(samples, dtype="<i2" if width == 2 else np.uint8).tobytes())
    return buf.getvalue()


def _tar(path: pathlib.Path, files: dict[str, bytes]) -> pathlib.Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.skipif(not ARCHIVE.exists(), reason=f"FSDD archive not found at {ARCHIVE} (set ISTJAX_DATA_DIR)")
def test_real_archive_conventional_split(tmp_path, monkeypatch):
    monkeypatch.setenv("ISTJAX_CACHE_DIR", str(tmp_path))
    d = registry.load_dataset("fsdd", data_dir=str(DATA))
    assert d.train_x.shape == (2700, 4096) and d.test_x.shape == (300, 4096) and d.num_classes == 10
    assert np.bincount(d.train_y).tolist() == [270] * 10 and np.bincount(d.test_y).tolist() == [30] * 10
    assert abs(float(d.train_x.mean())) < 1e-3 and np.isfinite(d.test_x).all()
    cached = list(tmp_path.glob("fsdd-*.npz"))
    assert len(cached) == 1
    again = speech.load_fsdd(str(DATA))  # from the cache: the same arrays
    np.testing.assert_array_equal(again.train_x, d.train_x)


def test_features_are_the_paper_grid_at_8khz(tmp_path, monkeypatch):
    """One synthetic recording through the loader equals `audio.speech_features` with `FSDD_MEL` by hand."""
    monkeypatch.setenv("ISTJAX_CACHE_DIR", str(tmp_path / "cache"))
    t = np.arange(6000) / 8000
    tone = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    files = {f"recordings/{d}_alice_{k}.wav": _wav(tone * (d + 1) // 10) for d in range(10) for k in (0, 7)}
    _tar(tmp_path / speech.FSDD_ARCHIVE, files)
    waves, digits, takes, speakers = speech.read_fsdd(tmp_path / speech.FSDD_ARCHIVE)
    assert len(waves) == 20 and set(speakers) == {"alice"} and sorted(set(takes.tolist())) == [0, 7]
    x = speech._features(waves, speech.FSDD_MEL)
    want = np.asarray(audio.speech_features(np.pad(waves[0] / 32768.0, (0, 2000)), speech.FSDD_MEL))
    assert x.shape == (20, 4096) and speech.FSDD_MEL.num_features == 4096
    np.testing.assert_allclose(x[0], want, rtol=1e-4, atol=1e-3)
    d = speech.load_fsdd(tmp_path)
    assert d.train_x.shape == (10, 4096) and d.test_x.shape == (10, 4096)  # take 0 tests, take 7 trains


def test_folder_of_wavs(tmp_path, monkeypatch):
    monkeypatch.setenv("ISTJAX_CACHE_DIR", str(tmp_path / "cache"))
    rec = tmp_path / "recordings"
    rec.mkdir()
    for d in range(10):
        for k in (1, 9):
            (rec / f"{d}_bob_{k}.wav").write_bytes(_wav(np.full(4000, 100 * d, np.int16)))
    (rec / "README.txt").write_text("not a recording")  # skipped: not named like one
    d = speech.load_fsdd(tmp_path, cache=False)
    assert d.train_x.shape == (10, 4096) and d.test_x.shape == (10, 4096)


def test_hostile_archives_are_refused_or_skipped(tmp_path):
    ok = _wav(np.zeros(800, np.int16))
    # A member whose path tries to leave the folder is read in memory only; its base name must look like FSDD's.
    path = _tar(tmp_path / "a.tar.gz", {"../../etc/0_eve_1.wav": ok, "recordings/evil.sh": b"rm -rf /"})
    waves, digits, _, _ = speech.read_fsdd(path)
    assert len(waves) == 1 and digits.tolist() == [0]
    assert not (tmp_path.parent.parent / "etc" / "0_eve_1.wav").exists()
    big = _tar(tmp_path / "b.tar.gz", {"recordings/1_eve_1.wav": b"\0" * ((1 << 20) + 1)})
    with pytest.raises(ValueError, match="1_eve_1.wav is 1048577 bytes"):
        speech.read_fsdd(big)
    junk = _tar(tmp_path / "c.tar.gz", {"recordings/2_eve_1.wav": b"RIFF....not a wav"})
    with pytest.raises(ValueError, match="2_eve_1.wav: not a readable PCM WAV"):
        speech.read_fsdd(junk)
    empty = _tar(tmp_path / "d.tar.gz", {"notes.txt": b"x"})
    with pytest.raises(DataNotFoundError, match="no recordings"):
        speech.read_fsdd(empty)


@pytest.mark.parametrize("kwargs,match", [({"rate": 16000}, "16000 Hz"), ({"channels": 2}, "2 channel"),
                                          ({"width": 1}, "8-bit")])
def test_wav_format_is_checked(kwargs, match):
    samples = np.zeros(100 * kwargs.get("channels", 1), np.int16)
    with pytest.raises(ValueError, match=match):
        speech.read_wav(_wav(samples, **kwargs), "x.wav")


def test_missing_data_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv("ISTJAX_DATA_DIR", raising=False)
    with pytest.raises(DataNotFoundError, match="ISTJAX_DATA_DIR"):
        speech.load_fsdd()
    with pytest.raises(DataNotFoundError, match="fsdd-recordings.tar.gz"):
        speech.load_fsdd(tmp_path)
    with pytest.raises(ValueError, match="data_dir=3"):
        speech.load_fsdd(3)
