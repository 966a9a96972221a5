"""The studies' shared pieces: a grid of labelled cells x seeds run by the library's study runner
(`istjax.launch.study`), written to a committed results file, its figure, and one command line for every study.

A cell is a config file plus ``--config.FIELD=VALUE`` overrides; every cell trains once per seed into
``<workdir>/<label>/s<seed>`` (a finished run with the same config is reused, so an interrupted study continues
where it stopped), and after every run the results file is rewritten: ``rows`` (one per cell: the mean and sample
standard deviation over its finished seeds) and ``runs`` (one per seed, each with the commit that trained it and
whether that tree was clean), with the command and each cell's config. `experiments.report` renders the docs' tables
from these files.

Seeds of one cell differ only in values, so they compile to the same programs: a persistent compilation cache
(``<workdir>/.jax_cache``) lets seeds 1 and 2 skip the 20 s compilation of seed 0.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Optional

from istjax.launch.study import Cell, run_study
from istjax.launch.tuning import Objective, tune_then_run

__all__ = ["Cell", "REPO", "Tuning", "parser", "seed_list", "run_grid", "plot", "cell_baselines", "record_baselines",
           "recorded_baselines"]

REPO = pathlib.Path(__file__).resolve().parents[1]


def seed_list(text: str) -> list[int]:
    """``--seeds``: '0,1,2' -> [0, 1, 2] (distinct integers)."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers, e.g. 0,1,2") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{text!r}: give distinct seeds, e.g. 0,1,2")
    return seeds


