"""Natural federated clients: Shakespeare's speaking roles and the spoken-digit speakers.

* `shakespeare_roles`: each speaking role of each play a client (McMahan et al. 2017, "Communication-Efficient
  Learning of Deep Networks from Decentralized Data", arXiv 1602.05629, section 3; LEAF, Caldas et al. 2018, builds
  its Shakespeare the same way). A role's *lines* are its speeches, in the order spoken: a speech is the text under
  one speaker heading, its verse lines joined by ``"\\n"``, stage directions dropped. Each role's lines are split
  by position, as the paper does: the last ``ceil(test_fraction * n)`` lines test, the first ones train. A role
  whose lines leave no training line (at the default fraction: a role of one line; the paper keeps roles "with at
  least two lines") or that speaks fewer than ``min_chars`` characters is dropped.
* `fsdd_speakers`: the Free Spoken Digit Dataset's recordings, one client per speaker.
* `load_shakespeare_roles`: the roles as a data set (``data.name='shakespeare_roles'``): character windows of each
  role's training text, each window its role's client (``Dataset.train_clients``), tested on windows of every role's
  test text. `natural_split` makes any data set's own clients (these, or FSDD's speakers: `istjax.data.speech`) a
  `ClientSplit` (``clients.split='natural'`` in a config).

The text format `shakespeare_roles` reads is the ``shakespeare`` package's ``*_gut.txt`` files
(`istjax.data.text.shakespeare_plays`), paragraphs separated by blank lines::

    ACT I.                                      a heading: ACT / SCENE lines, PROLOGUE, EPILOGUE, INDUCTION
    Scene I. Elsinore.                          alone on a line; no one speaks until the next speaker heading

    [Enter Bernardo.]                           a stage direction: [...] (also {...]), on its own lines or inline

    Ber.                                        a speaker heading: the paragraph's first line, a name ending in
    Who's there? [Aside.] Stand!                "." ("Ber.", "FIRST CITIZEN.", "1. CAR.") or in capitals alone
                                                ("LYSANDER", A Midsummer Night's Dream's style)
    Nay, answer me.                             a paragraph without a heading continues the last speech

On the package's 42 files: 1,131 roles of two lines or more (the paper counts 1,146 over the complete works), 1,054
of them speaking `MIN_CHARS` = 100 characters or more (median 1,400, largest 64,558: Hamlet).

The text before a play's first ``ACT``, ``PROLOGUE`` or ``INDUCTION`` heading (title, persons represented) is not
read, and neither are the five poems (no such heading). A name is kept as written, so "KING." and "KING HENRY."
in one play are two roles, as the files spell them.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Optional

import numpy as np

from istjax.core.errors import ArgError, Code
from istjax.core.streams import check_positive
from istjax.data.clients import ClientSplit, by_group
from istjax.data.dataset import Dataset
from istjax.data.text import _check_context, shakespeare_plays, shakespeare_vocabulary

__all__ = ["MIN_CHARS", "NATURAL_DATASETS", "TEST_FRACTION", "Role", "fsdd_speakers", "load_shakespeare_roles",
           "natural_split", "parse_play", "shakespeare_roles"]

#: The shipped data sets that carry clients of their own (``Dataset.train_clients``), and what the clients are.
NATURAL_DATASETS = {"fsdd": "its speakers", "shakespeare_roles": "its speaking roles"}

MIN_CHARS = 100  # a role speaking fewer characters is dropped: too little for one window and a test line
TEST_FRACTION = 0.2  # the paper's: the first 80 % of a role's lines train, the last 20 % (at least one) test

_OPENING = re.compile(r"^(ACT|Act|THE PROLOGUE|PROLOGUE|INDUCTION)\b", re.MULTILINE)
_HEADING = re.compile(r"^(ACT|Act|SCENE|Scene)\b")  # always a heading
_PART = re.compile(r"^(THE )?(PROLOGUE|EPILOGUE|INDUCTION|END)\.?$")  # a heading, or a speaker when lines follow
# A closed stage direction: [...] or {...] with no bracket inside and no blank line (nested ones go inside out).
_DIRECTION = re.compile(r"[\[{](?:[^\[\]{}\n]|\n(?![ \t]*\n))*[\]}]")
_NAME_WORD = r"(?:[A-Z][A-Za-z'-]*|of|the|and|de|la|le|du)"
_SPEAKER = re.compile(rf"^(?:[0-9]+\.?\s+)?[A-Z][A-Za-z'-]*(?:\s+{_NAME_WORD}){{0,4}}\.$")
_CAPITALS = re.compile(r"^[A-Z][A-Z'-]+(?:\s+[A-Z][A-Z'-]+){0,3}$")
_STANZA = re.compile(r"^[IVXL]+\.?$")  # a song's stanza number ("II."), not a speaker
_FSDD_FILE = re.compile(r"^([0-9])_([a-z]+)_([0-9]{1,2})\.wav$")  # istjax.data.speech's recording names
_FSDD_SPEAKER = re.compile(r"^[a-z]+$")


class Role(NamedTuple):
    """One client of `shakespeare_roles`: a speaking role of one play and its lines (speeches), in order.

    ``train`` and ``test`` are its speeches (each a string, verse lines joined by ``"\\n"``): ``train`` the first
    ones, ``test`` the rest. ``train_text`` and ``test_text`` join them by ``"\\n"``, the text a loader cuts into
    character windows."""

    play: str
    name: str
    train: tuple[str, ...]
    test: tuple[str, ...]

    @property
    def train_text(self) -> str:
        return "\n".join(self.train)

    @property
    def test_text(self) -> str:
        return "\n".join(self.test)

    @property
    def num_chars(self) -> int:
        """Characters spoken, in train and test (the speeches' characters, not the joins)."""
        return sum(map(len, self.train + self.test))


def _speaker(line: str, alone: bool, known: frozenset) -> Optional[str]:
    """The role a paragraph's first ``line`` names, or None. A heading alone in its paragraph (``alone``) is
    taken only in capitals (``CHORUS.``) or when the play names that speaker elsewhere (``known``): a one-line
    paragraph such as ``Farewell.`` continues a speech, and so does a song's stanza number (``II.``)."""
    text = re.sub(r"[\[\]{}]", "", line).strip()
    if _STANZA.match(text):
        return None
    if _SPEAKER.match(text):
        name = " ".join(text[:-1].split())
        return name if not alone or name.upper() == name or name in known else None
    if not alone and _CAPITALS.match(text):
        return " ".join(text.split())
    return None


def _paragraphs(text: str) -> list[list[str]]:
    """The play after its opening heading as paragraphs of non-empty lines, closed stage directions removed and
    paragraphs that are stage directions dropped (an unclosed ``[`` opening one, or the tail ``...]`` of one cut by
    a blank line)."""
    start = _OPENING.search(text)
    if start is None:
        return []
    out = []
    for block in re.split(r"\n[ \t]*\n", text[start.start():]):
        while True:  # inside out; a direction between words leaves one space ("glad. [Sits.] Sit": "glad. Sit")
            cleaned = _DIRECTION.sub("\0", block)
            if cleaned == block:
                break
            block = cleaned
        block = re.sub(r"[ \t]*\0[ \t]*", " ", block)
        lines = [ln.strip() for ln in block.split("\n") if ln.strip()]
        if lines and not lines[0].startswith(("[", "{")) and not lines[-1].endswith(("]", "}")):
            out.append([ln.split("[")[0].rstrip() if "[" in ln else ln for ln in lines])
    return out


def parse_play(text: str) -> dict[str, list[str]]:
    """Every role of one play's text (module docstring's format) -> its speeches in order (non-empty strings, lines
    joined by ``"\\n"``), roles in order of first speech."""
    paragraphs = _paragraphs(text)
    known = frozenset(n for p in paragraphs if len(p) > 1 for n in [_speaker(p[0], False, frozenset())] if n)
    roles: dict[str, list[list[str]]] = {}
    speech: Optional[list[str]] = None  # the lines of the speech being read; None: no one is speaking
    for p in paragraphs:
        if _HEADING.match(p[0]) or (_PART.match(p[0]) and len(p) == 1):
            speech = None
            continue
        name = _speaker(p[0], len(p) == 1, known)
        if name is not None:
            speech = []
            roles.setdefault(name, []).append(speech)
            p = p[1:]
        if speech is not None:
            speech.extend(ln for ln in p if ln)
    return {name: ["\n".join(s) for s in speeches if s] for name, speeches in roles.items()
            if any(speeches)}


def shakespeare_roles(plays: Mapping[str, str], min_chars: int = MIN_CHARS,
                      test_fraction: float = TEST_FRACTION) -> list[Role]:
    """The speaking roles of ``plays`` as clients (module docstring), plays in the mapping's order, roles in order
    of first speech.

    Args:
      plays: play name -> text, as `istjax.data.text.shakespeare_plays` returns them.
      min_chars: a role speaking fewer characters (train and test) is dropped (default `MIN_CHARS`).
      test_fraction: the last ``ceil(test_fraction * n)`` of a role's ``n`` lines are its test lines (default
        `TEST_FRACTION`, the paper's 20 %); in ``[0, 1)``; a role left without a training line is dropped.
    """
    min_chars = check_positive("min_chars", min_chars, 0)
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)) or not 0 <= test_fraction < 1:
        raise ArgError("test_fraction", test_fraction, f"test_fraction={test_fraction!r}: the fraction of each "
                                                       f"role's lines held out must be in [0, 1),",
                       use={"test_fraction": TEST_FRACTION})
    out = []
    for play, text in plays.items():
        for name, lines in parse_play(text).items():
            held = math.ceil(test_fraction * len(lines))
            role = Role(play, name, tuple(lines[:len(lines) - held]), tuple(lines[len(lines) - held:]))
            if role.train and role.num_chars >= min_chars:
                out.append(role)
    return out


