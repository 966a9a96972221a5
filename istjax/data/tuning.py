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

A data set that holds its own validation split (``Dataset.validation``: a graph's validation nodes, Planetoid's 500)
is tuned on that instead: the runs train on the whole training split and evaluate on the validation split, so any
fraction > 0 switches the tuning split on and its value is not read. Carving a graph's training nodes would be the
wrong split twice over: Cora trains on 140 labelled nodes, 14 of them would decide, and the published protocol
chooses on the validation nodes. A data set whose validation split is empty is refused (`ArgError` naming
``data.tuning_fraction``), not tuned on its training tail behind the study's back.
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
    split (module docstring); with a validation split of its own (``data.validation``), the whole training split
    and that split evaluated; ``data`` itself for ``fraction`` 0. The reported split (``data.test_x``) is dropped
    unread.

    Raises:
      ArgError: a fraction outside ``[0, 1)``, one that leaves either part without an example, a validation
        split of the data set's own that is empty, or a tail holding a class the rest never shows
        (`_check_classes`).
    """
    fraction = check_tuning_fraction(fraction)
    if fraction == 0:
        return data
    if data.validation is not None:
        return _own_validation(data, fraction)
    n = len(data.train_y)
    held = int(round(n * fraction))
    if held < 1 or held >= n:
        raise ArgError("tuning_fraction", fraction,
                       f"data.tuning_fraction={fraction:g} of {n} training examples holds out {held}, leaving "
                       f"{'no tuning example' if held < 1 else 'nothing to train on'};",
                       "choose a fraction that leaves at least one example on each side.")
    cut = n - held
    _check_classes(data, cut, fraction)
    clients = None if data.train_clients is None else data.train_clients[:cut]  # the head's clients, as they were
    return data._replace(train_x=_rows(data.train_x, slice(0, cut)), train_y=data.train_y[:cut],
                         test_x=np.asarray(data.train_x[cut:]), test_y=data.train_y[cut:],  # evaluated whole
                         train_clients=clients)


def _check_classes(data: Dataset, cut: int, fraction: float) -> None:
    """Refuses a tail whose classes the head never shows: a loader that lists its training examples class by class
    (files sorted by label) would otherwise tune on the last classes alone, with models that never trained on them,
    and choose on noise. Class labels only (``[N]`` integers); text's and label sets' ``[N, ...]`` are not checked."""
    y = np.asarray(data.train_y)
    if y.ndim != 1:
        return
    unseen = sorted(set(np.unique(y[cut:]).tolist()) - set(np.unique(y[:cut]).tolist()))
    if unseen:
        raise ArgError("tuning_fraction", fraction,
                       f"data.tuning_fraction={fraction:g}: data set {data.name!r} lists its training examples so "
                       f"that the held-out last {len(y) - cut} hold class(es) {unseen[:5]} the first {cut} never "
                       f"show;", "list them interleaved across classes in the loader (as "
                       "istjax.data.keywords.load_spoken_keywords does).")


def _own_validation(data: Dataset, fraction: float) -> Dataset:
    """``data`` evaluated on its own validation split (module docstring), the training split whole."""
    x, y = data.validation
    if len(y) == 0:
        raise ArgError("tuning_fraction", fraction,
                       f"data.tuning_fraction={fraction:g}: data set {data.name!r} tunes on its own validation split "
                       f"(a graph's validation nodes), which is empty;",
                       "give it validation nodes (data.kwargs.num_val for csbm and Planetoid) or set "
                       "data.tuning_fraction=0.")
    return data._replace(test_x=np.asarray(x), test_y=np.asarray(y))
