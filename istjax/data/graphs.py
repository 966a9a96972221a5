"""Graph datasets for node classification: Planetoid (Cora, Citeseer, Pubmed), ``.npz`` files and a generator.

Every reader returns a :class:`GraphData`: one :class:`~istjax.graph.graph.Graph` (undirected edges stored in both
directions, no self-loops, no duplicates; see `istjax.graph.graph.from_edges`), ``int32`` node labels and the
train / validation / test node indices of a transductive split.  :func:`load_graph` picks the reader by name.

Planetoid files
---------------
The format of Yang, Cohen and Salakhutdinov ("Revisiting semi-supervised learning with graph embeddings", ICML
2016), read as Kipf and Welling's GCN code reads it.  A dataset ``<name>`` is eight files in one folder::

    ind.<name>.x           # scipy CSR [n_train, F]: features of the labelled training nodes
    ind.<name>.y           # numpy [n_train, C] one-hot labels of those nodes
    ind.<name>.allx        # scipy CSR [n_all, F]: features of every non-test node (its first n_train rows are x)
    ind.<name>.ally        # numpy [n_all, C] one-hot labels of those nodes
    ind.<name>.tx          # scipy CSR [n_test, F]: features of the test nodes, in the order of test.index
    ind.<name>.ty          # numpy [n_test, C] their one-hot labels
    ind.<name>.graph       # dict (a defaultdict) node id -> list of neighbour ids
    ind.<name>.test.index  # text, one test node id per line (ids >= n_all)

Node ``i < n_all`` is row ``i`` of ``allx``/``ally``; node ``test.index[j]`` is row ``j`` of ``tx``/``ty``.  The
graph has ``N = max(test.index) + 1`` nodes.  Test ids need not be contiguous: Citeseer has 3,327 nodes but only
1,000 test rows for the 1,015 ids in ``[2312, 3327)``; its 15 missing ids are nodes of the graph file (each with
one or two edges) that have no feature or label row.  As in the GCN code they get all-zero features and an
all-zero label row (label 0 here), and belong to no split.  (Citeseer's isolated nodes are others: 48 nodes have
no edge once the self-loops are dropped.)  The standard split is Kipf's: train = nodes ``[0, n_train)`` (140 for
Cora, 120 for Citeseer, 60 for Pubmed), val = the next 500, test = the sorted test ids (1,000).  Features are
row-normalised (each row divided by its sum; zero rows stay zero) unless ``normalize_features=False``.  Loaded
sizes: Cora 2,708 nodes, 1,433 features, 7 classes, 10,556 directed edges (5,278 undirected; the often-quoted
5,429 includes duplicate links); Citeseer 3,327 nodes, 3,703
features, 6 classes, 9,104 directed edges (its graph file also lists 124 self-loops, dropped); Pubmed 19,717
nodes, 500 features, 3 classes.

The files are Python 2 pickles.  They are read with a *restricted* unpickler (:func:`read_planetoid_pickle`) that
admits only the globals these files need (numpy's array reconstruction, ``numpy.dtype``, scipy's CSR/CSC matrix
class names, ``collections.defaultdict``, ``list`` and ``set``, and ``_codecs.encode`` for files re-saved by
Python 3) and refuses every other global with a ValueError
naming the file: a pickle can run any function it names, and these files are downloaded.  Sparse matrices are not
rebuilt by scipy: a stand-in records their arrays, which are checked and densified here (so neither scipy's
version nor its code is involved).  :func:`fetch_planetoid` downloads the files where a machine is online and
checks each file's sha256 (:data:`PLANETOID_SHA256`).

``.npz`` files
--------------
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

Contextual stochastic block model
---------------------------------
:func:`csbm` generates a graph whose labels are balanced blocks, whose edges fall inside blocks with a chosen
frequency (``homophily`` = expected fraction of edges inside a block) and whose features are a class mean plus
standard normal noise.  It samples edge counts and then edges, never an N x N matrix: 100,000 nodes take
about a second.

Nothing here touches the network except :func:`fetch_planetoid`.
"""

from __future__ import annotations

import codecs
import collections
import hashlib
import math
import os
import pathlib
import pickle
import re
import urllib.error
import urllib.request
import warnings
import zipfile
from typing import Any, Mapping, NamedTuple, Optional, Union

import numpy as np

from istjax.core.streams import check_positive as _check_positive
from istjax.data.dataset import Dataset, _damaged_file
from istjax.data.images import DataNotFoundError
from istjax.graph.graph import Graph, from_edges

__all__ = [
    "GRAPH_DATASETS",
    "PLANETOID_FILES",
    "PLANETOID_NAMES",
    "PLANETOID_SHA256",
    "PLANETOID_URL",
    "GraphData",
    "csbm",
    "fetch_planetoid",
    "load_graph",
    "planetoid_dir",
    "read_npz",
    "read_planetoid",
    "read_planetoid_pickle",
    "save_npz",
]

PLANETOID_NAMES = ("cora", "citeseer", "pubmed")
"""The Planetoid datasets :func:`load_graph` knows by name."""

GRAPH_DATASETS = PLANETOID_NAMES + ("npz", "csbm")
"""Every name :func:`load_graph` accepts."""

PLANETOID_FILES = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")
"""The suffixes of a Planetoid dataset's eight files, ``ind.<name>.<suffix>``."""

PLANETOID_URL = "https://github.com/kimiyoung/planetoid/raw/master/data"
"""Where :func:`fetch_planetoid` downloads from by default: the data folder of the Planetoid repository."""

