"""Extreme multi-label classification: the repository text format (round trip, refusals, cache), sparse batches,
the ranking metrics by hand, the blockwise top-k against the full one, the generator, and xmc-debian-deps."""

from __future__ import annotations

import contextlib
import gzip
import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from istjax.data import DataNotFoundError, extreme
from istjax.data.extreme import text_format
from istjax.xmc import metrics

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA_ROOT = pathlib.Path(os.environ.get("ISTJAX_DATA_DIR") or REPO.parent / "shared" / "data")
DEBIAN = DATA_ROOT / "xmc-debian-deps"

# Five points: labels then features; point 1 has no labels (leading space), point 3 neither labels nor features
# (an empty line), point 4 labels but no features; ids out of order on a line are sorted by the reader.
SMALL = """5 10 6
3,0 4:0.5 1:-2.25 9:1e-3
 0:1.5 7:2
5 2:0.125

1,2,4
"""


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ISTJAX_CACHE_DIR", str(tmp_path / "cache"))


def _write(path: pathlib.Path, text: str) -> pathlib.Path:
    raw = text.encode("latin-1")
    path.write_bytes(gzip.compress(raw) if path.suffix == ".gz" else raw)
    return path


def _arrays(d: extreme.XMCData) -> list[np.ndarray]:
    return [d.features.indptr, d.features.ids, d.features.values, d.labels.indptr, d.labels.ids]


def _same(a: extreme.XMCData, b: extreme.XMCData) -> bool:
    return (a.num_features, a.num_labels) == (b.num_features, b.num_labels) and all(
        x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(_arrays(a), _arrays(b)))


# --------------------------------------------------------------------------
# The text format
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["small.txt", "small.txt.gz"])
def test_a_small_file_reads_as_written(tmp_path, name):
    d = extreme.read_xmc(_write(tmp_path / name, SMALL), cache=False)
    assert (d.num_points, d.num_features, d.num_labels, d.name) == (5, 10, 6, name)
    np.testing.assert_array_equal(d.features.indptr, [0, 3, 5, 6, 6, 6])
    np.testing.assert_array_equal(d.features.ids, [1, 4, 9, 0, 7, 2])
    np.testing.assert_array_equal(d.features.values, np.float32([-2.25, 0.5, 1e-3, 1.5, 2, 0.125]))
    np.testing.assert_array_equal(d.labels.indptr, [0, 2, 2, 3, 3, 6])
    np.testing.assert_array_equal(d.labels.ids, [0, 3, 5, 1, 2, 4])
    assert [a.dtype for a in _arrays(d)] == [np.int64, np.int32, np.float32, np.int64, np.int32]
    assert not any(a.flags.writeable for a in _arrays(d))
    np.testing.assert_array_equal(d.label_counts(), [1, 1, 1, 1, 1, 1])
    assert repr(d) == (f"XMCData({name}, 5 points, 10 features, 6 labels; 1.20 nonzero features and 1.200 labels "
                       f"per point)")
    # written back (plain and gzipped) and read again: the same arrays, and gzip's bytes do not depend on the time
    for out in ("back.txt", "back.txt.gz"):
        assert _same(extreme.read_xmc(extreme.write_xmc(tmp_path / out, d), cache=False), d)
    assert extreme.write_xmc(tmp_path / "again.txt.gz", d).read_bytes() == (tmp_path / "back.txt.gz").read_bytes()


def test_a_line_may_start_with_its_features_and_lines_may_end_in_crlf(tmp_path):
    d = extreme.read_xmc(_write(tmp_path / "f.txt", "2 3 2\r\n0:1 2:2\r\n1 1:3\r\n"), cache=False)
    np.testing.assert_array_equal(d.labels.indptr, [0, 0, 1])
    np.testing.assert_array_equal(d.features.ids, [0, 2, 1])


