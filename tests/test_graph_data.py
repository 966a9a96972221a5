"""Graph datasets: Planetoid (real Cora and Citeseer), the restricted unpickler, .npz files, the CSBM generator and
fetch_planetoid against a local HTTP server."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import pathlib
import pickle
import shutil
import threading
import warnings

import numpy as np
import pytest

from istjax.data.graphs import (
    PLANETOID_FILES,
    PLANETOID_SHA256,
    GraphData,
    csbm,
    fetch_planetoid,
    load_graph,
    read_npz,
    read_planetoid,
    read_planetoid_pickle,
    save_npz,
)
from istjax.data import DataNotFoundError

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA_ROOT = pathlib.Path(os.environ.get("ISTJAX_DATA_DIR") or REPO.parent / "shared" / "data")
PLANETOID = DATA_ROOT / "planetoid"


def _have(name: str) -> bool:
    return all((PLANETOID / f"ind.{name}.{s}").is_file() for s in PLANETOID_FILES)


needs_cora = pytest.mark.skipif(not _have("cora"), reason=f"Cora's Planetoid files are not in {PLANETOID}")
needs_citeseer = pytest.mark.skipif(not _have("citeseer"), reason=f"Citeseer's files are not in {PLANETOID}")


@functools.lru_cache(maxsize=None)
def _real(name: str, normalize: bool = True) -> GraphData:
    return read_planetoid(name, PLANETOID, normalize_features=normalize)


def _copy_planetoid(name: str, dest: pathlib.Path) -> pathlib.Path:
    """A writable copy of one dataset's eight files (the shared ones are read-only)."""
    dest.mkdir(parents=True, exist_ok=True)
    for s in PLANETOID_FILES:
        shutil.copyfile(PLANETOID / f"ind.{name}.{s}", dest / f"ind.{name}.{s}")
    return dest


def _check_graph_invariants(d: GraphData) -> None:
    g = d.graph
    s, r = np.asarray(g.senders), np.asarray(g.receivers)
    n = d.num_nodes
    assert g.nodes.dtype == np.float32 and s.dtype == np.int32 and r.dtype == np.int32
    assert d.labels.dtype == np.int32 and d.labels.shape == (n,)
    assert d.labels.min() >= 0 and d.labels.max() < d.num_classes
    assert g.edge_mask.all() and g.node_mask.all()
    assert not np.any(s == r), "self-loops"
    keys = s.astype(np.int64) * n + r
    assert np.unique(keys).size == keys.size, "duplicate edges"
    assert np.array_equal(np.sort(keys), np.sort(r.astype(np.int64) * n + s)), "edges not symmetric"
    splits = [d.train_idx, d.val_idx, d.test_idx]
    for idx in splits:
        assert idx.dtype == np.int32 and np.all(np.diff(idx) > 0) and idx.min() >= 0 and idx.max() < n
    assert np.unique(np.concatenate(splits)).size == sum(map(len, splits)), "splits overlap"


# --------------------------------------------------------------------------
# Planetoid: real files
# --------------------------------------------------------------------------


@needs_cora
def test_cora_sizes_split_and_graph():
    d = _real("cora")
    assert (d.name, d.num_nodes, d.num_features, d.num_classes) == ("cora", 2708, 1433, 7)
    assert d.graph.num_edges == 10556  # 5,278 undirected edges: the published 5,429 count duplicates
    assert (len(d.train_idx), len(d.val_idx), len(d.test_idx)) == (140, 500, 1000)
    assert np.array_equal(d.train_idx, np.arange(140)) and np.array_equal(d.val_idx, np.arange(140, 640))
    test_ids = np.loadtxt(PLANETOID / "ind.cora.test.index", dtype=np.int64)
    assert np.array_equal(d.test_idx, np.sort(test_ids))
    assert np.bincount(d.labels[d.train_idx], minlength=7).tolist() == [20] * 7
    _check_graph_invariants(d)


