"""The default study: IST on scikit-learn's digits (what ``istjax train`` runs with no ``--config``).

Command::

    istjax train --config=experiments/configs/default.py --workdir=runs/default

or, from any directory, just ``istjax`` (results in ``./runs/digits_ist-<timestamp>``).

Result: row ``ist`` of ``experiments/mlp/results/digits.json`` (the same config as ``digits_ist.py``, three
seeds).
"""

from istjax.launch.config import default_config


def get_config(arg=None):
    del arg
    return default_config()
