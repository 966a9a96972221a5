"""``istjax configs``: the config files shipped with the repository, what each one studies and its stated result.

::

    istjax configs [--format=text|markdown] [--root=REPO]

Lists every ``*.py`` file under ``experiments/configs``, ``experiments/speech/configs`` and
``experiments/theory/configs`` of the repository (`CONFIG_DIRS`; the repository is the folder above the installed
``istjax`` package, ``pathlib.Path(istjax.__file__).parents[1]``, or ``--root``), one line per file:

* its path, relative to the repository;
* its description: the first line of the module docstring (the whole first paragraph when that line does not
  end it), read with `ast` without importing or running the file;
* the result its docstring states, trimmed to its first clause: the paragraph of the first line saying "Measured"
  or "Expected" (the lead-in such as "Expected result (measured on a shared 2-core CPU):" dropped), else the first
  line mentioning "test accuracy"; ``-`` when the docstring states none.

Exit codes: 0 listed; 2 none of the folders exists (an install without the repository's ``experiments/``: pass
``--root`` to a checkout).
"""

from __future__ import annotations

import argparse
import ast
import pathlib
import re
import sys
from collections.abc import Sequence
from typing import NamedTuple, Optional

__all__ = ["CONFIG_DIRS", "CatalogError", "ConfigEntry", "describe", "format_catalog", "main", "repo_root",
           "shipped_configs"]

CONFIG_DIRS = ("experiments/configs", "experiments/speech/configs", "experiments/theory/configs")
_RESULT_MAX = 150  # characters of a stated result kept on its line
_RESULT_LINE = re.compile(r"\b(Measured|Expected|Result)\b")
_LEAD_IN = re.compile(r"^.*?\b(?:Measured|Expected|Result)\b[^:.]*?(?:\([^)]*\))?\s*[:.]\s*")
_RESULTS_FILE = re.compile(r"experiments/[\w./-]+\.json")


class CatalogError(FileNotFoundError):
    """No config folder under the repository root."""


class ConfigEntry(NamedTuple):
    """One shipped config: ``path`` relative to the repository, ``description``, ``result`` (None: none stated)."""

    path: str
    description: str
    result: Optional[str]


def repo_root() -> pathlib.Path:
    """The repository the installed package lives in: the folder above ``istjax/``."""
    import istjax

    return pathlib.Path(istjax.__file__).resolve().parents[1]


def _paragraph(lines: list[str], start: int) -> str:
    out = []
    for line in lines[start:]:
        if not line.strip():
            break
        out.append(line.strip())
    return " ".join(out)


def _first_clause(text: str) -> str:
    """``text`` up to its first ``;`` or sentence end outside parentheses."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif depth == 0 and (ch == ";" or (ch == "." and (i + 1 == len(text) or text[i + 1] == " "))):
            return text[:i]
    return text


def _trim(text: str, limit: int = _RESULT_MAX) -> str:
    text = re.sub(r"\s+", " ", text).strip().replace("``", "`")
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + " …"


def describe(docstring: Optional[str]) -> tuple[str, Optional[str]]:
    """``(description, result)`` of a config's module docstring (see the module's docstring); None: no result."""
    if not docstring or not docstring.strip():
        return "(no docstring)", None
    lines = docstring.strip().splitlines()
    description = _paragraph(lines, 0) if lines[0].strip() and not lines[0].rstrip().endswith(".") else \
        lines[0].strip()
    result = None
    for i, line in enumerate(lines):
        if _RESULT_LINE.search(line):
            text = _LEAD_IN.sub("", _paragraph(lines, i), count=1)
            result = _trim(_first_clause(text)) or None
            break
    if result is None:
        hit = next((line for line in lines[1:] if "test accuracy" in line.lower()), None)
        if hit is not None:
            result = _trim(_first_clause(hit))
    return re.sub(r"\s+", " ", description).strip().replace("``", "`"), result


def _read(path: pathlib.Path) -> tuple[str, Optional[str]]:
    """The description and stated result of one config file, parsed with `ast` (never imported or run)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, ValueError) as e:
        return f"(unreadable: {type(e).__name__}: {e})", None
    return describe(ast.get_docstring(tree))