@needs_citeseer
def test_citeseer_sizes_and_isolated_test_ids():
    d = _real("citeseer")
    assert (d.num_nodes, d.num_features, d.num_classes) == (3327, 3703, 6)
    assert d.graph.num_edges == 9104  # the graph file's 124 self-loops are dropped
    assert (len(d.train_idx), len(d.val_idx), len(d.test_idx)) == (120, 500, 1000)
    _check_graph_invariants(d)
    # The 15 ids in the test range missing from test.index: zero features, label 0, no split, but edges.
    test_ids = np.loadtxt(PLANETOID / "ind.citeseer.test.index", dtype=np.int64)
    missing = np.setdiff1d(np.arange(2312, 3327), test_ids)
    assert missing.size == 15
    assert not d.graph.nodes[missing].any() and not d.labels[missing].any()
    assert not np.isin(missing, np.concatenate([d.train_idx, d.val_idx, d.test_idx])).any()
    degree = np.bincount(d.graph.receivers, minlength=d.num_nodes)
    assert degree[missing].min() >= 1  # they are in the graph file, linked to other nodes
    assert (degree == 0).sum() == 48  # Citeseer's isolated nodes (some only had a self-loop)


@pytest.mark.parametrize("name", [pytest.param("cora", marks=needs_cora),
                                  pytest.param("citeseer", marks=needs_citeseer)])
def test_planetoid_features_row_normalised_and_match_the_files(name):
    d, raw = _real(name), _real(name, normalize=False)
    sums = d.graph.nodes.sum(1)
    zero = sums == 0
    np.testing.assert_allclose(sums[~zero], 1.0, rtol=1e-5)
    assert np.array_equal(zero, raw.graph.nodes.sum(1) == 0)
    assert set(np.unique(raw.graph.nodes).tolist()) <= {0.0, 1.0}  # binary bag-of-words
    assert np.array_equal(d.graph.senders, raw.graph.senders) and np.array_equal(d.labels, raw.labels)
    # Cross-check against the files unpickled with the ordinary pickle (trusted local copies) and scipy.
    pytest.importorskip("scipy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        files = {s: pickle.load(open(PLANETOID / f"ind.{name}.{s}", "rb"), encoding="latin1")
                 for s in ("tx", "ty", "allx", "ally", "graph")}
    test_ids = np.loadtxt(PLANETOID / f"ind.{name}.test.index", dtype=np.int64)
    n_all = files["allx"].shape[0]
    np.testing.assert_array_equal(raw.graph.nodes[:n_all], files["allx"].toarray())
    np.testing.assert_array_equal(raw.graph.nodes[test_ids], files["tx"].toarray())
    np.testing.assert_array_equal(d.labels[:n_all], files["ally"].argmax(1))
    np.testing.assert_array_equal(d.labels[test_ids], files["ty"].argmax(1))
    pairs = {(u, v) for u, vs in files["graph"].items() for v in vs if u != v}
    assert pairs == set(zip(d.graph.senders.tolist(), d.graph.receivers.tolist()))


@needs_cora
def test_load_graph_reads_planetoid_from_data_dir_or_env(monkeypatch):
    assert load_graph("Cora", PLANETOID).num_nodes == 2708
    monkeypatch.setenv("ISTJAX_DATA_DIR", str(DATA_ROOT))
    assert load_graph("cora").graph.num_edges == 10556


def test_load_graph_without_a_folder_says_how_to_get_the_files(monkeypatch, tmp_path):
    monkeypatch.delenv("ISTJAX_DATA_DIR", raising=False)
    with pytest.raises(DataNotFoundError, match="ISTJAX_DATA_DIR.*fetch_planetoid"):
        load_graph("pubmed")
    with pytest.raises(DataNotFoundError, match=r"lacks \['ind.cora.x'.*fetch_planetoid\('cora'"):
        load_graph("cora", tmp_path)
    with pytest.raises(DataNotFoundError, match="does not exist"):
        load_graph("citeseer", tmp_path / "nowhere")
    assert issubclass(DataNotFoundError, ValueError)
    with pytest.raises(ValueError, match="unknown graph dataset 'reddit'"):
        load_graph("reddit")
    with pytest.raises(ValueError, match="unexpected argument"):
        load_graph("cora", tmp_path, num_nodes=3)


