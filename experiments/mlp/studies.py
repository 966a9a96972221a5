"""IST against data parallel and local SGD on the small tabular studies, on three seeds, as committed results.

    python -m experiments.mlp.studies digits  [--seeds 0,1,2]   # scikit-learn digits, W = 4, 76,800 samples
    python -m experiments.mlp.studies mnist1d [--seeds 0,1,2]   # MNIST-1D, W = 4, 2-hidden-layer MLP
    python -m experiments.mlp.studies keywords [--seeds 0,1,2]  # synthesised keywords, held-out voices: IST vs DP
    python -m experiments.mlp.studies breast_cancer [--seeds 0,1,2]  # your own data (data.module), W = 4

Each trains its configs (``experiments/configs/<study>_{ist,data_parallel,local_sgd}.py``: the same samples for
every algorithm) once per seed into ``runs/mlp/<study>/<cell>/s<seed>`` and writes
``experiments/mlp/results/<study>.json`` (`experiments.grid`), which `experiments.report` renders into the README
and the docs. ``--baselines`` trains nothing: it records the data's trivial baseline (a linear model trained full
batch, `experiments.grid.record_baselines`) in the study's results file.

``keywords --tune`` first chooses each arm's settings (`keywords_tuning`): SGD's learning rate over half, once
and twice the config's (0.005, 0.01, 0.02), one run each at the full budget and seed 0, trained on the first 90 % of
the training clips and scored by accuracy on the last 10 % (`istjax.data.tuning`: 8 clips of every word, listed
last by `istjax.data.keywords.load_spoken_keywords`; spoken by training voices, so the choice is made on unseen
clips, not unseen voices; the test voices are never read), under ``runs/mlp/keywords/tuning``; then both arms
train on ``--seeds`` at their choice. It writes the same ``keywords.json``, which it supersedes: rows at the
chosen settings (each row's ``tuned``), a ``tuning`` section with every tuning run and the choice, the
``--baselines`` sections kept.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from experiments.grid import REPO, Cell, Tuning, parser, plot, record_baselines, run_grid
from istjax.launch.tuning import Objective, arm_grid

RESULTS = REPO / "experiments" / "mlp" / "results"
ALGORITHMS = ("ist", "data_parallel", "local_sgd")
TUNED = ("keywords",)  # the studies --tune tunes


def cells(study: str) -> list[Cell]:
    """One cell per algorithm: the study's three configs as they are. ``keywords``: the IST paper's generalisation
    claim on the 2-layer speech MLP (`keywords_speech.py:2`, W = 2, 40 rounds x K = 20 x B = 128: 204,800 samples,
    simulate backend), IST against data parallel, test clips in voices no training clip uses."""
    if study == "keywords":
        return [Cell(a, "experiments/configs/keywords_speech.py:2", (f"--config.algorithm.name={a}",),
                     {"dataset": study}) for a in ("ist", "data_parallel")]
    if study == "breast_cancer":  # one config, data from a user's file (docs/your_data.md)
        return [Cell(a, "experiments/configs/breast_cancer.py", (f"--config.algorithm.name={a}",),
                     {"dataset": study}) for a in ALGORITHMS]
    return [Cell(a, f"experiments/configs/{study}_{a}.py", (), {"dataset": study}) for a in ALGORITHMS]


def keywords_tuning() -> Tuning:
    """``keywords --tune`` (module docstring): each arm's learning rate at half, once and twice the one
    ``experiments/configs/keywords_speech.py`` sets (SGD, 0.01). Plain SGD keeps no state, so restarting or carrying
    it is the same run and is not a grid field (`istjax.launch.tuning.arm_grid` adds it for an optimizer with
    state). The highest accuracy on the tuning split is chosen."""
    import runpy

    config = runpy.run_path(str(REPO / "experiments" / "configs" / "keywords_speech.py"))["get_config"]("2")
    lr, stateless = float(config.learning_rate), config.optimizer == "sgd"
    return Tuning(grids=lambda cell: arm_grid(cell, (lr / 2, lr, 2 * lr), root=REPO,
                                              optimizer_states=() if stateless else ("reset", "carry")),
                  objective=Objective("test_accuracy", "max"))


def main(argv: Sequence[str]) -> int:
    ap = parser("python -m experiments.mlp.studies", __doc__, ["digits", "mnist1d", "keywords", "breast_cancer"],
                baselines=True, tune=True)
    args = ap.parse_args(argv)
    if args.baselines:
        print(f"wrote {record_baselines(RESULTS / f'{args.study}.json', cells(args.study)[0])}")
        return 0
    if args.tune and args.study not in TUNED:
        ap.error(f"--tune: study {args.study!r} has no tuning grid; name one of {', '.join(TUNED)}")
    seeds, only = args.seeds, [x for x in args.only.split(",") if x]
    workdir = args.workdir or REPO / "runs" / "mlp" / args.study
    command = (f"python -m experiments.mlp.studies {args.study} --seeds {','.join(map(str, seeds))}"
               + (" --tune" if args.tune else ""))
    status = 0
    if not args.plot:
        status = run_grid(args.study, cells(args.study), seeds, workdir, RESULTS / f"{args.study}.json", command,
                          only, args.jobs, keywords_tuning() if args.tune else None)
    if args.study == "keywords" and (RESULTS / "keywords.json").exists():
        plot(RESULTS / "keywords.json", REPO / "docs" / "figures" / "keywords_generalisation.png",
             "Synthesised keywords, unseen voices: IST vs data parallel, W = 2, 204,800 samples", "data_parallel")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
