"""Your own data: :func:`from_arrays` makes a :class:`~istjax.data.dataset.Dataset` of arrays you hold, and
:func:`check_dataset` checks one that code outside istjax made (a ``data.module`` function's) before anything is
built from it.

The Dataset contract (`istjax.data.dataset`): features ``[N, ...] float32`` standardised with the training split's
statistics, labels ``[N] int32`` in ``[0, num_classes)``, both splits non-empty with one example shape::

    >>> import numpy as np, istjax
    >>> x, y = np.random.default_rng(0).normal(size=(100, 5)), np.arange(100) % 2
    >>> data = istjax.data.from_arrays(x, y, test_fraction=0.2, name="mine")
    >>> data
    Dataset(name='mine', train_x=(80, 5), test_x=(20, 5), num_classes=2)
"""

from __future__ import annotations

import operator
from typing import Any, Optional

import numpy as np

from istjax.core.errors import ArgError
from istjax.data.dataset import Dataset, finalise

__all__ = ["from_arrays", "check_dataset"]


def from_arrays(x: Any, y: Any, *, test_x: Any = None, test_y: Any = None, test_fraction: float = 0.25,
                seed: int = 0, num_classes: Optional[int] = None, name: str = "arrays") -> Dataset:
    """A `Dataset` of your arrays: split (unless you give the test split), standardised with the training split's
    statistics, cast and frozen.

    Args:
      x: ``[N, ...]`` features, real numbers (a table: ``[N, F]``; images: ``[N, H, W, C]``).
      y: ``[N]`` integer labels in ``[0, num_classes)`` (map other labels with ``np.unique(y, return_inverse=True)``).
      test_x, test_y: a test split of your own; otherwise ``test_fraction`` of the examples are held out, stratified
        by label where every class has two examples or more (scikit-learn's ``train_test_split`` with ``seed``).
      num_classes: the number of classes (default: the largest label + 1).
      name: what runs and summaries call the data.

    Raises:
      ValueError: naming the argument, the value and the fix (shapes, labels, an empty split), before anything is
        built.
    """
    x, y = _features("x", x), _labels("y", y)
    _same_length(("x", x), ("y", y))
    if (test_x is None) != (test_y is None):
        raise ArgError(("test_x", "test_y"), test_x, "from_arrays: give test_x and test_y together",
                       "(or neither, to hold out test_fraction of x).")
    if test_x is None:
        x, test_x, y, test_y = _split(x, y, test_fraction, seed)
    else:
        test_x, test_y = _features("test_x", test_x), _labels("test_y", test_y)
        _same_length(("test_x", test_x), ("test_y", test_y))
        if test_x.shape[1:] != x.shape[1:]:
            raise ArgError(("test_x", "x"), test_x, f"from_arrays: test_x has examples of shape {test_x.shape[1:]} "
                                                    f"but x has {x.shape[1:]};", "both splits need one example shape.")
    top = int(max(y.max(initial=0), test_y.max(initial=0))) + 1
    num_classes = top if num_classes is None else operator.index(num_classes)
    _check_label_range("y", y, num_classes, "num_classes")
    _check_label_range("test_y", test_y, num_classes, "num_classes")
    return check_dataset(finalise(str(name), x, y, test_x, test_y, num_classes), "from_arrays")


def _features(arg: str, x: Any) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise ArgError(arg, x, f"from_arrays: {arg} holds {a.dtype} values;",
                       "give numbers (encode categories as numbers first, e.g. one-hot columns).")
    if a.ndim < 2:
        raise ArgError(arg, x, f"from_arrays: {arg} has shape {a.shape};",
                       f"give [N, ...] with one row per example (one feature per example: {arg}.reshape(-1, 1)).")
    _check_finite(arg, a, "from_arrays")
    return a


def _check_finite(arg: str, x: Any, where: str, chunk: int = 4096) -> None:
    """Refuses NaN or infinite features in ``x`` (an array, or `istjax.data.Rows`: read ``chunk`` rows at a time),
    naming it (``arg``'s last part: ``data.test_x`` is ``test_x``), the count and the first example that holds one:
    a NaN in the training split reaches the loss at round 1, an inf in the test split makes a NaN test loss."""
    if not np.issubdtype(np.dtype(getattr(x, "dtype", np.float32)), np.floating):
        return
    bad, first = 0, None
    for start in range(0, len(x), chunk):
        block = np.asarray(x[start:start + chunk])
        rows = ~np.isfinite(block.reshape(len(block), -1)).all(1)
        if first is None and rows.any():
            first = start + int(np.argmax(rows))
        bad += int(rows.sum())
    if bad:
        raise ArgError(arg, tuple(np.shape(x)), f"{where}: {arg.rsplit('.', 1)[-1]} holds NaN or infinite values in {bad} example(s) "
                                                f"(the first: row {first});", "fill or drop those examples first.")


def _labels(arg: str, y: Any) -> np.ndarray:
    a = np.asarray(y)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 1:
        raise ArgError(arg, a, f"from_arrays: {arg} has shape {a.shape};",
                       f"give [N] integer class labels (one-hot labels: {arg}.argmax(1)).")
    if not np.issubdtype(a.dtype, np.integer):
        whole = np.issubdtype(a.dtype, np.floating) and np.all(np.isfinite(a)) and np.all(a == np.round(a))
        if not whole:
            raise ArgError(arg, a, f"from_arrays: {arg} holds {a.dtype} values;",
                           f"give integer class labels in [0, num_classes) (classes, {arg} = np.unique({arg}, "
                           f"return_inverse=True)).")
    return a.astype(np.int64)


