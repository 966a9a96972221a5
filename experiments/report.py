"""Every number in the README and docs/ regenerated from the committed results files.

    python -m experiments.report                        # rewrite every table between markers (`make results`)
    python -m experiments.report --check                # exit 1 with a diff where a table differs from its JSON,
                                                        # or where a number rests on a run from a dirty tree or
                                                        # with no commit (`unproven`) that is not declared
    python -m experiments.report --list                 # the tables, the files they read and where they stand

In README.md and docs/*.md a table stands between two marker lines, ``<!-- report:NAME -->`` and
``<!-- /report:NAME -->``; a single figure inside prose stands between the same two markers on one line
(``IST was <!-- report:NAME -->5.8x<!-- /report:NAME --> sooner``). Markers inside code (fenced blocks, backticks)
are text. NAME is an entry of the registry (`experiments.tables`): the JSON files it reads (relative to the
repository root) and a pure function from their contents to the text. Each study family registers its entries
beside its study, in ``experiments/<family>/report.py`` (`FAMILIES`); adding a table of an aggregated results file
(a list ``rows``, one per cell, each with ``algorithm``, ``num_workers``, ``seeds``, ``test_accuracy_mean`` and
``test_accuracy_std``) is one call there::

    results_table("images_demo", "experiments/images/results/demo.json",
                  ["label", "algorithm", "num_workers", "test_accuracy", "bytes_per_round"])

and any other table a function under ``@table(NAME, PATH, ...)`` (or ``scalar(NAME, PATH, fn)`` for one figure).

Provenance: every results file a marker reads must say which code made it. A file of runs (``runs``) passes when
each run records the commit that trained it (``commit``) and a clean tree (``clean``: true), as
`istjax.launch.study` writes them; a file of one measurement passes on its ``code`` stamp
(`istjax.launch.provenance.code_version`). A file that does not, and that cannot be remade here (a GPU measurement on a
machine without one), may say so in a top-level ``"unrecorded": {"why": ..., "rerun": ...}`` (`declared`): its
numbers are then shown with that reason, in the ``<!-- report:provenance -->`` note every page reading such a file
must carry (`provenance_note`), until a rerun rewrites the file without it. Anything else, an undeclared file
resting on a dirty tree or no commit, or a page without its note, is a problem naming the file and the markers.

Exit status: 0 every table agrees (or was rewritten); 1 a number rests on a run from a dirty tree or with no commit
that is not declared, or (``--check``) a table differs from its JSON; 2 the files cannot be read as asked: a marker
naming no entry, a marker without its other half, a results file missing or malformed. Nothing is written unless
every table renders.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import json
import pathlib
import re
import sys
from collections.abc import Sequence
from typing import Any

from experiments import claims as claims_lib
from experiments import tables
from experiments.tables import NAME_PATTERN, Entry, markdown_table

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/*.md")  # the files whose markers are kept, relative to the root
FIX = "python -m experiments.report (or make results)"
# The study families whose experiments/<family>/report.py registers tables (imported in this order).
FAMILIES = ("mlp", "images", "graphs", "custom", "distributed", "benchmarks", "network", "theory", "extreme", "text",
            "precision", "federated", "protocols")
# The README's headline table: its rows in the order of these results files (a file's rows in registration order).
HEADLINE_ORDER = (
    "experiments/mlp/results/digits.json", "experiments/mlp/results/keywords.json",
    "experiments/mlp/results/mnist1d.json", "experiments/images/results/resnet.json",
    "experiments/images/results/ablation.json", "experiments/images/results/decompose.json",
    "experiments/images/results/headline.json",
    "experiments/graphs/results/gist_cora.json",
    "experiments/graphs/results/gist_citeseer.json", "experiments/custom/results/fit.json",
    "experiments/graphs/results/gist_width.json", "experiments/distributed/results/comm_and_memory.json",
    "experiments/benchmarks/results.json", "experiments/benchmarks/results_conv.json",
    "experiments/network/results.json", "experiments/network/results_keywords.json",
    "experiments/theory/results/quadratic/results.json", "experiments/federated/results/claim.json",
    "experiments/federated/results/momentum.json", "experiments/protocols/results/dynamic.json",
    "experiments/protocols/results/drift.json", "experiments/protocols/results/admm.json",
    "experiments/protocols/results/codistill.json")


# ----------------------------------------------------------------------------------------------------------------
# The families' entries and the README's headline table

def _headline_rows() -> list:
    """`experiments.tables.HEADLINE` in `HEADLINE_ORDER` (a file not listed goes last, in registration order)."""
    rank = {source: i for i, source in enumerate(HEADLINE_ORDER)}
    return sorted(tables.HEADLINE, key=lambda row: rank.get(row[2], len(rank)))


def _headline(*loaded):
    data = dict(zip(_headline_sources(), loaded))
    return markdown_table(["what", "result", "where"],
                          [[what(data[source]) if callable(what) else what, fn(data[source]), where]
                           for what, where, source, fn in _headline_rows()])


def _headline_sources() -> tuple[str, ...]:
    return tuple(dict.fromkeys(source for _, _, source, _ in _headline_rows()))


def _register_headline() -> None:
    """(Re)registers the headline table over the sources of the rows `experiments.tables.HEADLINE` holds now."""
    tables.REGISTRY.pop("headline", None)
    tables.register("headline", _headline_sources(), _headline)


for _family in FAMILIES:
    importlib.import_module(f"experiments.{_family}.report")
_register_headline()


# ----------------------------------------------------------------------------------------------------------------
# Markers

OPEN = re.compile(rf"<!-- report:({NAME_PATTERN}) -->")
CLOSE = re.compile(rf"<!-- /report:({NAME_PATTERN}) -->")
INLINE = re.compile(rf"<!-- report:(?P<name>{NAME_PATTERN}) -->(?P<body>.*?)<!-- /report:(?P=name) -->")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


PROVENANCE = "provenance"  # the reserved marker of a page's provenance note (`provenance_note`)


class ReportError(Exception):
    """The files cannot be read as asked (exit status 2); the message names the file, the line and the fix."""


@dataclasses.dataclass
class Placement:
    """Where a table (or, ``inline``, a figure) stands: ``text[start:end]`` is what the file holds now."""
    path: str
    line: int
    name: str
    start: int
    end: int
    inline: bool


def _mask_code(line: str) -> str:
    """The line with code spans blanked (same length), so markers quoted in backticks are not markers."""
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def find_markers(text: str, path: str) -> list[Placement]:
    """Every marker pair in ``text``; a `ReportError` for one without its other half."""
    placements: list[Placement] = []
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    open_block: tuple[str, int] | None = None  # (name, index of its line)
    in_fence = False
    for i, line in enumerate(lines):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        masked = _mask_code(line)
        stripped = masked.strip()
        if (m := OPEN.fullmatch(stripped)) and not INLINE.search(masked):
            if open_block:
                raise ReportError(f"{path}:{i + 1}: <!-- report:{m.group(1)} --> opens inside report:{open_block[0]} "
                                  f"(opened at line {open_block[1] + 1}), which has no closing marker before it; "
                                  f"fix: add <!-- /report:{open_block[0]} --> after its table")
            open_block = (m.group(1), i)
            continue
        if m := CLOSE.fullmatch(stripped):
            if not open_block or open_block[0] != m.group(1):
                opened = f" (report:{open_block[0]} is open, from line {open_block[1] + 1})" if open_block else ""
                raise ReportError(f"{path}:{i + 1}: <!-- /report:{m.group(1)} --> closes a table that was not "
                                  f"opened{opened}; fix: put <!-- report:{m.group(1)} --> on its own line before "
                                  f"the table, or remove this marker")
            name, j = open_block
            placements.append(Placement(path, j + 1, name, offsets[j + 1], offsets[i], inline=False))
            open_block = None
            continue
        for m in INLINE.finditer(masked):
            placements.append(Placement(path, i + 1, m.group("name"), offsets[i] + m.start("body"),
                                        offsets[i] + m.end("body"), inline=True))
        rest = INLINE.sub("", masked)
        if m := (OPEN.search(rest) or CLOSE.search(rest)):
            raise ReportError(f"{path}:{i + 1}: {m.group(0)} has no other half on its line; fix: a table's markers "
                              f"stand alone on their own lines, a figure's both on the line it is in, "
                              f"<!-- report:{m.group(1)} -->value<!-- /report:{m.group(1)} -->")
    if open_block:
        raise ReportError(f"{path}:{open_block[1] + 1}: <!-- report:{open_block[0]} --> is never closed; fix: add "
                          f"<!-- /report:{open_block[0]} --> on its own line after the table")
    return placements


# Rendering and the command

def pages(root: pathlib.Path) -> list[pathlib.Path]:
    found: list[pathlib.Path] = []
    for pattern in PAGES:
        found += sorted(root.glob(pattern))
    return found


def block(text: str) -> str:
    """What stands between a table's two marker lines: the table with a blank line on either side."""
    return "\n" + text.strip("\n") + "\n\n"


