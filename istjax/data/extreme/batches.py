"""Rows of an XMC data set as fixed-shape padded arrays, for ``jit``: label sets, feature ``(id, value)`` pairs and
:class:`SparseBatch` es, widths bucketed to powers of two.

* :func:`take_rows`: some points of an :class:`~istjax.data.extreme.XMCData` as a new record.
* :func:`pack_rows` / :func:`pack_labels`: rows as a :class:`SparseBatch` / padded label sets (padding -1).
* :func:`feature_pairs`: each row's features as ``(id, value)`` pairs in one float32 array, what the training view
  (:func:`istjax.data.extreme.as_dataset`) carries and ``istjax.models.EmbeddingBag`` reads.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

from istjax.core.errors import ArgError
from istjax.core.streams import check_positive
from istjax.data.extreme.text_format import SparseRows, XMCData, indptr_from_counts, make_record

__all__ = ["MAX_EXACT_ID", "SparseBatch", "bucket", "feature_pairs", "pack_labels", "pack_rows", "take_rows"]


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
        parts.append((indptr_from_counts(lengths), sparse.ids[source],
                      None if sparse.values is None else sparse.values[source]))
    (f_ptr, f_ids, f_vals), (l_ptr, l_ids, _) = parts
    return make_record(data.name, f_ptr, f_ids, f_vals, l_ptr, l_ids, data.num_features, data.num_labels)


def _padded(sparse: SparseRows, rows: np.ndarray, width: Optional[int], arg: str, fill: int):
    """``(ids [R, width], values [R, width] or None)``: the rows left-aligned, padded with ``fill`` / 0."""
    lengths, row_of, source = _gather(sparse, rows)
    longest = int(lengths.max()) if lengths.size else 0
    if width is None:
        width = bucket(longest)
    else:
        width = check_positive(arg, width)
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
    nnz = check_positive("nnz", nnz)
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
