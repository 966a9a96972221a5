"""Name -> entry tables: how a config's names (``algorithm``, ``sampler``, ``backend``, ``model.name``) find code.

Every kind of piece a run is built from has one `Registry`: `istjax.algorithms.ALGORITHMS`,
`istjax.core.partition.SAMPLERS`, `istjax.runtimes.RUNTIMES` and `istjax.models.MODELS`. A registry is the only
place a piece's name is compared: code elsewhere asks the registry (``ALGORITHMS.get(name)``) or the entry what it
declares, never ``if name == "..."``. Looking up an unknown name raises `UnknownName`, a ValueError naming the
field, the value, the closest known names and every known one::

    >>> from istjax.core.registry import Registry
    >>> colours = Registry("colour", field="paint", entries={"red": 1, "green": 2})
    >>> colours.get("gren")
    Traceback (most recent call last):
    ...
    istjax.core.registry.UnknownName: paint='gren' is not a known colour (did you mean 'green'?); choose one of ['green', 'red'].
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import Generic, Optional, TypeVar

from istjax.core.errors import ArgError

__all__ = ["Registry", "UnknownName", "close_matches"]

T = TypeVar("T")


class UnknownName(ArgError):
    """A name no registry entry has (an `ArgError` naming ``name``); the message lists the known ones."""


def close_matches(name: str, known) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known`` to ``name``, or ``""``."""
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=2)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


class Registry(Mapping[str, T], Generic[T]):
    """A read-mostly ``name -> entry`` mapping with one way to add (`register`) and one to look up (`get`).

    Args:
      kind: what an entry is, for messages ("algorithm", "sampler", ...).
      field: the config field that names an entry, for messages ("algorithm", "sampler", "backend", ...).
      entries: the initial entries.
      hint: appended to the unknown-name message (how to add one).
    """

    def __init__(self, kind: str, *, field: str, entries: Optional[Mapping[str, T]] = None, hint: str = ""):
        self.kind, self.field, self.hint = kind, field, hint
        self._entries: dict[str, T] = dict(entries or {})

    def register(self, name: str, entry: T) -> T:
        """Adds ``entry`` under ``name`` (replacing one of the same name) and returns it."""
        if not isinstance(name, str) or not name:
            raise ArgError("name", name, f"register({name!r}, ...): a {self.kind} needs a non-empty str name.", "")
        self._entries[name] = entry
        return entry

    def get(self, name) -> T:  # unlike Mapping.get, never a silent default: an unknown name is an error
        """The entry called ``name``; an `UnknownName` listing the known names when there is none."""
        if isinstance(name, str) and name in self._entries:
            return self._entries[name]
        raise UnknownName("name", name,
                          f"{self.field}={name!r} is not a known {self.kind}{close_matches(name, self._entries)};",
                          f"choose one of {self.names()}.{(' ' + self.hint) if self.hint else ''}")

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name) -> bool:
        return isinstance(name, str) and name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"
