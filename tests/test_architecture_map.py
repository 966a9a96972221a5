"""docs/architecture.md's folder map, true by test: every folder and module it names exists, and every folder and
module of ``istjax/`` is named in it at the granularity the map uses.

The map is the first ``text`` code block under "## The folders": ``istjax/`` then one entry a line, two spaces of
indent a level (``core/``, then ``spec.py`` under it), each followed by its description, which may run on over
lines indented deeper. Granularity: every top-level folder (and module) of ``istjax/`` has an entry; a folder whose
map lists modules (as entries under it, or, for a sub-folder such as ``runtimes/mpi/``, in its description) lists
all of them (``__init__.py`` aside) and its sub-folders. Every ``name.py`` or ``name/`` (or ``a/b.py``) a
description names must exist beside its entry.
"""

from __future__ import annotations

import pathlib
import re
from typing import NamedTuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
NAME = re.compile(r"^[A-Za-z_]\w*(?:\.py|/)$")
MENTION = re.compile(r"(?<![\w/.-])((?:\w+/)*\w+(?:\.py|/))(?![\w/])")


class Entry(NamedTuple):
    """One line of the map: its path below ``istjax/`` (a folder ends in '/'), and its description."""

    path: str
    description: str

    @property
    def folder(self) -> str:
        """Where the names its description mentions are: the entry itself for a folder, else its folder."""
        return self.path if self.path.endswith("/") else self.path.rpartition("/")[0] + "/" * ("/" in self.path)


def map_block(text: str) -> list[str]:
    """The lines of the first ``text`` code block after '## The folders'."""
    after = text.split("## The folders", 1)[1]
    block = after.split("```text\n", 1)[1].split("```", 1)[0]
    return block.rstrip("\n").split("\n")


def parse(lines: list[str]) -> list[Entry]:
    """The entries of a map (module docstring). A line is an entry when it starts with a name and is indented at
    most one level deeper than the entry before; anything else continues that entry's description."""
    assert lines[0] == "istjax/", f"the map starts with 'istjax/', not {lines[0]!r}"
    entries: list[list] = []  # [path, description, indent]
    parents: list[tuple[int, str]] = [(0, "")]  # (indent, folder path) from the root down
    for line in lines[1:]:
        indent = len(line) - len(line.lstrip(" "))
        words = line.split(maxsplit=1)
        last = entries[-1][2] if entries else 0
        if words and NAME.match(words[0]) and indent % 2 == 0 and 2 <= indent <= last + 2:
            while parents[-1][0] >= indent:
                parents.pop()
            path = parents[-1][1] + words[0]
            entries.append([path, words[1] if len(words) > 1 else "", indent])
            if path.endswith("/"):
                parents.append((indent, path))
        else:
            assert entries, f"the map's line {line!r} comes before any entry"
            entries[-1][1] += " " + line.strip()
    return [Entry(p, d) for p, d, _ in entries]


def mentions(entry: Entry) -> set[str]:
    """The paths (below ``istjax/``) of the modules and folders ``entry``'s description names."""
    return {entry.folder + m for m in MENTION.findall(entry.description)}


def _exists(package: pathlib.Path, path: str) -> bool:
    return (package / path).is_dir() if path.endswith("/") else (package / path).is_file()


def _children(package: pathlib.Path, folder: str) -> set[str]:
    """The modules and sub-packages of ``folder`` (``__init__.py`` aside), as map paths."""
    here = package / folder
    return ({folder + p.name for p in here.glob("*.py") if p.name != "__init__.py"}
            | {folder + p.name + "/" for p in here.iterdir() if p.is_dir() and (p / "__init__.py").exists()})