class _Renderer:
    """Renders each entry once, loading each JSON file once; errors name the marker that asked."""

    def __init__(self, root: pathlib.Path, registry: dict[str, Entry]):
        self.root, self.registry = root, registry
        self.loaded: dict[str, Any] = {}
        self.done: dict[str, str] = {}
        self.readers: dict[str, list[str]] = {}  # results file -> the markers whose numbers rest on it
        self.noted: set[str] = set()  # the pages carrying a provenance note

    def load(self, source: str, where: str, name: str) -> Any:
        if source not in self.loaded:
            path = self.root / source
            if not path.is_file():
                raise ReportError(f"{where}: report:{name} reads {source}, which is not in {self.root}; fix: run the "
                                  f"study that writes it and commit the file, or remove the marker")
            try:
                self.loaded[source] = json.loads(path.read_text())
            except (OSError, ValueError) as e:
                raise ReportError(f"{where}: report:{name} reads {source}, which is not valid JSON ({e}); fix: "
                                  f"restore it from git or run its study again") from e
        return self.loaded[source]

    def entry(self, name: str, where: str) -> Entry:
        """The registered entry ``name``; an unknown name is refused with the closest ones."""
        entry = self.registry.get(name)
        if entry is None:
            near = difflib.get_close_matches(name, self.registry, n=3)
            hint = f"did you mean {', '.join(near)}? " if near else ""
            raise ReportError(f"{where}: report:{name} names no table; {hint}fix: use a name that "
                              f"`python -m experiments.report --list` shows, or register it in its study's "
                              f"experiments/<family>/report.py")
        return entry

    def note(self, p: Placement, placements: Sequence[Placement]) -> str:
        """The page's provenance note (`provenance_note`) over the files its other markers read; a page is noted
        as carrying one, so `_provenance_status` can tell the pages that lack it."""
        if p.inline:
            raise ReportError(f"{p.path}:{p.line}: report:{PROVENANCE} is a note; fix: put its markers each on its "
                              f"own line")
        self.noted.add(p.path)
        read = dict.fromkeys(s for q in placements if q.name != PROVENANCE for s in self.registry[q.name].sources)
        return block(provenance_note([(s, declared(self.loaded[s], s)) for s in read
                                      if unproven(self.loaded[s])]))

    def render(self, p: Placement) -> str:
        where = f"{p.path}:{p.line}"
        entry = self.entry(p.name, where)
        if entry.inline != p.inline:
            want = ("on one line, <!-- report:NAME -->value<!-- /report:NAME -->" if entry.inline
                    else "each on its own line around the table")
            raise ReportError(f"{where}: report:{p.name} is a {'figure' if entry.inline else 'table'}; fix: put "
                              f"its markers {want}")
        for source in entry.sources:
            self.readers.setdefault(source, []).append(f"{where} report:{p.name}")
        if p.name not in self.done:
            loaded = [self.load(s, where, p.name) for s in entry.sources]
            try:
                text = entry.render(*loaded)
            except (KeyError, IndexError, TypeError, ValueError, StopIteration, ZeroDivisionError) as e:
                raise ReportError(f"{where}: report:{p.name} cannot be rendered from {', '.join(entry.sources)}: "
                                  f"{type(e).__name__}: {e}; fix: check the file against what its entry in "
                                  f"experiments/<family>/report.py reads") from e
            if entry.inline and "\n" in text:
                raise ReportError(f"{where}: report:{p.name} rendered more than one line")
            self.done[p.name] = text if entry.inline else block(text)
        return self.done[p.name]


