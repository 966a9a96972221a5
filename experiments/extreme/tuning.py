"""The extreme study's tuning stage (``python -m experiments.extreme.study ... --tune``): each arm's Adam rate and
optimizer state chosen on a tuning split of the training points, at one width, before any reported run.

Without it every arm trains at the config's Adam 1e-3, and a comparison of arms decides only if that rate is every
arm's best. With ``--tune``, first (`istjax.launch.tuning.tune`, with the study's own trainer: the same ``mpiexec``,
cgroup cap and ``runtime.memory_limit`` as the reported runs):

* **the arms**: each (algorithm, ranks) of ``--arms``, labelled ``<algorithm>_p<P>`` (`arm_label`); an arm is
  every width of the study (its cells are ``<algorithm>_p<P>_h<H>``);
* **one width** (`tuning_width`): ``--tune-width``, or the largest width at which every arm trained within the cap
  in the results file of an earlier run of the study under the same cap (each arm's widest width that trained on
  every seed it tried; the smallest of those). Memory grows with the width, so every arm fits there: the Debian
  study's H = 256 (data parallel holds no more), the synthetic study's H = 512 (its data parallel at 1024 trained
  in 2 of 3 seeds);
* **the grid** (`grids`): Adam's rate over ``RATES`` (half the config's 1e-3 to 32 times it, doubling: a first
  tuning of the Debian study over 5e-4, 1e-3 and 2e-3 chose 2e-3, the grid's top edge, for every one of its five
  arms; a second up to 8e-3 chose 8e-3 for four of them (local SGD 4e-3 with its state carried); so the grid was
  widened upwards twice, before any reported run trained, the earlier grids' runs reused) and, where the algorithm
  reads it (`istjax.launch.tuning.arm_grid`: IST and local SGD; data and tensor parallelism carry Adam's
  state by construction), its state restarted every round or carried;
* **the budget**: a quarter of the reported samples (``--tune-samples``), seed 0;
* **the split**: the training points' last ``FRACTION`` evaluated, the rest trained on
  (``data.tuning_fraction``, `istjax.data.tuning`), listed in a fixed permutation (``data.kwargs.order=shuffled``,
  `istjax.data.extreme.as_dataset`: the Debian set lists its packages by name, so its tail would be the end of the
  alphabet); the test split is never read. The objective is the last evaluation's P@1 on that split, the metric
  the study's claims rest on.

Then every width of an arm trains at that arm's choice (`applied`), and the results file records the grid, every
tuning run and the choice as ``tuning`` (`experiments.extreme.report` renders it). A choice of carried moments
costs memory at the widest widths (docs/extreme.md: a sharded IST rank then holds its shard's moments too), which
the reported cells show as they fit or not.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from istjax.launch import study as study_lib
from istjax.launch.tuning import Objective, arm_grid, tune, with_settings

__all__ = ["RATES", "STATES", "OBJECTIVE", "FRACTION", "arm_label", "tuning_width", "tuning_arms", "grids",
           "run_tuning", "applied"]

# Adam's rates tried: from half the configs' 1e-3 to 32 times it. The Debian tuning put its arms on the grid's top
# edge twice (2e-3, then 8e-3 for four of five); the grid was widened upwards before any reported run (module
# docstring).
RATES = (5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2)
STATES = ("reset", "carry")  # Adam's state restarted every round or carried, where the algorithm reads it
OBJECTIVE = Objective("test_precision_at_1", "max")  # during tuning, "test" is the tuning split
FRACTION = 0.1  # the training points held out to choose on
ORDER = "--config.data.kwargs.order=shuffled"  # the tail a fair draw of the training points (module docstring)


def arm_label(cell: study_lib.Cell) -> str:
    """The arm a study cell belongs to: ``ist_p2`` for ``ist_p2_h512`` (its algorithm and ranks)."""
    return f"{cell.info['algorithm']}_p{cell.info['ranks']}"


def tuning_width(out: os.PathLike, arms: Sequence[tuple[str, int]], cap: int) -> int:
    """The largest width every arm of ``arms`` trained at within ``cap`` in the results file ``out`` (module
    docstring). A ValueError naming ``--tune-width`` where the file cannot say: missing, made under another cap,
    or an arm that fitted at no width there."""
    try:
        doc = json.loads(pathlib.Path(out).read_text())
    except (OSError, ValueError):
        raise ValueError(f"--tune without --tune-width reads the widths that fit from an earlier run's results file, "
                         f"and {out} cannot be read; give --tune-width H (a width every arm fits under the cap)"
                         ) from None
    if doc.get("cap_bytes") != cap:
        raise ValueError(f"{out} was made under a cap of {doc.get('cap', '?')}, not this one ({cap:,} bytes); give "
                         f"--tune-width H (a width every arm fits under this cap)")
    widest = {}
    for algorithm, ranks in arms:
        fit = [r["hidden"] for r in doc.get("rows", []) if (r["algorithm"], r["ranks"]) == (algorithm, ranks)
               and r["fits"]]
        if not fit:
            raise ValueError(f"arm {algorithm}:{ranks} trained at no width in {out}; give --tune-width H (a width "
                             f"every arm fits under the cap)")
        widest[algorithm, ranks] = max(fit)
    return min(widest.values())


def tuning_arms(at_width: Sequence[study_lib.Cell]) -> list[study_lib.Cell]:
    """The tuning runs' arms: the study's cells at the tuning width (one per arm, at the tuning budget) labelled by
    their arm, their training points listed in the fixed permutation (``ORDER``)."""
    return [study_lib.Cell(arm_label(c), c.config, (*c.overrides, ORDER), c.info) for c in at_width]


def grids(rates: Sequence[float] = RATES, states: Sequence[str] = STATES,
          root: os.PathLike = ".") -> Callable[[study_lib.Cell], dict[str, tuple]]:
    """Each arm's grid (module docstring): `istjax.launch.tuning.arm_grid` over ``rates`` and, where the arm's
    algorithm reads it, ``states``."""
    return lambda cell: arm_grid(cell, rates, optimizer_states=states, root=root)


def run_tuning(arms: Sequence[study_lib.Cell], workdir: os.PathLike, *, train: Callable, root: os.PathLike,
               rates: Sequence[float] = RATES, states: Sequence[str] = STATES,
               earlier: Optional[Mapping[str, Any]] = None, **extra: Any) -> dict[str, Any]:
    """`istjax.launch.tuning.tune` of the ``arms`` (`tuning_arms`) with the study's ``train`` into
    ``<workdir>/tuning`` (``earlier``: the results file's tuning record, whose runs stand for those gone from the
    disk): the tuning record, with ``extra`` (the width, the samples) and the training points' order added."""
    record = tune(arms, grids(rates, states, root), workdir, objective=OBJECTIVE, fraction=FRACTION, root=root,
                  study="extreme tuning", train=train, earlier=earlier)
    return {**record, **extra, "order": ORDER.rsplit("=", 1)[1]}


def applied(cells: Sequence[study_lib.Cell], tuning: Mapping[str, Any]) -> list[study_lib.Cell]:
    """The reported cells at their arm's choice (every width), the choice in each row's ``info`` (``tuned``).
    A ValueError naming the arm for a cell whose arm the record did not tune."""
    chosen = tuning["chosen"]
    out = []
    for c in cells:
        if arm_label(c) not in chosen:
            raise ValueError(f"arm {arm_label(c)!r} of cell {c.label!r} was not tuned (tuned: {sorted(chosen)}); run "
                           f"the study with --tune and this arm in --arms")
        point = chosen[arm_label(c)]
        out.append(with_settings(c, point, info={**c.info, "tuned": point}))
    return out
