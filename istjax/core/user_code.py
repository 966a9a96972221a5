"""A researcher's own code, named by where it lives: ``model.module`` (a class) and ``data.module`` (a function).

``"pkg.mod:Name"`` imports ``pkg.mod`` (it must be importable: installed, or on ``sys.path``);
``"path/to/file.py:Name"`` loads that file, with no ``PYTHONPATH`` needed: the file's folder is put on
``sys.path`` while it loads, so it may import its neighbours; a file inside a package (folders with
``__init__.py``) is imported as a member of its package, so its relative imports work. A run records the spec with
the file's absolute path (`absolute`), so ``istjax train --resume`` and ``istjax eval`` of that run find the code
again in a fresh process, from any folder.

Every failure is a `ValueError` naming the config field, the value and the fix; a spec without ``:Name``, or with a
name the file lacks, lists what the file defines (its functions, or its flax modules) with the closest to the name
given. Loading a file runs it, as Python runs any module it imports: name only files you trust.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from typing import Any, Callable, NamedTuple, Optional

from istjax.core.errors import ArgError, Code

__all__ = ["Field", "load_object", "defined", "is_file_spec", "absolute", "spec_of", "searched"]


class Field(NamedTuple):
    """The config field a spec came from and what it names, for messages: ``Field("model.module", "ClassName")``;
    ``what`` and ``wanted``: the objects of a module listed when a spec names none of them (``"functions"``,
    ``inspect.isfunction``)."""

    name: str
    noun: str
    what: str = "functions"
    wanted: Callable[[Any], bool] = inspect.isfunction

    @property
    def arg(self) -> str:
        """The argument an `ArgError` names: ``"module"`` (``model.module``, ``data.module``)."""
        return self.name.rsplit(".", 1)[-1]

    @property
    def fix(self) -> tuple:
        """The two forms of a spec, as a fix (`istjax.core.errors`) setting `arg`."""
        return ("Name it as", {self.arg: f"path/to/file.py:{self.noun}"}, "(a file, no PYTHONPATH needed) or",
                {self.arg: f"package.module:{self.noun}"}, "(importable from here).")


def is_file_spec(spec: str) -> bool:
    """Whether ``spec`` names a file (``...py:Name``) rather than an importable module."""
    return spec.rsplit(":", 1)[0].endswith(".py")


def absolute(spec: str, *, base: Optional[str] = None) -> str:
    """``spec`` with a file path made absolute (relative to ``base``, default the current folder); a module spec
    unchanged."""
    if not is_file_spec(spec):
        return spec
    path, colon, name = spec.rpartition(":") if ":" in spec else (spec, "", "")  # no ":Name": refused when loaded
    path = os.path.expanduser(path)
    if not os.path.isabs(path):
        path = os.path.join(base or os.getcwd(), path)
    return f"{os.path.normpath(path)}{colon}{name}"


def searched() -> str:
    """Where Python looks for a module in this process, in words: sys.path, and whether the current folder is on it
    (``python script.py`` puts the script's folder there; the ``istjax`` console script puts neither it nor the
    current folder)."""
    cwd = os.getcwd()
    on_path = any(os.path.abspath(p or os.curdir) == cwd for p in sys.path)
    where = "sys.path, which includes" if on_path else "sys.path, which does NOT include"
    return (f"{where} the current folder {cwd} (PYTHONPATH={os.environ.get('PYTHONPATH', '')!r})")


def _split(spec: Any, field: Field) -> tuple[str, str]:
    if not isinstance(spec, str) or spec.count(":") < 1 or not all(spec.rsplit(":", 1)):
        raise ArgError(field.arg, spec, f"{field.name}={spec!r}: give 'where:{field.noun}'.", field.fix)
    where, name = spec.rsplit(":", 1)
    return where, name


def _package_name(path: str) -> Optional[tuple[str, str]]:
    """``(root, "pkg.sub.mod")`` when file ``path`` lies in a package (its folder, and each one above it up to
    ``root``, holds an ``__init__.py``); None for a file outside any package."""
    folder, parts = os.path.dirname(path), [os.path.splitext(os.path.basename(path))[0]]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parts.insert(0, os.path.basename(folder))
        folder = os.path.dirname(folder)
    return (folder, ".".join(parts)) if len(parts) > 1 and all(p.isidentifier() for p in parts) else None


def _import_from_package(path: str, spec: str, field: Field):
    """A file inside a package, imported as a member of it (the package's root on ``sys.path`` while it imports),
    so its relative imports work and its objects are the ones an ordinary import gives; None for a file outside any
    package, or when that import fails or finds another file of the same dotted name."""
    found = _package_name(path)
    if found is None:
        return None
    root, dotted = found
    sys.path.insert(0, root)
    try:
        module = _import(dotted, spec, field)
    except ValueError:  # e.g. an installed package of the same name shadows it: the file is loaded by path instead
        return None
    finally:
        if sys.path and sys.path[0] == root:
            sys.path.pop(0)
    same = os.path.abspath(getattr(module, "__file__", "") or "") == path
    return module if same else None


def _load_file(path: str, spec: str, field: Field):
    """The module of file ``path``: imported under its dotted name when it lies in a package
    (`_import_from_package`), else loaded once per process under a name derived from its absolute path."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise ArgError(field.arg, spec, f"{field.name}={spec!r}: no such file ({path}).", field.fix)
    module = _import_from_package(path, spec, field)
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
        raise ValueError(f"{field.name}={spec!r}: loading {path} failed with {type(e).__name__}: {e}. Fix the file "
                         f"(run `python {path}` to see the whole error).") from e
    finally:
        if sys.path and sys.path[0] == folder:
            sys.path.pop(0)
    return module


def _import(where: str, spec: str, field: Field):
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as e:
        if e.name and where.startswith(e.name):
            raise ArgError(field.arg, spec, f"{field.name}={spec!r}: no module named {e.name!r} here (searched "
                                            f"{searched()}).", field.fix) from e
        raise ValueError(f"{field.name}={spec!r}: importing {where} failed: {e}. Install the missing package or fix "
                         f"the import.") from e
    except Exception as e:
        raise ValueError(f"{field.name}={spec!r}: importing {where} failed with {type(e).__name__}: {e}.") from e


def load_object(spec: str, field: Field) -> tuple[Any, Any]:
    """``(the object spec names, the module it was found in)``; a ValueError naming ``field`` and the fix when the
    file or module does not load, or lacks the name (a dotted name reaches a nested one: ``Outer.Inner``), or the spec
    gives no name: then the fix lists the names the module defines (`defined`), the closest first."""
    if isinstance(spec, str) and spec.strip(": ") and ":" not in spec:
        _refuse_missing_name(spec, _module(spec, spec, field), field)
    where, name = _split(spec, field)
    module = _module(where, spec, field)
    obj = module
    for part in name.split("."):
        obj = getattr(obj, part, None)
    if obj is None:
        close = difflib.get_close_matches(name, defined(module, field), n=3, cutoff=0.6)
        mean = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
        listed = f"the {field.what} defined there are {defined(module, field)}"
        raise ArgError(field.arg, spec, f"{field.name}={spec!r}: {where} has no {name!r}{mean};",
                       (listed, Code("", ("; use", {field.arg: f"{where}:{close[0]}"})) if close else "", "."))
    return obj, module


def _module(where: str, spec: str, field: Field):
    return _load_file(where, spec, field) if where.endswith(".py") else _import(where, spec, field)


def defined(module: Any, field: Field) -> list[str]:
    """The public names of ``module`` that ``field`` can name: objects defined in it (not imported into it) that
    ``field.wanted`` accepts, sorted."""
    return sorted(n for n, v in vars(module).items() if not n.startswith("_") and field.wanted(v)
                  and getattr(v, "__module__", None) == module.__name__)


def _refuse_missing_name(spec: str, module: Any, field: Field) -> None:
    """A spec that names a file or module but nothing in it (``data.module=my_data.py``): the form, and what it
    defines (the one it defines, when it defines one)."""
    names = defined(module, field)
    example = names[0] if len(names) == 1 else field.noun
    listed = f"the {field.what} it defines are {names}" if names else f"it defines no {field.what}"
    raise ArgError(field.arg, spec, f"{field.name}={spec!r} names no {field.noun} in it: give 'where:{field.noun}';",
                   ("e.g.", {field.arg: f"{spec}:{example}"}, f"({listed})."))


def spec_of(obj: Any) -> Optional[str]:
    """Where a class or function can be loaded from again (a file spec, absolute), or None (defined
    interactively)."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    path = getattr(module, "__file__", None)
    if not path or "<" in obj.__qualname__:
        return None
    return f"{os.path.abspath(path)}:{obj.__qualname__}"