# --------------------------------------------------------------------------
# Planetoid: unsafe and broken files
# --------------------------------------------------------------------------


def test_restricted_unpickler_refuses_os_system(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "ind.evil.graph"
    evil.write_bytes(b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR.")  # protocol 0: os.system(...)
    with pytest.raises(ValueError, match=r"ind\.evil\.graph.*global os\.system, which is not allowed"):
        read_planetoid_pickle(evil)
    # The same call as a modern pickle writes it (STACK_GLOBAL, os.system's module is posix / nt).
    evil.write_bytes(pickle.dumps(_CallsSystem(f"touch {marker}"), protocol=4))
    with pytest.raises(ValueError, match=r"global (posix|nt|os)\.system"):
        read_planetoid_pickle(evil)
    assert not marker.exists()


class _CallsSystem:
    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return os.system, (self.cmd,)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("protocol", [2, 4])
def test_restricted_unpickler_reads_sparse_matrices_written_by_python3(tmp_path, fmt, protocol):
    sp = pytest.importorskip("scipy.sparse")
    from istjax.data.graphs.planetoid import _dense_matrix

    m = sp.random(6, 5, density=0.4, format=fmt, random_state=0, dtype=np.float32)
    path = tmp_path / "ind.toy.x"
    path.write_bytes(pickle.dumps(m, protocol=protocol))
    np.testing.assert_array_equal(_dense_matrix(read_planetoid_pickle(path), path, "x"), m.toarray())
    path.write_bytes(pickle.dumps(np.eye(3, dtype=np.int32), protocol=protocol))
    np.testing.assert_array_equal(read_planetoid_pickle(path), np.eye(3))


@needs_cora
def test_read_planetoid_refuses_a_tampered_file_and_names_it(tmp_path):
    d = _copy_planetoid("cora", tmp_path)
    (d / "ind.cora.graph").write_bytes(pickle.dumps(_CallsSystem("true"), protocol=2))
    with pytest.raises(ValueError, match=r"ind\.cora\.graph: the pickle refers to the global"):
        read_planetoid("cora", d)
    (d / "ind.cora.graph").write_bytes((PLANETOID / "ind.cora.graph").read_bytes()[:1000])
    with pytest.raises(ValueError, match=r"ind\.cora\.graph: not a readable pickle"):
        read_planetoid("cora", d)


@needs_cora
def test_planetoid_labels_missing_for_split_nodes(tmp_path):
    d = _copy_planetoid("cora", tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ally = pickle.load(open(d / "ind.cora.ally", "rb"), encoding="latin1")
    ally[200] = 0  # node 200 is in the validation split
    (d / "ind.cora.ally").write_bytes(pickle.dumps(ally, protocol=2))
    with pytest.raises(ValueError, match=r"ind\.cora\.ally: labels missing for 1 val node\(s\) \(first: node 200"):
        read_planetoid("cora", d)


@needs_cora
@needs_citeseer
def test_planetoid_mixed_files_are_named(tmp_path):
    d = _copy_planetoid("cora", tmp_path)
    shutil.copyfile(PLANETOID / "ind.citeseer.ty", d / "ind.cora.ty")
    with pytest.raises(ValueError, match=r"disagree on the number of classes.*'ind.cora.ty': 6"):
        read_planetoid("cora", d)
    shutil.copyfile(PLANETOID / "ind.cora.ty", d / "ind.cora.ty")
    (d / "ind.cora.test.index").write_text("\n".join(map(str, range(1708, 2707))) + "\n")
    with pytest.raises(ValueError, match=r"ind\.cora\.test\.index: lists 999 test nodes but ind\.cora\.tx has 1000"):
        read_planetoid("cora", d)
    (d / "ind.cora.test.index").write_text("1708\nx\n")
    with pytest.raises(ValueError, match="line 2 is 'x', not a node id"):
        read_planetoid("cora", d)


# --------------------------------------------------------------------------
# .npz files
# --------------------------------------------------------------------------


def _small_arrays():
    return dict(
        features=np.arange(12, dtype=np.float64).reshape(6, 2),
        labels=np.array([0, 1, 2, 0, 1, -1]),
        edges=np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 0], [1, 0], [2, 2]]),
        train_idx=np.array([0, 1, 2]),
        val_idx=np.array([3]),
        test_idx=np.array([4]),
    )


