"""`ArgError`: a refusal that names its argument, the value and the fix; the fix is data, rendered where it is read.

A library function refuses bad input with the fix as values, named by their Python names (``use={"mode":
"parameter_server"}``), never as text of one interface. ``str(error)`` renders them in the Python API's words
("Use mode='parameter_server'."); the config collector (`istjax.launch.config.collect`) renders the same values in
the command line's, through the map it keeps from each argument to the config field that set it (the config field
runtime.mode), so a researcher is never told to call a Python function from the command line, and a renamed config
field is renamed in one place.

A fix is a sentence of pieces (`Piece`): words, the same in every interface; a setting (a dict of names set together,
``{"sampler": "stratified", "num_owners": 2}``; the value ``...`` names the argument alone); `Code`, a fix the Python
API spells as code and a config as settings; and a list of such choices, alternatives joined by "or" (alternatives
that set one name read ``num_workers=2 or 4``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Union

__all__ = ["ArgError", "Code", "Piece", "python_words"]


class Code(NamedTuple):
    """A fix the Python API spells as code and a config as settings:
    ``Code("istjax.uniform(pad=True)", {"sampler": "uniform_pad"})``; ``settings`` may be a sentence of pieces, and
    ``python`` empty: advice only the command line needs (``Code("", ("; use", {"module": "my_data.py:synth"}))``)."""

    python: str
    settings: Union[Mapping[str, Any], tuple]


# Words (every interface), a setting, `Code`, or a list of those three: alternatives joined by "or".
Piece = Union[str, Mapping[str, Any], Code, list]
# How an interface writes one setting: ``{"mode": "parameter_server"} -> "mode='parameter_server'"``.
Words = Callable[[Mapping[str, Any]], str]


def python_words(setting: Mapping[str, Any]) -> str:
    """A setting as Python keywords: ``num_owners=2, mode='sharded'`` (a value ``...``: the name alone)."""
    return ", ".join(k if v is ... else f"{k}={v!r}" for k, v in setting.items())


class ArgError(ValueError):
    """A `ValueError` whose message is ``problem`` followed by its fix, in the words of the interface that reads it.

    ``ArgError(arg, value, problem, fix="", *, use=())``: ``fix`` is words, or a sequence of `Piece` (a sentence that
    sets values: ``("Add", {"num_owners": 2}, "or deepen the stages.")``); ``use`` the values that fix it (a setting,
    `Code`, words, or a list of alternatives), rendered after ``fix`` as "Use ...".

    Attributes:
      arg: the argument refused (``"num_workers"``, ``"sampler"``), or a tuple of the arguments refused together
        (``("group_sizes", "num_workers", "sampler")``: a width that W does not divide under this sampler). A key of
        a dict argument is ``"samplers.hidden_0"``.
      value: its value.
      problem: what is wrong, in words that hold for every interface.
      pieces: the fix as data (`Piece` s), for `fix_in` to render.
      fix: the fix in the Python API's words (``fix_in(python_words)``).
    """

    def __init__(self, arg: Union[str, tuple[str, ...]], value: Any, problem: str,
                 fix: Union[str, Sequence[Piece]] = "", *, use: Piece = ()):
        self.arg, self.value, self.problem = arg, value, problem
        pieces = [fix] if isinstance(fix, (str, Code, Mapping)) else list(fix)
        if use:
            before = " ".join(p for p in [problem, *pieces] if isinstance(p, str) and p).rstrip()
            pieces += ["use" if before.endswith((";", ":", ",")) else "Use", use, "."]
        self.pieces = [p for p in pieces if not (isinstance(p, str) and not p.strip())]
        self.fix = self.fix_in(python_words)
        super().__init__(f"{problem} {self.fix}".strip())

    @property
    def args_named(self) -> tuple[str, ...]:
        """The arguments refused, first the one the message leads with."""
        return (self.arg,) if isinstance(self.arg, str) else tuple(self.arg)

    def names(self) -> list[str]:
        """Every name the fix sets, in order (the names a renderer must know)."""
        return [k for s in _flat(self.pieces) if not isinstance(s, str) for k in s]

    def fix_in(self, words: Words, code: bool = True) -> str:
        """The fix with each setting written by ``words``; `Code` as its Python text when ``code``, else as its
        settings (an interface with no Python, such as the command line)."""
        def one(p) -> str:
            if isinstance(p, str):
                return p
            if isinstance(p, Code):
                return p.python if code else one(p.settings)
            if isinstance(p, list):
                return _alternatives([one(c) for c in p])
            return _sentence([one(q) for q in p]) if isinstance(p, tuple) else words(p)
        return _sentence([one(p) for p in self.pieces])

    def in_words(self, words: Words, code: bool = True) -> str:
        """The message with the fix rendered by ``words`` (`fix_in`)."""
        return f"{self.problem} {self.fix_in(words, code)}".strip()


def _flat(pieces) -> list:
    """The words and settings of ``pieces``, alternatives, sentences and `Code` opened."""
    out: list = []
    for p in pieces:
        p = p.settings if isinstance(p, Code) else p
        out += _flat(p) if isinstance(p, (list, tuple)) else [p]
    return out


def _alternatives(texts: list[str]) -> str:
    """``"a or b"``, ``"a, b or c"``; neighbours that set the same one name share it (``num_workers=2 or 4``)."""
    groups: list[tuple[str, list[str]]] = []  # (the name set, its values), or ("", [words])
    for t in texts:
        name, eq, value = t.partition("=")
        one = bool(eq) and " " not in t
        if one and groups and groups[-1][0] == name:
            groups[-1][1].append(value)
        else:
            groups.append((name, [value]) if one else ("", [t]))
    return _or([f"{name}={_or(values)}" if name else values[0] for name, values in groups])


def _or(texts: list[str]) -> str:
    """``a or b``, ``a, b or c``; ``a or b, or c`` when a choice itself has alternatives."""
    last = ", or " if any(" or " in t for t in texts) else " or "
    return texts[0] if len(texts) == 1 else f"{', '.join(texts[:-1])}{last}{texts[-1]}"


def _sentence(texts: list[str]) -> str:
    """Pieces joined by spaces, none before punctuation or after an opening parenthesis."""
    out = ""
    for t in filter(None, texts):
        out += t if not out or t[:1] in ",.;:)" or out.endswith("(") else f" {t}"
    return out.strip()
