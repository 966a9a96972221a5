"""The default study: IST on scikit-learn's digits (what ``istjax train`` runs with no ``--config``).

Command::

    istjax train --config=experiments/configs/default.py --workdir=runs/default

Expected result: see `digits_ist.py` (the same config).
"""

from istjax.config import default_config


def get_config(arg=None):
    del arg
    return default_config()