def fsdd_speakers(names: Sequence[Any]) -> ClientSplit:
    """FSDD's recordings by speaker: one client per speaker, speakers in alphabetical order (`by_group`), client c
    holding the positions of its speaker's recordings in ``names``.

    ``names`` (``[n]``): recording file names ``{digit}_{speaker}_{take}.wav`` (``3_jackson_12.wav``) or the speaker
    names `istjax.data.speech.read_fsdd` returns (``jackson``), one per example, in the order of the examples the
    clients index (a training split: the names of its examples only)."""
    speakers = []
    for i, name in enumerate(names):
        match = _FSDD_FILE.match(str(name))
        if match is None and not _FSDD_SPEAKER.match(str(name)):
            raise ArgError("names", name, f"names[{i}]={name!r} is neither an FSDD recording name nor a speaker;",
                           "give file names like '3_jackson_12.wav' or speakers like 'jackson'.")
        speakers.append(match.group(2) if match else str(name))
    return by_group(speakers)


def natural_split(dataset: Dataset) -> ClientSplit:
    """``dataset``'s own clients (``dataset.train_clients``) as a `ClientSplit`: `by_group` of the ids (clients in
    order of id), named by ``dataset.client_names``, the data set's name in its settings. An `ArgError` on
    ``dataset`` for a data set without clients of its own."""
    if getattr(dataset, "train_clients", None) is None:
        shipped = ", ".join(f"{name}: {what}" for name, what in NATURAL_DATASETS.items())
        raise ArgError("dataset", dataset.name, f"data set {dataset.name!r} has no clients of its own (its "
                                                f"Dataset.train_clients is None; {shipped}), so no natural split;",
                       ["use", [Code(f"istjax.data.load_dataset({n!r})", {"dataset": n}) for n in NATURAL_DATASETS],
                        "(a data set with clients), or draw its clients:", Code("istjax.data.clients.iid (or dirichlet, shards)",
                                                    {"kind": "iid"}), "."])
    split = by_group(dataset.train_clients)
    names = dataset.client_names
    return dataclasses.replace(split, names=tuple(names[int(i)] for i in split.names) if names else split.names,
                               params={**split.params, "data": str(dataset.name)})