PLANETOID_SHA256: dict[str, dict[str, Optional[str]]] = {
    "cora": {
        "ind.cora.x": "23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab",
        "ind.cora.y": "94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1",
        "ind.cora.tx": "b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a",
        "ind.cora.ty": "41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad",
        "ind.cora.allx": "9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543",
        "ind.cora.ally": "2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71",
        "ind.cora.graph": "58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d",
        "ind.cora.test.index": "297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875",
    },
    "citeseer": {
        "ind.citeseer.x": "d20de19150741e555de0ed037195630fc194114ebc7fd72ced62810148aa22f6",
        "ind.citeseer.y": "8ba87e515d8e3ee3cf52f6d2c5b86aa73f11ecad825a808455209ec26cd54924",
        "ind.citeseer.tx": "539a8906a2da97628d212f2fdd668c109a8b3f0d36574b59e5d3fd5b5303da21",
        "ind.citeseer.ty": "55e5bd1ba1e733a04598753ad1a8d57957f4b8f89e74519f41f4f4938767e4ce",
        "ind.citeseer.allx": "2ac30345d95c9ec933a817ee0bdd6a5f077f8c184a20e696910192d534414668",
        "ind.citeseer.ally": "f704b2d986dde6c2669934de1f3ae5696a6cf9455c0f6b2646a2d135ea0a1c95",
        "ind.citeseer.graph": "d79a4ef9d3e7169aee8946145f6b7306e35bc79bffad26346cfb94e10e9912a7",
        "ind.citeseer.test.index": "2af990671580b6b2df5d158d1038f8292e30c9cd821b5453f399659b25b723d4",
    },
    "pubmed": {
        "ind.pubmed.x": "fbe9cb5c47200d1b7769a26e579be3b7130b556831f9d850e77c4c74f2599b33",
        "ind.pubmed.y": "e6c807633307a07ed659249006536a147c7999c797f11a2560752990181b41b3",
        "ind.pubmed.tx": "4eb5f5d0f30f26497eb0ac6ac9719d09c67e284f1ed0385c93f3ef27a671da3d",
        "ind.pubmed.ty": "ee2e0d4819d9fbcc403689c3bf2e49face401b605932f093bc58ab6461130fdd",
        "ind.pubmed.allx": None,
        "ind.pubmed.ally": "0c37bbe3b5014ec365e9d393cf4791925e5ed94fb194305d74f064a8d7b50f0e",
        "ind.pubmed.graph": "5b89f0036ca22909471f1e6558eb42fa06e0c730a577bde5b058b40638f81dc9",
        "ind.pubmed.test.index": "b101d421688bbaecbd82e8a18f1e282378d6830f3a37666f28ebc47f844341b5",
    },
}
"""sha256 of each published file, as served from :data:`PLANETOID_URL`: Cora's and Citeseer's computed from the
files (the GCN repository, tkipf/gcn, holds the same bytes), Pubmed's from the Planetoid repository's git objects.
``None``: no digest known (``ind.pubmed.allx``, a large file that copy lacked); such a file is downloaded
unverified, with a warning."""

_MAX_DENSE = 1 << 31
"""Most elements a feature or label matrix may densify to (8 GiB of float32): a guard against a file whose
header claims an absurd shape."""

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _how_to_get(name: str) -> str:
    files = ", ".join(f"ind.{name}.{s}" for s in PLANETOID_FILES)
    return (
        f"Where this machine is online, download them with "
        f"`istjax.data.graphs.fetch_planetoid({name!r}, data_dir)` (from {PLANETOID_URL}); otherwise copy the "
        f"eight files ({files}) from the Planetoid repository (kimiyoung/planetoid, folder data/) into a folder and "
        f"pass data_dir=<that folder>, or set ISTJAX_DATA_DIR so that $ISTJAX_DATA_DIR/planetoid holds them."
    )


# --------------------------------------------------------------------------
# The container
# --------------------------------------------------------------------------


class GraphData(NamedTuple):
    """One graph with node labels and a transductive train / val / test split.

    Fields:
      name: the dataset's name (``"cora"``, ``"csbm"``, the ``.npz`` file's stem, ...).
      graph: the :class:`~istjax.graph.graph.Graph`, features ``[N, F] float32``, every undirected edge stored in
        both directions (unless read with ``read_npz(..., symmetric=False)``), no padding.
      labels: ``[N] int32`` in ``[0, num_classes)``; nodes without a known label (outside every split) hold 0.
      train_idx: ``[n_train] int32`` node indices, sorted.
      val_idx: ``[n_val] int32`` node indices, sorted, disjoint from train.
      test_idx: ``[n_test] int32`` node indices, sorted, disjoint from train and val.
      num_classes: number of classes.
    """

    name: str
    graph: Graph
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    num_classes: int

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def num_features(self) -> int:
        return int(self.graph.nodes.shape[1])

    def __repr__(self) -> str:
        return (
            f"GraphData(name={self.name!r}, nodes={self.num_nodes}, features={self.num_features}, "
            f"edges={self.graph.num_edges}, classes={self.num_classes}, split={len(self.train_idx)}/"
            f"{len(self.val_idx)}/{len(self.test_idx)})"
        )


def _row_normalize(features: np.ndarray) -> np.ndarray:
    """Each row divided by its sum (summed in float64), as GCN preprocesses features; rows summing to 0 stay as
    they are."""
    sums = features.sum(axis=1, dtype=np.float64)
    scale = np.divide(1.0, sums, out=np.zeros_like(sums), where=sums != 0)
    scale[sums == 0] = 1.0
    return features.astype(np.float32) * scale.astype(np.float32)[:, None]


# --------------------------------------------------------------------------
# Restricted unpickling of the Planetoid files
# --------------------------------------------------------------------------


class _PickledSparse:
    """Stands in for a pickled scipy sparse matrix: records the pickled state, runs none of scipy's code."""

    fmt = "csr"

    def __setstate__(self, state: Any) -> None:
        self.state = state


class _PickledCSR(_PickledSparse):
    fmt = "csr"


class _PickledCSC(_PickledSparse):
    fmt = "csc"


def _allowed_globals() -> dict[tuple[str, str], Any]:
    reconstruct = np.zeros(0).__reduce__()[0]  # numpy's array reconstruction, wherever this numpy keeps it
    scalar = np.float64(0).__reduce__()[0]
    table: dict[tuple[str, str], Any] = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        table[(module, "_reconstruct")] = reconstruct
        table[(module, "scalar")] = scalar
    for module in ("scipy.sparse", "scipy.sparse.csr", "scipy.sparse._csr"):
        table[(module, "csr_matrix")] = _PickledCSR
    for module in ("scipy.sparse", "scipy.sparse.csc", "scipy.sparse._csc"):
        table[(module, "csc_matrix")] = _PickledCSC
    # Python 3 writes bytes into protocol-2 pickles as `_codecs.encode(text, "latin1")` (a re-saved file); a pure
    # conversion, it runs no code the pickle chooses.
    table[("_codecs", "encode")] = codecs.encode
    table[("collections", "defaultdict")] = collections.defaultdict
    for module in ("__builtin__", "builtins"):  # Python 2 pickles name builtins `__builtin__`
        table[(module, "list")] = list
        table[(module, "set")] = set
    return table