def run(root: pathlib.Path, check: bool, registry: dict[str, Entry] | None = None, out=None,
        claims: Sequence[claims_lib.Claim] | None = None) -> int:
    """Rewrites (or, ``check``, compares) every marked table under ``root``; returns the exit status: also 1 where
    a number rests on a run from a dirty tree or with no commit that its file does not declare (`unproven`,
    `declared`), a page reading a declared file lacks its provenance note, or a claim fails the regime gate
    (`experiments.claims`: ``claims``, default every registered one whose table a page under ``root`` shows: a
    claim is what a page says; `tests/test_report.py` holds every registered claim to a table the docs show)."""
    registry = tables.REGISTRY if registry is None else registry
    out = out or sys.stdout
    renderer = _Renderer(root, registry)
    new_texts: dict[pathlib.Path, str] = {}
    diffs: list[str] = []
    for page in pages(root):
        rel = page.relative_to(root).as_posix()
        text = page.read_text()
        placements = find_markers(text, rel)
        wanted = {id(p): renderer.render(p) for p in placements if p.name != PROVENANCE}
        wanted.update({id(p): renderer.note(p, placements) for p in placements if p.name == PROVENANCE})
        new = text
        for p in sorted(placements, key=lambda p: p.start, reverse=True):
            want, have = wanted[id(p)], text[p.start:p.end]
            if want != have:
                sources = ", ".join(registry[p.name].sources) if p.name != PROVENANCE else "the files it reads"
                diffs.append("".join(difflib.unified_diff(
                    have.splitlines(keepends=True) if not p.inline else [have + "\n"],
                    want.splitlines(keepends=True) if not p.inline else [want + "\n"],
                    fromfile=f"{rel}:{p.line} report:{p.name} (as written)",
                    tofile=f"{rel}:{p.line} report:{p.name} (from {sources})")))
                new = new[:p.start] + want + new[p.end:]
        if new != text:
            new_texts[page] = new
    if claims is None:
        claims = [c for c in claims_lib.CLAIMS if c.table in renderer.done]
    status = max(_provenance_status(renderer, out), _claims_status(renderer, claims, out))
    if check:
        if diffs:
            print("\n".join(reversed(diffs)), file=out)
            print(f"{len(diffs)} table(s) differ from the committed results; fix: {FIX}", file=out)
            return 1
        print(f"every table agrees with the committed results ({len(renderer.done)} entries used)", file=out)
        return status
    for page, new in new_texts.items():
        page.write_text(new)
    print(f"rewrote {len(diffs)} table(s) in {len(new_texts)} file(s); {len(renderer.done)} entries used", file=out)
    return status