def problems(entries: list[Entry], package: pathlib.Path) -> list[str]:
    """What makes the map untrue of ``package``: names that do not exist, folders and modules it leaves out."""
    named = {e.path for e in entries} | set().union(*(mentions(e) for e in entries))
    out = [f"the map names {p}, which istjax/ does not hold" for p in sorted(named) if not _exists(package, p)]
    listing = {e.folder for e in entries if e.path.endswith(".py")}  # folders with module entries
    listing |= {e.path for e in entries if e.path.count("/") > 1}  # a sub-folder's entry lists its modules
    for folder in sorted({""} | listing):
        if not (package / folder).is_dir():
            continue
        missing = sorted(_children(package, folder) - named)
        out += [f"istjax/{p} is not in the map (it lists the rest of istjax/{folder})" for p in missing]
    return out


def test_the_architecture_map_names_what_istjax_holds_and_nothing_else():
    entries = parse(map_block(PAGE.read_text()))
    found = problems(entries, ROOT / "istjax")
    assert not found, ("docs/architecture.md's folder map is not true of istjax/; fix the map (one entry a line under "
                       "its folder, two spaces a level):\n" + "\n".join(found))


MAP = """\
istjax/
  core/         the core
    spec.py       specs
    task.py       tasks; see also util.py
  runtimes/     where workers run
    mpi/          the MPI runtime: world.py (ranks),
                  rounds.py (what every round shares), then tensor.py
  launch/       config (schema), the driver (driver.py)
"""


def _tree(tmp_path: pathlib.Path, files: list[str]) -> pathlib.Path:
    package = tmp_path / "istjax"
    for f in files:
        (package / f).parent.mkdir(parents=True, exist_ok=True)
        (package / f).write_text("")
    for d in [package, *package.rglob("*")]:
        if d.is_dir():
            (d / "__init__.py").touch()
    return package


TRUE_TREE = ["core/spec.py", "core/task.py", "core/util.py", "runtimes/base.py", "runtimes/mpi/world.py",
             "runtimes/mpi/rounds.py", "runtimes/mpi/tensor.py", "launch/driver.py", "launch/cli.py"]


def test_the_parser_reads_entries_levels_and_continued_descriptions():
    entries = parse(MAP.rstrip("\n").split("\n"))
    assert [e.path for e in entries] == ["core/", "core/spec.py", "core/task.py", "runtimes/", "runtimes/mpi/",
                                         "launch/"]
    mpi = entries[4]
    assert mentions(mpi) == {"runtimes/mpi/world.py", "runtimes/mpi/rounds.py", "runtimes/mpi/tensor.py"}
    assert mentions(entries[2]) == {"core/util.py"}  # a module's mention is beside it
    assert mentions(entries[5]) == {"launch/driver.py"}


def test_a_true_map_has_no_problems(tmp_path):
    """launch/ and runtimes/ list no module entries, so their cli.py and base.py need not be named."""
    package = _tree(tmp_path, TRUE_TREE)
    assert problems(parse(MAP.rstrip("\n").split("\n")), package) == []


@pytest.mark.parametrize("change, says", [
    (["core/state.py"], "istjax/core/state.py is not in the map"),  # a listed folder's new module
    (["runtimes/mpi/sharded.py"], "istjax/runtimes/mpi/sharded.py is not in the map"),  # a sub-folder's
    (["xmc/loss.py"], "istjax/xmc/ is not in the map"),  # a new top-level folder
    (["core/deep/x.py"], "istjax/core/deep/ is not in the map"),  # a listed folder's sub-package
])
def test_what_the_map_leaves_out_is_named(tmp_path, change, says):
    package = _tree(tmp_path, TRUE_TREE + change)
    found = problems(parse(MAP.rstrip("\n").split("\n")), package)
    assert any(says in p for p in found), found


@pytest.mark.parametrize("gone, says", [
    ("core/task.py", "the map names core/task.py"),  # an entry
    ("launch/driver.py", "the map names launch/driver.py"),  # a mention in a description
    ("runtimes/mpi/rounds.py", "the map names runtimes/mpi/rounds.py"),  # on a continued line
])
def test_what_the_map_names_must_exist(tmp_path, gone, says):
    package = _tree(tmp_path, [f for f in TRUE_TREE if f != gone])
    found = problems(parse(MAP.rstrip("\n").split("\n")), package)
    assert any(says in p for p in found), found