BAD = [  # (file text, the 1-based line named, words of the message)
    ("", 1, "empty"),
    ("3 10\n", 1, "not three non-negative integers"),
    ("2 x 4\n0 1:1\n1 1:1\n", 1, "not three non-negative integers"),
    ("1 10 0\n 1:1\n", 1, "at least 1"),
    ("3 10 4\n0 1:1\n1 2:1\n", 4, "ends after 2 of the 3 points"),
    ("1 10 4\n0 1:1\n1 2:1\n", 3, "declares 1 points but the file has more lines"),
    ("1 10 4\n0 1:1\n\n", 3, "more lines"),
    ("2 10 4\n0 1:1\n1,4 2:1\n", 3, "label id 4 is past the header's 4 labels"),
    ("2 10 4\n0 1:1\n-1,2 2:1\n", 3, "label id -1 is negative"),
    ("2 10 4\n0 10:1\n1 2:1\n", 2, "feature id 10 is past the header's 10 features"),
    ("2 10 4\n0 -3:1\n1 2:1\n", 2, "feature id -3 is negative"),
    ("2 10 4\n0 1:1\n1 2:nan\n", 3, "feature 2 has the value nan, not a finite float32"),
    ("2 10 4\n0 1:inf\n1 2:1\n", 2, "feature 1 has the value inf, not a finite float32"),
    ("2 10 4\n0 1:1\n1 2:1e39\n", 3, "feature 2 has the value 1e+39, not a finite float32"),
    ("2 10 4\n0,2,0 1:1\n1 2:1\n", 2, "label id 0 appears twice"),
    ("2 10 4\n0 1:1\n1 2:1 3:1 2:5\n", 3, "feature id 2 appears twice"),
    ("2 10 4\n0 1:1\n1 2:1:3 4\n", 3, "is not `id:value`"),
    ("2 10 4\n0 1:1 5\n1 2:1\n", 2, "is not `id:value`"),
    ("2 10 4\n0 1:1\n1 a:1\n", 3, "is not an integer id"),
    ("2 10 4\n0 1:1\n1 2:x\n", 3, "not a number"),
    ("2 10 4\n0 1:1\n1,,2 2:1\n", 3, "label '' (in '1,,2') is not an integer id"),
    ("2 10 4\n0 1:1\n99999999999999999999 2:1\n", 3, "too large"),
    ("2 10 4\n0 1:1\n1 2:1_0\n", 3, "'_'"),
    ("2 10 4\n0 1:1\n1 2:1\xe9\n", 3, "not ASCII"),
]


@pytest.mark.parametrize("text,line,words", BAD, ids=[b[2][:40] + f"@{b[1]}" for b in BAD])
@pytest.mark.parametrize("suffix", [".txt", ".txt.gz"])
def test_malformed_input_is_refused_naming_file_line_and_fix(tmp_path, text, line, words, suffix):
    path = _write(tmp_path / f"bad{suffix}", text)
    with pytest.raises(ValueError) as e:
        extreme.read_xmc(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: line {line}: ") and words in msg, msg
    assert any(w in msg for w in ("Fix", "fix", "Give", "copy", "Copy", "remove")), msg  # and says what to do
    assert not list((tmp_path / "cache").glob("*.npz"))  # nothing cached from a refused file


def test_a_cut_gzip_file_and_a_missing_file_are_refused(tmp_path):
    whole = gzip.compress(SMALL.encode() * 40)
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match=r"cut\.txt\.gz: not a complete gzip file.*truncated or corrupt"):
        extreme.read_xmc(path)
    with pytest.raises(DataNotFoundError, match="nowhere.txt does not exist"):
        extreme.read_xmc(tmp_path / "nowhere.txt")


def test_the_second_read_comes_from_the_cache_and_a_changed_file_is_parsed_again(tmp_path, monkeypatch):
    path = _write(tmp_path / "small.txt", SMALL)
    first = extreme.read_xmc(path)
    (cached,) = (tmp_path / "cache").glob("xmc-small.txt-*.npz")
    monkeypatch.setattr(text_format, "parse_xmc", lambda p: pytest.fail("parsed again"))
    assert _same(extreme.read_xmc(path), first)
    monkeypatch.undo()
    monkeypatch.setenv("ISTJAX_CACHE_DIR", str(tmp_path / "cache"))
    _write(path, SMALL.replace("5 2:0.125", "5 2:0.25"))
    os.utime(path, ns=(cached.stat().st_mtime_ns + 10**9,) * 2)
    assert extreme.read_xmc(path).features.values[5] == np.float32(0.25)
    assert len(list((tmp_path / "cache").glob("xmc-small.txt-*.npz"))) == 2


