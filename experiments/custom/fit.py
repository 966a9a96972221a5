"""Is a model a good fit for IST? The worked example of docs/ist_fit.md, on three seeds, as committed results.

    python -m experiments.custom.fit [--seeds 0,1,2]
    python -m experiments.custom.fit --baselines      # the linear baseline row (a minute; the runs kept)

The researcher's 1-D CNN (``experiments/custom/conv1d.py``, a model istjax does not ship, named by
``model.module``) on MNIST-1D, W = 4, 192,000 samples: IST without a remedy and with each remedy for the scale of
a sub-network's partitioned sums (train-time scaling by full / sub-network channels; LayerNorm after them;
batch-statistics BatchNorm after them and on the logits), against local SGD and data parallel on the plain and
the batch-statistics model. Writes
``experiments/custom/results/fit.json`` (`experiments.grid`), which `experiments.report` renders into
docs/ist_fit.md.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from experiments.grid import REPO, Cell, parser, record_baselines, run_grid

RESULTS = REPO / "experiments" / "custom" / "results"
CONFIG = "experiments/custom/configs/conv1d.py"
REMEDIES = ("none", "scale", "norm", "batchnorm")  # IST with each
BASELINES = ("local_sgd", "data_parallel")  # each on the model without a remedy and with the one that works best


def cells() -> list[Cell]:
    """IST with every remedy, and the two baselines on the plain model and on the batch-statistics one: the same
    samples (W, K, B, rounds) for every cell."""
    ist = [("ist", r) for r in REMEDIES]
    baselines = [(a, r) for r in ("none", "batchnorm") for a in BASELINES]
    return [Cell(f"{a} {remedy}", f"{CONFIG}:{remedy}", (f"--config.algorithm.name={a}",),
                 {"remedy": remedy, "model": "conv1d"}) for a, remedy in ist + baselines]


def main(argv: Sequence[str]) -> int:
    args = parser("python -m experiments.custom.fit", __doc__, ["fit"], baselines=True).parse_args(["fit", *argv])
    if args.baselines:
        print(f"wrote {record_baselines(RESULTS / 'fit.json', cells()[0])}")
        return 0
    seeds, only = args.seeds, [c for c in args.only.split(",") if c.strip()]
    command = f"python -m experiments.custom.fit --seeds {','.join(map(str, seeds))}"
    return run_grid("fit", cells(), seeds, args.workdir or REPO / "runs" / "custom" / "fit", RESULTS / "fit.json",
                    command, only=only, jobs=args.jobs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
