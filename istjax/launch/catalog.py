"""``istjax configs``: the config files shipped with the repository, what each one studies and its stated result.

::

    istjax configs [--format=text|markdown] [--root=REPO]

Lists every ``*.py`` file under ``experiments/configs``, ``experiments/speech/configs`` and
``experiments/theory/configs`` of the repository (`CONFIG_DIRS`; the repository is the folder above the installed
``istjax`` package, ``pathlib.Path(istjax.__file__).parents[1]``, or ``--root``), one line per file:

* its path, relative to the repository;
* its description: the first line of the module docstring (the whole first paragraph when that line does not
  end it), read with `ast` without importing or running the file;
* its result line: the docstring's paragraph that begins with ``Result:`` at the start of a line (`RESULT_PREFIX`,
  the one convention every shipped config follows), trimmed to its first clause. It states a measured figure, or
  the results file that holds one (``Result: experiments/.../x.json ...``: the catalog then shows that file's test
  accuracy for this config run as it is, or for the row the line names, ``row `ist` of experiments/...``), or
  ``not measured`` and why. Nothing else
  in a docstring is read as a result; ``-`` when there is no such paragraph (every shipped config has one:
  ``tests/test_listings.py``).

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

__all__ = ["CONFIG_DIRS", "RESULT_PREFIX", "CatalogError", "ConfigEntry", "describe", "format_catalog", "main",
           "repo_root", "shipped_configs"]

CONFIG_DIRS = ("experiments/configs", "experiments/speech/configs", "experiments/theory/configs")
#: What a config docstring's result paragraph begins with, at the start of a line.
RESULT_PREFIX = "Result:"
_RESULT_MAX = 150  # characters of a stated result kept on its line
_RESULTS_FILE = re.compile(r"experiments/[\w./-]+\.json")
_ROW = re.compile(r"\brow `+([\w.-]+)`+")  # ``Result: row `ist` of experiments/.../x.json``: the row to show


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
    """``(description, result)`` of a config's module docstring: the result is the first clause of the paragraph
    that begins with `RESULT_PREFIX` (the module's docstring); None when there is none."""
    if not docstring or not docstring.strip():
        return "(no docstring)", None
    lines = docstring.strip().splitlines()
    description = _paragraph(lines, 0) if lines[0].strip() and not lines[0].rstrip().endswith(".") else \
        lines[0].strip()
    at = next((i for i, line in enumerate(lines) if line.lstrip().startswith(RESULT_PREFIX)), None)
    result = None
    if at is not None:
        result = _trim(_first_clause(_paragraph(lines, at).removeprefix(RESULT_PREFIX).strip())) or None
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
    this config: the row the result names (``row `ist` of experiments/...``), else the row of this ``config`` run
    as it is (no overrides): ``'test accuracy 0.971 ± 0.002 (3 seeds) in experiments/mlp/results/digits.json'``;
    None when there is no such file or row."""
    import json

    from istjax.launch.metrics import format_mean_std

    found = _RESULTS_FILE.search(result or "")
    if found is None:
        return None
    named = _ROW.search(result or "")
    try:
        rows = json.loads((root / found.group(0)).read_text(encoding="utf-8")).get("rows", [])
        row = next(r for r in rows if (r.get("label") == named.group(1) if named else
                                       r.get("config") == config and not r.get("overrides")))
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
