"""A policy value a config names by a string, compared through its enum.

Each policy with a fixed set of values (what an exchange moves, what a worker sends back, what happens to the
optimizer and model state at a round's end) is a `Choice`: a ``str`` enum, so the string a config or a caller gives
compares equal to its member (``Exchange("replicas") == "replicas"``), while code asks by member
(``alg.exchange == Exchange.REPLICAS``) and a typo fails at import, not silently at run time. Messages, metrics and
f-strings show the plain value::

    class Exchange(Choice):
        SUBNETWORKS = "subnetworks"
        ...

    Exchange.values()        # ('subnetworks', ...): the choices a refusal lists
"""

from __future__ import annotations

import enum

__all__ = ["Choice"]


class Choice(str, enum.Enum):
    """The base of a policy's values (module docstring): a member is its string; ``str``, ``format`` and ``repr``
    show the value alone."""

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__

    def __repr__(self) -> str:
        return repr(self.value)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        """Every value, in declaration order: what a refusal offers."""
        return tuple(m.value for m in cls)