def rendered(name: str, root: pathlib.Path = ROOT) -> str:
    """The registered table (or figure) ``name`` as Markdown, rendered from its committed results file(s): what the
    docs site's results page shows at build time (``IPython.display.Markdown(rendered("text_study"))``)."""
    renderer = _Renderer(root, tables.REGISTRY)
    entry = renderer.entry(name, "rendered()")
    return entry.render(*[renderer.load(s, "rendered()", name) for s in entry.sources])


# ----------------------------------------------------------------------------------------------------------------
# Provenance: which code made the numbers

def _clean(code: Any) -> bool:
    """A ``{"commit", "clean"}`` record of a commit and a clean tree (`istjax.launch.provenance.code_version`)."""
    return isinstance(code, dict) and bool(code.get("commit")) and code.get("clean") is True


def _run_name(r: dict[str, Any]) -> str:
    what = r.get("label") or "-".join(str(r[k]) for k in ("model", "ranks", "link", "algorithm") if k in r) or "run"
    return f"{what} seed {r.get('seed')}: " + ("no commit" if not r.get("commit") else
                                               f"{str(r['commit'])[:10]}, dirty tree")


def unproven(doc: Any) -> str | None:
    """Why the numbers of a results file do not rest on committed code, or None when they do.

    A file of runs (``runs``, as `istjax.launch.study` writes it) needs every run to record its own ``commit`` and
    ``clean: true`` (a run without a ``commit`` of its own falls back on the file's ``code`` stamp, as a study that
    measured its runs in one process writes it); any other file needs its ``code`` stamp to be a clean commit.
    """
    doc = doc if isinstance(doc, dict) else {}
    runs = doc.get("runs")
    if isinstance(runs, list) and runs and all(isinstance(r, dict) for r in runs):
        bad = [r for r in runs if not _clean(r if "commit" in r else doc.get("code"))]
        if not bad:
            return None
        names = "; ".join(_run_name(r) for r in bad[:3]) + ("; ..." if len(bad) > 3 else "")
        return f"{len(bad)} of {len(runs)} runs from a dirty tree or with no commit ({names})"
    if _clean(doc.get("code")):
        return None
    return "records no clean commit of the code that made it (no per-run commit, no clean 'code' stamp)"


def declared(doc: Any, source: str = "the file") -> dict[str, str] | None:
    """A results file's ``"unrecorded": {"why", "rerun"}``: why its numbers rest on no recorded commit and the
    command that would remake them; None where it declares nothing. A declaration without both is a `ReportError`."""
    decl = doc.get("unrecorded") if isinstance(doc, dict) else None
    if decl is None:
        return None
    if not (isinstance(decl, dict) and all(isinstance(decl.get(k), str) and decl[k].strip() for k in ("why", "rerun"))):
        raise ReportError(f"{source}: 'unrecorded' must be {{\"why\": \"...\", \"rerun\": \"command\"}}, not "
                          f"{decl!r}; fix: say why its numbers carry no commit and the command that remakes them")
    return decl


