"""Extreme multi-label classification (XMC) data: data sets by name and from your own folder, and the training view
the whole library trains on. Every public name of the package is importable from here.

The package, one job to a module:

* :mod:`istjax.data.extreme.text_format`: the Extreme Classification Repository's text format, its record
  (:class:`XMCData`: two CSR matrices, features and label sets), parser, writer and cache (:func:`read_xmc`,
  :func:`write_xmc`);
* :mod:`istjax.data.extreme.folder`: a folder of such files, train, test and label names (:func:`read_xmc_folder`);
* :mod:`istjax.data.extreme.batches`: rows as fixed-shape padded arrays for ``jit`` (:func:`pack_rows`,
  :func:`pack_labels`, :func:`feature_pairs`, :func:`take_rows`);
* :mod:`istjax.data.extreme.synthetic`: a seeded generator with power-law label frequencies (:func:`synthetic_xmc`).

Here:

* :func:`load_xmc_debian_deps`: the ``xmc-debian-deps`` set (Debian packages' dependencies from their descriptions;
  ``$ISTJAX_DATA_DIR/xmc-debian-deps``), train and test plus the label names; :func:`load_xmc` by name.
* :func:`as_dataset`: an :class:`XMCDataset` as an :class:`istjax.data.Dataset`; the training views
  :data:`istjax.data.DATASETS` names (``xmc_debian_deps``, ``xmc_synthetic``, and ``xmc``: a folder of your own,
  :func:`load_folder_dataset`).

The ranking metrics (P@k, nDCG@k, PSP@k) and the blockwise top-k over labels are in :mod:`istjax.xmc.metrics`.
Nothing here touches the network.
"""

from __future__ import annotations

import pathlib
from typing import Any, Optional

import numpy as np

from istjax.core.errors import ArgError
from istjax.data.dataset import Dataset
from istjax.data.extreme.batches import SparseBatch as SparseBatch
from istjax.data.extreme.batches import bucket as bucket
from istjax.data.extreme.batches import feature_pairs as feature_pairs
from istjax.data.extreme.batches import pack_labels as pack_labels
from istjax.data.extreme.batches import pack_rows as pack_rows
from istjax.data.extreme.batches import take_rows as take_rows
from istjax.data.extreme.folder import read_xmc_folder as read_xmc_folder
from istjax.data.extreme.synthetic import synthetic_xmc as synthetic_xmc
from istjax.data.extreme.synthetic import synthetic_xmc_dataset as synthetic_xmc_dataset
from istjax.data.extreme.text_format import PathLike
from istjax.data.extreme.text_format import SparseRows as SparseRows
from istjax.data.extreme.text_format import XMCData as XMCData
from istjax.data.extreme.text_format import XMCDataset as XMCDataset
from istjax.data.extreme.text_format import freeze
from istjax.data.extreme.text_format import parse_xmc as parse_xmc
from istjax.data.extreme.text_format import read_xmc as read_xmc
from istjax.data.extreme.text_format import write_xmc as write_xmc
from istjax.data.files import data_folder
from istjax.xmc.metrics import propensities

__all__ = [
    "XMC_DATASETS",
    "XMC_DEBIAN_DEPS_FILES",
    "SparseBatch",
    "SparseRows",
    "XMCData",
    "XMCDataset",
    "as_dataset",
    "bucket",
    "feature_pairs",
    "load_debian_deps_dataset",
    "load_folder_dataset",
    "load_synthetic_dataset",
    "load_xmc",
    "load_xmc_debian_deps",
    "pack_labels",
    "pack_rows",
    "parse_xmc",
    "read_xmc",
    "read_xmc_folder",
    "synthetic_xmc",
    "synthetic_xmc_dataset",
    "take_rows",
    "write_xmc",
    "xmc_debian_deps_dir",
]


# --------------------------------------------------------------------------
# Data sets by name
# --------------------------------------------------------------------------

XMC_DEBIAN_DEPS_FILES = ("train.txt.gz", "test.txt.gz", "labels.txt")
"""The files :func:`load_xmc_debian_deps` reads (the data files may also be uncompressed, without ``.gz``)."""

_DEBIAN_HOW = ("The set is the folder xmc-debian-deps/ (train.txt.gz, test.txt.gz, labels.txt, built by its "
               "build.py from Debian's package index); set ISTJAX_DATA_DIR to the folder that holds "
               "xmc-debian-deps/, or pass data_dir=<the xmc-debian-deps folder>.")


