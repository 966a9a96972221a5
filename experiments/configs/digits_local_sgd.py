"""Local SGD on digits, the baseline for `digits_ist.py` at equal samples seen (76,800).

Every worker trains the full model for K=10 steps; the W=4 models are averaged each round.

Command::

    istjax train --config=experiments/configs/digits_local_sgd.py --workdir=runs/digits_local_sgd

Expected result (measured on a shared 2-core CPU):
test accuracy 0.978 after 60 rounds (76,800 samples), about 7 ms per round; each worker moves 156 kB each way per
round (the whole model once).
"""

from istjax.experiment.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "digits_local_sgd"
    c.algorithm = "local_sgd"
    return c