def shipped_configs(root: str | pathlib.Path | None = None) -> list[ConfigEntry]:
    """Every ``*.py`` config file (not ``__init__.py``) under `CONFIG_DIRS` of ``root`` (default: `repo_root`),
    folder by folder, sorted by name, with its description and stated result.

    Raises:
      CatalogError: none of `CONFIG_DIRS` exists under ``root``.
    """
    root = repo_root() if root is None else pathlib.Path(root)
    folders = [root / d for d in CONFIG_DIRS]
    if not any(f.is_dir() for f in folders):
        raise CatalogError(
            f"no config folders under {str(root)!r} (looked for {', '.join(CONFIG_DIRS)}): the shipped configs live "
            f"in a checkout of the istjax repository, not in an installed package; pass --root=PATH_TO_CHECKOUT.")
    out = []
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted(p for p in folder.glob("*.py") if p.name != "__init__.py"):
            description, result = _read(path)
            rel = path.relative_to(root).as_posix()
            out.append(ConfigEntry(rel, description, _committed(root, rel, result) or result))
    return out


def _committed(root: pathlib.Path, config: str, result: Optional[str]) -> Optional[str]:
    """The test accuracy the results file a docstring points to (``Result: experiments/.../x.json``) holds for
    this config run as it is (a row with this ``config`` and no overrides): ``'test accuracy 0.971 ± 0.002
    (3 seeds) in experiments/mlp/results/digits.json'``; None when there is no such file or row."""
    import json

    from istjax.launch.metrics import format_mean_std

    found = _RESULTS_FILE.search(result or "")
    if found is None:
        return None
    try:
        rows = json.loads((root / found.group(0)).read_text(encoding="utf-8")).get("rows", [])
        row = next(r for r in rows if r.get("config") == config and not r.get("overrides"))
        acc = format_mean_std(row["test_accuracy_mean"], row["test_accuracy_std"], len(row["seeds"]))
    except (OSError, ValueError, AttributeError, StopIteration, KeyError, TypeError):
        return None
    return f"test accuracy {acc} in {found.group(0)}"


def format_catalog(entries: Sequence[ConfigEntry], fmt: str = "text") -> str:
    """``fmt="text"``: one line per config, ``PATH  DESCRIPTION  | result: RESULT``, paths aligned;
    ``"markdown"``: a table with the columns config, description, result. A missing result reads ``-``."""
    if fmt == "markdown":
        def cell(text: str) -> str:
            return text.replace("|", "\\|")

        lines = ["| config | description | result |", "|---|---|---|"]
        lines += [f"| `{e.path}` | {cell(e.description)} | {cell(e.result or '-')} |" for e in entries]
        return "\n".join(lines)
    if fmt != "text":
        raise ValueError(f"format {fmt!r}: choose text or markdown.")
    width = max((len(e.path) for e in entries), default=0)
    return "\n".join(f"{e.path:<{width}}  {e.description}  | result: {e.result or '-'}" for e in entries)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="istjax configs", description="List the config files shipped under experiments/: path, one-line "
        "description and the result each one's docstring states (read without running the files).")
    p.add_argument("--format", choices=("text", "markdown"), default="text", help="output format (default: text)")
    p.add_argument("--root", default=None,
                   help="repository checkout to list (default: the one the installed istjax package is in)")
    return p


def main(argv: Sequence[str]) -> int:
    """``istjax configs`` (``argv`` without the program and subcommand names); returns the exit code."""
    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as e:  # argparse has printed usage/help
        return int(e.code or 0)
    try:
        entries = shipped_configs(args.root)
    except CatalogError as e:
        print(f"istjax configs: {e}", file=sys.stderr)
        return 2
    print(format_catalog(entries, args.format))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
