"""Data-parallel SGD on MNIST-1D, the baseline for `mnist1d_ist.py` at equal samples seen (192,000).

Command::

    istjax train --config=experiments/configs/mnist1d_data_parallel.py --workdir=runs/mnist1d_data_parallel

Expected result (measured on a shared 2-core CPU):
test accuracy 0.654 after 150 rounds (192,000 samples; 0.6 at round 60), about 15 ms per round; each worker moves
11.6 MB each way per round.
"""

import pathlib
import runpy


def get_config(arg=None):
    """The IST study of `mnist1d_ist.py` (same model, rounds, W, K, B: equal samples seen), trained with data_parallel."""
    c = runpy.run_path(str(pathlib.Path(__file__).with_name("mnist1d_ist.py")))["get_config"](arg)
    c.name = "mnist1d_data_parallel"
    c.algorithm = "data_parallel"
    return c
