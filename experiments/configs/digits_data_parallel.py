"""Data-parallel SGD on digits, the baseline for `digits_ist.py` at equal samples seen (76,800).

Every step the W=4 workers average their gradients; a round is K=10 such steps.

Command::

    istjax train --config=experiments/configs/digits_data_parallel.py --workdir=runs/digits_data_parallel

Expected result (measured on a shared 2-core CPU):
test accuracy 0.981 after 60 rounds (76,800 samples), about 7 ms per round; each worker moves 1.56 MB each way per
round (the whole gradient at every one of the K steps).
"""

from istjax.experiment.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "digits_data_parallel"
    c.algorithm = "data_parallel"
    return c