def test_a_damaged_cache_file_is_refused_naming_it(tmp_path):
    path = _write(tmp_path / "small.txt", SMALL)
    extreme.read_xmc(path)
    (cached,) = (tmp_path / "cache").glob("*.npz")
    cached.write_bytes(cached.read_bytes()[:100])
    with pytest.raises(ValueError, match=rf"{cached.name}: not a complete istjax cache file.*Delete it"):
        extreme.read_xmc(path)
    cached.unlink()
    extreme.read_xmc(path)  # rebuilt
    with np.load(cached) as z:
        arrays = dict(z)
    arrays["label_ids"] = arrays["label_ids"] + 100  # reads whole, but breaks the record's invariants
    np.savez(cached, **arrays)
    with pytest.raises(ValueError, match=r"labels: an id outside \[0, 6\).*Delete it"):
        extreme.read_xmc(path)
    assert _same(extreme.read_xmc(path, cache=False), extreme.parse_xmc(path))


# --------------------------------------------------------------------------
# Rows and sparse batches
# --------------------------------------------------------------------------


def test_pack_rows_pads_ids_with_zero_labels_with_minus_one_and_buckets_widths(tmp_path):
    d = extreme.read_xmc(_write(tmp_path / "small.txt", SMALL), cache=False)
    b = extreme.pack_rows(d, [0, 3, 4])
    assert b.ids.shape == b.values.shape == (3, 8) and b.labels.shape == (3, 8)
    assert b.ids.dtype == np.int32 and b.values.dtype == np.float32 and b.labels.dtype == np.int32
    np.testing.assert_array_equal(b.ids[0], [1, 4, 9, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(b.values[0], np.float32([-2.25, 0.5, 1e-3, 0, 0, 0, 0, 0]))
    assert not b.ids[1:].any() and not b.values[1:].any()  # no features: all padding
    np.testing.assert_array_equal(b.labels[:, :3], [[0, 3, -1], [-1, -1, -1], [1, 2, 4]])
    assert (b.labels[:, 3:] == -1).all()
    # any shape of rows (a round's [W, K, B]); fixed widths; a wider row than asked is refused, naming it
    r = extreme.pack_rows(d, np.array([[[0, 1]], [[2, 0]]]), nnz=3, max_labels=2)
    assert r.ids.shape == (2, 1, 2, 3) and r.labels.shape == (2, 1, 2, 2)
    np.testing.assert_array_equal(r.ids[1, 0, 1], [1, 4, 9])
    with pytest.raises(ValueError, match=r"point 0 has 3 entries, more than nnz=2.*nnz>=3"):
        extreme.pack_rows(d, [1, 0], nnz=2)
    with pytest.raises(ValueError, match=r"point 4 has 3 entries, more than max_labels=2"):
        extreme.pack_labels(d, [4], max_labels=2)
    with pytest.raises(ValueError, match=r"row 5 is outside \[0, 5\)"):
        extreme.pack_rows(d, [5])
    np.testing.assert_array_equal(extreme.pack_labels(d, [4, 2], max_labels=4), [[1, 2, 4, -1], [5, -1, -1, -1]])


def test_bucket_is_the_next_power_of_two_at_least_eight():
    assert [extreme.bucket(n) for n in (0, 1, 8, 9, 16, 17, 76, 815)] == [8, 8, 8, 16, 16, 32, 128, 1024]
    assert extreme.bucket(3, minimum=1) == 4


def test_take_rows_keeps_the_order_and_repeats():
    d = extreme.synthetic_xmc(50, 40, 20, seed=1)
    t = extreme.take_rows(d, [7, 3, 7])
    assert t.num_points == 3
    for got, want in ((0, 7), (1, 3), (2, 7)):
        np.testing.assert_array_equal(extreme.pack_rows(t, [got]).ids, extreme.pack_rows(d, [want]).ids)
        np.testing.assert_array_equal(extreme.pack_rows(t, [got]).labels, extreme.pack_rows(d, [want]).labels)


# --------------------------------------------------------------------------
# Metrics, by hand
# --------------------------------------------------------------------------

# Three points: true labels {0, 2}, {1}, {3, 4, 5}; predictions best first. Hits: [1,0,1], [0,0,1], [1,0,1].
TRUE = np.array([[0, 2, -1], [1, -1, -1], [3, 4, 5]])
TOP = np.array([[2, 1, 0], [0, 3, 1], [5, 0, 4]])
# Inverse propensities w = 1/p = [2, 4, 1, 2, 5, 10].
P = np.array([0.5, 0.25, 1.0, 0.5, 0.2, 0.1])


def test_precision_and_ndcg_by_hand():
    assert metrics.precision_at_k(TOP, TRUE, 1) == pytest.approx(2 / 3)
    assert metrics.precision_at_k(TOP, TRUE, 3) == pytest.approx(5 / 9)  # (2/3 + 1/3 + 2/3) / 3
    assert metrics.ndcg_at_k(TOP, TRUE, 1) == pytest.approx(2 / 3)
    # @2: 1 / (1 + 1/log2 3) for the first and third points, 0 for the second
    assert metrics.ndcg_at_k(TOP, TRUE, 2) == pytest.approx(0.40876479517697223)
    # @3: 1.5/1.6309298 (ideal of 2 labels), 0.5/1, 1.5/2.1309298 (ideal of 3): 0.91972, 0.5, 0.70392
    assert metrics.ndcg_at_k(TOP, TRUE, 3) == pytest.approx(0.707879626060774)


def test_psp_by_hand_is_weighted_hits_over_the_best_achievable():
    # @1: hits weigh 1 (label 2) + 0 + 10 (label 5) = 11; best: 2 + 4 + 10 = 16
    assert metrics.psp_at_k(TOP, TRUE, P, 1) == pytest.approx(11 / 16)
    # @3: (1 + 2) + 4 + (10 + 5) = 22; best: (2 + 1) + 4 + (10 + 5 + 2) = 24
    assert metrics.psp_at_k(TOP, TRUE, P, 3) == pytest.approx(22 / 24)
    perfect = np.array([[0, 2, 1], [1, 0, 2], [5, 4, 3]])  # true labels first, by weight
    assert metrics.psp_at_k(perfect, TRUE, P, 3) == pytest.approx(1.0)
    m = metrics.ranking_metrics(TOP, TRUE, P, ks=(1, 3))
    assert list(m) == ["P@1", "nDCG@1", "PSP@1", "P@3", "nDCG@3", "PSP@3"]
    assert m["PSP@3"] == pytest.approx(22 / 24) and "PSP@1" not in metrics.ranking_metrics(TOP, TRUE, ks=(1,))


def test_propensities_follow_jain_et_al():
    # N = 100, A = 0.55, B = 1.5: C = (ln 100 - 1) * 2.5^0.55 = 5.9676; p = 1 / (1 + C (N_l + 1.5)^-0.55)
    np.testing.assert_allclose(metrics.propensities([0, 10, 99], 100),
                               [0.17317032497262708, 0.3910173106040255, 0.6790169711897959], rtol=1e-12)


def test_a_point_without_labels_scores_zero_and_bad_inputs_are_refused():
    top, true = np.array([[1, 0], [0, 1]]), np.array([[0], [-1]])
    assert metrics.ndcg_at_k(top, true, 2) == pytest.approx(0.5 * (1 / np.log2(3)))
    assert metrics.precision_at_k(top, true, 1) == 0.0
    with pytest.raises(ValueError, match="repeats a label id"):
        metrics.precision_at_k(np.array([[1, 1]]), np.array([[1]]), 2)
    with pytest.raises(ValueError, match="k=3 but top_ids holds 2"):
        metrics.precision_at_k(top, true, 3)
    with pytest.raises(ValueError, match="negative id"):
        metrics.precision_at_k(np.array([[-1]]), np.array([[-1]]), 1)
    with pytest.raises(ValueError, match="covering every label id used"):
        metrics.psp_at_k(TOP, TRUE, P[:4], 1)


# --------------------------------------------------------------------------
# Blockwise top-k
# --------------------------------------------------------------------------


@pytest.mark.parametrize("num_labels,block,k", [(50, 7, 5), (50, 10, 3), (50, 50, 5), (50, 64, 1), (13, 5, 5)])
def test_blockwise_top_k_equals_full_top_k_ties_included(num_labels, block, k):
    # Logits from 4 values only: most of each row's top k are ties, resolved to the lower id as lax.top_k does.
    logits = jnp.asarray(np.random.default_rng(num_labels + block).integers(0, 4, (6, num_labels)), jnp.float32)
    want_v, want_i = jax.lax.top_k(logits, k)
    fn = lambda start: jax.lax.dynamic_slice_in_dim(logits, start, min(block, num_labels), axis=1)  # noqa: E731
    for top in (metrics.blockwise_top_k, jax.jit(metrics.blockwise_top_k, static_argnums=(0, 1, 2, 3))):
        v, i = top(fn, num_labels, k, block)
        np.testing.assert_array_equal(i, want_i)
        np.testing.assert_array_equal(v, want_v)
        assert i.dtype == jnp.int32


def test_dense_top_k_never_needs_the_full_logits():
    rng = np.random.default_rng(0)
    h, w, b = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((4, 16), (16, 103), (103,)))
    want_v, want_i = jax.lax.top_k(h @ w + b[None, :], 5)
    v, i = jax.jit(metrics.dense_top_k, static_argnums=(3, 4))(h, w, b, 5, 16)
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_allclose(v, want_v, rtol=1e-6)
    # the largest logits array the computation holds is one block: [4, 16], not [4, 103]
    jaxpr = jax.make_jaxpr(lambda h, w, b: metrics.dense_top_k(h, w, b, 5, 16))(h, w, b)
    shapes = {tuple(v.aval.shape) for eqn in _eqns(jaxpr.jaxpr) for v in eqn.outvars}
    assert (4, 103) not in shapes and (4, 16) in shapes
    np.testing.assert_array_equal(metrics.dense_top_k(h, w, None, 2, 50)[1], jax.lax.top_k(h @ w, 2)[1])
    with pytest.raises(ValueError, match="k=5 is more than the block of 4 labels"):
        metrics.dense_top_k(h, w, b, 5, 4)
    with pytest.raises(ValueError, match="do not fit together"):
        metrics.dense_top_k(h, w[:8], b, 5, 16)


def _eqns(jaxpr):
    """Every equation of ``jaxpr`` and of the jaxprs inside it (a scan's body)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for p in eqn.params.values():
            inner = getattr(p, "jaxpr", p)
            if hasattr(inner, "eqns"):
                yield from _eqns(inner)


# --------------------------------------------------------------------------
# The generator
# --------------------------------------------------------------------------


def test_the_generator_is_deterministic_per_seed_and_has_the_asked_statistics(tmp_path):
    kw = dict(num_points=4000, num_features=3000, num_labels=500, labels_per_point=4.0, features_per_point=30.0)
    d = extreme.synthetic_xmc(**kw, seed=3)
    assert _same(d, extreme.synthetic_xmc(**kw, seed=3)) and not _same(d, extreme.synthetic_xmc(**kw, seed=4))
    assert (d.num_points, d.num_features, d.num_labels) == (4000, 3000, 500)
    labels_per_point = np.diff(d.labels.indptr)
    nnz = np.diff(d.features.indptr)
    assert labels_per_point.min() >= 1 and 3.8 < labels_per_point.mean() < 4.2
    assert nnz.min() >= 1 and 24 < nnz.mean() < 30  # repeated draws merge
    np.testing.assert_allclose(np.bincount(np.repeat(np.arange(4000), nnz), d.features.values ** 2), 1.0, rtol=1e-5)
    counts = d.label_counts()
    # Zipf with exponent 1: frequency falls about as 1 / rank (slope of log count on log rank near -1 in the head)
    slope = np.polyfit(np.log(np.arange(1, 51)), np.log(counts[:50]), 1)[0]
    assert -1.3 < slope < -0.6 and counts[0] > 10 * counts[99] > 0
    head = extreme.take_rows(d, np.arange(50))
    assert _same(extreme.read_xmc(extreme.write_xmc(tmp_path / "s.txt.gz", head), cache=False), head)
    with pytest.raises(ValueError, match=r"signal=1.5 must be a number in \[0.0, 1.0\]"):
        extreme.synthetic_xmc(10, 10, 10, signal=1.5)


def test_more_capacity_predicts_the_synthetic_labels_better():
    """The best rank-H linear predictor (a linear model with H hidden units) gains P@1 with H."""
    data = extreme.synthetic_xmc(1500, 300, 100, labels_per_point=3.0, features_per_point=20.0, signal=0.6, seed=0)
    x = np.zeros((1500, 300))
    x[np.repeat(np.arange(1500), np.diff(data.features.indptr)), data.features.ids] = data.features.values
    y = np.zeros((1500, 100))
    y[np.repeat(np.arange(1500), np.diff(data.labels.indptr)), data.labels.ids] = 1.0
    train, test = slice(0, 1000), slice(1000, 1500)
    with _one_blas_thread():  # small products: threads only contend with whatever else runs
        w = np.linalg.solve(x[train].T @ x[train] + 0.1 * np.eye(300), x[train].T @ y[train])
        directions = np.linalg.svd(x[train] @ w, full_matrices=False)[2]
        scores = {h: x[test] @ w @ directions[:h].T @ directions[:h] for h in (2, 8, 32)}  # top-h output directions
    true = extreme.pack_labels(data, np.arange(1000, 1500))
    p1 = {h: metrics.precision_at_k(np.argsort(-s, axis=1)[:, :1], true, 1) for h, s in scores.items()}
    assert p1[2] + 0.1 < p1[8] < p1[32] - 0.05, p1  # measured: 0.58, 0.75, 0.84


def _one_blas_thread():
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1)


# --------------------------------------------------------------------------
# xmc-debian-deps
# --------------------------------------------------------------------------


def test_the_loader_says_to_set_istjax_data_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("ISTJAX_DATA_DIR", raising=False)
    with pytest.raises(DataNotFoundError, match="ISTJAX_DATA_DIR is not set"):
        extreme.load_xmc_debian_deps()
    monkeypatch.setenv("ISTJAX_DATA_DIR", str(tmp_path))
    with pytest.raises(DataNotFoundError, match=r"xmc-debian-deps does not exist.*set ISTJAX_DATA_DIR"):
        extreme.load_xmc("xmc-debian-deps")
    (tmp_path / "xmc-debian-deps").mkdir()
    with pytest.raises(DataNotFoundError, match=r"has no train.txt or train.txt.gz \(found: nothing\)"):
        extreme.load_xmc_debian_deps()
    with pytest.raises(ValueError, match=r"'xmc-debain-deps' is not a known XMC data set.*xmc-synthetic"):
        extreme.load_xmc("xmc-debain-deps")


def test_xmc_synthetic_by_name_splits_one_problem():
    ds = extreme.load_xmc("xmc-synthetic", num_train=300, num_test=100, num_features=200, num_labels=50, seed=2)
    whole = extreme.synthetic_xmc(400, 200, 50, seed=2)
    assert (ds.train.num_points, ds.test.num_points, ds.label_names) == (300, 100, None)
    assert _same(ds.test, extreme.take_rows(whole, np.arange(300, 400)))


@pytest.mark.skipif(not (DEBIAN / "train.txt.gz").is_file(),
                    reason=f"xmc-debian-deps is not in {DEBIAN} (set ISTJAX_DATA_DIR to the folder holding it)")
def test_xmc_debian_deps_counts_and_its_readme_baseline():
    ds = extreme.load_xmc_debian_deps(DEBIAN)
    train, test = ds.train, ds.test
    assert (train.num_points, test.num_points) == (43_333, 10_345)
    assert (train.num_features, train.num_labels) == (31_435, 15_186) == (test.num_features, test.num_labels)
    assert ds.label_names[:3] == ("libc6", "libstdc++6", "python3") and len(ds.label_names) == 15_186
    for d, labels, nnz in ((train, 4.767, 30.42), (test, 4.741, 29.94)):
        assert round(len(d.labels.ids) / d.num_points, 3) == labels
        assert round(len(d.features.ids) / d.num_points, 2) == nnz
    counts = train.label_counts()
    assert counts.min() == 2 and counts[0] == 17_243 and np.all(np.diff(counts) <= 0)  # ordered by frequency
    # README baseline: always the five most frequent training labels; propensities from training counts, N = 43,333
    top = np.tile(np.argsort(-counts, kind="stable")[:5], (test.num_points, 1))
    true = extreme.pack_labels(test, np.arange(test.num_points))
    m = metrics.ranking_metrics(top, true, metrics.propensities(counts, train.num_points))
    got = {name: round(m[name], 4) for name in ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5")}
    assert got == {"P@1": 0.4428, "P@3": 0.2412, "P@5": 0.1895, "PSP@1": 0.1033, "PSP@3": 0.0895, "PSP@5": 0.0958}