def _same_length(*arrays: tuple[str, np.ndarray]) -> None:
    (a, x), (b, y) = arrays
    if len(x) != len(y):
        raise ArgError((a, b), x, f"from_arrays: {a} has {len(x)} examples but {b} has {len(y)};",
                       "give one label per example.")


def _check_label_range(arg: str, y: np.ndarray, num_classes: int, field: str, where: str = "from_arrays") -> None:
    if len(y) and (y.min() < 0 or y.max() >= num_classes):
        raise ArgError((arg, field) if where == "from_arrays" else f"data.{arg}", y,
                       f"{where}: {arg} holds labels in [{int(y.min())}, {int(y.max())}] but {field}={num_classes};",
                       f"labels must lie in [0, {field}) (map them with np.unique(labels, return_inverse=True)).")


def _split(x: np.ndarray, y: np.ndarray, test_fraction: float, seed: int):
    from sklearn.model_selection import train_test_split

    if not 0 < float(test_fraction) < 1:
        raise ArgError("test_fraction", test_fraction, f"from_arrays: test_fraction={test_fraction!r};",
                       "give a fraction in (0, 1), e.g. 0.25, or your own test_x and test_y.")
    n_test = int(round(len(y) * float(test_fraction)))
    if n_test < 1 or n_test >= len(y):
        raise ArgError("test_fraction", test_fraction,
                       f"from_arrays: test_fraction={test_fraction} of {len(y)} examples leaves an empty split;",
                       "give more examples or another test_fraction.")
    counts = np.bincount(y)
    stratify = y if np.all(counts[counts > 0] >= 2) and n_test >= np.count_nonzero(counts) else None
    return train_test_split(x, y, test_size=n_test, stratify=stratify, random_state=operator.index(seed))


def check_dataset(data: Any, where: str) -> Dataset:
    """``data`` when it keeps the Dataset contract (module docstring: both splits non-empty with one example shape,
    float32 features that are all finite, integer labels in ``[0, num_classes)``), else a ValueError in one line that
    starts with ``where`` (``"data.module='my_data.py:load'"``) and names the split, the field and the fix."""
    if not isinstance(data, Dataset):
        raise ArgError("data", type(data).__name__,
                       f"{where} returned a {type(data).__name__}, not an istjax.data.Dataset;",
                       "return istjax.data.from_arrays(x, y) (it splits, standardises and checks your arrays).")
    c = data.num_classes
    if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 2:
        raise ArgError("data.num_classes", c, f"{where}: num_classes={c!r};",
                       "a classifier needs an integer of at least 2.")
    for split in ("train", "test"):
        x, y = getattr(data, f"{split}_x"), getattr(data, f"{split}_y")
        _check_split(where, split, x, y, int(c))
    if tuple(data.train_x.shape[1:]) != tuple(data.test_x.shape[1:]):
        raise ArgError("data.test_x", tuple(data.test_x.shape),
                       f"{where}: train_x has examples of shape {tuple(data.train_x.shape[1:])} but test_x "
                       f"{tuple(data.test_x.shape[1:])};", "both splits need one example shape.")
    _check_clients(where, data)
    return data


def _check_clients(where: str, data: Dataset) -> None:
    """A data set's own clients (``train_clients``, ``client_names``), when it has them: one integer id per training
    example, each naming one of ``client_names``."""
    ids, names = getattr(data, "train_clients", None), getattr(data, "client_names", None)
    if ids is None and names is None:
        return
    if ids is None or names is None:
        given = "train_clients" if names is None else "client_names"
        raise ArgError(f"data.{given}", "given", f"{where}: {given} without "
                                                 f"{'client_names' if names is None else 'train_clients'};",
                       "give both (each training example's client id, and each id's name), or neither.")
    ids, n = np.asarray(ids), len(data.train_y)
    if ids.shape != (n,) or not np.issubdtype(ids.dtype, np.integer):
        raise ArgError("data.train_clients", ids.shape, f"{where}: train_clients is {ids.dtype} of shape {ids.shape};",
                       f"give [{n}] integer client ids, one per training example.")
    if n and (ids.min() < 0 or ids.max() >= len(names)):
        raise ArgError("data.train_clients", int(ids.max() if ids.min() >= 0 else ids.min()),
                       f"{where}: train_clients holds ids in [{int(ids.min())}, {int(ids.max())}] but client_names "
                       f"names {len(names)} clients;", "give ids in [0, len(client_names)).")


def _check_split(where: str, split: str, x: Any, y: Any, num_classes: int) -> None:
    shape, y = tuple(np.shape(x)), np.asarray(y)
    if len(shape) < 2 or shape[0] == 0:
        what = "no example" if len(shape) >= 1 and shape[0] == 0 else f"shape {shape}"
        raise ArgError(f"data.{split}_x", shape, f"{where}: {split}_x has {what};",
                       "each split needs [N, ...] features with N >= 1 (one row per example).")
    if np.dtype(getattr(x, "dtype", None)) != np.float32:
        raise ArgError(f"data.{split}_x", getattr(x, "dtype", type(x).__name__),
                       f"{where}: {split}_x is {getattr(x, 'dtype', type(x).__name__)}, not float32;",
                       "build the Dataset with istjax.data.from_arrays (it standardises and casts).")
    _check_finite(f"data.{split}_x", x, where)
    if y.shape != (shape[0],) or not np.issubdtype(y.dtype, np.integer):
        raise ArgError(f"data.{split}_y", y.shape, f"{where}: {split}_y is {y.dtype} of shape {y.shape};",
                       f"give [{shape[0]}] integer labels, one per example of {split}_x.")
    _check_label_range(f"{split}_y", y, num_classes, "num_classes", where)