def xmc_debian_deps_dir(data_dir: Optional[PathLike] = None) -> pathlib.Path:
    """The folder :func:`load_xmc_debian_deps` reads: ``data_dir`` if given, else ``$ISTJAX_DATA_DIR/xmc-debian-deps``;
    with neither, a DataNotFoundError saying to set ISTJAX_DATA_DIR."""
    return data_folder(data_dir, "xmc-debian-deps", what="xmc-debian-deps", how=_DEBIAN_HOW)


def load_xmc_debian_deps(data_dir: Optional[PathLike] = None, *, cache: bool = True) -> XMCDataset:
    """``xmc-debian-deps``: 43,333 train / 10,345 test Debian packages, 31,435 tf-idf features of their
    descriptions, 15,186 labels (their dependencies); see the set's README for the construction and a baseline.

    The folder is read as any XMC folder (:func:`read_xmc_folder`), with its own name and instructions, and its
    ``labels.txt`` required.

    Args:
      data_dir: the ``xmc-debian-deps`` folder; default ``$ISTJAX_DATA_DIR/xmc-debian-deps``.
      cache: as in :func:`read_xmc`.

    Raises:
      DataNotFoundError: the folder or a file is missing (says to set ISTJAX_DATA_DIR); also a ValueError.
      ValueError: a malformed file (naming it and the line), or files that disagree on the feature or label count.
    """
    return read_xmc_folder(xmc_debian_deps_dir(data_dir), cache=cache, name="xmc-debian-deps", labels_required=True,
                           how=_DEBIAN_HOW)


_XMC_LOADERS = {"xmc-debian-deps": load_xmc_debian_deps, "xmc-synthetic": synthetic_xmc_dataset}
XMC_DATASETS: tuple[str, ...] = tuple(_XMC_LOADERS)
"""The names :func:`load_xmc` knows."""


def load_xmc(name: str, **kwargs: Any) -> XMCDataset:
    """An XMC data set by name: ``"xmc-debian-deps"`` (:func:`load_xmc_debian_deps`: ``data_dir``, ``cache``) or
    ``"xmc-synthetic"`` (:func:`synthetic_xmc_dataset`: ``num_train``, ``num_test`` and the generator's arguments).

    These return the sparse record (:class:`XMCDataset`); :data:`istjax.data.DATASETS` holds their training views
    (:func:`as_dataset`) as ``xmc_debian_deps`` and ``xmc_synthetic``.
    """
    if name not in _XMC_LOADERS:
        raise ArgError("name", name, f"name={name!r} is not a known XMC data set;",
                       f"choose one of {list(XMC_DATASETS)}.")
    return _XMC_LOADERS[name](**kwargs)


# --------------------------------------------------------------------------
# The training view: a Dataset of (feature id, value) pairs and padded label sets
# --------------------------------------------------------------------------


#: The training points' orders `as_dataset` lists: as the files list them, or in one fixed permutation.
ORDERS = ("file", "shuffled")
_ORDER_SEED = 0  # the permutation of ``order="shuffled"``: the same on every machine and for every run


