"""Graphs in ``.npz`` files: :func:`read_npz` and :func:`save_npz`.

:func:`read_npz` reads one ``.npz`` (``np.savez``, opened with ``allow_pickle=False``) holding::

    features     [N, F] real          node features (stored as float32; must be finite)
    labels       [N] integer          class of each node, in [0, num_classes); -1 marks an unknown label,
                                      allowed only outside the three splits (stored as 0, like Planetoid's)
    edges        [M, 2] integer       node index pairs in [0, N), undirected (either or both directions;
                                      self-loops and duplicates are dropped)
    train_idx    [n_train] integer    node indices, distinct, in [0, N), at least one
    val_idx      [n_val] integer      node indices (may be empty), disjoint from train
    test_idx     [n_test] integer     node indices (may be empty), disjoint from train and val
    num_classes  [] integer           optional; default max(labels) + 1

:func:`save_npz` writes a :class:`GraphData` in this format.
"""

from __future__ import annotations

import os
import pathlib
import pickle
import zipfile
from typing import Optional, Union

import numpy as np

from istjax.core.errors import ArgError
from istjax.data.files import DataNotFoundError
from istjax.graph.graph import from_edges

from istjax.data.graphs.container import GraphData
from istjax.data.graphs.container import _row_normalize

# --------------------------------------------------------------------------
# .npz files
# --------------------------------------------------------------------------

_NPZ_FIELDS = ("features", "labels", "edges", "train_idx", "val_idx", "test_idx")


def _npz_index(path: pathlib.Path, field: str, arr: np.ndarray, num_nodes: int) -> np.ndarray:
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ValueError(f"{path}: {field} must be a 1-D integer array of node indices, got {arr.dtype} "
                         f"{arr.shape}.")
    arr = arr.astype(np.int64)
    bad = arr[(arr < 0) | (arr >= num_nodes)]
    if bad.size:
        raise ValueError(f"{path}: {field} holds node index {int(bad[0])} outside [0, {num_nodes}) ({bad.size} in "
                         f"all); features has {num_nodes} rows. Fix the indices or the features.")
    if np.unique(arr).size != arr.size:
        raise ValueError(f"{path}: {field} lists {arr.size - np.unique(arr).size} node(s) more than once; each "
                         f"split must list distinct nodes.")
    return np.sort(arr).astype(np.int32)


def _load_npz_arrays(path: pathlib.Path) -> tuple[dict[str, np.ndarray], Optional[np.ndarray]]:
    """`({field: array} of the six required fields, num_classes or None)` from the file, all fields present."""
    try:
        npz = np.load(path, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("a single .npy array, not an .npz archive")
        with npz:
            present = sorted(npz.files)
            arrays = {f: npz[f] for f in _NPZ_FIELDS if f in present}
            declared = npz["num_classes"] if "num_classes" in present else None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError) as e:
        raise ValueError(f"{path}: not a readable .npz of plain arrays ({type(e).__name__}: {e}). Write it with "
                         f"np.savez (no object arrays) or istjax.data.graphs.save_npz.") from None
    missing = [f for f in _NPZ_FIELDS if f not in arrays]
    if missing:
        raise ValueError(f"{path}: missing field(s) {missing}; the file holds {present} but needs "
                         f"{list(_NPZ_FIELDS)} (num_classes optional). See istjax.data.graphs for the format.")
    return arrays, declared


def _check_npz_features(path: pathlib.Path, features: np.ndarray) -> np.ndarray:
    """The features as a finite `[N, F] float32` matrix with N >= 1."""
    if features.ndim != 2 or features.dtype.kind not in "biuf":
        raise ValueError(f"{path}: features must be a real [N, F] matrix, got {features.dtype} {features.shape}.")
    features = features.astype(np.float32)
    if not np.isfinite(features).all():
        row = int(np.argwhere(~np.isfinite(features))[0, 0])
        raise ValueError(f"{path}: features holds NaN or infinite values (first in row {row}); fix the file.")
    if features.shape[0] < 1:
        raise ValueError(f"{path}: features has 0 rows; a graph needs at least one node.")
    return features


def _check_npz_labels(path: pathlib.Path, labels: np.ndarray, num_nodes: int) -> np.ndarray:
    """The labels as `[N] int64`, each a class id >= 0 or -1 (unknown)."""
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise ValueError(f"{path}: labels must be a 1-D integer array [N], got {labels.dtype} {labels.shape}.")
    if labels.shape[0] != num_nodes:
        raise ValueError(f"{path}: labels has {labels.shape[0]} entries but features has {num_nodes} rows; both "
                         f"must have one per node.")
    labels = labels.astype(np.int64)
    if labels.size and labels.min() < -1:
        raise ValueError(f"{path}: labels holds {int(labels.min())}; labels are class ids >= 0, or -1 for unknown.")
    return labels


def _check_npz_splits(path: pathlib.Path, arrays: dict[str, np.ndarray], num_nodes: int) -> dict[str, np.ndarray]:
    """`{"train_idx", "val_idx", "test_idx"}` as sorted int32 node indices: valid, disjoint, train not empty."""
    splits = {f: _npz_index(path, f, arrays[f], num_nodes) for f in ("train_idx", "val_idx", "test_idx")}
    if splits["train_idx"].size == 0:
        raise ValueError(f"{path}: train_idx is empty; the split needs at least one training node.")
    for a, b in (("train_idx", "val_idx"), ("train_idx", "test_idx"), ("val_idx", "test_idx")):
        both = np.intersect1d(splits[a], splits[b])
        if both.size:
            raise ValueError(f"{path}: {a} and {b} share {both.size} node(s) (first: {int(both[0])}); the splits "
                             f"must be disjoint.")
    return splits