_ALLOWED_GLOBALS = _allowed_globals()


class _RefusedGlobal(ValueError):
    """A pickle named a global outside `_ALLOWED_GLOBALS` (or used persistent ids)."""


class _RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals in `_ALLOWED_GLOBALS`; any other raises ValueError."""

    def __init__(self, file: Any, where: str) -> None:
        super().__init__(file, encoding="latin1")
        self._where = where

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise _RefusedGlobal(
                f"{self._where}: the pickle refers to the global {module}.{name}, which is not allowed: Planetoid "
                f"files need only numpy arrays, scipy sparse matrices, defaultdict and list. The file is not a "
                f"Planetoid file, or was tampered with; it was not loaded. Download it again (fetch_planetoid "
                f"checks its sha256)."
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise _RefusedGlobal(f"{self._where}: the pickle uses persistent ids, which Planetoid files never do.")


def read_planetoid_pickle(path: Union[str, os.PathLike]) -> Any:
    """Unpickle one Planetoid file with the restricted unpickler (``encoding="latin1"``, for Python 2 pickles).

    Sparse matrices come back as stand-ins carrying their pickled state (see :func:`read_planetoid`, which checks
    and densifies them); arrays, dicts and lists as themselves.

    Raises:
      ValueError: naming the file, for a global outside the allowed few (e.g. ``os.system``) or a file that is
        not a complete pickle.
    """
    path = pathlib.Path(path)
    with open(path, "rb") as f:
        try:
            return _RestrictedUnpickler(f, str(path)).load()
        except _RefusedGlobal:
            raise
        except Exception as e:  # a truncated or malformed pickle fails in many ways
            raise _damaged_file(path, "readable pickle", e, "Download it again (fetch_planetoid checks its sha256) "
                                "or copy it again.") from None


def _dense_matrix(obj: Any, path: pathlib.Path, what: str) -> np.ndarray:
    """A `[rows, cols]` float32 array from a pickled sparse matrix stand-in or a numeric ndarray, checked."""
    fix = "The file is corrupt or not a Planetoid file; download or copy it again."
    if isinstance(obj, np.ndarray):
        if obj.ndim != 2 or obj.dtype.kind not in "biuf":
            raise ValueError(f"{path}: {what} must be a 2-D numeric matrix, got {obj.dtype} {obj.shape}. {fix}")
        out = obj.astype(np.float32)
    elif isinstance(obj, _PickledSparse):
        state = obj.state if isinstance(getattr(obj, "state", None), dict) else {}
        shape = state.get("_shape", state.get("shape"))
        data, indices, indptr = (state.get(k) for k in ("data", "indices", "indptr"))
        if not (isinstance(shape, tuple) and len(shape) == 2
                and all(isinstance(s, (int, np.integer)) and s >= 0 for s in shape)
                and all(isinstance(a, np.ndarray) and a.ndim == 1 for a in (data, indices, indptr))
                and indices.dtype.kind in "iu" and indptr.dtype.kind in "iu" and data.dtype.kind in "biuf"):
            raise ValueError(f"{path}: {what} is a sparse {obj.fmt.upper()} matrix with an unreadable state "
                             f"(keys {sorted(state)}). {fix}")
        rows, cols = int(shape[0]), int(shape[1])
        major, minor = (rows, cols) if obj.fmt == "csr" else (cols, rows)
        ptr = indptr.astype(np.int64)
        if (ptr.shape[0] != major + 1 or ptr[0] != 0 or np.any(np.diff(ptr) < 0) or ptr[-1] != data.shape[0]
                or indices.shape[0] != data.shape[0]):
            raise ValueError(f"{path}: {what} ({rows} x {cols} {obj.fmt.upper()}) has inconsistent index pointers "
                             f"({ptr.shape[0]} pointers, {indices.shape[0]} indices, {data.shape[0]} values). {fix}")
        if indices.size and (indices.min() < 0 or indices.max() >= minor):
            raise ValueError(f"{path}: {what} ({rows} x {cols}) has an index outside [0, {minor}). {fix}")
        if rows * cols > _MAX_DENSE:
            raise ValueError(f"{path}: {what} is {rows} x {cols}, too large to hold dense ({rows * cols} > "
                             f"{_MAX_DENSE} elements); this reader is meant for Cora, Citeseer and Pubmed.")
        out = np.zeros((rows, cols), np.float32)
        at_major = np.repeat(np.arange(major), np.diff(ptr))
        at = (at_major, indices) if obj.fmt == "csr" else (indices, at_major)
        np.add.at(out, at, data.astype(np.float32))  # duplicate entries sum, as in scipy
    else:
        raise ValueError(f"{path}: {what} must be a scipy sparse matrix or a numpy array, got "
                         f"{type(obj).__name__}. {fix}")
    if not np.isfinite(out).all():
        raise ValueError(f"{path}: {what} holds NaN or infinite values. {fix}")
    return out


def _read_test_index(path: pathlib.Path) -> np.ndarray:
    ids = []
    for number, line in enumerate(path.read_text(encoding="ascii", errors="replace").splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        try:
            ids.append(int(line))
        except ValueError:
            raise ValueError(f"{path}: line {number} is {line[:40]!r}, not a node id; the file must hold one "
                             f"integer per line. Download or copy it again.") from None
    out = np.asarray(ids, np.int64)
    if out.size == 0:
        raise ValueError(f"{path}: holds no test node ids. Download or copy it again.")
    if out.min() < 0:
        raise ValueError(f"{path}: node id {int(out.min())} is negative. Download or copy it again.")
    if np.unique(out).size != out.size:
        raise ValueError(f"{path}: lists {out.size - np.unique(out).size} node id(s) twice. Download or copy it "
                         f"again.")
    return out


def _graph_edges(adjacency: Any, path: pathlib.Path) -> np.ndarray:
    """`[M, 2]` int64 (node, neighbour) pairs from a dict of neighbour lists."""
    if not isinstance(adjacency, dict):
        raise ValueError(f"{path}: must hold a dict node -> neighbour list, got {type(adjacency).__name__}. "
                         f"Download or copy it again.")
    keys = np.asarray(list(adjacency.keys()))
    lists = [np.asarray(list(v) if isinstance(v, (list, set, tuple)) else v) for v in adjacency.values()]
    if keys.size and keys.dtype.kind not in "iu":
        raise ValueError(f"{path}: node ids must be integers, found {keys.dtype}. Download or copy it again.")
    for key, nbrs in zip(keys.tolist(), lists):
        if nbrs.ndim != 1 or (nbrs.size and nbrs.dtype.kind not in "iu"):
            raise ValueError(f"{path}: the neighbours of node {key} must be a list of integer ids, got "
                             f"{nbrs.dtype} {nbrs.shape}. Download or copy it again.")
    if not lists:
        return np.zeros((0, 2), np.int64)
    senders = np.repeat(keys.astype(np.int64), [n.size for n in lists])
    receivers = np.concatenate([n.astype(np.int64) for n in lists])
    return np.stack([senders, receivers], axis=1)


def _one_hot_labels(onehot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`(labels [N] int32, has_label [N] bool)`: the argmax of each row, and whether the row is not all zero."""
    has_label = (onehot != 0).any(axis=1)
    labels = np.where(has_label, onehot.argmax(axis=1), 0).astype(np.int32)
    return labels, has_label


