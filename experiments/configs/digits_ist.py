"""IST on scikit-learn's digits (1437 train / 360 test, 64 features): MLP 64-512-10, W=4, K=10, B=32.

Same samples seen (60 rounds x W x K x B = 76,800) as `digits_data_parallel.py` and `digits_local_sgd.py`.

Command::

    istjax train --config=experiments/configs/digits_ist.py --workdir=runs/digits_ist

Result: ``experiments/mlp/results/digits.json`` (three seeds, with IST and the two baselines at the same
samples; ``python -m experiments.mlp.studies digits`` regenerates it), rendered in the README's headline table.
"""

from istjax.launch.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "digits_ist"
    c.algorithm.name = "ist"
    c.target_accuracy = 0.95  # the summary says when the run first reached 95 % (the study's target)
    return c