def _npz_num_classes(path: pathlib.Path, labels: np.ndarray, declared: Optional[np.ndarray]) -> int:
    """The number of classes: `declared` (checked) or max(labels) + 1; every known label below it."""
    known = labels[labels >= 0]
    if declared is not None:
        if declared.ndim != 0 or declared.dtype.kind not in "iu" or int(declared) < 1:
            raise ValueError(f"{path}: num_classes must be a positive integer scalar, got {declared.dtype} "
                             f"{declared.shape} {declared.tolist()}.")
        num_classes = int(declared)
    else:
        num_classes = int(known.max()) + 1 if known.size else 0
    if known.size and known.max() >= num_classes:
        raise ValueError(f"{path}: labels holds class {int(known.max())} but num_classes is {num_classes}; fix "
                         f"num_classes or the labels.")
    return num_classes


def _check_npz_split_labels(path: pathlib.Path, labels: np.ndarray, splits: dict[str, np.ndarray]) -> None:
    """A ValueError if a node of a split has an unknown label (-1)."""
    for field, idx in splits.items():
        unknown = idx[labels[idx] < 0]
        if unknown.size:
            raise ValueError(f"{path}: labels missing (-1) for {unknown.size} node(s) of {field} (first: node "
                             f"{int(unknown[0])}); every node of a split needs a label. Fix labels or {field}.")


def _check_npz_edges(path: pathlib.Path, edges: np.ndarray) -> np.ndarray:
    """The edges as an integer `[M, 2]` array (an empty array of any numeric shape as `[0, 2]`)."""
    if edges.size == 0 and edges.dtype.kind in "iuf":
        edges = np.zeros((0, 2), np.int64)
    if edges.ndim != 2 or edges.shape[1] != 2 or edges.dtype.kind not in "iu":
        raise ValueError(f"{path}: edges must be integer node pairs [M, 2], got {edges.dtype} {edges.shape}.")
    return edges


def read_npz(path: Union[str, os.PathLike], *, normalize_features: bool = False, symmetric: bool = True,
             name: Optional[str] = None) -> GraphData:
    """A graph dataset from one ``.npz`` file in the format of the module docstring (see :func:`save_npz`).

    Args:
      path: the ``.npz`` file (read with ``allow_pickle=False``).
      normalize_features: divide each feature row by its sum (zero rows stay zero); default: as stored.
      symmetric: store every edge in both directions (default); False keeps the edges as directed.
      name: the ``GraphData.name``; default the file's stem.

    Raises:
      DataNotFoundError: the file does not exist; also a ValueError.
      ValueError: naming the file and the field: a missing field, a wrong shape or dtype, an edge or split index
        outside ``[0, N)``, labels missing (``-1``) or out of range for split nodes, overlapping splits.
    """
    path = pathlib.Path(path).expanduser()
    if not path.is_file():
        raise DataNotFoundError(f"graph file {path} does not exist; pass the path of an .npz holding "
                                f"{', '.join(_NPZ_FIELDS)} (istjax.data.graphs.save_npz writes one).")
    arrays, declared = _load_npz_arrays(path)
    features = _check_npz_features(path, arrays["features"])
    labels = _check_npz_labels(path, arrays["labels"], features.shape[0])
    splits = _check_npz_splits(path, arrays, features.shape[0])
    num_classes = _npz_num_classes(path, labels, declared)
    _check_npz_split_labels(path, labels, splits)
    edges = _check_npz_edges(path, arrays["edges"])
    features = _row_normalize(features) if normalize_features else features
    graph = from_edges(features, edges, symmetric=symmetric, where=f"{path}: edges")
    labels = np.where(labels >= 0, labels, 0).astype(np.int32)
    return GraphData(path.stem if name is None else name, graph, labels, splits["train_idx"], splits["val_idx"],
                     splits["test_idx"], num_classes)


def save_npz(path: Union[str, os.PathLike], data: GraphData) -> pathlib.Path:
    """Write ``data`` as an ``.npz`` that :func:`read_npz` reads back to the same graph, labels and split.

    The edges are written as the graph stores them (both directions); the features as they are (normalised or
    not).  Padded graphs (a False ``node_mask`` / ``edge_mask``) are refused: write the unpadded one.
    """
    graph = data.graph
    if not (np.all(np.asarray(graph.node_mask)) and np.all(np.asarray(graph.edge_mask))):
        raise ArgError("data", data.name, f"save_npz: {data.name!r} has padded nodes or edges (a False mask);",
                       "save the unpadded graph.")
    path = pathlib.Path(path).expanduser()
    with open(path, "wb") as f:  # a file object, so numpy does not append ".npz" to the name
        np.savez(f, features=np.asarray(graph.nodes, np.float32), labels=np.asarray(data.labels, np.int64),
                 edges=np.stack([np.asarray(graph.senders), np.asarray(graph.receivers)], axis=1).astype(np.int64),
                 train_idx=np.asarray(data.train_idx, np.int64), val_idx=np.asarray(data.val_idx, np.int64),
                 test_idx=np.asarray(data.test_idx, np.int64), num_classes=np.int64(data.num_classes))
    return path
