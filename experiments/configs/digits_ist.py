"""IST on scikit-learn's digits (1437 train / 360 test, 64 features): MLP 64-512-10, W=4, K=10, B=32.

Same samples seen (60 rounds x W x K x B = 76,800) as `digits_data_parallel.py` and `digits_local_sgd.py`.

Command::

    istjax train --config=experiments/configs/digits_ist.py --workdir=runs/digits_ist

Expected result (measured on a shared 2-core CPU):
test accuracy 0.972 after 60 rounds (76,800 samples); 0.95 reached at round 5. About 4 ms per round (0.3 s of
training plus about 5-9 s of compilation); each worker moves 38.9 kB each way per round.
"""

from istjax.experiment.config import default_config


def get_config(arg=None):
    del arg
    c = default_config()
    c.name = "digits_ist"
    c.algorithm = "ist"
    return c
