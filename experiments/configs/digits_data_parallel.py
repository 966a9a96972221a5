"""Data-parallel SGD on digits, the baseline for `digits_ist.py` at equal samples seen (76,800).

Every step the W=4 workers average their gradients; a round is K=10 such steps.

Command::

    istjax train --config=experiments/configs/digits_data_parallel.py --workdir=runs/digits_data_parallel

Expected result (measured on a shared 2-core CPU): RESULT_digits_data_parallel
"""

from istjax.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "digits_data_parallel"
    c.algorithm = "data_parallel"
    return c
