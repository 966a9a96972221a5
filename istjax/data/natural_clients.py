"""Natural federated clients: Shakespeare's speaking roles and the spoken-digit speakers.

* `shakespeare_roles`: each speaking role of each play a client (McMahan et al. 2017, "Communication-Efficient
  Learning of Deep Networks from Decentralized Data", arXiv 1602.05629, section 3; LEAF, Caldas et al. 2018, builds
  its Shakespeare the same way). A role's *lines* are its speeches, in the order spoken: a speech is the text under
  one speaker heading, its verse lines joined by ``"\\n"``, stage directions dropped. Each role's lines are split
  by position, as the paper does: the last ``ceil(test_fraction * n)`` lines test, the first ones train. A role
  whose lines leave no training line (at the default fraction: a role of one line; the paper keeps roles "with at
  least two lines") or that speaks fewer than ``min_chars`` characters is dropped.
* `fsdd_speakers`: the Free Spoken Digit Dataset's recordings, one client per speaker.

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

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Optional

from istjax.core.errors import ArgError
from istjax.core.streams import check_positive
from istjax.data.clients import ClientSplit, by_group

__all__ = ["MIN_CHARS", "TEST_FRACTION", "Role", "fsdd_speakers", "parse_play", "shakespeare_roles"]

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
