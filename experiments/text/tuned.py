"""The transformer study redone through the tuning stage (issue 55): every arm's learning rate, optimizer state and
(IST by width) scaling chosen on a tuning split of the training plays before any reported run, at a budget where
the models beat the trigram table.

Arms, per W (2 and 4): IST by width (its scaling a tuned variant: none, training-time, test-time), IST by depth
(ResIST's test-time scaling), data parallel, local SGD and DiLoCo, all on `experiments/configs/
shakespeare_transformer.py` (4 layers, width 128, context 64, Adam, K = 10 steps of B = 32 windows).

1. **Tune** (`istjax.launch.tuning.tune`): each arm's grid (`grid`: Adam's rate over `LEARNING_RATES`; the optimizer
   state restarted or carried where the algorithm reads it; DiLoCo's outer rate over `OUTER_LEARNING_RATES`; IST by
   width's scaling over `SCALINGS`) trained once, seed 0, for ``--tuning-samples`` windows on the first 90% of the
   training windows and judged by the loss on the last 10% (``data.tuning_fraction = 0.1``). The held-out plays'
   windows, which the reported numbers are read on, are never loaded. Tuning runs evaluate once, at their end.
2. **Run** the arms with their choices over ``--seeds`` for ``--samples`` windows each (the same samples for every
   cell: rounds = samples / (W x K x B)), evaluated on the 512 held-out windows eight times a run (the curves).

The results file (``experiments/text/results/tuned.json``) holds the runner's record, the ``tuning`` section (every
grid, every tuning run with its loss and commit, each arm's choice) and the character n-gram tables on the same
validation windows; ``docs/figures/transformers_tuned.png`` its curves against samples and against bytes::

    python -m experiments.text.tuned                      # both W, seeds 0,1,2 (several hours on 2 cores)
    python -m experiments.text.tuned --workers 2          # W = 2 only (an interrupted study resumes)
    python -m experiments.text.tuned --plot
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Sequence
from typing import Optional

from experiments.grid import REPO, Cell, parser
from experiments.text import study as text
from istjax.launch.study import run_study
from istjax.launch.tuning import arm_grid, recorded_tuning, tune, tuned_cells

OUT = REPO / "experiments" / "text" / "results" / "tuned.json"
FIGURE = REPO / "docs" / "figures" / "transformers_tuned.png"
K, B = text.K, text.B
SAMPLES = 128_000  # 200 rounds at W = 2: local SGD reached 1.74 nats/char there untuned (issue 55)
TUNING_SAMPLES = 32_000  # a quarter of the reported budget, one seed
TUNING_FRACTION = 0.1
# 5e-4 added before any reported run, when data parallel, local SGD and IST by depth chose 1e-3, the lower edge of
# the first grid, at W = 2 (a choice on a grid's edge says only that the best may lie beyond it)
LEARNING_RATES = (5e-4, 1e-3, 2e-3, 4e-3)
OUTER_LEARNING_RATES = (0.7, 1.0)
SCALINGS = ("none", "train", "test")
ARMS = {"ist_width": ("ist", "width"), "ist_depth": ("ist", "depth"), "data_parallel": ("data_parallel", None),
        "local_sgd": ("local_sgd", None), "diloco": ("diloco", None)}
EVALS = 8  # evaluations a reported run (its curve)


def rounds_for(samples: int, w: int) -> int:
    """``samples`` windows as rounds of W x K x B; a refusal naming the multiple when they are not whole."""
    rounds = samples // (w * K * B)
    if rounds < 1 or rounds * w * K * B != samples:
        raise SystemExit(f"{samples} windows are not a whole number of rounds at W = {w} (W x K x B = {w * K * B});"
                         f" use a multiple of {4 * K * B}.")
    return rounds


def arms(samples: int, workers: Sequence[int], evals: int = EVALS) -> list[Cell]:
    """One cell per arm and W (labels ``<arm>_w<W>``) training ``samples`` windows with ``evals`` evaluations
    (1: at the end only); IST by depth at test-time scaling (ResIST's), the rest at the config's."""
    out = []
    for w in workers:
        rounds = rounds_for(samples, w)
        base = (f"--config.num_workers={w}", f"--config.local_steps={K}", f"--config.batch_size={B}",
                f"--config.num_rounds={rounds}", f"--config.eval_every={max(1, rounds // evals)}",
                f"--config.checkpoint_every={rounds}",
                "--config.algorithm.optimizer_state=reset")  # each arm's tuning chooses its own, where it reads one
        for arm, (algorithm, split) in ARMS.items():
            flags = (f"--config.algorithm.name={algorithm}",)
            if split is not None:
                flags += (f"--config.model.split={split}",) + (("--config.model.scaling=test",)
                                                                if split == "depth" else ())
            out.append(Cell(f"{arm}_w{w}", text.CONFIG, base + flags,
                            {"arm": arm, "algorithm": algorithm, "split": split, "num_workers": w}))
    return out


def grid(cell: Cell) -> dict:
    """An arm's tuning grid (module docstring): the same rates for every arm; the variants where they exist."""
    variants = {"model.scaling": SCALINGS} if cell.info["split"] == "width" else None
    return arm_grid(cell, LEARNING_RATES, outer_learning_rates=OUTER_LEARNING_RATES, variants=variants, root=REPO)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = parser("python -m experiments.text.tuned", __doc__.split("\n\n")[0], ["tuned"])
    p.add_argument("--samples", type=int, default=SAMPLES, help="windows of 64 characters every reported run trains")
    p.add_argument("--tuning-samples", type=int, default=TUNING_SAMPLES, help="windows every tuning run trains")
    p.add_argument("--workers", default="2,4", help="comma-separated W (default 2,4)")
    p.add_argument("--out", type=pathlib.Path, default=OUT)
    args = p.parse_args(argv)
    if args.plot:
        print(text.plot(args.out, FIGURE, against_bytes=True))
        return 0
    workdir = args.workdir or REPO / "runs" / "text_tuned"
    workers = [int(w) for w in args.workers.split(",") if w]
    cache = pathlib.Path(workdir) / ".jax_cache"
    record = tune(arms(args.tuning_samples, workers, evals=1), grid, workdir, fraction=TUNING_FRACTION, seed=0,
                  root=REPO, study="text tuning", cache=cache, jobs=args.jobs, earlier=recorded_tuning(args.out))
    record["samples"] = args.tuning_samples
    command = "python -m experiments.text.tuned " + " ".join(sys.argv[1:] if argv is None else argv)

    def write(*_):  # after every run and at the end: the file's derived fields, then the figure from it
        text.finish(args.out)
        text.plot(args.out, FIGURE, against_bytes=True)

    outcome = run_study("text_tuned", tuned_cells(arms(args.samples, workers), record), args.seeds, workdir,
                        out=args.out, command=command.strip(), root=REPO, only=[s for s in args.only.split(",") if s],
                        record=text.record, cache=cache, jobs=args.jobs, sections={"tuning": record},
                        after_run=write)
    write()
    return 1 if outcome.failed else 0


if __name__ == "__main__":
    sys.exit(main())
