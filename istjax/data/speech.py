"""Real spoken words: the Free Spoken Digit Dataset (FSDD) as the IST paper's 4096 log-mel features.

FSDD (Jakobovski et al., CC BY-SA 4.0) holds 3,000 recordings of the digits 0-9, six speakers x 50 takes each, as
8 kHz mono 16-bit WAV files named ``{digit}_{speaker}_{take}.wav``. Its conventional split tests on takes 0-4 of
every speaker and digit (300 clips) and trains on takes 5-49 (2,700). Each training clip's speaker is its client
(``train_clients``: ids into ``client_names``, the speakers in alphabetical order), for federated learning's natural
clients (`istjax.data.natural_clients`).

`load_fsdd` reads the published archive (``fsdd-recordings.tar.gz``, holding ``recordings/*.wav``) or a folder of
those WAV files, from ``data_dir`` or ``$ISTJAX_DATA_DIR``, and turns every clip into the IST paper's input with
`istjax.data.audio`: a 128-mel x 32-frame log-mel spectrogram (4096 features). The paper's 16 kHz settings
(n_fft 2048, hop 512 over 16,000 samples) become, at FSDD's 8 kHz, n_fft 1024 and hop 256 over 8,000 samples
(`FSDD_MEL`): the same window and hop in seconds, the same 128 x 32 grid, so the paper's 4096-input models train on
it unchanged. Clips are zero-padded or cut to 1 s.

Files from outside are read defensively: the archive is never extracted to disk (members are read in memory, so no
path in it can write anywhere), only regular files named like FSDD recordings are read, each at most 1 MiB, at most
10,000 of them; each must be a PCM WAV (mono, 16-bit, 8 kHz), parsed with the standard library's `wave` module. An
archive cut short (an interrupted copy) or damaged is refused in one line naming it (a ValueError; exit 2 from
``istjax train``). The features are cached (``.npz``, read without pickles) under ``$ISTJAX_CACHE_DIR`` or
``~/.cache/istjax``, keyed by the source's size and modification time and the mel settings; a cache file that does
not read whole is refused the same way, saying to delete it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pathlib
import re
import tarfile
import wave
import zlib
from collections.abc import Iterator
from typing import Optional, Union

import jax
import numpy as np

from istjax.data.audio import MelConfig, speech_features
from istjax.data.dataset import Dataset, finalise
from istjax.data.files import DataNotFoundError, cache_dir, damaged_file, data_folder, read_cache, write_cache

__all__ = ["FSDD_ARCHIVE", "FSDD_MEL", "load_fsdd", "read_fsdd", "read_wav"]

FSDD_ARCHIVE = "fsdd-recordings.tar.gz"
FSDD_RATE = 8000
FSDD_MEL = MelConfig(sample_rate=FSDD_RATE, num_samples=FSDD_RATE, n_fft=1024, hop_length=256)
_NAME = re.compile(r"^([0-9])_([a-z]+)_([0-9]{1,2})\.wav$")
_MAX_FILE_BYTES = 1 << 20
_MAX_FILES = 10_000
_TEST_TAKES = range(0, 5)
_HOW_TO_GET = (f"Point data_dir= (a config's data.kwargs.data_dir) or $ISTJAX_DATA_DIR at a folder holding "
               f"{FSDD_ARCHIVE} (the recordings of github.com/Jakobovski/free-spoken-digit-dataset, packed as "
               f"recordings/*.wav) or a recordings/ folder of its WAV files.")


def read_wav(data: bytes, name: str = "<wav>", sample_rate: int = FSDD_RATE) -> np.ndarray:
    """Samples ``[N] int16`` of a mono 16-bit PCM WAV file's bytes, or a ValueError naming ``name`` and what is
    wrong with it."""
    try:
        with wave.open(io.BytesIO(data), "rb") as w:
            channels, width, rate, frames = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
            if (channels, width, rate) != (1, 2, sample_rate):
                raise ValueError(f"{name}: {channels} channel(s), {8 * width}-bit, {rate} Hz; FSDD recordings are "
                                 f"mono, 16-bit, {sample_rate} Hz.")
            if frames * width > len(data):
                raise ValueError(f"{name}: the header claims {frames} frames, more than the file holds.")
            raw = w.readframes(frames)
    except (wave.Error, EOFError) as e:
        raise ValueError(f"{name}: not a readable PCM WAV file ({e}).") from None
    return np.frombuffer(raw, dtype="<i2").astype(np.int16)


def _members(source: pathlib.Path, read: bool = True) -> Iterator[tuple[str, Optional[bytes]]]:
    """``(file name, bytes)`` of every FSDD-named recording in ``source`` (an archive or a folder); with ``read``
    False, ``(file name, None)``: the names alone, no recording read."""
    count = 0

    def admit(name: str, size: int) -> bool:
        nonlocal count
        if not _NAME.match(name):
            return False
        if size > _MAX_FILE_BYTES:
            raise ValueError(f"{source}: {name} is {size} bytes; an FSDD recording is well under "
                             f"{_MAX_FILE_BYTES} bytes. Not reading it.")
        count += 1
        if count > _MAX_FILES:
            raise ValueError(f"{source}: more than {_MAX_FILES} recordings; FSDD has 3,000. Not reading further.")
        return True

    if source.is_dir():
        folder = source / "recordings" if (source / "recordings").is_dir() else source
        for path in sorted(folder.iterdir()):
            if path.is_file() and not path.is_symlink() and admit(path.name, path.stat().st_size):
                yield path.name, path.read_bytes() if read else None
        return
    try:
        with tarfile.open(source, "r:*") as tar:
            for m in tar:
                name = os.path.basename(m.name)
                if m.isreg() and admit(name, m.size):
                    yield name, tar.extractfile(m).read(_MAX_FILE_BYTES + 1) if read else None
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:  # cut short (an interrupted copy)
        raise damaged_file(source, "complete tar archive", e, "Copy it again, or point data_dir= "
                            "(a config's data.kwargs.data_dir) at a recordings/ folder of its WAV files.") from None


def _source(data_dir: Optional[Union[str, os.PathLike]]) -> pathlib.Path:
    """The archive or folder to read: in ``data_dir`` if given, else in ``$ISTJAX_DATA_DIR``."""
    root = data_folder(data_dir, "", what="FSDD", how=_HOW_TO_GET)
    for candidate in (root / FSDD_ARCHIVE, root / "recordings", root / "fsdd" / "recordings", root / "fsdd"):
        if candidate.exists() and (candidate.is_file() or any(candidate.glob("*.wav"))):
            return candidate
    if root.is_file():
        return root
    raise DataNotFoundError(f"FSDD: found neither {FSDD_ARCHIVE} nor a recordings/ folder of WAV files in {root}. "
                            f"{_HOW_TO_GET}")


def read_fsdd(source: Union[str, os.PathLike]) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, list[str]]:
    """Every recording in ``source``: ``(waves, digits [N], takes [N], speakers)`` sorted by file name."""
    source = pathlib.Path(source)
    waves, digits, takes, speakers = [], [], [], []
    for name, data in sorted(_members(source)):
        digit, speaker, take = _NAME.match(name).groups()
        waves.append(read_wav(data, f"{source}:{name}"))
        digits.append(int(digit))
        takes.append(int(take))
        speakers.append(speaker)
    if not waves:
        raise DataNotFoundError(f"FSDD: {source} holds no recordings named like 0_jackson_0.wav. {_HOW_TO_GET}")
    return waves, np.asarray(digits, np.int32), np.asarray(takes, np.int32), speakers


def _features(waves: list[np.ndarray], config: MelConfig, chunk: int = 256) -> np.ndarray:
    """``[N, 4096] float32`` log-mel features, computed in jitted chunks of equal-length (padded) clips."""
    clips = np.zeros((len(waves), config.num_samples), np.float32)
    for i, w in enumerate(waves):
        n = min(len(w), config.num_samples)
        clips[i, :n] = w[:n].astype(np.float32) / 32768.0
    fn = jax.jit(lambda x: speech_features(x, config))
    return np.concatenate([np.asarray(fn(clips[s:s + chunk])) for s in range(0, len(clips), chunk)])


def load_fsdd(data_dir: Optional[Union[str, os.PathLike]] = None, cache: bool = True) -> Dataset:
    """FSDD as a `Dataset` of 4096 standardised log-mel features, 10 classes (module docstring).

    Args:
      data_dir: a folder holding ``fsdd-recordings.tar.gz`` or ``recordings/*.wav`` (default ``$ISTJAX_DATA_DIR``).
      cache: keep the features in ``$ISTJAX_CACHE_DIR`` (or ``~/.cache/istjax``) for the next load.
    """
    source = _source(data_dir)
    st = source.stat()
    key = hashlib.sha256(f"{source.resolve()}|{st.st_size}|{st.st_mtime_ns}|{tuple(FSDD_MEL)}".encode()).hexdigest()
    path = cache_dir() / f"fsdd-{key[:16]}.npz"
    cached = read_cache(path, ("x", "digits", "takes")) if cache else None
    if cached is not None:
        x, digits, takes = cached
        speakers = _speakers(source, digits, takes, path.with_name(path.stem + "-speakers.npz"))
    else:
        waves, digits, takes, speakers = read_fsdd(source)
        x = _features(waves, FSDD_MEL)
        if cache:
            write_cache(path, x=x, digits=digits, takes=takes)
    test = np.isin(takes, list(_TEST_TAKES))
    names, ids = np.unique(np.asarray(speakers)[~test], return_inverse=True)  # alphabetical: the clients' order
    clients = ids.reshape(-1).astype(np.int32)
    clients.flags.writeable = False
    return finalise("fsdd", x[~test], digits[~test], x[test], digits[test], 10)._replace(
        train_clients=clients, client_names=tuple(str(n) for n in names))


def _speakers(source: pathlib.Path, digits: np.ndarray, takes: np.ndarray, path: pathlib.Path) -> list[str]:
    """The speaker of every recording of ``source``, in the order of the cached features (sorted by file name): the
    names listed without reading a recording, checked against the cached ``digits`` and ``takes``, and kept in the
    cache file ``path`` beside the features' (a feature cache written before speakers were kept stays valid)."""
    cached = read_cache(path, ("speakers",))
    if cached is not None and len(cached[0]) == len(digits):
        return [str(s) for s in cached[0]]
    parts = [_NAME.match(name).groups() for name, _ in sorted(_members(source, read=False))]
    if [(int(d), int(t)) for d, _, t in parts] != list(zip(digits.tolist(), takes.tolist())):
        raise ValueError(f"FSDD: the recordings listed in {source} are not those of its cached features; delete the "
                         f"cache files fsdd-*.npz in {cache_dir()} and load again.")
    speakers = [speaker for _, speaker, _ in parts]
    write_cache(path, speakers=np.asarray(speakers))
    return speakers
