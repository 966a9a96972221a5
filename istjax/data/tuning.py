"""The tuning split: the last fraction of a data set's *training* examples, held out to choose settings on.

A study that chooses a learning rate or a variant on the split it reports has chosen on its test set. Here the
choice is made on examples carved from the training split instead (``data.tuning_fraction`` in a config, which
`istjax.launch.config.load_config_data` applies to every data set, shipped or yours)::

    train (N examples)            ->  train_x[:N - n]  trains      (n = round(N * fraction))
                                      train_x[N - n:]  evaluates   (the run's "test" metrics are the tuning split's)
    test  (the reported split)    ->  not read

`tuning_split` is the one place that carves it. The tail, not a random draw: character windows are cut in text
order, so the held-out windows are the end of the training text (no window straddles the cut's far side), and the
split is the same for every seed. Feature statistics (a loader's standardisation, an extreme data set's label
propensities) stay the full training split's: they were computed from training data only, so nothing of the
reported split enters the choice.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from istjax.core.errors import ArgError
from istjax.data.dataset import Dataset, Rows

__all__ = ["tuning_split", "check_tuning_fraction"]


def check_tuning_fraction(fraction: Any, field: str = "tuning_fraction") -> float:
    """``fraction`` as a float in ``[0, 1)`` (0: no tuning split); an `ArgError` naming ``field`` otherwise."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction < 1:
        raise ArgError(field, fraction, f"{field}={fraction!r}:",
                       "give a fraction in [0, 1) of the training examples to hold out for tuning (0: none), "
                       "e.g. 0.1.")
    return float(fraction)


def _rows(x: Any, index: slice) -> Any:
    """``x[index]`` keeping a :class:`Rows` split lazy (only the rows a process reads are ever decoded)."""
    if isinstance(x, Rows):
        return Rows(x.raw[index], x.transform, x.mean, x.inv, item_shape=x.item_shape)
    return x[index]


def tuning_split(data: Dataset, fraction: float) -> Dataset:
    """``data`` with its training split's last ``fraction`` as the evaluated split and the rest as the training
    split (module docstring); ``data`` itself for ``fraction`` 0. The reported split (``data.test_x``) is dropped
    unread.

    Raises:
      ArgError: a fraction outside ``[0, 1)``, or one that leaves either part without an example.
    """
    fraction = check_tuning_fraction(fraction)
    if fraction == 0:
        return data
    n = len(data.train_y)
    held = int(round(n * fraction))
    if held < 1 or held >= n:
        raise ArgError("tuning_fraction", fraction,
                       f"data.tuning_fraction={fraction:g} of {n} training examples holds out {held}, leaving "
                       f"{'no tuning example' if held < 1 else 'nothing to train on'};",
                       "choose a fraction that leaves at least one example on each side.")
    cut = n - held
    return data._replace(train_x=_rows(data.train_x, slice(0, cut)), train_y=data.train_y[:cut],
                         test_x=np.asarray(data.train_x[cut:]), test_y=data.train_y[cut:])  # evaluated whole
