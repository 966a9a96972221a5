"""bfloat16 compute and exchange against float32, at equal samples, on three seeds (issue 37; docs/precision.md).

A grid of cells (`experiments.grid`): for the speech MLP (the IST paper's 2-layer model on FSDD,
``experiments/configs/fsdd_speech.py:2``, 10 rounds), the image ResNet (``fmnist_resnet_ist.py:diagnosis``, 20 rounds)
and the graph network (GCN on Cora, ``cora_gist.py``), each of IST, data parallel and local SGD in three precisions:
``float32`` (the reference), ``bf16_compute`` (``--config.compute_dtype=bfloat16``: the model computes in bfloat16,
float32 masters) and ``bf16_exchange`` (``--config.exchange_dtype=bfloat16``: what crosses the wire is bfloat16, the
change each worker made, `istjax.core.precision`). Every cell of a data set sees the same samples::

    python -m experiments.precision.studies accuracy            # 27 cells x seeds 0,1,2
    python -m experiments.precision.studies accuracy --only speech_ist_float32,speech_ist_bf16_exchange

Every cell trains once per seed into ``runs/precision/accuracy/<cell>/s<seed>`` (a finished run is reused) and after
every run ``experiments/precision/results/accuracy.json`` (per seed and per cell: mean and spread, command, commit,
machine) and ``docs/figures/precision_accuracy.png`` are rewritten; `experiments.report` renders docs/precision.md's
table from the JSON, each precision's difference to float32 beside it. ``accuracy --baselines`` trains no cell: it
records each data set's linear model (`data_baselines`) in the results file, which a rerun of the study keeps.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from experiments.grid import REPO, Cell, cell_baselines, parser, plot, run_grid
from istjax.launch.baselines import record_sections

RESULTS = REPO / "experiments" / "precision" / "results"
PRECISIONS = {"float32": (), "bf16_compute": ("--config.compute_dtype=bfloat16",),
              "bf16_exchange": ("--config.exchange_dtype=bfloat16",)}
ALGORITHMS = ("ist", "data_parallel", "local_sgd")
# Each data set's config and the overrides that set its budget (the same for every algorithm and precision).
DATASETS = {
    "speech": ("experiments/configs/fsdd_speech.py:2", ("--config.num_rounds=10", "--config.eval_every=10",
                                                        "--config.checkpoint_every=10")),
    "images": ("experiments/configs/fmnist_resnet_ist.py:diagnosis",
               ("--config.num_rounds=20", "--config.eval_every=20", "--config.checkpoint_every=20")),
    "graphs": ("experiments/configs/cora_gist.py", ()),
}


def accuracy_cells() -> list[Cell]:
    """Data set x algorithm x precision, labelled ``<data>_<algorithm>_<precision>``."""
    cells = []
    for data, (config, budget) in DATASETS.items():
        for algorithm in ALGORITHMS:
            for precision, flags in PRECISIONS.items():
                cells.append(Cell(f"{data}_{algorithm}_{precision}", config,
                                  (f"--config.algorithm.name={algorithm}", *budget, *flags),
                                  {"data": data, "algorithm": algorithm, "precision": precision}))
    return cells


def data_baselines() -> dict:
    """``accuracy --baselines``: each data set's linear model (`experiments.grid.cell_baselines` of its first cell: a
    softmax regression trained full batch on the data its config reads, scored on its test split), as the file's
    ``baselines`` section, ``<data> linear`` -> scores. No regime: the study compares precisions of one model, not
    algorithms, and registers no claim."""
    firsts = {}
    for c in accuracy_cells():
        firsts.setdefault(c.info["data"], c)
    return {"baselines": {f"{data} linear": cell_baselines(c)["baselines"]["linear"] for data, c in firsts.items()}}


def main(argv: Sequence[str]) -> int:
    ap = parser("python -m experiments.precision.studies", __doc__, ["accuracy"], baselines=True)
    args = ap.parse_args(argv)
    out = RESULTS / "accuracy.json"
    if args.baselines:
        print(f"wrote {record_sections(out, data_baselines())}")
        return 0
    status = 0
    if not args.plot:
        command = f"python -m experiments.precision.studies accuracy --seeds {','.join(map(str, args.seeds))}"
        status = run_grid("accuracy", accuracy_cells(), args.seeds, args.workdir or REPO / "runs" / "precision" /
                          "accuracy", out, command, [x for x in args.only.split(",") if x], args.jobs)
    print(f"wrote {plot(out, REPO / 'docs' / 'figures' / 'precision_accuracy.png', 'bfloat16 against float32')}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
