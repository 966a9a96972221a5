"""The default study: IST on scikit-learn's digits (what ``istjax train`` runs with no ``--config``).

Command::

    istjax train --config=experiments/configs/default.py --workdir=runs/default

or, from any directory, just ``istjax`` (results in ``./runs/digits_ist-<timestamp>``).

Expected result (measured on a shared 2-core CPU): test accuracy 0.972 after 60 rounds (76,800 samples), 0.95
reached at round 5 (6,400 samples); about 13 s for the whole command (interpreter start, data, compilation about
5 s, training 0.2 s, evaluations and checkpoints). The same config as `digits_ist.py`.
"""

from istjax.experiment.config import default_config


def get_config(arg=None):
    del arg
    return default_config()
