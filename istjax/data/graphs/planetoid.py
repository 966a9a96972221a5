"""Planetoid files (Cora, Citeseer, Pubmed): the restricted unpickler, the reader and the verified download.

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

Nothing else in `istjax.data.graphs` touches the network; :func:`fetch_planetoid` does.
"""

from __future__ import annotations

import codecs
import collections
import hashlib
import os
import pathlib
import pickle
import re
import urllib.error
import urllib.request
import warnings
from typing import Any, Mapping, Optional, Union

import numpy as np

from istjax.core.errors import ArgError
from istjax.core.streams import check_positive
from istjax.data.files import DataNotFoundError, damaged_file
from istjax.graph.graph import Graph
from istjax.graph.graph import from_edges

from istjax.data.graphs.container import GraphData
from istjax.data.graphs.container import _MAX_DENSE
from istjax.data.graphs.container import _row_normalize

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
            raise damaged_file(path, "readable pickle", e, "Download it again (fetch_planetoid checks its sha256) "
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
        raise ArgError("num_val", num_val, f"{directory}: the split needs {n_train} train + {num_val} val nodes among "
                                           f"the {n_all} rows of {p['allx']};",
                       f"pass a smaller num_val (at most {n_all - n_train}).")
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
        raise ArgError("name", name, f"name={name!r} must be a Planetoid dataset name such as 'cora'",
                       "(letters, digits, '.', '_', '-').")
    num_val = check_positive("num_val", num_val, 0)
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
        raise ArgError("checksums", table, f"checksums must be a dict {{file name: sha256 hex}} or None, got "
                                           f"{type(table).__name__}.", "")
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
        raise ArgError("name", name, f"name={name!r} must be a Planetoid dataset name such as 'cora'.", "")
    if not isinstance(base_url, str) or not base_url:
        raise ArgError("base_url", base_url, f"base_url={base_url!r} must be a URL string such as {PLANETOID_URL!r}.",
                       "")
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