def _write(path, **arrays):
    np.savez(path, **arrays)
    return path


def test_read_npz_small(tmp_path):
    d = read_npz(_write(tmp_path / "toy.npz", **_small_arrays()))
    assert (d.name, d.num_nodes, d.num_features, d.num_classes) == ("toy", 6, 2, 3)
    assert d.graph.num_edges == 10  # 5 undirected edges; the duplicate and the self-loop dropped
    assert d.labels.tolist() == [0, 1, 2, 0, 1, 0]  # the unknown (-1) label, outside every split, stored as 0
    assert d.train_idx.tolist() == [0, 1, 2] and d.val_idx.tolist() == [3] and d.test_idx.tolist() == [4]
    _check_graph_invariants(d)
    normed = read_npz(tmp_path / "toy.npz", normalize_features=True)
    np.testing.assert_allclose(normed.graph.nodes[1], [2 / 5, 3 / 5])
    assert load_graph("npz", path=tmp_path / "toy.npz").graph.num_edges == 10


@needs_cora
def test_npz_round_trip_of_cora(tmp_path):
    d = _real("cora")
    back = read_npz(save_npz(tmp_path / "cora.graph", d), name="cora")
    assert back.name == "cora" and back.num_classes == d.num_classes
    for field in ("nodes", "senders", "receivers", "edge_mask", "node_mask"):
        np.testing.assert_array_equal(getattr(back.graph, field), getattr(d.graph, field))
    for field in ("labels", "train_idx", "val_idx", "test_idx"):
        np.testing.assert_array_equal(getattr(back, field), getattr(d, field))


def test_csbm_npz_round_trip(tmp_path):
    d = csbm(300, 3, 4, 6.0, 0.7, seed=3, train_per_class=5, num_val=30, num_test=60)
    back = load_graph("npz", path=save_npz(tmp_path / "g.npz", d))
    assert np.array_equal(back.graph.senders, d.graph.senders) and np.array_equal(back.labels, d.labels)
    assert np.array_equal(back.graph.nodes, d.graph.nodes) and np.array_equal(back.test_idx, d.test_idx)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(edges=np.array([[0, 1], [2, 6]])),
         r"bad\.npz: edges: edge 1 = \[2, 6\] refers to a node outside \[0, 6\)"),
        (dict(edges=np.array([[0, -1]])), r"edges: edge 0 = \[0, -1\] refers to a node outside"),
        (dict(edges=np.array([[0.0, 1.0]])), r"bad\.npz: edges must be integer node pairs"),
        (dict(features=np.zeros((5, 2))), r"bad\.npz: labels has 6 entries but features has 5 rows"),
        (dict(features=np.zeros(6)), r"bad\.npz: features must be a real \[N, F\] matrix"),
        (dict(features=np.full((6, 2), np.nan)), r"features holds NaN"),
        (dict(labels=np.array([0, 1, -1, 0, 1, 2])), r"bad\.npz: labels missing \(-1\) for 1 node\(s\) of train_idx "
                                                     r"\(first: node 2\)"),
        (dict(labels=np.array([0, 1, 2, 0, -3, 1])), r"labels holds -3"),
        (dict(labels=np.array([0.0, 1, 2, 0, 1, 1])), r"labels must be a 1-D integer array"),
        (dict(num_classes=np.int64(2)), r"labels holds class 2 but num_classes is 2"),
        (dict(train_idx=np.array([0, 7])), r"bad\.npz: train_idx holds node index 7 outside \[0, 6\)"),
        (dict(train_idx=np.array([0, 0])), r"train_idx lists 1 node\(s\) more than once"),
        (dict(train_idx=np.array([], np.int64)), r"train_idx is empty"),
        (dict(test_idx=np.array([2, 4])), r"train_idx and test_idx share 1 node\(s\) \(first: 2\)"),
        (dict(val_idx=None), r"bad\.npz: missing field\(s\) \['val_idx'\]"),
    ],
)
def test_read_npz_rejects_bad_input(tmp_path, change, match):
    arrays = {**_small_arrays(), **change}
    arrays = {k: v for k, v in arrays.items() if v is not None}
    with pytest.raises(ValueError, match=match):
        read_npz(_write(tmp_path / "bad.npz", **arrays))