def _role_windows(ids: np.ndarray, context: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """Windows of ``context`` ids starting every ``stride`` ids, each with its next ids (``y``: ``x`` shifted by
    one); ``(len(ids) - 1 - context) // stride + 1`` of them (none for a text of ``context`` ids or fewer). At
    ``stride == context``, `istjax.data.text.windows`'s."""
    n = (len(ids) - 1 - context) // stride + 1 if len(ids) > context else 0
    offsets = (np.arange(n) * stride)[:, None] + np.arange(context)[None, :]
    return ids[offsets].astype(np.int32), ids[offsets + 1].astype(np.int32)


def _check_plays(plays: Any, known: Mapping[str, str]) -> dict[str, str]:
    names = (plays,) if isinstance(plays, str) else tuple(plays)
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ArgError("plays", list(names), f"plays={list(names)!r}: no play named {unknown};",
                       f"choose among {sorted(known)}, or give none (every play).")
    return {n: known[n] for n in known if n in names} if names else dict(known)


def load_shakespeare_roles(*, context: int = 64, stride: int = 0, min_chars: int = MIN_CHARS,
                           test_fraction: float = TEST_FRACTION, plays: Sequence[str] = (),
                           num_test_windows: int = 1024) -> Dataset:
    """Shakespeare by speaking role as a text data set with clients: each role (`shakespeare_roles`) a client.

    A role's training examples are windows of ``context`` characters cut from its training text (its training lines
    in order, joined by ``"\\n"``) every ``stride`` characters, each with the next character at every position
    (``x`` and ``y`` ``[N, context] int32``, as `istjax.data.text.load_shakespeare`'s, in the same 84-character
    vocabulary); a window never crosses from one role to another, and ``train_clients[i]`` is the role of window
    ``i`` (``client_names``: ``"play/role"``). The test split is windows of every role's test text (its last lines)
    at the same stride, ``num_test_windows`` of them spread evenly over the roles' windows in role order (so each
    role in proportion to its test text). A role whose training text is too short for one window (``context + 1``
    characters) is dropped with the roles ``min_chars`` drops.

    At the defaults (context 64, non-overlapping windows): 1,022 clients, 51,142 training windows, a client's
    median 18 and largest 829 (Hamlet). LEAF's windows start at every character (stride 1, length 80): 64 times
    the windows at this context, the same characters read again.

    Args:
      context: characters per window (the transformer's sequence length, ``model.context``).
      stride: characters between window starts, in ``[1, context]``; 0 (default): ``context``, windows that do not
        overlap (an epoch reads each character once, as the text family's).
      min_chars: a role speaking fewer characters is dropped (`MIN_CHARS`).
      test_fraction: each role's last fraction of lines tested (`TEST_FRACTION`, the paper's 20 %), in ``(0, 1)``.
      plays: the plays read (names of `istjax.data.text.shakespeare_plays`); none: all 42.
      num_test_windows: the test windows kept (0: all of them, about 14,000 at the defaults).
    """
    context = _check_context(context)
    stride = context if stride == 0 and not isinstance(stride, bool) else check_positive("stride", stride)
    if stride > context:
        raise ArgError("stride", stride, f"stride={stride} is longer than context={context}: the characters between "
                                         f"windows would never be read;", f"use a stride in [1, {context}], or 0.")
    num_test = check_positive("num_test_windows", num_test_windows, 0)
    vocab = shakespeare_vocabulary()
    roles = shakespeare_roles(_check_plays(plays, shakespeare_plays()), min_chars, test_fraction)
    train, test, names = [], [], []
    for role in roles:
        x, y = _role_windows(vocab.encode(role.train_text, f"{role.play}/{role.name}"), context, stride)
        if len(x):
            train.append((x, y))
            test.append(_role_windows(vocab.encode(role.test_text, f"{role.play}/{role.name}"), context, stride))
            names.append(f"{role.play}/{role.name}")
    if not train:
        raise ArgError("context", context, f"context={context}: no role's training text holds {context + 1} "
                                           f"characters, one window and its next character;",
                       "use a shorter context, a smaller test_fraction or more plays.")
    vx, vy = np.concatenate([x for x, _ in test]), np.concatenate([y for _, y in test])
    if not len(vx):
        raise ArgError("test_fraction", test_fraction, f"test_fraction={test_fraction!r} leaves no role a test text "
                                                       f"of {context + 1} characters or more (context={context});",
                       use={"test_fraction": TEST_FRACTION})
    if 0 < num_test < len(vx):
        keep = np.linspace(0, len(vx) - 1, num_test).round().astype(np.int64)
        vx, vy = vx[keep], vy[keep]
    clients = np.repeat(np.arange(len(train), dtype=np.int32), [len(x) for x, _ in train])
    arrays = [np.concatenate([t[0] for t in train]), np.concatenate([t[1] for t in train]), vx, vy, clients]
    for a in arrays:
        a.setflags(write=False)
    tx, ty, vx, vy, clients = arrays
    return Dataset("shakespeare_roles", tx, ty, vx, vy, len(vocab), vocabulary=vocab.chars, train_clients=clients,
                   client_names=tuple(names))