def provenance_note(files: Sequence[tuple[str, dict[str, str] | None]]) -> str:
    """A page's ``<!-- report:provenance -->`` note: its results files that rest on no recorded commit, each with
    its declared reason and the command that would remake it (``files``: ``(source, declaration)``)."""
    if not files:
        return "Every number on this page rests on runs from a clean commit of the code."
    lines = ["Numbers on this page that rest on no recorded commit of the code (measured before runs recorded one; "
             "rerunning the command rewrites the file with its commit):", ""]
    for source, decl in files:
        decl = decl or {"why": "not declared.", "rerun": "?"}
        lines.append(f"- `{source}`: {decl['why'].strip()} Rerun: `{decl['rerun'].strip()}`.")
    return "\n".join(lines)


def _provenance_status(renderer: _Renderer, out) -> int:
    """Prints every results file the markers read whose numbers do not rest on committed code (`unproven`): those
    that declare why (`declared`) as notes, the others as problems, and the pages that read a declared file without
    a provenance note; returns 1 when there is a problem, else 0."""
    unrecorded = [(source, why, declared(doc, source)) for source, doc in sorted(renderer.loaded.items())
                  if (why := unproven(doc))]
    problems = 0
    for source, why, decl in unrecorded:
        readers = renderer.readers.get(source, [])
        pages_without = sorted({r.split(":")[0] for r in readers} - renderer.noted)
        if decl and not pages_without:
            print(f"provenance: {source}: declared: {decl['why'].strip()}", file=out)
            continue
        problems += 1
        if decl:
            print(f"provenance: {source} is read by {', '.join(pages_without)}, which carr"
                  f"{'y' if len(pages_without) > 1 else 'ies'} no provenance note; fix: add "
                  f"<!-- report:{PROVENANCE} --> and <!-- /report:{PROVENANCE} --> on lines of their own, then "
                  f"{FIX}", file=out)
            continue
        print(f"provenance: {source}: {why}; read by {', '.join(readers[:3])}"
              + (f" and {len(readers) - 3} more" if len(readers) > 3 else ""), file=out)
    if problems:
        print(f"{problems} results file(s) rest on runs from a dirty tree or with no commit; fix: commit, rerun the "
              f"study from the clean checkout, commit its results (or, where it cannot be rerun here, declare why in "
              f"the file's \"unrecorded\" and note it on the page)", file=out)
        return 1
    print(f"every number rests on runs from a clean commit ({len(renderer.loaded) - len(unrecorded)} results files"
          + (f"; {len(unrecorded)} declared and noted on their pages" if unrecorded else "") + ")", file=out)
    return 0


def _claims_status(renderer: _Renderer, claims: Sequence[claims_lib.Claim], out) -> int:
    """Prints every claim that fails the regime gate (`experiments.claims.problems`); 1 when one does, else 0."""
    found = claims_lib.problems(claims, renderer.registry,
                                lambda source, c: renderer.load(source, f"claim {c.name}", c.table))
    for line in found:
        print(f"regime: {line}", file=out)
    if found:
        print(f"{len(found)} claim problem(s): a claimed comparison between cells that do not beat the study's "
              f"trivial baseline, or resting on a metric its table does not show", file=out)
        return 1
    if claims:
        print(f"every claim's cells beat their study's regime baseline ({len(claims)} claims)", file=out)
    return 0


def listing(root: pathlib.Path, registry: dict[str, Entry]) -> str:
    used: dict[str, list[str]] = {}
    for page in pages(root):
        rel = page.relative_to(root).as_posix()
        for p in find_markers(page.read_text(), rel):
            used.setdefault(p.name, []).append(f"{rel}:{p.line}")
    lines = []
    for name, e in sorted(registry.items()):
        lines.append(f"{name:44s} {'figure' if e.inline else 'table ':6s} {', '.join(e.sources)}  "
                     f"[{', '.join(used.get(name, [])) or 'unused'}]")
    noted = ", ".join(used.get(PROVENANCE, [])) or "unused"
    lines.append(f"{PROVENANCE:44s} note   the files its page reads  [{noted}]")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.report", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 with a diff where a table differs from its results file")
    parser.add_argument("--list", action="store_true", help="list the registered tables and where they stand")
    parser.add_argument("--root", type=pathlib.Path, default=ROOT,
                        help="the repository tree to read (default: this checkout)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        if args.list:
            print(listing(root, tables.REGISTRY))
            return 0
        return run(root, args.check)
    except ReportError as e:
        print(f"experiments.report: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