def as_dataset(data: XMCDataset, *, nnz: int = 256, max_labels: Optional[int] = None, order: str = "file",
               log: Optional[Any] = None) -> Dataset:
    """``data`` as an :class:`istjax.data.Dataset` the whole library trains on (``istjax train``, every algorithm
    and runtime): ``x [N, nnz, 2]`` (:func:`feature_pairs`), ``y [N, max_labels] int32`` label sets padded with
    -1 (:func:`pack_labels`; default: :func:`bucket` of the longest set of either split, so both share one width),
    ``num_classes`` the number of labels, ``num_feature_ids`` the number of features (the embedding bag's rows) and
    ``label_weights`` the training labels' inverse propensities (:func:`istjax.xmc.metrics.propensities` with its
    default A = 0.55, B = 1.5; PSP@k's weights).

    Rows with more than ``nnz`` features keep their ``nnz`` largest (``log`` is told how many, per split). The
    features are not standardised (tf-idf rows are already scaled); the labels are sets, so the model's scores
    must be multi-label ones (``istjax.models.SparseMLP``).

    ``order``: the training points as the files list them (``"file"``), or in one fixed permutation
    (``"shuffled"``; the test split and the propensities are the same either way). It decides what a tuning run
    holds out (`istjax.data.tuning`: the training split's tail): ``xmc-debian-deps`` lists its packages by name, so
    its last tenth is the end of the alphabet, where 7.6 % of the label occurrences are labels the other nine
    tenths never show (0.7 % in the test split) and the most frequent label is in 52 % of the points (38 % in the
    rest, 44 % in the test split); shuffled, the tail is a fair draw of the training points (0.9 % and 38 %).
    """
    if order not in ORDERS:
        raise ArgError("order", order, f"order={order!r} is not an order of the training points;",
                       f"choose one of {', '.join(map(repr, ORDERS))}.")
    width = max_labels or bucket(max(int(s.labels.row_lengths.max(initial=1)) for s in (data.train, data.test)))
    splits = {}
    for split in ("train", "test"):
        part = getattr(data, split)
        pairs, cut = feature_pairs(part, nnz=nnz)
        if cut and log is not None:
            log(f"{data.name}: {cut} of {part.num_points} {split} points have more than nnz={nnz} features and keep "
                f"their {nnz} largest (data.kwargs.nnz raises it)")
        splits[split] = (pairs, pack_labels(part, np.arange(part.num_points), max_labels=width))
    (train_x, train_y), (test_x, test_y) = splits["train"], splits["test"]
    if order == "shuffled":
        listed = np.random.default_rng(_ORDER_SEED).permutation(len(train_y))
        train_x, train_y = train_x[listed], train_y[listed]
    freeze(train_x, train_y, test_x, test_y)
    weights = 1.0 / propensities(data.train.label_counts(), max(2, data.train.num_points))
    return Dataset(data.name.replace("-", "_"), train_x, train_y, test_x, test_y, int(data.train.num_labels),
                   num_feature_ids=int(data.train.num_features), label_weights=weights.astype(np.float32))


def load_debian_deps_dataset(data_dir: Optional[PathLike] = None, nnz: int = 256,
                             cache: bool = True, order: str = "file") -> Dataset:
    """``xmc-debian-deps`` as a training :class:`istjax.data.Dataset` (:func:`as_dataset`): ``DATASETS`` name
    ``xmc_debian_deps``. 43,333 / 10,345 points, 31,435 features, 15,186 labels; at the default ``nnz=256`` 21
    training and 2 test points keep their 256 largest features (the longest description has 2,123 nonzero). The
    packages are listed by name; ``order="shuffled"`` lists them in a fixed permutation (:func:`as_dataset`)."""
    return as_dataset(load_xmc_debian_deps(data_dir, cache=cache), nnz=nnz, order=order)


def load_folder_dataset(path: PathLike, nnz: Optional[int] = None, cache: bool = True,
                        order: str = "file") -> Dataset:
    """Your own XMC folder (:func:`read_xmc_folder`: ``train.txt``, ``test.txt``, optionally ``labels.txt``) as a
    training :class:`istjax.data.Dataset` (:func:`as_dataset`), named after the folder: ``DATASETS`` name ``xmc``,
    a config's ``data.name=xmc`` with ``data.kwargs.path=<folder>``. ``nnz``: the (id, value) pairs a row carries;
    None: the :func:`bucket` of the longest row of either split, at most 256. Longer rows keep their ``nnz``
    largest. ``order``: :func:`as_dataset`'s."""
    data = read_xmc_folder(path, cache=cache)
    if nnz is None:
        nnz = min(256, bucket(max(int(s.features.row_lengths.max(initial=1)) for s in (data.train, data.test))))
    return as_dataset(data, nnz=nnz, order=order)


def load_synthetic_dataset(num_train: int = 8000, num_test: int = 2000, num_features: int = 5000,
                           num_labels: int = 1000, labels_per_point: float = 4.0, features_per_point: float = 30.0,
                           label_exponent: float = 1.0, features_per_label: int = 8, signal: float = 0.5,
                           seed: int = 0, nnz: int = 64, order: str = "file") -> Dataset:
    """:func:`synthetic_xmc_dataset` as a training :class:`istjax.data.Dataset` (:func:`as_dataset`):
    ``DATASETS`` name ``xmc_synthetic``. The defaults train in minutes on two cores; Amazon-670k's shape is
    ``num_features=135909, num_labels=670091`` (its memory, not its accuracy, is what this machine can show).
    ``order``: :func:`as_dataset`'s (the points are drawn independently, so either order's tail is a fair draw)."""
    data = synthetic_xmc_dataset(num_train, num_test, num_features=num_features, num_labels=num_labels,
                                 labels_per_point=labels_per_point, features_per_point=features_per_point,
                                 label_exponent=label_exponent, features_per_label=features_per_label,
                                 signal=signal, seed=seed)
    return as_dataset(data, nnz=nnz, order=order)
