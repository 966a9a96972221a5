"""A Sphinx extension: a public constant re-exported from the module that defines it (``istjax.WORKERS`` from
``istjax.core.state``) is documented by the ``#:`` comment (or the docstring after it) where it is assigned.

autodoc reads a module attribute's documentation only from the module it documents; for a re-exported constant
that module has none, so the entry would be empty, or skipped. `constant_doc` finds it where the value is defined:
the module of istjax whose attribute of that name is the same object and whose source documents it.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import Any


@functools.lru_cache(maxsize=None)
def _attr_docs() -> dict[str, list[tuple[str, list[str]]]]:
    """Attribute name -> [(module, doc lines)] over every istjax module with source."""
    from sphinx.pycode import ModuleAnalyzer

    import istjax

    found: dict[str, list[tuple[str, list[str]]]] = {}
    names = ["istjax"] + [m.name for m in pkgutil.walk_packages(istjax.__path__, "istjax.")]
    for name in names:
        try:
            attrs = ModuleAnalyzer.for_module(name).find_attr_docs()
        except Exception:  # noqa: BLE001 (no source: nothing to read)
            continue
        for (scope, attr), lines in attrs.items():
            if scope == "" and "".join(lines).strip():
                found.setdefault(attr, []).append((name, list(lines)))
    return found


def constant_doc(module: Any, name: str) -> list[str]:
    """The doc lines of ``module.name`` (``module`` a module or its name) from the module of istjax that assigns it
    (empty when none documents it)."""
    try:
        value = getattr(importlib.import_module(module) if isinstance(module, str) else module, name)
    except (ImportError, AttributeError):
        return []
    for source, lines in _attr_docs().get(name, []):
        try:
            if getattr(importlib.import_module(source), name) is value:
                return [line.rstrip("\n") for line in lines]
        except (ImportError, AttributeError):
            continue
    return []


def _fill(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """A constant's entry: its ``#:`` documentation where it is assigned, in place of what autodoc found (nothing,
    or the docstring of its type: ``dict``'s for a dict)."""
    if what == "data":
        module, _, attr = name.rpartition(".")
        lines[:] = constant_doc(module, attr) or lines


def setup(app: Any) -> dict[str, Any]:
    app.connect("autodoc-process-docstring", _fill)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
