"""What the studies on shaped links built on the time-to-accuracy study share: their checks before anything runs,
the command line they record, and running their cells into a results file rewritten after every run.

`experiments.extreme.network` and `experiments.text.network` are each a set of cells (`istjax.launch.study.Cell`),
a ``record`` of one run and a ``document`` of all runs so far; the rest is here::

    if (code := common.refused("text network study", args.links)) is not None:
        return code
    runs = common.run_to_file("text_network", cells, args, record=record, document=document, tag="tn")
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Callable, Sequence
from typing import Any, Optional

from experiments.network import slow_net
from experiments.network import time_to_accuracy as tta
from istjax.launch import study

ROOT = pathlib.Path(__file__).resolve().parents[2]


def refused(name: str, links: str) -> Optional[int]:
    """2 (with the reason on stderr) where this process may not build namespaces or ``links`` (comma-separated tc
    rates) are not rates, else None: checked before anything runs."""
    why = slow_net.missing_privileges()
    if why:
        print(f"{name}: {why}", file=sys.stderr)
        return 2
    for rate in links.split(","):
        slow_net.Link(rate)  # raises on units tc does not know
    return None


def command(module: str, argv: Optional[Sequence[str]]) -> str:
    """The command line a results file records: ``python -m module`` and its arguments, ``--out`` left out."""
    given = sys.argv[1:] if argv is None else list(argv)
    return f"python -m {module} " + " ".join(a for a in given if not a.startswith("--out"))


def run_to_file(name: str, cells: Sequence[study.Cell], args: argparse.Namespace, *,
                record: Callable[[study.Planned], Optional[dict[str, Any]]],
                document: Callable[[list[dict[str, Any]]], dict[str, Any]], tag: str) -> list[dict[str, Any]]:
    """Every cell once per seed of ``args.seeds`` under the study runner in ``args.workdir`` (a finished run is
    reused), each launched on shaped links (`time_to_accuracy.trainer`, ``args.timeout`` seconds, tags from
    ``tag``); after every run and at the end ``args.out`` is rewritten as ``document(runs)``. Returns the records
    of the runs that finished."""
    every = study.plan(cells, args.seeds, args.workdir, root=ROOT)

    def runs() -> list[dict[str, Any]]:
        return [r for p in every if (r := record(p)) is not None]

    def write(*_):
        study.write_json(args.out, document(runs()))

    study.run_study(name, cells, args.seeds, args.workdir, root=ROOT, train=tta.trainer(args.timeout, tag),
                    record=record, after_run=write)
    write()
    return runs()