def test_read_npz_refuses_pickles_and_missing_files(tmp_path):
    arrays = {**_small_arrays(), "features": np.array([[{"a": 1}]] * 6, dtype=object)}
    with pytest.raises(ValueError, match=r"bad\.npz: not a readable \.npz of plain arrays"):
        read_npz(_write(tmp_path / "bad.npz", **arrays))
    (tmp_path / "junk.npz").write_bytes(b"not a zip file at all")
    with pytest.raises(ValueError, match=r"junk\.npz: not a readable"):
        read_npz(tmp_path / "junk.npz")
    with pytest.raises(DataNotFoundError, match="does not exist"):
        read_npz(tmp_path / "absent.npz")


# --------------------------------------------------------------------------
# CSBM
# --------------------------------------------------------------------------


def test_csbm_sizes_split_and_homophily():
    d = csbm(6000, num_classes=4, num_features=16, avg_degree=8.0, homophily=0.9, snr=2.0, seed=1,
             train_per_class=20, num_val=500, num_test=1000)
    assert (d.name, d.num_nodes, d.num_features, d.num_classes) == ("csbm", 6000, 16, 4)
    assert np.bincount(d.labels).tolist() == [1500] * 4
    assert (len(d.train_idx), len(d.val_idx), len(d.test_idx)) == (80, 500, 1000)
    assert np.bincount(d.labels[d.train_idx]).tolist() == [20] * 4
    _check_graph_invariants(d)
    degree = d.graph.num_edges / d.num_nodes
    assert 7.5 < degree < 8.5, degree
    same = d.labels[d.graph.senders] == d.labels[d.graph.receivers]
    assert 0.87 < same.mean() < 0.93, same.mean()  # well above 1/C = 0.25
    # Features: class means snr apart from the origin, unit noise.
    means = np.stack([d.graph.nodes[d.labels == c].mean(0) for c in range(4)])
    np.testing.assert_allclose(np.linalg.norm(means, axis=1), 2.0, atol=0.15)
    resid = d.graph.nodes - means[d.labels]
    assert 0.95 < resid.std() < 1.05
    hetero = csbm(3000, 3, 4, 6.0, homophily=0.1, seed=0)
    assert (hetero.labels[hetero.graph.senders] == hetero.labels[hetero.graph.receivers]).mean() < 0.15


def test_csbm_is_deterministic_in_seed():
    a, b, c = (csbm(2000, 3, 8, 5.0, 0.8, 1.0, seed=s) for s in (7, 7, 8))
    for x, y in ((a.graph.nodes, b.graph.nodes), (a.graph.senders, b.graph.senders), (a.labels, b.labels),
                 (a.train_idx, b.train_idx), (a.test_idx, b.test_idx)):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.labels, c.labels) and a.graph.num_edges != c.graph.num_edges
    by_name = load_graph("csbm", num_nodes=2000, num_classes=3, num_features=8, avg_degree=5.0, seed=7)
    np.testing.assert_array_equal(by_name.graph.receivers, a.graph.receivers)


