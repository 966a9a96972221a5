"""Extreme multi-label classification (XMC) data: data sets by name and from your own folder, sparse batches, a
generator, and the training view the whole library trains on.

The repository text format, its record (:class:`XMCData`: two CSR matrices, features and label sets), its parser,
writer and cache are :mod:`istjax.data.xmc_format` (re-exported here: :func:`read_xmc`, :func:`write_xmc`); a folder
of such files is read by :mod:`istjax.data.xmc_folder` (:func:`read_xmc_folder`). Here:

* :func:`load_xmc_debian_deps`: the ``xmc-debian-deps`` set (Debian packages' dependencies from their descriptions;
  ``$ISTJAX_DATA_DIR/xmc-debian-deps``), train and test plus the label names; :func:`load_xmc` by name.
* :func:`pack_rows` / :func:`pack_labels`: rows of an :class:`XMCData` as fixed-shape padded arrays for ``jit``.
* :func:`synthetic_xmc`: a seeded generator of XMC data with power-law label frequencies and label-dependent features.
* :func:`as_dataset`: an :class:`XMCDataset` as an :class:`istjax.data.Dataset`; the training views
  :data:`istjax.data.DATASETS` names (``xmc_debian_deps``, ``xmc_synthetic``, and ``xmc``: a folder of your own,
  :func:`load_folder_dataset`).

The ranking metrics (P@k, nDCG@k, PSP@k) and the blockwise top-k over labels are in :mod:`istjax.xmc.metrics`.
Nothing here touches the network.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, NamedTuple, Optional

import numpy as np

from istjax.core.errors import ArgError
from istjax.core.streams import check_positive as _check_positive
from istjax.core.streams import check_seed
from istjax.data.dataset import Dataset
from istjax.data.images import DataNotFoundError
from istjax.data.xmc_folder import read_xmc_folder
from istjax.data.xmc_format import PathLike, SparseRows, XMCData, XMCDataset, _freeze, _indptr, _record
from istjax.data.xmc_format import parse_xmc as parse_xmc
from istjax.data.xmc_format import read_xmc as read_xmc
from istjax.data.xmc_format import write_xmc as write_xmc
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
    if data_dir is not None:
        if not isinstance(data_dir, (str, os.PathLike)) or not str(data_dir):
            raise ArgError("data_dir", data_dir, f"data_dir={data_dir!r} must be a folder path or None;",
                           "pass the xmc-debian-deps folder.")
        return pathlib.Path(data_dir).expanduser()
    env = os.environ.get("ISTJAX_DATA_DIR")
    if not env:
        raise DataNotFoundError(f"xmc-debian-deps: ISTJAX_DATA_DIR is not set and no data_dir was given. {_DEBIAN_HOW}")
    return pathlib.Path(env).expanduser() / "xmc-debian-deps"


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


def synthetic_xmc_dataset(num_train: int = 8000, num_test: int = 2000, **kwargs: Any) -> XMCDataset:
    """A train / test pair from one :func:`synthetic_xmc` problem (same labels' features, same label frequencies):
    its first ``num_train`` points and the ``num_test`` after them. ``kwargs``: :func:`synthetic_xmc`'s arguments
    other than ``num_points``."""
    num_train = _check_positive("num_train", num_train)
    num_test = _check_positive("num_test", num_test)
    if "num_points" in kwargs:
        raise ArgError("num_points", kwargs["num_points"], "xmc-synthetic takes num_train and num_test,",
                       "not num_points.")
    data = synthetic_xmc(num_train + num_test, **kwargs)
    train = take_rows(data, np.arange(num_train))._replace(name="xmc-synthetic/train")
    test = take_rows(data, np.arange(num_train, num_train + num_test))._replace(name="xmc-synthetic/test")
    return XMCDataset("xmc-synthetic", train, test)


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
# Rows, and fixed-shape batches of them
# --------------------------------------------------------------------------


class SparseBatch(NamedTuple):
    """Rows of an :class:`XMCData` as fixed-shape padded arrays (:func:`pack_rows`); ``S`` is the shape of ``rows``.

    Fields:
      ids: ``[*S, nnz] int32`` feature ids of each row, ascending, then padding id 0.
      values: ``[*S, nnz] float32`` their values, then padding value 0, so a padded slot adds nothing to an
        embedding bag ``sum_j values[j] * E[ids[j]]`` and needs no mask.
      labels: ``[*S, max_labels] int32`` label ids of each row, ascending, then padding -1 (never a label id): a
        hit test ``any(labels == predicted)`` needs no mask; a loss that gathers logits at ``labels`` masks with
        ``labels >= 0`` and gathers at ``max(labels, 0)`` (a -1 index would wrap to the last label).
    """

    ids: np.ndarray
    values: np.ndarray
    labels: np.ndarray


def bucket(n: int, minimum: int = 8) -> int:
    """The padded width for ``n`` entries: the next power of two ``>= max(n, minimum)``, so that ``jit`` sees a few
    shapes (8, 16, 32, ...) rather than one per batch."""
    n = max(int(n), int(minimum), 1)
    return 1 << (n - 1).bit_length()


def _row_index(rows: Any, num_rows: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """``rows`` as flat int64 row numbers, checked, and its shape."""
    arr = np.asarray(rows)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise ArgError("rows", rows if arr.size < 8 else f"{arr.dtype} {arr.shape}",
                       f"rows must be integer row numbers, got {arr.dtype};", "pass an int array (any shape).")
    flat = arr.reshape(-1).astype(np.int64)
    bad = flat[(flat < 0) | (flat >= num_rows)]
    if bad.size:
        raise ArgError("rows", int(bad[0]), f"row {int(bad[0])} is outside [0, {num_rows}) ({bad.size} in all);",
                       f"pick rows of the {num_rows} points.")
    return flat, arr.shape


def _gather(sparse: SparseRows, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(lengths [R], row_of [T], source [T])``: the entries of ``rows`` in order, ``source`` indexing ``sparse``."""
    starts = sparse.indptr[rows]
    lengths = sparse.indptr[rows + 1] - starts
    offsets = np.cumsum(lengths) - lengths
    total = int(lengths.sum())
    row_of = np.repeat(np.arange(len(rows)), lengths)
    source = np.arange(total, dtype=np.int64) - np.repeat(offsets - starts, lengths)
    return lengths, row_of, source


def take_rows(data: XMCData, rows: Any) -> XMCData:
    """The points ``rows`` (1-D, in that order, repeats allowed) of ``data`` as a new :class:`XMCData`."""
    flat, _ = _row_index(rows, data.num_points)
    parts = []
    for sparse in (data.features, data.labels):
        lengths, _, source = _gather(sparse, flat)
        parts.append((_indptr(lengths), sparse.ids[source],
                      None if sparse.values is None else sparse.values[source]))
    (f_ptr, f_ids, f_vals), (l_ptr, l_ids, _) = parts
    return _record(data.name, f_ptr, f_ids, f_vals, l_ptr, l_ids, data.num_features, data.num_labels)


def _padded(sparse: SparseRows, rows: np.ndarray, width: Optional[int], arg: str, fill: int):
    """``(ids [R, width], values [R, width] or None)``: the rows left-aligned, padded with ``fill`` / 0."""
    lengths, row_of, source = _gather(sparse, rows)
    longest = int(lengths.max()) if lengths.size else 0
    if width is None:
        width = bucket(longest)
    else:
        width = _check_positive(arg, width)
        if longest > width:
            r = int(np.argmax(lengths))
            raise ArgError(arg, width, f"point {int(rows[r])} has {longest} entries, more than {arg}={width};",
                           f"pass {arg}>={longest}, or {arg}=None for the batch's bucket ({bucket(longest)}).")
    col = np.arange(len(source)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    ids = np.full((len(rows), width), fill, np.int32)
    ids[row_of, col] = sparse.ids[source]
    if sparse.values is None:
        return ids, None
    values = np.zeros((len(rows), width), np.float32)
    values[row_of, col] = sparse.values[source]
    return ids, values


def pack_labels(data: XMCData, rows: Any, *, max_labels: Optional[int] = None) -> np.ndarray:
    """``[*S, max_labels] int32``: the label sets of ``rows`` (shape ``S``), ascending, padded with -1.

    ``max_labels=None``: :func:`bucket` of the longest set among ``rows``; an int: that width (a longer set is
    refused, naming the point)."""
    flat, shape = _row_index(rows, data.num_points)
    ids, _ = _padded(data.labels, flat, max_labels, "max_labels", -1)
    return ids.reshape(*shape, ids.shape[-1])


def pack_rows(data: XMCData, rows: Any, *, nnz: Optional[int] = None,
              max_labels: Optional[int] = None) -> SparseBatch:
    """Rows of ``data`` as a :class:`SparseBatch` of fixed-shape arrays (a pure function of its arguments).

    Args:
      data: the points.
      rows: row numbers of any shape ``S`` (``[B]``, or a round's ``[W, K, B]``).
      nnz: the feature width; None: :func:`bucket` of the most nonzero features among ``rows`` (a power of two,
        at least 8). Pass a fixed width (e.g. ``bucket`` of the split's maximum) for one shape across batches.
      max_labels: the label width, the same way.

    Returns:
      ``SparseBatch(ids [*S, nnz], values [*S, nnz], labels [*S, max_labels])``: features padded with id 0 and
      value 0, labels padded with -1 (see :class:`SparseBatch` for why).

    Raises:
      ArgError: a row outside ``[0, N)``, or a row longer than a given ``nnz`` / ``max_labels``.
    """
    flat, shape = _row_index(rows, data.num_points)
    ids, values = _padded(data.features, flat, nnz, "nnz", 0)
    labels, _ = _padded(data.labels, flat, max_labels, "max_labels", -1)
    return SparseBatch(*(a.reshape(*shape, a.shape[-1]) for a in (ids, values, labels)))


# --------------------------------------------------------------------------
# A generator
# --------------------------------------------------------------------------


def _check_real(arg: str, value: Any, low: float, high: float = np.inf) -> float:
    if not isinstance(value, (int, float, np.integer, np.floating)) or not low <= float(value) <= high:
        bounds = f"in [{low}, {high}]" if np.isfinite(high) else f">= {low}"
        raise ArgError(arg, value, f"{arg}={value!r} must be a number {bounds};", f"pass {arg} {bounds}.")
    return float(value)


def _label_sets(rng: np.random.Generator, n: int, num_labels: int, mean: float, exponent: float) -> np.ndarray:
    """``[n, width] int64`` distinct labels per point, -1 padded: ``1 + Poisson(mean - 1)`` of them (at most
    ``num_labels``), drawn one at a time with probability ``∝ (l + 1) ** -exponent`` among those not yet drawn."""
    counts = np.minimum(1 + rng.poisson(mean - 1.0, n), num_labels)
    cdf = np.cumsum((np.arange(num_labels) + 1.0) ** -exponent)
    cdf /= cdf[-1]
    chosen = np.full((n, int(counts.max())), -1, np.int64)
    have = np.zeros(n, np.int64)
    while True:
        short = np.flatnonzero(have < counts)
        if not short.size:
            return chosen
        draw = np.minimum(np.searchsorted(cdf, rng.random(short.size), side="right"), num_labels - 1)
        new = ~(chosen[short] == draw[:, None]).any(1)
        rows = short[new]
        chosen[rows, have[rows]] = draw[new]
        have[rows] += 1


def _feature_draws(rng: np.random.Generator, sets: np.ndarray, indicative: np.ndarray, num_features: int,
                   mean: float, signal: float) -> tuple[np.ndarray, np.ndarray]:
    """``(row [T], feature [T])``: ``1 + Poisson(mean - 1)`` draws per point, each from the indicative features of
    one of its labels (uniform label, uniform feature) with probability ``signal``, else uniform over all."""
    n = len(sets)
    draws = 1 + rng.poisson(mean - 1.0, n)
    from_labels = rng.binomial(draws, signal)
    row_s = np.repeat(np.arange(n), from_labels)
    num_set = (sets >= 0).sum(1)
    slot = (rng.random(row_s.size) * num_set[row_s]).astype(np.int64)
    label = sets[row_s, slot]
    feature_s = indicative[label, rng.integers(0, indicative.shape[1], row_s.size)]
    row_n = np.repeat(np.arange(n), draws - from_labels)
    feature_n = rng.integers(0, num_features, row_n.size)
    return np.concatenate([row_s, row_n]), np.concatenate([feature_s, feature_n])


def _tf_rows(n: int, row: np.ndarray, feature: np.ndarray, num_features: int):
    """CSR ``(indptr, ids, values)`` of the draws: value ``ln(1 + count)``, each row scaled to unit L2 norm."""
    keys, counts = np.unique(row.astype(np.int64) * num_features + feature, return_counts=True)
    rows, ids = keys // num_features, keys % num_features
    values = np.log1p(counts.astype(np.float64))
    norms = np.sqrt(np.bincount(rows, values ** 2, minlength=n))
    return _indptr(np.bincount(rows, minlength=n)), ids, values / norms[rows]


def synthetic_xmc(num_points: int = 10_000, num_features: int = 5_000, num_labels: int = 1_000, *,
                  labels_per_point: float = 4.0, features_per_point: float = 30.0, label_exponent: float = 1.0,
                  features_per_label: int = 8, signal: float = 0.5, seed: int = 0) -> XMCData:
    """A seeded synthetic XMC problem (numpy only): power-law label frequencies, features that tell the labels.

    The problem (fixed by ``seed``): label ``l`` has ``features_per_label`` *indicative* features, drawn uniformly
    (with replacement) from all ``num_features``, so labels overlap in features only by chance, and a popularity
    ``∝ (l + 1) ** -label_exponent`` (Zipf; label 0 is the most frequent, as in ``xmc-debian-deps``). Each point:

    1. ``1 + Poisson(labels_per_point - 1)`` distinct labels (capped at ``num_labels``), drawn by popularity
       without replacement (mean about ``labels_per_point``);
    2. ``1 + Poisson(features_per_point - 1)`` feature draws; each, with probability ``signal``, one of the
       indicative features of one of the point's labels (both uniform), else a noise feature uniform over all;
    3. value of a feature ``ln(1 + times drawn)``, the row scaled to unit L2 norm (like tf-idf rows). Repeated draws
       merge, so the mean nonzero count is below ``features_per_point`` (about 26 for 30 with the other defaults).

    Predicting the labels needs a separate direction per label (their indicative sets are unrelated), so the best
    rank-``H`` predictor, and a model with ``H`` hidden units, improves with ``H`` up to about ``num_labels``.

    Args:
      num_points, num_features, num_labels: the sizes (>= 1).
      labels_per_point: mean labels per point (>= 1).
      features_per_point: mean feature draws per point (>= 1).
      label_exponent: the Zipf exponent of label popularity (>= 0; 0: uniform).
      features_per_label: indicative features per label (>= 1).
      signal: the fraction of feature draws that come from the labels' indicative features (in [0, 1]).
      seed: fixes both the problem (the labels' indicative features) and the points drawn from it.

    Returns:
      An :class:`XMCData` named ``"synthetic"``, as :func:`read_xmc` returns. The same arguments give the same
      arrays; to split one problem into train and test, generate once and :func:`take_rows` (as
      :func:`synthetic_xmc_dataset` does).
    """
    n, num_features, num_labels, per_label = (_check_positive(a, v) for a, v in (
        ("num_points", num_points), ("num_features", num_features), ("num_labels", num_labels),
        ("features_per_label", features_per_label)))
    per_point, exponent, draws, signal = (_check_real(a, v, low, high) for a, v, low, high in (
        ("labels_per_point", labels_per_point, 1.0, np.inf), ("label_exponent", label_exponent, 0.0, np.inf),
        ("features_per_point", features_per_point, 1.0, np.inf), ("signal", signal, 0.0, 1.0)))
    world, points = (np.random.default_rng([check_seed(seed), stream]) for stream in (0, 1))
    indicative = world.integers(0, num_features, (num_labels, per_label))
    sets = _label_sets(points, n, num_labels, per_point, exponent)
    row, feature = _feature_draws(points, sets, indicative, num_features, draws, signal)
    ascending = np.sort(np.where(sets >= 0, sets, num_labels), axis=1)  # -1 padding last
    return _record("synthetic", *_tf_rows(n, row, feature, num_features), _indptr((sets >= 0).sum(1)),
                   ascending[ascending < num_labels], num_features, num_labels)  # label ids row by row


# --------------------------------------------------------------------------
# The training view: a Dataset of (feature id, value) pairs and padded label sets
# --------------------------------------------------------------------------

MAX_EXACT_ID = 1 << 24
"""Feature ids are carried in float32 (:func:`feature_pairs`), exact below ``2**24`` (16,777,216; Amazon-670k has
135,909 features)."""


def feature_pairs(data: XMCData, rows: Any = None, *, nnz: int = 256) -> tuple[np.ndarray, int]:
    """``(pairs [R, nnz, 2] float32, truncated)``: each row's nonzero features as ``(id, value)`` pairs, padded with
    ``(0, 0)`` (a padded slot adds nothing to an embedding bag); ``truncated`` counts the rows that had more than
    ``nnz`` and kept their ``nnz`` largest values (``|value|``; ties by lower id).

    One float32 array rather than two so that every batch path of the library (slicing, ``jnp.take`` over
    examples, device puts, evaluation chunks) carries sparse rows unchanged; ids are exact in float32 below
    :data:`MAX_EXACT_ID` (refused above). ``istjax.models.EmbeddingBag`` reads the layout back.
    """
    nnz = _check_positive("nnz", nnz)
    if data.num_features > MAX_EXACT_ID:
        raise ArgError("num_features", data.num_features,
                       f"{data.name}: {data.num_features} features; ids above 2**24 are not exact in float32 pairs,",
                       "hash the features into fewer ids first.")
    flat = np.arange(data.num_points) if rows is None else _row_index(rows, data.num_points)[0]
    lengths, row_of, source = _gather(data.features, flat)
    ids, values = data.features.ids[source], data.features.values[source]
    # Within each row, entries ordered by |value| descending (ties: lower id), then the first nnz kept, then ids
    # restored to ascending order.
    order = np.lexsort((ids, -np.abs(values), row_of))
    rank = np.arange(len(order)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    keep = order[rank < nnz]
    keep = keep[np.lexsort((ids[keep], row_of[keep]))]
    kept_rows, kept_ids, kept_values = row_of[keep], ids[keep], values[keep]
    col = np.arange(len(keep)) - np.repeat(np.cumsum(np.minimum(lengths, nnz)) - np.minimum(lengths, nnz),
                                           np.minimum(lengths, nnz))
    pairs = np.zeros((len(flat), nnz, 2), np.float32)
    pairs[kept_rows, col, 0] = kept_ids
    pairs[kept_rows, col, 1] = kept_values
    return pairs, int((lengths > nnz).sum())


def as_dataset(data: XMCDataset, *, nnz: int = 256, max_labels: Optional[int] = None,
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
    """
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
    _freeze(train_x, train_y, test_x, test_y)
    weights = 1.0 / propensities(data.train.label_counts(), max(2, data.train.num_points))
    return Dataset(data.name.replace("-", "_"), train_x, train_y, test_x, test_y, int(data.train.num_labels),
                   num_feature_ids=int(data.train.num_features), label_weights=weights.astype(np.float32))


def load_debian_deps_dataset(data_dir: Optional[PathLike] = None, nnz: int = 256,
                             cache: bool = True) -> Dataset:
    """``xmc-debian-deps`` as a training :class:`istjax.data.Dataset` (:func:`as_dataset`): ``DATASETS`` name
    ``xmc_debian_deps``. 43,333 / 10,345 points, 31,435 features, 15,186 labels; at the default ``nnz=256`` 21
    training and 2 test points keep their 256 largest features (the longest description has 2,123 nonzero)."""
    return as_dataset(load_xmc_debian_deps(data_dir, cache=cache), nnz=nnz)


def load_folder_dataset(path: PathLike, nnz: Optional[int] = None, cache: bool = True) -> Dataset:
    """Your own XMC folder (:func:`read_xmc_folder`: ``train.txt``, ``test.txt``, optionally ``labels.txt``) as a
    training :class:`istjax.data.Dataset` (:func:`as_dataset`), named after the folder: ``DATASETS`` name ``xmc``,
    ``--config.data.name=xmc --config.data.kwargs.path=<folder>``. ``nnz``: the (id, value) pairs a row carries;
    None: the :func:`bucket` of the longest row of either split, at most 256. Longer rows keep their ``nnz``
    largest."""
    data = read_xmc_folder(path, cache=cache)
    if nnz is None:
        nnz = min(256, bucket(max(int(s.features.row_lengths.max(initial=1)) for s in (data.train, data.test))))
    return as_dataset(data, nnz=nnz)


def load_synthetic_dataset(num_train: int = 8000, num_test: int = 2000, num_features: int = 5000,
                           num_labels: int = 1000, labels_per_point: float = 4.0, features_per_point: float = 30.0,
                           label_exponent: float = 1.0, features_per_label: int = 8, signal: float = 0.5,
                           seed: int = 0, nnz: int = 64) -> Dataset:
    """:func:`synthetic_xmc_dataset` as a training :class:`istjax.data.Dataset` (:func:`as_dataset`):
    ``DATASETS`` name ``xmc_synthetic``. The defaults train in minutes on two cores; Amazon-670k's shape is
    ``num_features=135909, num_labels=670091`` (its memory, not its accuracy, is what this machine can show)."""
    data = synthetic_xmc_dataset(num_train, num_test, num_features=num_features, num_labels=num_labels,
                                 labels_per_point=labels_per_point, features_per_point=features_per_point,
                                 label_exponent=label_exponent, features_per_label=features_per_label,
                                 signal=signal, seed=seed)
    return as_dataset(data, nnz=nnz)
