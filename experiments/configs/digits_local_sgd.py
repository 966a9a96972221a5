"""Local SGD on digits, the baseline for `digits_ist.py` at equal samples seen (76,800).

Every worker trains the full model for K=10 steps; the W=4 models are averaged each round.

Command::

    istjax train --config=experiments/configs/digits_local_sgd.py --workdir=runs/digits_local_sgd

Result: ``experiments/mlp/results/digits.json`` (three seeds, with IST and the two baselines at the same
samples; ``python -m experiments.mlp.studies digits`` regenerates it), rendered in the README's headline table.
"""

from istjax.launch.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "digits_local_sgd"
    c.algorithm.name = "local_sgd"
    c.target_accuracy = 0.95  # the summary says when the run first reached 95 % (the study's target)
    return c
