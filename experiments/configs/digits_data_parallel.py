"""Data-parallel SGD on digits, the baseline for `digits_ist.py` at equal samples seen (76,800).

Every step the W=4 workers average their gradients; a round is K=10 such steps.

Command::

    istjax train --config=experiments/configs/digits_data_parallel.py --workdir=runs/digits_data_parallel

Result: ``experiments/mlp/results/digits.json`` (three seeds, with IST and the two baselines at the same
samples; ``python -m experiments.mlp.studies digits`` regenerates it), rendered in the README's headline table.
"""

from istjax.launch.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "digits_data_parallel"
    c.algorithm.name = "data_parallel"
    c.target_accuracy = 0.95  # the summary says when the run first reached 95 % (the study's target)
    return c