def _planetoid_paths(name: str, directory: pathlib.Path) -> dict[str, pathlib.Path]:
    """The eight file paths of dataset `name` in `directory` by suffix; a DataNotFoundError if any is missing."""
    paths = {s: directory / f"ind.{name}.{s}" for s in PLANETOID_FILES}
    missing = [p.name for p in paths.values() if not p.is_file()]
    if missing:
        where = f"folder {directory} does not exist" if not directory.is_dir() else f"{directory} lacks {missing}"
        raise DataNotFoundError(f"Planetoid dataset {name!r}: {where}. {_how_to_get(name)}")
    return paths


def _planetoid_arrays(paths: dict[str, pathlib.Path]) -> tuple[Any, dict[str, np.ndarray], np.ndarray]:
    """`(adjacency dict, {suffix: dense matrix} of the six matrices, test ids)` read from the eight files."""
    raw = {s: read_planetoid_pickle(paths[s]) for s in PLANETOID_FILES if s != "test.index"}
    mats = {s: _dense_matrix(raw[s], paths[s], "the feature matrix") for s in ("x", "tx", "allx")}
    mats.update({s: _dense_matrix(raw[s], paths[s], "the one-hot label matrix") for s in ("y", "ty", "ally")})
    return raw["graph"], mats, _read_test_index(paths["test.index"])


def _check_planetoid_matrices(directory: pathlib.Path, paths: dict[str, pathlib.Path],
                              mats: dict[str, np.ndarray], fix: str) -> None:
    """Features and labels agree row by row, the three feature (and label) matrices on their width."""
    p = {s: q.name for s, q in paths.items()}
    for feats, labs in (("x", "y"), ("tx", "ty"), ("allx", "ally")):
        if mats[feats].shape[0] != mats[labs].shape[0]:
            raise ValueError(f"{directory}: {p[feats]} has {mats[feats].shape[0]} rows but {p[labs]} has "
                             f"{mats[labs].shape[0]}; features and labels must describe the same nodes. {fix}")
    for group in (("x", "tx", "allx"), ("y", "ty", "ally")):
        widths = {p[s]: mats[s].shape[1] for s in group}
        if len(set(widths.values())) != 1:
            what = "features" if group[0] == "x" else "classes"
            raise ValueError(f"{directory}: the files disagree on the number of {what}: {widths}. {fix}")
    if mats["ally"].shape[1] < 1:
        raise ValueError(f"{paths['ally']}: the label matrix has 0 columns (classes). {fix}")


def _check_planetoid_layout(directory: pathlib.Path, paths: dict[str, pathlib.Path], mats: dict[str, np.ndarray],
                            test_ids: np.ndarray, num_val: int, fix: str) -> None:
    """The rows fit the Planetoid layout: x, y lead allx, ally, test ids follow them, the split fits."""
    p = {s: q.name for s, q in paths.items()}
    n_train, n_all, n_test = mats["y"].shape[0], mats["allx"].shape[0], mats["tx"].shape[0]
    if test_ids.size != n_test:
        raise ValueError(f"{paths['test.index']}: lists {test_ids.size} test nodes but {p['tx']} has {n_test} "
                         f"rows; row j of tx is the node on line j. {fix}")
    if n_train < 1:
        raise ValueError(f"{paths['y']}: has 0 rows, so the split has no training nodes. {fix}")
    if n_train + num_val > n_all:
        raise ValueError(f"{directory}: the split needs {n_train} train + {num_val} val nodes among the {n_all} "
                         f"rows of {p['allx']}; pass a smaller num_val (at most {n_all - n_train}).")
    # x, y are the first len(y) rows of allx, ally: the training labels the split uses come from ally.
    if (not np.array_equal(mats["y"], mats["ally"][:n_train])
            or not np.array_equal(mats["x"], mats["allx"][:n_train])):
        raise ValueError(f"{directory}: {p['x']} / {p['y']} differ from the first {n_train} rows of {p['allx']} "
                         f"/ {p['ally']}; in the Planetoid format they are the same nodes. {fix}")
    if test_ids.min() < n_all:
        raise ValueError(f"{paths['test.index']}: test node {int(test_ids.min())} is below {n_all}, a row of "
                         f"{p['allx']} (non-test nodes come first, test ids after them). {fix}")


