"""A researcher's own model class, named by where it lives: ``model.module`` in a config.

``"pkg.mod:Class"`` imports ``pkg.mod`` (it must be importable: installed, or on ``sys.path``);
``"path/to/file.py:Class"`` loads that file, with no ``PYTHONPATH`` needed: the file's folder is put on
``sys.path`` while it loads, so it may import its neighbours; a file inside a package (folders with
``__init__.py``) is imported as a member of its package, so its relative imports work. A run records the spec with
the file's absolute path (`spec_of` for a class registered by other means), so ``istjax train --resume`` and
``istjax eval`` of that run find the class again in a fresh process, from any folder.

Every failure is a `ValueError` naming ``model.module``, the value and the fix. Loading a file runs it, as Python
runs any module it imports: name only files you trust.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from typing import Optional

import flax.linen as nn

__all__ = ["load", "is_file_spec", "absolute", "spec_of"]

_FIX = ("Name it as --config.model.module=path/to/file.py:ClassName (a file, no PYTHONPATH needed) or "
        "--config.model.module=package.module:ClassName (importable from here).")


def is_file_spec(spec: str) -> bool:
    """Whether ``spec`` names a file (``...py:Class``) rather than an importable module."""
    return spec.rsplit(":", 1)[0].endswith(".py")


def absolute(spec: str, *, base: Optional[str] = None) -> str:
    """``spec`` with a file path made absolute (relative to ``base``, default the current folder); a module spec
    unchanged."""
    if not is_file_spec(spec):
        return spec
    path, cls = spec.rsplit(":", 1)
    path = os.path.expanduser(path)
    if not os.path.isabs(path):
        path = os.path.join(base or os.getcwd(), path)
    return f"{os.path.normpath(path)}:{cls}"


def _split(spec) -> tuple[str, str]:
    if not isinstance(spec, str) or spec.count(":") < 1 or not all(spec.rsplit(":", 1)):
        raise ValueError(f"model.module={spec!r}: give 'where:ClassName'. {_FIX}")
    where, cls = spec.rsplit(":", 1)
    return where, cls


def _package_name(path: str) -> Optional[tuple[str, str]]:
    """``(root, "pkg.sub.mod")`` when file ``path`` lies in a package (its folder, and each one above it up to
    ``root``, holds an ``__init__.py``); None for a file outside any package."""
    folder, parts = os.path.dirname(path), [os.path.splitext(os.path.basename(path))[0]]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parts.insert(0, os.path.basename(folder))
        folder = os.path.dirname(folder)
    return (folder, ".".join(parts)) if len(parts) > 1 and all(p.isidentifier() for p in parts) else None


def _import_from_package(path: str, spec: str):
    """A file inside a package, imported as a member of it (the package's root on ``sys.path`` while it imports),
    so its relative imports work and its classes are the ones an ordinary import gives; None for a file outside any
    package, or when that import fails or finds another file of the same dotted name."""
    found = _package_name(path)
    if found is None:
        return None
    root, dotted = found
    sys.path.insert(0, root)
    try:
        module = _import(dotted, spec)
    except ValueError:  # e.g. an installed package of the same name shadows it: the file is loaded by path instead
        return None
    finally:
        if sys.path and sys.path[0] == root:
            sys.path.pop(0)
    same = os.path.abspath(getattr(module, "__file__", "") or "") == path
    return module if same else None


def _load_file(path: str, spec: str):
    """The module of file ``path``: imported under its dotted name when it lies in a package
    (`_import_from_package`), else loaded once per process under a name derived from its absolute path."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise ValueError(f"model.module={spec!r}: no such file ({path}). {_FIX}")
    module = _import_from_package(path, spec)
    if module is not None:
        return module
    digest = hashlib.sha1(path.encode()).hexdigest()[:10]
    name = f"istjax_user_{os.path.splitext(os.path.basename(path))[0]}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(loader_spec)
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    sys.modules[name] = module  # dataclass and pickle machinery look classes up by module name
    try:
        loader_spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise ValueError(f"model.module={spec!r}: loading {path} failed with {type(e).__name__}: {e}. Fix the file "
                         f"(run `python {path}` to see the whole error).") from e
    finally:
        if sys.path and sys.path[0] == folder:
            sys.path.pop(0)
    return module


def _import(where: str, spec: str):
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as e:
        if e.name and where.startswith(e.name):
            raise ValueError(f"model.module={spec!r}: no module named {e.name!r} here (searched the current folder "
                             f"{os.getcwd()} and sys.path; PYTHONPATH={os.environ.get('PYTHONPATH', '')!r}). "
                             f"{_FIX}") from e
        raise ValueError(f"model.module={spec!r}: importing {where} failed: {e}. Install the missing package or fix "
                         f"the import.") from e
    except Exception as e:
        raise ValueError(f"model.module={spec!r}: importing {where} failed with {type(e).__name__}: {e}.") from e


def load(spec: str) -> type[nn.Module]:
    """The ``flax.linen.Module`` subclass ``spec`` names (module docstring); a ValueError with the fix otherwise."""
    where, cls_name = _split(spec)
    module = _load_file(where, spec) if is_file_spec(spec) else _import(where, spec)
    cls = module
    for part in cls_name.split("."):  # a nested class: Outer.Inner
        cls = getattr(cls, part, None)
    if cls is None:
        found = sorted(n for n, v in vars(module).items()
                       if inspect.isclass(v) and issubclass(v, nn.Module) and v.__module__ == module.__name__)
        raise ValueError(f"model.module={spec!r}: {where} has no {cls_name!r}; the flax modules defined there are "
                         f"{found}.")
    if not (inspect.isclass(cls) and issubclass(cls, nn.Module)):
        raise ValueError(f"model.module={spec!r}: {cls_name} is a {type(cls).__name__}, not a flax.linen.Module "
                         f"subclass. Name the model's class.")
    return cls


def spec_of(cls: type) -> Optional[str]:
    """Where ``cls`` can be loaded from again (a file spec, absolute), or None (defined interactively)."""
    module = sys.modules.get(cls.__module__)
    path = getattr(module, "__file__", None)
    if not path or "<" in cls.__qualname__:
        return None
    return f"{os.path.abspath(path)}:{cls.__qualname__}"
