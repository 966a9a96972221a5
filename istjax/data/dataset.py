"""The dataset container every loader returns, and the standardisation it guarantees.

Contract
--------
Every loader returns a :class:`Dataset` whose features are ``float32`` and
standardised per feature with *train* statistics (zero mean, unit variance;
features that are constant on the training set are centred and left at 0),
and whose labels are ``int32`` in ``[0, num_classes)``.  Loaders never touch
the network (the shipped ones are in :mod:`istjax.data.builtin`, the registry
in :mod:`istjax.data.registry`).  Loaded arrays are cached in memory and
returned read-only, so callers must copy before mutating.

Also here: `finalise` and `finalise_rows`, which every loader ends with (standardise,
cast, freeze, wrap). Where loaders find their files and keep their caches is
:mod:`istjax.data.files`.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

from istjax.core.errors import ArgError

__all__ = [
    "Dataset",
    "Rows",
    "finalise",
    "finalise_rows",
    "standardize",
    "standardized_rows",
]


class Dataset(NamedTuple):
    """A classification dataset with standardised features.

    Fields:
      name: what runs and summaries call the data: a built-in loader's :data:`istjax.data.registry.DATASETS` name,
        `tfds:<name>`, or any name for your own data (:func:`istjax.data.from_arrays`).
      train_x: `[N, ...] float32`, standardised with train statistics: an array, or :class:`Rows` (a file-backed
        loader's, standardised row by row when indexed, so a process that needs some examples decodes only those).
      train_y: `[N] int32` in `[0, num_classes)`.
      test_x: `[M, ...] float32`, standardised with *train* statistics.
      test_y: `[M] int32`.
      num_classes: number of classes.
      shared: inputs every worker reads each round (a graph, an adjacency, a lookup
        table), passed to a round once and never stacked per worker; None for
        ordinary datasets.
      num_feature_ids: sparse data only (extreme classification,
        :func:`istjax.data.extreme.as_dataset`): ``x`` holds ``(feature id, value)``
        pairs with ids in ``[0, num_feature_ids)`` (a model's ``num_features``
        field is filled from it), and ``y`` label sets ``[N, L]`` padded with -1;
        None for dense data.
      label_weights: sparse multi-label data only: ``[num_classes]`` inverse
        propensities of the training labels (Jain et al. 2016,
        :func:`istjax.xmc.metrics.propensities`), the weights of PSP@k; None
        otherwise.
      vocabulary: character-level text only (:mod:`istjax.data.text`): the
        characters, id ``i`` being ``vocabulary[i]``; ``x`` and ``y`` are then
        ``[N, context]`` character ids (``y`` the next character at every
        position). None otherwise.
      validation: ``(x, y)``, a split the data set holds out apart from both others for choosing settings (a
        graph's validation nodes, :func:`istjax.data.graphs.as_dataset`): what a tuning run evaluates on in place
        of the training split's tail (:func:`istjax.data.tuning.tuning_split`). None where it holds none.
      train_clients: data with clients of its own (federated learning's natural clients: FSDD's speakers,
        Shakespeare's speaking roles, :mod:`istjax.data.natural_clients`): ``[N] int32``, the client that holds each
        training example, ids in ``[0, len(client_names))``; `istjax.data.natural_clients.natural_split` makes them
        a `istjax.data.clients.ClientSplit` (``clients.split='natural'`` in a config). None where it has none.
      client_names: with ``train_clients``, the name of each client id (``client_names[i]`` of id ``i``: a speaker,
        ``"hamlet/Ham"``); None otherwise.
    """

    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int
    shared: Optional[dict] = None
    num_feature_ids: Optional[int] = None
    label_weights: Optional[np.ndarray] = None
    vocabulary: Optional[str] = None
    validation: Optional[tuple[Any, np.ndarray]] = None
    train_clients: Optional[np.ndarray] = None
    client_names: Optional[tuple[str, ...]] = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one example, ``train_x.shape[1:]``."""
        return tuple(self.train_x.shape[1:])

    @property
    def num_features(self) -> int:
        """Number of scalar features per example, `prod(input_shape)`."""
        return int(np.prod(self.input_shape, dtype=np.int64))

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, train_x={self.train_x.shape}, "
            f"test_x={self.test_x.shape}, num_classes={self.num_classes})"
        )


def _train_moments(x: np.ndarray, chunk: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and std of `x: [N, ...]`, float64, without a full temp.

    Merges per-chunk moments (Chan et al.) so a `[20000, 4096]` float32 array
    never needs a float64 copy.  Returns `(mean, std)` each of shape `x.shape[1:]`.
    """
    n_total = 0
    mean = np.zeros(x.shape[1:], np.float64)
    m2 = np.zeros(x.shape[1:], np.float64)
    for start in range(0, x.shape[0], chunk):
        c = np.asarray(x[start : start + chunk], np.float64)
        n_c = c.shape[0]
        mean_c = c.mean(0)
        m2_c = ((c - mean_c) ** 2).sum(0)
        n_new = n_total + n_c
        delta = mean_c - mean
        mean = mean + delta * (n_c / n_new)
        m2 = m2 + m2_c + delta**2 * (n_total * n_c / n_new)
        n_total = n_new
    return mean, np.sqrt(m2 / max(n_total, 1))


class Rows:
    """A read-only ``[N, ...] float32`` training split made row by row: ``rows[idx]`` reads ``raw[idx]`` (an array
    of any dtype: the decoded file's bytes), applies ``transform`` and, when given, standardises with ``mean`` and
    ``inv`` (1 / std), exactly as :func:`standardize` does, and returns a fresh read-only array.

    Why: an MPI rank holds only the examples its workers read (`istjax.data.make_batch_fn(workers=)`); with
    ``Rows`` it also converts only those to ``float32`` (Fashion-MNIST: the 47 MB of raw bytes instead of 188 MB of
    features per process). ``np.asarray(rows)`` makes them all. ``shape``, ``ndim``, ``dtype``, ``len`` and
    ``reshape(n, -1)`` are the array's; the rows are chosen by an int, a slice, a 1-D integer array or list, or a 1-D
    boolean mask, optionally followed by indices into each row (``rows[idx, 3]``, ``rows[..., 0]``); other index
    forms raise an IndexError (use ``np.asarray(rows)[...]``).
    """

    dtype = np.dtype(np.float32)

    def __init__(self, raw: np.ndarray, transform: Any = None, mean: Optional[np.ndarray] = None,
                 inv: Optional[np.ndarray] = None, *, item_shape: Optional[tuple[int, ...]] = None):
        self.raw, self.transform, self.mean, self.inv = raw, transform, mean, inv
        for a in (mean, inv):  # shared by every later load of a cached dataset
            if a is not None:
                a.flags.writeable = False
        if item_shape is None:  # what transform makes of one row
            item_shape = np.shape(transform(np.asarray(raw[:1])))[1:] if transform else raw.shape[1:]
        self.item_shape = tuple(item_shape)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.raw), *self.item_shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, index: Any) -> np.ndarray:
        if isinstance(index, tuple):  # the rows first, then the rest of the index on them
            if not index or index[0] is Ellipsis:
                return self[:][index]
            if any(isinstance(i, (list, np.ndarray)) for i in index[1:]):
                raise IndexError(f"Rows takes one array index, the rows', not {index!r}; use np.asarray(rows)[...].")
            rows = self[index[0]]
            return rows[(slice(None), *index[1:])] if rows.ndim == self.ndim else rows[index[1:]]
        _check_row_index(index)
        raw = np.asarray(self.raw[index])
        single = np.ndim(raw) == len(self.raw.shape) - 1
        out = self.transform(raw[None] if single else raw) if self.transform else raw
        out = np.asarray(out, np.float32)
        if not out.flags.writeable or np.shares_memory(out, self.raw):  # a fresh float32 array is used as it is
            out = out.copy()
        out = out.reshape(len(out), *self.item_shape)
        if self.mean is not None:
            out -= self.mean
            out *= self.inv
        out = out[0] if single else out
        out.flags.writeable = False
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if copy is False:
            raise ArgError("copy", copy, "Rows makes its float32 rows when read:",
                           "np.asarray(rows, copy=False) cannot avoid a copy.")
        return np.asarray(self[:], dtype)

    def reshape(self, *shape: Any) -> "Rows":
        """``reshape(n, -1)`` and the like: the same rows with another item shape (the first size must be N)."""
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        item = np.empty((1, *self.item_shape), np.float32).reshape(1, *shape[1:]).shape[1:]
        if shape[0] not in (len(self), -1):
            raise ArgError("shape", shape, f"cannot reshape {self.shape} rows to {shape}:",
                           f"the first size must stay {len(self)}.")
        mean = None if self.mean is None else self.mean.reshape(item)
        inv = None if self.inv is None else self.inv.reshape(item)
        return Rows(self.raw, self.transform, mean, inv, item_shape=item)

    def __repr__(self) -> str:
        return f"Rows(shape={self.shape}, float32, from {self.raw.dtype} {tuple(self.raw.shape)})"


def _check_row_index(index: Any) -> None:
    """Refuses a row index `Rows` would not treat as numpy does (it picks rows only)."""
    if isinstance(index, (int, np.integer, slice)) or index is Ellipsis:
        return
    a = np.asarray(index) if isinstance(index, (list, np.ndarray)) else None
    if a is None or a.ndim != 1 or not (a.dtype == bool or np.issubdtype(a.dtype, np.integer) or a.size == 0):
        raise IndexError(f"Rows picks rows by an int, a slice, a 1-D integer array or a 1-D boolean mask, not "
                         f"{index!r}; use np.asarray(rows)[...] for other indexing.")


def standardized_rows(raw: np.ndarray, transform: Any, eps: float = 1e-8) -> Rows:
    """``raw`` (``[N, ...]`` decoded bytes) as :class:`Rows` standardised with its own statistics (those of
    ``transform(raw)``, read in chunks: the ``float32`` split is never made whole)."""
    return Rows(raw, transform, *_statistics(Rows(raw, transform), eps))


def _statistics(train_x: Any, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, 1 / std)`` per feature of ``train_x`` as float32 (a std ``<= eps`` taken as 1: only centred)."""
    if train_x.shape[0] < 1:
        raise ArgError("train_x", tuple(train_x.shape), "train_x has 0 examples;",
                       "need at least 1 to compute statistics.")
    mean, std = _train_moments(train_x)
    std = np.where(std > eps, std, 1.0)
    return mean.astype(np.float32), (1.0 / std).astype(np.float32)


def standardize(
    train_x: np.ndarray, test_x: np.ndarray, eps: float = 1e-8, *, copy: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Standardise features with train statistics.

    Args:
      train_x: `[N, ...]` any real dtype.
      test_x: `[M, ...]`, same trailing shape as `train_x`.
      eps: features whose train std is `<= eps` are only centred (std taken as 1).
      copy: if False, writable `float32` inputs are standardised in place.

    Returns:
      `(train_x, test_x)` as `float32` arrays (new unless `copy=False`), train
      having zero mean and unit variance per non-constant feature.
    """
    if train_x.shape[1:] != test_x.shape[1:]:
        raise ArgError(("test_x", "train_x"), tuple(test_x.shape),
                       f"test_x has example shape {test_x.shape[1:]} but train_x has {train_x.shape[1:]};",
                       "both splits must have the same feature shape.")
    mean32, inv32 = _statistics(train_x, eps)

    def apply(x: np.ndarray) -> np.ndarray:
        out = np.array(x, dtype=np.float32, copy=True if copy else None)
        if not out.flags.writeable:
            out = out.copy()
        out -= mean32
        out *= inv32
        return out

    return apply(train_x), apply(test_x)


def finalise(
    name: str,
    train_x: np.ndarray,
    train_y: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    num_classes: int,
    *,
    owned: bool = False,
) -> Dataset:
    """Standardise, cast to `float32`/`int32`, freeze and wrap in a Dataset.

    `owned=True` lets freshly generated float32 features be standardised in place.
    """
    train_x, test_x = standardize(train_x, test_x, copy=not owned)
    arrays = [train_x, np.asarray(train_y, np.int32), test_x, np.asarray(test_y, np.int32)]
    for a in arrays:
        a.flags.writeable = False
    return Dataset(name, *arrays, num_classes=int(num_classes))


def finalise_rows(name: str, train_raw: np.ndarray, train_y: np.ndarray, test_raw: np.ndarray,
                   test_y: np.ndarray, num_classes: int, transform: Any) -> Dataset:
    """`finalise` for a file-backed loader: the training split stays :class:`Rows` over ``train_raw`` (standardised
    when indexed); the test split, which every process evaluates, is made whole with the same statistics."""
    train_x = standardized_rows(train_raw, transform)
    test = Rows(test_raw, transform, train_x.mean, train_x.inv)
    if test.item_shape != train_x.item_shape:
        raise ArgError(("test_raw", "train_raw"), tuple(test.shape),
                       f"test_x has example shape {test.item_shape} but train_x has {train_x.item_shape};",
                       "both splits must have the same feature shape.")
    test_x = test[:]
    labels = [np.asarray(train_y, np.int32), np.asarray(test_y, np.int32)]
    for a in labels:
        a.flags.writeable = False
    return Dataset(name, train_x, labels[0], test_x, labels[1], num_classes=int(num_classes))