def _planetoid_nodes(paths: dict[str, pathlib.Path], mats: dict[str, np.ndarray],
                     test_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(features [N, F], labels [N], has_label [N])` with every node at its id (missing test ids all zero)."""
    # Node i < n_all is row i of allx; node test_ids[j] is row j of tx; ids in between missing from test.index
    # (Citeseer's isolated nodes) get zero features and no label, as in the GCN code.
    n_all, num_features, num_classes = mats["allx"].shape[0], mats["allx"].shape[1], mats["ally"].shape[1]
    num_nodes = int(test_ids.max()) + 1
    if num_nodes * max(num_features, num_classes) > _MAX_DENSE:
        raise ValueError(f"{paths['test.index']}: node id {num_nodes - 1} implies {num_nodes} nodes, too many to "
                         f"hold dense features; this reader is meant for Cora, Citeseer and Pubmed.")
    features = np.zeros((num_nodes, num_features), np.float32)
    features[:n_all] = mats["allx"]
    features[test_ids] = mats["tx"]
    onehot = np.zeros((num_nodes, num_classes), np.float32)
    onehot[:n_all] = mats["ally"]
    onehot[test_ids] = mats["ty"]
    labels, has_label = _one_hot_labels(onehot)
    return features, labels, has_label


def _planetoid_graph(adjacency: Any, paths: dict[str, pathlib.Path], features: np.ndarray,
                     normalize_features: bool, fix: str) -> Graph:
    """The Graph of the adjacency dict over `features` (row-normalised if asked), checked against the node count."""
    edges = _graph_edges(adjacency, paths["graph"])
    num_nodes = features.shape[0]
    if len(adjacency) > num_nodes:
        raise ValueError(f"{paths['graph']}: has {len(adjacency)} nodes but the features cover {num_nodes} "
                         f"(rows of {paths['allx'].name} and ids in {paths['test.index'].name}). {fix}")
    return from_edges(_row_normalize(features) if normalize_features else features, edges,
                      symmetric=True, where=str(paths["graph"]))


def _planetoid_split(directory: pathlib.Path, paths: dict[str, pathlib.Path], n_train: int, num_val: int,
                     test_ids: np.ndarray, has_label: np.ndarray, fix: str) -> dict[str, np.ndarray]:
    """Kipf's standard split `{"train", "val", "test"}`, checked to hold only labelled nodes."""
    splits = {
        "train": np.arange(n_train, dtype=np.int32),
        "val": np.arange(n_train, n_train + num_val, dtype=np.int32),
        "test": np.sort(test_ids).astype(np.int32),
    }
    for split, idx in splits.items():
        unlabelled = idx[~has_label[idx]]
        if unlabelled.size:
            source = paths["ty"].name if split == "test" else paths["ally"].name
            raise ValueError(
                f"{directory / source}: labels missing for {unlabelled.size} {split} node(s) (first: node "
                f"{int(unlabelled[0])}, an all-zero one-hot row); every node of the standard split needs a label. "
                f"{fix}")
    return splits


def read_planetoid(name: str, data_dir: Union[str, os.PathLike], *, normalize_features: bool = True,
                   num_val: int = 500) -> GraphData:
    """A Planetoid dataset (``ind.<name>.*`` in ``data_dir``) with the standard split, as the GCN code builds it.

    Args:
      name: the file prefix, e.g. ``"cora"``, ``"citeseer"``, ``"pubmed"``.
      data_dir: the folder holding the eight files (:data:`PLANETOID_FILES`).
      normalize_features: divide each feature row by its sum (GCN's preprocessing; zero rows stay zero).
      num_val: validation nodes, those right after the training nodes (500 in the standard split).

    Returns:
      ``GraphData`` with train = nodes ``[0, len(y))``, val = the next ``num_val``, test = the sorted test ids.

    Raises:
      DataNotFoundError: the folder or a file is missing (says how to get them); also a ValueError.
      ValueError: a file that is unsafe, corrupt, or inconsistent with the others (naming it, the values, the fix).
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"name={name!r} must be a Planetoid dataset name such as 'cora' (letters, digits, '.', "
                         f"'_', '-').")
    num_val = _check_positive("num_val", num_val, 0)
    directory = pathlib.Path(data_dir).expanduser()
    paths = _planetoid_paths(name, directory)
    adjacency, mats, test_ids = _planetoid_arrays(paths)
    fix = f"The files in {directory} do not belong together: download or copy all eight again."
    _check_planetoid_matrices(directory, paths, mats, fix)
    _check_planetoid_layout(directory, paths, mats, test_ids, num_val, fix)
    features, labels, has_label = _planetoid_nodes(paths, mats, test_ids)
    graph = _planetoid_graph(adjacency, paths, features, normalize_features, fix)
    splits = _planetoid_split(directory, paths, mats["y"].shape[0], num_val, test_ids, has_label, fix)
    return GraphData(name, graph, labels, splits["train"], splits["val"], splits["test"], int(mats["ally"].shape[1]))


# --------------------------------------------------------------------------
# Downloading Planetoid files
# --------------------------------------------------------------------------

_USE_TABLE = object()


def _sha256_file(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _checksum_table(name: str, checksums: Any) -> Optional[Mapping]:
    """The `{file name or suffix: sha256}` table `fetch_planetoid` checks against (None: no checks), validated."""
    table = PLANETOID_SHA256.get(name) if checksums is _USE_TABLE else checksums
    if table is not None and not isinstance(table, Mapping):
        raise ValueError(f"checksums must be a dict {{file name: sha256 hex}} or None, got {type(table).__name__}.")
    return table


def _expected_sha256(table: Optional[Mapping], fname: str, suffix: str) -> Optional[str]:
    """The lower-case sha256 the table gives `fname` (looked up by name, then suffix), or None if none."""
    expected = None if table is None else table.get(fname, table.get(suffix))
    return expected.lower() if isinstance(expected, str) else None


def _check_present(target: pathlib.Path, expected: Optional[str]) -> None:
    """A ValueError if the file already at `target` has a sha256 other than `expected` (None: no check)."""
    if expected is None:
        return
    actual = _sha256_file(target)
    if actual != expected:
        raise ValueError(f"{target}: already present with sha256 {actual}, expected {expected}; the file is "
                         f"corrupt or another version. Delete it or pass overwrite=True to download it again.")


def _stream_download(url: str, partial: pathlib.Path, timeout: float, name: str) -> str:
    """Write `url` to `partial`, returning its sha256; a ConnectionError (and no `partial`) if that fails."""
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(partial, "wb") as out:
            for chunk in iter(lambda: response.read(1 << 16), b""):
                digest.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError) as e:
        partial.unlink(missing_ok=True)
        raise ConnectionError(
            f"could not download {url} ({type(e).__name__}: {e}). Is this machine online and the URL right? "
            f"Otherwise copy the files by hand: {_how_to_get(name)}") from e
    return digest.hexdigest()


def _download_one(name: str, url: str, target: pathlib.Path, expected: Optional[str], timeout: float) -> None:
    """Download `url` to `target` via `<target>.part`, renamed only once its sha256 matches `expected`."""
    fname = target.name
    partial = target.parent / (fname + ".part")
    actual = _stream_download(url, partial, timeout, name)
    if expected is None:
        warnings.warn(f"{fname}: no sha256 known, downloaded from {url} without a check (sha256 {actual}).",
                      stacklevel=3)  # attributed to fetch_planetoid's caller
    elif actual != expected:
        partial.unlink(missing_ok=True)
        raise ValueError(
            f"{fname}: downloaded from {url} with sha256 {actual}, expected {expected}; the download is corrupt "
            f"or the server holds another version. The file was deleted; try again, or pass another "
            f"base_url.")
    os.replace(partial, target)


def fetch_planetoid(
    name: str,
    data_dir: Union[str, os.PathLike],
    *,
    base_url: str = PLANETOID_URL,
    checksums: Any = _USE_TABLE,
    overwrite: bool = False,
    timeout: float = 60.0,
) -> pathlib.Path:
    """Download the eight files of a Planetoid dataset into ``data_dir``, checking each file's sha256.

    Only for a machine that is online; uses :mod:`urllib` only.  Each file is written to ``<file>.part`` and
    renamed once its digest matches, so a failed download leaves no file that looks complete.  A file already in
    ``data_dir`` is kept if its digest matches (or if no digest is known) and not downloaded again.

    Args:
      name: the dataset, e.g. ``"cora"``, ``"citeseer"``, ``"pubmed"``.
      data_dir: the folder to write to (created if missing); pass it to :func:`read_planetoid` /
        :func:`load_graph` afterwards.
      base_url: the folder URL holding ``ind.<name>.*`` (default :data:`PLANETOID_URL`).
      checksums: ``{file name (or suffix): sha256 hex or None}``; default ``PLANETOID_SHA256.get(name)``.
        ``None`` (or a file's entry ``None`` or absent) means no check, with a warning.
      overwrite: download even the files already present.
      timeout: seconds to wait for the server, per request.

    Returns:
      ``data_dir`` as a path.

    Raises:
      ValueError: a downloaded (or present) file's digest differs from the table, naming the file and both
        digests; a downloaded file is deleted first.
      ConnectionError: the server could not be reached or answered with an error (e.g. 404).
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"name={name!r} must be a Planetoid dataset name such as 'cora'.")
    if not isinstance(base_url, str) or not base_url:
        raise ValueError(f"base_url={base_url!r} must be a URL string such as {PLANETOID_URL!r}.")
    table = _checksum_table(name, checksums)
    directory = pathlib.Path(data_dir).expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    for suffix in PLANETOID_FILES:
        fname = f"ind.{name}.{suffix}"
        expected = _expected_sha256(table, fname, suffix)
        target = directory / fname
        if target.is_file() and not overwrite:
            _check_present(target, expected)
            continue
        _download_one(name, f"{base_url.rstrip('/')}/{fname}", target, expected, timeout)
    return directory


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
        raise ValueError(f"save_npz: {data.name!r} has padded nodes or edges (a False mask); save the unpadded "
                         f"graph.")
    path = pathlib.Path(path).expanduser()
    with open(path, "wb") as f:  # a file object, so numpy does not append ".npz" to the name
        np.savez(f, features=np.asarray(graph.nodes, np.float32), labels=np.asarray(data.labels, np.int64),
                 edges=np.stack([np.asarray(graph.senders), np.asarray(graph.receivers)], axis=1).astype(np.int64),
                 train_idx=np.asarray(data.train_idx, np.int64), val_idx=np.asarray(data.val_idx, np.int64),
                 test_idx=np.asarray(data.test_idx, np.int64), num_classes=np.int64(data.num_classes))
    return path


# --------------------------------------------------------------------------
# Contextual stochastic block model
# --------------------------------------------------------------------------


def _sample_pairs(rng: np.random.Generator, target: int, draw: Any) -> np.ndarray:
    """`target` distinct int64 pair keys: repeatedly `draw(k)` candidates, deduplicate, keep a random `target`."""
    keys = np.zeros(0, np.int64)
    while keys.size < target:
        need = target - keys.size
        keys = np.unique(np.concatenate([keys, draw(need + need // 16 + 16)]))
    if keys.size > target:
        keys = np.sort(rng.choice(keys, size=target, replace=False))
    return keys


def _check_csbm_args(num_nodes: int, num_classes: int, num_features: int, avg_degree: float, homophily: float,
                     snr: float, seed: int, train_per_class: int, num_val: int,
                     num_test: int) -> tuple[int, int, int, int, int, int, int]:
    """`(n, c, f, train_per_class, num_val, num_test, seed)` as checked ints; a ValueError naming a bad argument."""
    n = _check_positive("num_nodes", num_nodes, 2)
    c = _check_positive("num_classes", num_classes, 2)
    f = _check_positive("num_features", num_features, 1)
    train_per_class = _check_positive("train_per_class", train_per_class, 1)
    num_val = _check_positive("num_val", num_val, 0)
    num_test = _check_positive("num_test", num_test, 0)
    seed = _check_positive("seed", seed, 0)
    for field, value, low, high in (("avg_degree", avg_degree, 0.0, float(n - 1)), ("homophily", homophily, 0.0, 1.0),
                                    ("snr", snr, 0.0, math.inf)):
        if not isinstance(value, (int, float, np.integer, np.floating)) or not low <= float(value) <= high:
            raise ValueError(f"{field}={value!r} must be a number in [{low}, {high}].")
    if c > n:
        raise ValueError(f"num_classes={c} is more than num_nodes={n}; each block needs nodes.")
    if c * train_per_class + num_val + num_test > n:
        raise ValueError(f"the split needs {c} x {train_per_class} train + {num_val} val + {num_test} test = "
                         f"{c * train_per_class + num_val + num_test} nodes, more than num_nodes={n}; pass fewer.")
    if train_per_class > n // c:
        raise ValueError(f"train_per_class={train_per_class} is more than the smallest block ({n // c} nodes).")
    return n, c, f, train_per_class, num_val, num_test, seed


def _csbm_edge_counts(rng: np.random.Generator, n: int, p_in_pairs: int, avg_degree: float,
                      homophily: float) -> tuple[int, int]:
    """`(m_in, m_out)`: edge counts inside / across blocks, drawn from their binomials (two draws from `rng`)."""
    p_out_pairs = n * (n - 1) // 2 - p_in_pairs
    m = n * float(avg_degree) / 2.0
    p_in = float(homophily) * m / p_in_pairs if p_in_pairs else 0.0
    p_out = (1.0 - float(homophily)) * m / p_out_pairs
    if p_in > 0.5 or p_out > 0.5 or (homophily > 0 and p_in_pairs == 0):
        raise ValueError(f"avg_degree={avg_degree} with homophily={homophily} needs edge probabilities p_in={p_in:.3g}"
                         f", p_out={p_out:.3g}; this generator is for sparse graphs (both <= 0.5): lower avg_degree, "
                         f"move homophily toward 1/num_classes, or add nodes.")
    m_in = int(rng.binomial(p_in_pairs, p_in)) if p_in > 0 else 0
    m_out = int(rng.binomial(p_out_pairs, p_out)) if p_out > 0 else 0
    return m_in, m_out


def _csbm_edges(rng: np.random.Generator, labels: np.ndarray, c: int, avg_degree: float,
                homophily: float) -> np.ndarray:
    """`[M, 2]` int64 distinct undirected edges (u < v) of the block model over `labels`."""
    n = labels.shape[0]
    members = np.argsort(labels, kind="stable")  # nodes grouped by block
    sizes = np.bincount(labels, minlength=c).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    pairs_in_block = sizes * (sizes - 1) // 2
    p_in_pairs = int(pairs_in_block.sum())
    m_in, m_out = _csbm_edge_counts(rng, n, p_in_pairs, avg_degree, homophily)

    def key(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The int64 key of each undirected pair."""
        return np.minimum(u, v) * n + np.maximum(u, v)

    def draw_in(k: int) -> np.ndarray:
        """`k` pair keys uniform over the pairs inside blocks."""
        block = rng.choice(c, size=k, p=pairs_in_block / p_in_pairs)
        size = sizes[block]
        i = rng.integers(0, size)
        j = (i + rng.integers(1, size)) % size  # a different member of the same block
        return key(members[starts[block] + i], members[starts[block] + j])

    def draw_out(k: int) -> np.ndarray:
        """Pair keys uniform over the pairs across blocks, by rejection among `k` and a few more candidates."""
        u, v = rng.integers(0, n, size=(2, k + k // max(c - 1, 1)))
        keep = labels[u] != labels[v]
        return key(u[keep], v[keep])

    keys = np.concatenate([_sample_pairs(rng, m_in, draw_in), _sample_pairs(rng, m_out, draw_out)])
    return np.stack([keys // n, keys % n], axis=1)


def _csbm_features(rng: np.random.Generator, labels: np.ndarray, c: int, f: int, snr: float) -> np.ndarray:
    """`[N, f] float32` features: each node's class mean (`snr` times a random unit vector) plus N(0, 1) noise."""
    directions = rng.standard_normal((c, f))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    means = (float(snr) * directions).astype(np.float32)
    features = rng.standard_normal((labels.shape[0], f), dtype=np.float32)
    features += means[labels]
    return features


def _csbm_split(rng: np.random.Generator, labels: np.ndarray, c: int, train_per_class: int, num_val: int,
                num_test: int) -> list[np.ndarray]:
    """`[train, val, test]` sorted int32 node indices: `train_per_class` random nodes a class, then random others."""
    order = rng.permutation(labels.shape[0])
    by_class = labels[order]
    train = np.concatenate([order[by_class == k][:train_per_class] for k in range(c)])
    rest = order[~np.isin(order, train)]
    return [np.sort(a).astype(np.int32) for a in (train, rest[:num_val], rest[num_val:num_val + num_test])]


def csbm(
    num_nodes: int = 10_000,
    num_classes: int = 5,
    num_features: int = 64,
    avg_degree: float = 10.0,
    homophily: float = 0.8,
    snr: float = 1.0,
    seed: int = 0,
    *,
    train_per_class: int = 20,
    num_val: int = 500,
    num_test: int = 1000,
) -> GraphData:
    """A contextual stochastic block model: blocks as labels, homophilous edges, Gaussian features.

    Labels are ``num_classes`` balanced blocks (sizes differ by at most one), assigned to nodes in a random
    order.  Each pair of nodes in the same block is an edge with probability ``p_in``, each pair in different
    blocks with ``p_out``, chosen so that the expected degree is ``avg_degree`` and the expected fraction of edges
    inside blocks is ``homophily``: ``p_in = homophily * M / P_in`` and ``p_out = (1 - homophily) * M / P_out``
    with ``M = N * avg_degree / 2`` and ``P_in``, ``P_out`` the numbers of pairs inside / across blocks.  So
    ``homophily = 1 / num_classes`` is an Erdos-Renyi graph, larger is homophilous, smaller heterophilous.  The
    edge counts are drawn from their binomials and the edges uniformly among the pairs, so the cost is linear in
    the number of edges (never an N x N matrix).  Features: class ``c`` has mean ``snr * u_c``, ``u_c`` a random
    unit vector in ``R^num_features``; a node's features are its class mean plus standard normal noise.

    The split: ``train_per_class`` random nodes of each class, then ``num_val`` and ``num_test`` random nodes of
    the rest.  The same arguments (``seed`` included) give the same dataset.

    Raises:
      ValueError: an argument out of range, naming it: too few nodes for the split, ``avg_degree`` or
        ``homophily`` that would need an edge probability above 1/2.
    """
    n, c, f, train_per_class, num_val, num_test, seed = _check_csbm_args(
        num_nodes, num_classes, num_features, avg_degree, homophily, snr, seed, train_per_class, num_val, num_test)
    rng = np.random.default_rng(seed)  # one stream, drawn in this order: labels, edges, features, split
    labels = rng.permutation(np.arange(n) % c).astype(np.int32)
    edges = _csbm_edges(rng, labels, c, avg_degree, homophily)
    features = _csbm_features(rng, labels, c, f, snr)
    splits = _csbm_split(rng, labels, c, train_per_class, num_val, num_test)
    graph = from_edges(features, edges, symmetric=True, where="csbm")
    return GraphData("csbm", graph, labels, *splits, num_classes=c)


# --------------------------------------------------------------------------
# By name
# --------------------------------------------------------------------------


def planetoid_dir(data_dir: Optional[Union[str, os.PathLike]] = None, name: str = "cora") -> pathlib.Path:
    """The folder :func:`load_graph` reads Planetoid files from: ``data_dir`` if given, else
    ``$ISTJAX_DATA_DIR/planetoid``; with neither, a DataNotFoundError saying how to get the files."""
    if data_dir is not None:
        if not isinstance(data_dir, (str, os.PathLike)) or not str(data_dir):
            raise ValueError(f"data_dir={data_dir!r} must be a folder path (a non-empty str) or None.")
        return pathlib.Path(data_dir).expanduser()
    env = os.environ.get("ISTJAX_DATA_DIR")
    if env:
        return pathlib.Path(env).expanduser() / "planetoid"
    raise DataNotFoundError(f"Planetoid dataset {name!r}: no folder given; pass data_dir=<folder holding "
                            f"ind.{name}.*> or set ISTJAX_DATA_DIR (files in $ISTJAX_DATA_DIR/planetoid). "
                            f"{_how_to_get(name)}")


def load_graph(name: str, data_dir: Optional[Union[str, os.PathLike]] = None, *,
               path: Optional[Union[str, os.PathLike]] = None, **kwargs: Any) -> GraphData:
    """A node-classification graph dataset by name.

    Args:
      name: ``"cora"``, ``"citeseer"``, ``"pubmed"`` (Planetoid files, standard split), ``"npz"`` (a file in
        the :func:`read_npz` format) or ``"csbm"`` (generated by :func:`csbm`).
      data_dir: Planetoid only: the folder holding ``ind.<name>.*``; default ``$ISTJAX_DATA_DIR/planetoid``.
      path: ``"npz"`` only: the file.
      **kwargs: passed on: to :func:`read_planetoid` (``normalize_features``, ``num_val``), :func:`read_npz`
        (``normalize_features``, ``symmetric``) or :func:`csbm` (all its arguments).

    Raises:
      DataNotFoundError: Planetoid files or the npz file are missing (says how to get them); also a ValueError.
      ValueError: an unknown name, a misplaced argument, or a bad file (see the readers).
    """
    key = name.lower() if isinstance(name, str) else name
    if key not in GRAPH_DATASETS:
        raise ValueError(f"unknown graph dataset {name!r}; choose one of {list(GRAPH_DATASETS)}.")
    if key != "npz" and path is not None:
        raise ValueError(f"path= is for name='npz'; {key!r} takes "
                         f"{'data_dir=' if key in PLANETOID_NAMES else 'generator arguments'}.")
    if key != "npz" and key not in PLANETOID_NAMES and data_dir is not None:
        raise ValueError(f"data_dir= is for the Planetoid datasets {list(PLANETOID_NAMES)}, not {key!r}.")
    if key in PLANETOID_NAMES:
        _only(key, kwargs, ("normalize_features", "num_val"))
        return read_planetoid(key, planetoid_dir(data_dir, key), **kwargs)
    if key == "npz":
        if path is None:
            path = data_dir
        if path is None:
            raise ValueError("load_graph('npz') needs path=<the .npz file>.")
        _only(key, kwargs, ("normalize_features", "symmetric", "name"))
        return read_npz(path, **kwargs)
    return csbm(**kwargs)


def _only(key: str, kwargs: dict, allowed: tuple[str, ...]) -> None:
    extra = sorted(set(kwargs) - set(allowed))
    if extra:
        raise ValueError(f"load_graph({key!r}) got unexpected argument(s) {extra}; it takes {list(allowed)}.")


# --------------------------------------------------------------------------
# As an istjax Dataset
# --------------------------------------------------------------------------


def as_dataset(data: GraphData) -> Dataset:
    """The `istjax.data.Dataset` a GIST run trains on: examples are *node indices* and the graph is shared.

    ``train_x`` / ``test_x`` are the train / test node indices (``[n] float32``: exact below 2**24 nodes; the
    model casts them back), ``train_y`` / ``test_y`` their labels, and ``shared = {"graph": Graph}`` with the
    graph's arrays on the device once, read by every worker each round and never stacked per worker. The node
    features are the graph's (row-normalised for Planetoid), not re-standardised.
    """
    if data.num_nodes >= 2 ** 24:
        raise ValueError(f"{data.name}: {data.num_nodes} nodes; node indices travel as float32 examples, exact "
                         f"only below 2**24 = 16,777,216 nodes.")
    import jax

    graph = Graph(*(jax.device_put(np.asarray(a)) for a in data.graph))
    ids = lambda idx: np.asarray(idx, np.float32)  # noqa: E731
    return Dataset(name=data.name, train_x=ids(data.train_idx), train_y=np.asarray(data.labels[data.train_idx]),
                   test_x=ids(data.test_idx), test_y=np.asarray(data.labels[data.test_idx]),
                   num_classes=int(data.num_classes), shared={"graph": graph})