def parser(prog: str, description: str, studies: Sequence[str], seeds: str = "0,1,2",
           baselines: bool = False, tune: bool = False) -> argparse.ArgumentParser:
    """The command line every study shares: ``STUDY [--seeds 0,1,2] [--workdir DIR] [--only CELL,...] [--plot]
    [--jobs N]`` (``STUDY`` optional where there is one), with ``baselines`` ``--baselines`` (`record_baselines`),
    with ``tune`` ``--tune`` (the study passes its `Tuning` to `run_grid`); a study adds its own options to it."""
    p = argparse.ArgumentParser(prog=prog, description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    if len(studies) == 1:  # a module of one study: naming it is optional
        p.add_argument("study", nargs="?", choices=list(studies), default=studies[0])
    else:
        p.add_argument("study", choices=list(studies))
    p.add_argument("--seeds", type=seed_list, default=seed_list(seeds),
                   help=f"comma-separated seeds, each cell trained once per seed (default {seeds})")
    p.add_argument("--workdir", type=pathlib.Path, default=None, help="where the runs go (default runs/...)")
    p.add_argument("--only", default="", help="grid studies: comma-separated cell labels to train")
    p.add_argument("--plot", action="store_true", help="grid studies: only redraw the figure from the results")
    p.add_argument("--jobs", type=int, default=1, help="grid studies: runs trained at once, each in its own "
                   "process (default 1; on a GPU machine, several)")
    if baselines:
        p.add_argument("--baselines", action="store_true", help="grid studies: train nothing; record the trivial "
                       "baselines of the study's data (for classification, a linear model trained full batch) "
                       "in its results file")
    if tune:
        p.add_argument("--tune", action="store_true", help="grid studies: first choose each cell's settings on "
                       "the tuning split (one seed, every point of the study's grid, runs under WORKDIR/tuning), then "
                       "train the cells at their choice; the results file (the same one) records every tuning run "
                       "and the choice under 'tuning'")
    return p


class Tuning(NamedTuple):
    """A grid study's tuning stage (`istjax.launch.tuning`): each arm's ``grids`` (per label, or a function of the
    arm: `istjax.launch.tuning.arm_grid`), the ``objective`` a tuning run is judged by, the tuning split's
    ``fraction`` of the training examples, and ``cells``: the arms as the tuning runs train them (the same labels
    as the reported cells, at a smaller budget; None: the reported cells themselves)."""
    grids: Any
    objective: Objective = Objective("test_accuracy", "max")
    fraction: float = 0.1
    cells: Optional[Sequence[Cell]] = None


def run_grid(study: str, cells: Sequence[Cell], seeds: Sequence[int], workdir: pathlib.Path, out: pathlib.Path,
             command: str, only: Sequence[str] = (), jobs: int = 1, tuning: Optional[Tuning] = None,
             record: Optional[Callable[[Any], Optional[dict]]] = None, sections: Optional[dict] = None) -> int:
    """Trains every cell (those in ``only``) once per seed with `istjax.launch.study.run_study` (config files
    relative to the repository, a compilation cache in the workdir); rewrites ``out`` after each run. With
    ``tuning``, each arm's settings are first chosen on the tuning split (`istjax.launch.tuning.tune`, seed 0, runs
    under ``<workdir>/tuning``), the cells then train at their choice and ``out`` holds the record (``tuning``).
    ``record``: a run's record (default `istjax.launch.study.run_record`); ``sections``: the study's own sections
    of ``out`` (its target), beside the baselines it records. Returns 1 if a run failed, else 0."""
    cache = pathlib.Path(workdir) / ".jax_cache"
    kwargs = dict(out=out, command=command, root=REPO, only=only, jobs=jobs, cache=cache,
                  sections={**recorded_baselines(out), **dict(sections or {})})
    if record is not None:
        kwargs["record"] = record
    try:
        if tuning is None:
            outcome = run_study(study, cells, seeds, workdir, **kwargs)
        else:
            outcome = tune_then_run(study, cells, seeds, workdir, grids=tuning.grids, objective=tuning.objective,
                                    fraction=tuning.fraction, tuning_cells=tuning.cells, **kwargs)
    except ValueError as e:
        raise SystemExit(f"{study}: {e}") from e
    return 1 if outcome.failed else 0


BASELINE_SECTIONS = ("baselines", "regime")  # what `record_baselines` adds to a results file


def recorded_baselines(out: pathlib.Path) -> dict:
    """The trivial baselines and regime the results file ``out`` records (`record_baselines`; ``{}`` where it has
    none or does not exist): what `run_grid` keeps when it rewrites the file. They depend on the data alone."""
    try:
        doc = json.loads(pathlib.Path(out).read_text())
    except (OSError, ValueError):
        return {}
    return {k: doc[k] for k in BASELINE_SECTIONS if k in doc}


def cell_baselines(cell: Cell) -> dict:
    """The trivial baselines of the data ``cell``'s config reads, on the split its runs are scored on, and their
    regime (`istjax.launch.baselines.baseline_sections`: for classification a softmax regression trained full batch
    until it converges or reaches its step limit, the regime baseline)."""
    from istjax.launch.baselines import baseline_sections
    from istjax.launch.study import plan

    return baseline_sections(plan([cell], [None], REPO, root=REPO)[0].config)


def record_baselines(out: pathlib.Path, cell: Cell) -> pathlib.Path:
    """``--baselines``: trains nothing; adds the `cell_baselines` of ``cell`` (a study's first cell) to the results
    file ``out``, keeping the rest. Returns ``out``."""
    from istjax.launch.baselines import record_sections

    return record_sections(out, cell_baselines(cell))


def plot(results: pathlib.Path, out: pathlib.Path, title: str, reference: str | None = None) -> pathlib.Path:
    """A horizontal bar per row of ``results``: the mean test accuracy over seeds, each seed a dot, the mean of the
    ``reference`` row (a label, e.g. data parallel) as a dashed line, and the study's regime baseline (the linear
    model, where ``--baselines`` recorded it) as a dotted red one. Rendered from the file alone, so the figure in the
    docs is regenerated with the table (``--plot``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doc = json.loads(results.read_text())
    rows = doc["rows"]
    fig, ax = plt.subplots(figsize=(8, 0.38 * len(rows) + 1.2))
    y = list(range(len(rows)))[::-1]
    ax.barh(y, [r["test_accuracy_mean"] for r in rows], color="#9ecae1", height=0.6)
    for yi, r in zip(y, rows):
        accs = [run["test_accuracy"] for run in doc["runs"] if run["label"] == r["label"]]
        ax.plot(accs, [yi] * len(accs), "o", color="#08519c", markersize=3)
    ref = next((r for r in rows if r["label"] == reference), None)
    if ref is not None:
        ax.axvline(ref["test_accuracy_mean"], color="k", linestyle="--", linewidth=1)
    regime = doc.get("regime") or {}
    base = ((doc.get("baselines") or {}).get(regime.get("baseline")) or {}).get("test_accuracy")
    if base is not None:
        ax.axvline(base, color="#d62728", linestyle=":", linewidth=1.2)
    ax.set_yticks(y, [r["label"] for r in rows])
    ax.set_xlabel("test accuracy (bar: mean over seeds; dots: seeds" + (f"; dashed: {reference}" if ref else "")
                  + (f"; dotted: the {regime['baseline']} model" if base is not None else "") + ")")
    low = min([run["test_accuracy"] for run in doc["runs"]] + ([base] if base is not None else []))
    ax.set_xlim(0 if low < 0.6 else math.floor(10 * low - 0.5) / 10, 1)  # close results: an axis that shows them
    ax.set_title("\n".join(textwrap.fill(line, 90) for line in title.split("\n")), fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
