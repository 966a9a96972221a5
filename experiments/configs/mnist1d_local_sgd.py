"""Local SGD on MNIST-1D, the baseline for `mnist1d_ist.py` at equal samples seen (192,000).

Command::

    istjax train --config=experiments/configs/mnist1d_local_sgd.py --workdir=runs/mnist1d_local_sgd

Result: ``experiments/mlp/results/mnist1d.json`` (three seeds, with IST and the two baselines at the same
samples; ``python -m experiments.mlp.studies mnist1d`` regenerates it), rendered in the README's headline table.
"""

import pathlib
import runpy


def get_config(arg=None):
    """The IST study of `mnist1d_ist.py` (same model, rounds, W, K, B: equal samples seen), trained with local_sgd."""
    c = runpy.run_path(str(pathlib.Path(__file__).with_name("mnist1d_ist.py")))["get_config"](arg)
    c.name = "mnist1d_local_sgd"
    c.algorithm.name = "local_sgd"
    return c