def test_csbm_100k_nodes_has_the_asked_size():
    """A 100,000-node graph at average degree 10 has about a million edges. (Its speed is not asserted here: a timed
    assertion fails on a busy machine; `experiments/benchmarks/graph.py` generates the large graphs it times.)"""
    d = csbm(100_000, num_classes=5, num_features=32, avg_degree=10.0, homophily=0.8, seed=0)
    assert d.num_nodes == 100_000 and 0.95e6 < d.graph.num_edges < 1.05e6


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_nodes=100, num_test=1000), r"the split needs .* more than num_nodes=100"),
        (dict(num_nodes=100, avg_degree=80.0, num_val=0, num_test=0), r"p_in=.*lower avg_degree"),
        (dict(homophily=1.5), r"homophily=1.5 must be a number in \[0.0, 1.0\]"),
        (dict(num_classes=1), r"num_classes=1 must be >= 2"),
        (dict(seed=-1), r"seed=-1 must be >= 0"),
    ],
)
def test_csbm_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        csbm(**{"num_nodes": 2000, **kwargs})


# --------------------------------------------------------------------------
# fetch_planetoid against a local HTTP server
# --------------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def served(tmp_path, monkeypatch):
    """(folder served, its URL): a local HTTP server over a writable copy of Cora's and Citeseer's files."""
    if not (_have("cora") and _have("citeseer")):
        pytest.skip(f"Planetoid files are not in {PLANETOID}")
    root = tmp_path / "served"
    _copy_planetoid("cora", root)
    _copy_planetoid("citeseer", root)
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(var, "*")  # never route 127.0.0.1 through a proxy the environment may name
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_checksum_table_matches_the_shared_files():
    for name in ("cora", "citeseer"):
        for fname, digest in PLANETOID_SHA256[name].items():
            if (PLANETOID / fname).is_file():
                assert hashlib.sha256((PLANETOID / fname).read_bytes()).hexdigest() == digest, fname


def test_fetch_planetoid_downloads_and_verifies(served, tmp_path):
    root, url = served
    dest = fetch_planetoid("cora", tmp_path / "dl", base_url=url)
    assert sorted(p.name for p in dest.iterdir()) == sorted(f"ind.cora.{s}" for s in PLANETOID_FILES)
    for p in dest.iterdir():
        assert p.read_bytes() == (root / p.name).read_bytes()
    d = load_graph("cora", dest)
    assert (d.num_nodes, d.graph.num_edges) == (2708, 10556)
    # Present and verified: nothing downloaded again (the server's copy is gone).
    (root / "ind.cora.x").unlink()
    fetch_planetoid("cora", dest, base_url=url)
    with pytest.raises(ConnectionError, match=r"could not download .*ind\.cora\.x.*404"):
        fetch_planetoid("cora", dest, base_url=url, overwrite=True)


def test_fetch_planetoid_checksum_mismatch_deletes_the_file(served, tmp_path):
    root, url = served
    tx = root / "ind.citeseer.tx"
    corrupt = bytearray(tx.read_bytes())
    corrupt[1000] ^= 0xFF
    tx.write_bytes(bytes(corrupt))
    actual = hashlib.sha256(bytes(corrupt)).hexdigest()
    expected = PLANETOID_SHA256["citeseer"]["ind.citeseer.tx"]
    dest = tmp_path / "dl"
    with pytest.raises(ValueError, match=rf"ind\.citeseer\.tx: downloaded from .* with sha256 {actual}, "
                                         rf"expected {expected}.*deleted"):
        fetch_planetoid("citeseer", dest, base_url=url)
    assert not (dest / "ind.citeseer.tx").exists() and not (dest / "ind.citeseer.tx.part").exists()
    assert (dest / "ind.citeseer.x").is_file()  # the files verified before it stay
    # Without a table the corrupt file downloads, with a warning per file.
    with pytest.warns(UserWarning, match="no sha256 known"):
        fetch_planetoid("citeseer", tmp_path / "unchecked", base_url=url, checksums=None)
    assert (tmp_path / "unchecked" / "ind.citeseer.tx").read_bytes() == bytes(corrupt)
    # A corrupt file already present is reported, not silently kept.
    shutil.copyfile(tx, dest / "ind.citeseer.tx")
    with pytest.raises(ValueError, match=r"already present with sha256 .*overwrite=True"):
        fetch_planetoid("citeseer", dest, base_url=url)
