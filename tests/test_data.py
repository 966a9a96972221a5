"""Tests for istjax.data: loaders, standardisation and on-device batching."""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from hypothesis import given, settings
from hypothesis import strategies as st

from istjax import data as D

SMALL_SPEECH = dict(num_train=600, num_test=150, num_features=64, num_classes=5, seed=3)


def _id_dataset(n: int, num_classes: int = 7) -> D.Dataset:
    """Dataset whose feature 0 encodes the example id (decodable after gathering)."""
    x = np.stack([np.arange(n), -np.arange(n)], axis=1).astype(np.float32)
    y = (np.arange(n) % num_classes).astype(np.int32)
    return D.Dataset("ids", x, y, x[:1], y[:1], num_classes)


def _ids(batch: dict) -> np.ndarray:
    """Example ids of an `_id_dataset` batch, `[W, K, B] int64`."""
    return np.asarray(batch["x"][..., 0]).astype(np.int64)


def _check_standardised(ds: D.Dataset) -> None:
    assert ds.train_x.dtype == np.float32 and ds.test_x.dtype == np.float32
    assert ds.train_y.dtype == np.int32 and ds.test_y.dtype == np.int32
    flat = ds.train_x.reshape(len(ds.train_x), -1).astype(np.float64)
    np.testing.assert_allclose(flat.mean(0), 0.0, atol=1e-4)
    std = flat.std(0)
    assert np.all((np.abs(std - 1.0) < 1e-3) | (std < 1e-6)), std
    assert (std > 0.5).mean() > 0.5  # most features are not constant
    assert ds.train_y.min() >= 0 and ds.train_y.max() < ds.num_classes
    assert ds.test_y.min() >= 0 and ds.test_y.max() < ds.num_classes
    assert np.isfinite(ds.train_x).all() and np.isfinite(ds.test_x).all()


# --------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------


def test_datasets_registry():
    assert tuple(D.DATASETS) == ("digits", "mnist1d", "synthetic_speech", "fashion_mnist", "fsdd", "spoken_keywords",
                                 "cora", "citeseer", "pubmed", "csbm", "graph_npz", "xmc_debian_deps", "xmc_synthetic",
                                 "xmc", "shakespeare", "text", "shakespeare_roles")


def test_digits_shapes_split_and_standardisation():
    ds = D.load_dataset("digits")
    assert ds.name == "digits" and ds.num_classes == 10
    assert ds.train_x.shape == (1437, 64) and ds.test_x.shape == (360, 64)
    assert ds.train_y.shape == (1437,) and ds.test_y.shape == (360,)
    _check_standardised(ds)
    # stratified: every class has 35-37 test examples
    counts = np.bincount(ds.test_y, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37, counts
    # deterministic, independent of the in-memory cache
    again = D.load_digits.__wrapped__()
    np.testing.assert_array_equal(again.train_x, ds.train_x)
    np.testing.assert_array_equal(again.test_y, ds.test_y)
    # train/test are disjoint splits of the 1797 images (no duplicated rows across)
    assert len(ds.train_x) + len(ds.test_x) == 1797


def test_loaded_arrays_are_read_only():
    ds = D.load_dataset("digits")
    with pytest.raises(ValueError):
        ds.train_x[0, 0] = 1.0
    assert "train_x=(1437, 64)" in repr(ds)
    assert ds.input_shape == (64,) and ds.num_features == 64


def test_mnist1d_default_shapes():
    ds = D.load_dataset("mnist1d")
    assert ds.name == "mnist1d" and ds.num_classes == 10
    assert ds.train_x.shape == (4000, 40) and ds.test_x.shape == (1000, 40)
    assert ds.train_y.shape == (4000,) and ds.test_y.shape == (1000,)
    _check_standardised(ds)
    assert set(np.unique(ds.train_y)) == set(range(10))


def test_mnist1d_disk_cache_and_rng_hygiene(tmp_path, monkeypatch):
    monkeypatch.setenv("ISTJAX_CACHE_DIR", str(tmp_path))
    np.random.seed(123)
    expected_next = np.random.rand()
    np.random.seed(123)
    ds = D.load_mnist1d(num_samples=500, seed=7)
    # make_dataset reseeds numpy's global RNG; the loader must restore it
    assert np.random.rand() == expected_next
    assert ds.train_x.shape == (400, 40) and ds.test_x.shape == (100, 40)
    files = list(tmp_path.glob("mnist1d-*.npz"))
    assert len(files) == 1
    # a fresh process (simulated by clearing the memory caches) reads the file
    D._mnist1d_raw.cache_clear()
    D._mnist1d_standardised.cache_clear()
    again = D.load_mnist1d(num_samples=500, seed=7)
    np.testing.assert_array_equal(again.train_x, ds.train_x)
    np.testing.assert_array_equal(again.test_y, ds.test_y)
    other = D.load_mnist1d(num_samples=500, seed=8)
    assert not np.array_equal(other.train_x, ds.train_x)
    assert len(list(tmp_path.glob("mnist1d-*.npz"))) == 2


def test_mnist1d_unknown_argument():
    with pytest.raises(ValueError, match="num_sample"):
        D.load_mnist1d(num_sample=10)


def test_synthetic_speech_shapes_and_standardisation():
    ds = D.load_dataset("synthetic_speech", **SMALL_SPEECH)
    assert ds.name == "synthetic_speech" and ds.num_classes == 5
    assert ds.train_x.shape == (600, 64) and ds.test_x.shape == (150, 64)
    assert ds.train_y.shape == (600,) and ds.test_y.shape == (150,)
    _check_standardised(ds)
    np.testing.assert_array_equal(np.bincount(ds.train_y), [120] * 5)  # balanced


def test_synthetic_speech_determinism():
    gen = D.load_synthetic_speech.__wrapped__
    a, b = gen(**SMALL_SPEECH), gen(**SMALL_SPEECH)
    np.testing.assert_array_equal(a.train_x, b.train_x)
    np.testing.assert_array_equal(a.test_x, b.test_x)
    c = gen(**{**SMALL_SPEECH, "seed": 4})
    assert not np.allclose(a.train_x, c.train_x)
    # the test split size does not change the training set
    d = gen(**{**SMALL_SPEECH, "num_test": 10})
    np.testing.assert_array_equal(a.train_x, d.train_x)
    np.testing.assert_array_equal(a.train_y, d.train_y)


def test_synthetic_speech_learnable_but_not_trivial():
    ds = D.load_synthetic_speech(num_train=2000, num_test=500, num_features=256, num_classes=5)
    x = np.c_[ds.train_x, np.ones(len(ds.train_x))]
    w = np.linalg.solve(x.T @ x + 10 * np.eye(x.shape[1]), x.T @ np.eye(5)[ds.train_y])
    acc = (np.argmax(np.c_[ds.test_x, np.ones(len(ds.test_x))] @ w, 1) == ds.test_y).mean()
    assert 0.45 < acc < 0.95, acc  # chance is 0.2


def test_synthetic_speech_bad_arguments():
    with pytest.raises(ValueError, match="num_frames=7.*num_features=64"):
        D.load_synthetic_speech(num_features=64, num_frames=7, num_train=10, num_test=10)
    with pytest.raises(ValueError, match="num_classes=1"):
        D.load_synthetic_speech(num_classes=1, num_features=64, num_train=10, num_test=10)
    with pytest.raises(ValueError, match="num_train=0"):
        D.load_synthetic_speech(num_train=0, num_features=64)


def test_load_dataset_unknown_name_lists_known_names():
    with pytest.raises(ValueError) as info:
        D.load_dataset("cifar10")
    msg = str(info.value)
    assert "cifar10" in msg
    for name in D.DATASETS:
        assert name in msg


def test_load_dataset_unknown_kwarg():
    with pytest.raises(ValueError, match="bogus") as info:
        D.load_dataset("synthetic_speech", bogus=1)
    assert "num_features" in str(info.value)  # lists what is accepted
    with pytest.raises(ValueError, match="bogus"):
        D.load_dataset("digits", bogus=1)


def test_standardize_uses_train_statistics():
    train = np.array([[1.0, 5.0], [3.0, 5.0]])
    test = np.array([[2.0, 6.0]])
    tr, te = D.standardize(train, test)
    np.testing.assert_allclose(tr, [[-1.0, 0.0], [1.0, 0.0]])
    np.testing.assert_allclose(te, [[0.0, 1.0]])  # constant feature: centred only
    assert tr.dtype == np.float32
    np.testing.assert_array_equal(train, [[1.0, 5.0], [3.0, 5.0]])  # input untouched


# --------------------------------------------------------------------------
# Batching
#
# Compiled code is keyed on the static plan (N, W, K, B, sharding), not on the
# seed, so the tests reuse a few plans to stay fast:
#   A: N=1000, W=4, K=5, B=5, disjoint (pool 250, 10 rounds per epoch)
#   B: N=120,  W=3, K=2, B=20, shared  (pool 120, 3 rounds per epoch)
#   C: N=50,   W=2, K=6, B=10, disjoint (pool 25 < K*B = 60)
# --------------------------------------------------------------------------

PLAN_A = dict(num_workers=4, local_steps=5, batch_size=5, sharding="disjoint")
PLAN_B = dict(num_workers=3, local_steps=2, batch_size=20, sharding="shared")
PLAN_C = dict(num_workers=2, local_steps=6, batch_size=10, sharding="disjoint")
PLANS = {"A": (1000, PLAN_A), "B": (120, PLAN_B), "C": (50, PLAN_C)}


@pytest.fixture(scope="module")
def bf_a():
    return D.make_batch_fn(_id_dataset(1000), seed=2, **PLAN_A)


def test_batch_shapes_dtypes_and_gather():
    ds = D.load_synthetic_speech(**{**SMALL_SPEECH, "num_train": 1000})
    bf = D.make_batch_fn(ds, seed=0, **PLAN_A)
    batch = bf(2)
    assert set(batch) == {"x", "y"}
    assert batch["x"].shape == (4, 5, 5, 64) and batch["x"].dtype == jnp.float32
    assert batch["y"].shape == (4, 5, 5) and batch["y"].dtype == jnp.int32
    idx = np.asarray(bf.indices(2))
    assert idx.shape == (4, 5, 5)
    np.testing.assert_array_equal(np.asarray(batch["x"]), ds.train_x[idx])
    np.testing.assert_array_equal(np.asarray(batch["y"]), ds.train_y[idx])
    assert bf.pool_size == 250 and bf.num_workers == 4
    assert "pool_size=250" in repr(bf)


def test_batch_fn_deterministic_and_varies(bf_a):
    ds = _id_dataset(1000)
    other = D.make_batch_fn(ds, seed=2, **PLAN_A)  # a fresh instance, e.g. after resume
    r5 = bf_a(5)
    np.testing.assert_array_equal(np.asarray(r5["x"]), np.asarray(other(5)["x"]))
    np.testing.assert_array_equal(np.asarray(r5["y"]), np.asarray(other(5)["y"]))
    np.testing.assert_array_equal(np.asarray(r5["x"]), np.asarray(bf_a(5)["x"]))
    ids5, ids6 = _ids(r5), _ids(bf_a(6))
    assert not np.array_equal(ids5, ids6)  # different round
    for w in range(1, 4):
        assert not np.array_equal(np.sort(ids5[0].ravel()), np.sort(ids5[w].ravel()))
    np.testing.assert_array_equal(np.asarray(r5["y"]), ids5 % 7)  # labels travel along
    reseeded = D.make_batch_fn(ds, seed=3, **PLAN_A)
    assert not np.array_equal(_ids(reseeded(5)), ids5)  # different seed
    assert not np.array_equal(np.asarray(reseeded.data["table"]), np.asarray(bf_a.data["table"]))


def test_batch_fn_under_jit_with_traced_round(bf_a):
    jitted = jax.jit(bf_a)
    for r in (0, 5, 123):
        out, ref = jitted(jnp.int32(r)), bf_a(r)
        np.testing.assert_array_equal(np.asarray(out["x"]), np.asarray(ref["x"]))
        np.testing.assert_array_equal(np.asarray(out["y"]), np.asarray(ref["y"]))
    # other integer types for the round
    np.testing.assert_array_equal(_ids(bf_a(np.int64(5))), _ids(bf_a(5)))


def test_pure_apply_in_a_jitted_scan(bf_a):
    # the recommended in-jit form: data passed as an argument, rounds traced
    @jax.jit
    def run(data, rounds):
        return jax.lax.scan(lambda c, r: (c, bf_a.apply(data, r)["x"]), 0, rounds)[1]

    xs = run(bf_a.data, jnp.arange(3, 6))
    for i, r in enumerate(range(3, 6)):
        np.testing.assert_array_equal(np.asarray(xs[i]), np.asarray(bf_a(r)["x"]))


@pytest.mark.parametrize("rounds", [range(0, 6), range(1000, 1003)])
def test_disjoint_workers_never_share_samples(bf_a, rounds):
    w = 4
    seen = [set() for _ in range(w)]
    for r in rounds:
        ids = _ids(bf_a(r))
        for i in range(w):
            for j in range(i + 1, w):
                assert not set(ids[i].ravel()) & set(ids[j].ravel())
            seen[i] |= set(ids[i].ravel())
    table = np.asarray(bf_a.data["table"])
    assert table.shape == (w, 250)
    assert len(np.unique(table)) == 1000  # shards are disjoint and cover the set
    for i in range(w):
        assert seen[i] <= set(table[i])


def test_disjoint_drops_remainder():
    fn = D.make_index_fn(1003, seed=2, **PLAN_A)
    ids = np.concatenate([np.asarray(fn(r)).ravel() for r in range(10)])
    assert len(np.unique(ids)) == 1000  # one epoch: 4 shards x 250, 3 left out


def test_shared_workers_draw_from_whole_set():
    bf = D.make_batch_fn(_id_dataset(120), seed=0, **PLAN_B)
    assert bf.pool_size == 120 and "table" not in bf.data
    ids = _ids(bf(0)).reshape(3, -1)
    assert all(len(set(row)) == 40 for row in ids)  # without replacement
    assert len(set(ids.ravel())) < 120  # workers overlap (independent permutations)


@pytest.mark.parametrize("plan", ["A", "B"])
def test_one_epoch_of_rounds_covers_each_sample_once(plan):
    n, kw = PLANS[plan]
    bf = D.make_batch_fn(_id_dataset(n), seed=5, **kw)
    w, kb, pool = kw["num_workers"], kw["local_steps"] * kw["batch_size"], bf.pool_size
    assert pool % kb == 0
    rounds = pool // kb
    ids = np.concatenate([_ids(bf(r)).reshape(w, -1) for r in range(2 * rounds)], axis=1)
    table = np.asarray(bf.data["table"]) if "table" in bf.data else None
    for i in range(w):
        expected = np.sort(table[i]) if table is not None else np.arange(n)
        first, second = ids[i, :pool], ids[i, pool:]
        np.testing.assert_array_equal(np.sort(first), expected)
        np.testing.assert_array_equal(np.sort(second), expected)
        assert not np.array_equal(first, second)  # reshuffled each epoch


def test_round_spanning_several_epochs():
    bf = D.make_batch_fn(_id_dataset(50), seed=9, **PLAN_C)  # pool 25, K*B 60
    ids = np.concatenate([_ids(bf(r)).reshape(2, -1) for r in range(5)], axis=1)  # 12 epochs
    for i in range(2):
        _, counts = np.unique(ids[i], return_counts=True)
        assert len(counts) == 25 and np.all(counts == 12)
        for e in range(12):  # every aligned epoch window is a permutation of the shard
            assert len(set(ids[i, 25 * e : 25 * (e + 1)])) == 25


_perm = jax.jit(jax.random.permutation, static_argnums=1)


def _reference_indices(n, w, k, b, seed, sharding, r):
    """Direct, slow transcription of the documented sampling contract."""
    base = jax.random.PRNGKey(seed)
    if sharding == "disjoint":
        pool = n // w
        order = np.asarray(_perm(jax.random.fold_in(base, D._SHARD_TAG), n))
        pools = [order[i * pool : (i + 1) * pool] for i in range(w)]
    else:
        pool, pools = n, [np.arange(n)] * w
    stream = jax.random.fold_in(base, D._STREAM_TAG)
    out = np.zeros((w, k * b), np.int64)
    for i in range(w):
        perms = {}
        for j in range(k * b):
            p = r * k * b + j  # python int: no overflow
            e = p // pool
            if e not in perms:
                perms[e] = np.asarray(_perm(jax.random.fold_in(jax.random.fold_in(stream, i), e), pool))
            out[i, j] = pools[i][perms[e][p % pool]]
    return out.reshape(w, k, b)


@pytest.mark.parametrize(
    "plan,r",
    [("A", 4), ("A", 2**31 - 1), ("B", 3), ("C", 2), ("C", 123456)],  # A at 2**31-1: r*K*B overflows int32
)
def test_matches_reference_contract(plan, r):
    n, kw = PLANS[plan]
    fn = D.make_index_fn(n, seed=3, **kw)
    k, b = kw["local_steps"], kw["batch_size"]
    expected = _reference_indices(n, kw["num_workers"], k, b, 3, kw["sharding"], r)
    np.testing.assert_array_equal(np.asarray(fn(r)), expected)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), r=st.integers(0, 2**31 - 1))
def test_any_round_is_disjoint_and_without_replacement(seed, r):
    fn = D.make_index_fn(50, seed=seed, **PLAN_C)  # K*B = 60 > pool = 25
    ids = np.asarray(fn(r)).reshape(2, -1)
    assert not set(ids[0]) & set(ids[1])
    start = r * 60 % 25  # offset into the first epoch touched
    bounds = [0, 25 - start] + list(range(50 - start, 60, 25)) + [60]
    for i in range(2):
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            chunk = ids[i, lo:hi]
            assert len(set(chunk)) == len(chunk)  # no repeats within one epoch


@pytest.mark.parametrize(
    "override,field",
    [
        (dict(num_workers=0), "num_workers"),
        (dict(local_steps=0), "local_steps"),
        (dict(batch_size=0), "batch_size"),
        (dict(batch_size=2.5), "batch_size"),
        (dict(sharding="random"), "sharding"),
        (dict(seed="x"), "seed"),
        (dict(seed=2**32 + 5), "seed"),
    ],
)
def test_batch_fn_bad_arguments(override, field):
    args = {**dict(num_workers=2, local_steps=2, batch_size=4, seed=0), **override}
    with pytest.raises(ValueError, match=field):
        D.make_batch_fn(_id_dataset(100), **args)


def test_shard_smaller_than_batch_is_an_error_with_numbers():
    ds = _id_dataset(100)
    with pytest.raises(ValueError, match=r"num_workers=8.*12.*batch_size=16"):
        D.make_batch_fn(ds, num_workers=8, local_steps=1, batch_size=16, seed=0)
    with pytest.raises(ValueError, match=r"100.*batch_size=101"):
        D.make_batch_fn(ds, num_workers=1, local_steps=1, batch_size=101, seed=0, sharding="shared")


def test_bad_round_index(bf_a):
    for bad in (-1, 1.5, jnp.arange(2), jnp.float32(1.0), 2**31):
        with pytest.raises(ValueError, match="round_index"):
            bf_a(bad)


# --------------------------------------------------------------------------
# Evaluation batches
# --------------------------------------------------------------------------


def test_eval_batches_cover_once():
    x = np.arange(23 * 2).reshape(23, 2)
    y = np.arange(23)
    chunks = list(D.eval_batches(x, y, 5))
    assert [len(c[1]) for c in chunks] == [5, 5, 5, 5, 3]
    np.testing.assert_array_equal(np.concatenate([c[0] for c in chunks]), x)
    np.testing.assert_array_equal(np.concatenate([c[1] for c in chunks]), y)
    assert [len(c[1]) for c in D.eval_batches(x, y, 23)] == [23]
    with pytest.raises(ValueError, match="batch_size"):
        list(D.eval_batches(x, y, 0))
    with pytest.raises(ValueError, match="23.*22"):
        list(D.eval_batches(x, y[:-1], 4))


def test_batch_fn_draws_one_ranks_rows_alone():
    """``batch_fn(r, workers=(a, b))`` (what an MPI rank draws) is rows a..b of the full round, traced or not."""
    ds = D.load_dataset("digits")
    fn = D.make_batch_fn(ds, num_workers=4, local_steps=3, batch_size=5, seed=1)
    full = fn(2)
    part = fn(2, workers=(2, 4))
    for k in ("x", "y"):
        np.testing.assert_array_equal(part[k], full[k][2:4])
    traced = jax.jit(lambda r: fn(r, workers=(1, 2)))(2)
    np.testing.assert_array_equal(traced["x"], full["x"][1:2])


def test_rows_split_makes_float32_features_of_the_held_examples_alone():
    """A file-backed loader's `Rows` equals the standardised array; a batch function built for some workers converts
    only their shards' rows (one call of the loader's transform, on those rows), and draws the same batches."""
    raw = np.random.default_rng(0).integers(0, 256, (40, 3, 2), dtype=np.uint8)
    calls = []

    def transform(r):
        calls.append(len(r))
        return r[..., None].astype(np.float32) / 255

    rows = D.dataset.standardized_rows(raw, transform)
    whole, test = D.standardize(transform(raw), transform(raw[:5]))
    np.testing.assert_array_equal(np.asarray(rows), whole)  # bit for bit what the eager path makes
    np.testing.assert_array_equal(rows[[39, 2, 2]], whole[[39, 2, 2]])
    assert rows.shape == whole.shape and rows.ndim == 4 and len(rows) == 40 and rows.reshape(40, -1).shape == (40, 6)
    for index in (-1, slice(3, 30, 4), np.arange(40) % 3 == 0, np.array([], int), (slice(2, 5), 1), (..., 0)):
        np.testing.assert_array_equal(rows[index], whole[index])
    for index in (np.zeros((2, 2), int), None, ([0, 1], [1, 0])):  # what numpy would read otherwise: refused
        with pytest.raises(IndexError, match="use np.asarray"):
            rows[index]
    with pytest.raises(ValueError):
        rows.mean[0] = 1.0  # the statistics of a cached dataset are read-only
    ds = D.Dataset("rows", rows, np.arange(40) % 4, test, np.arange(5) % 4, num_classes=4)
    kw = dict(num_workers=4, local_steps=2, batch_size=3, seed=0)
    calls.clear()
    mine = D.make_batch_fn(ds, workers=(1, 2), **kw)
    assert calls == [10], calls  # worker 1's shard: 40 / 4 examples, converted in one call
    full = D.make_batch_fn(ds._replace(train_x=whole), **kw)
    for r in (0, 5):
        np.testing.assert_array_equal(mine(r)["x"], full(r)["x"][1:2])


@pytest.mark.parametrize("sharding", ["disjoint", "shared"])
def test_batch_fn_built_for_a_ranks_workers_holds_only_their_shards(sharding):
    """``make_batch_fn(..., workers=(a, b))`` draws rows a..b of the full round, every round, traced or not, and with
    disjoint shards holds only the examples of those workers' shards (an MPI rank loads what its workers read)."""
    ds = D.load_dataset("digits")
    kw = dict(num_workers=4, local_steps=3, batch_size=5, seed=1, sharding=sharding)
    fn = D.make_batch_fn(ds, **kw)
    mine = D.make_batch_fn(ds, workers=(1, 3), **kw)
    assert mine.rows == (1, 3)
    for r in (0, 2, 57):  # 57: past an epoch of every pool
        full, part = fn(r), mine(r)
        for k in ("x", "y"):
            np.testing.assert_array_equal(part[k], full[k][1:3])
    np.testing.assert_array_equal(jax.jit(lambda r: mine.apply(mine.data, r))(4)["x"], fn(4)["x"][1:3])
    held = len(mine.data["y"])
    assert held == (2 * (len(ds.train_y) // 4) if sharding == "disjoint" else len(ds.train_y))
    np.testing.assert_array_equal(mine(3, workers=(1, 3))["y"], fn(3)["y"][1:3])
    with pytest.raises(ValueError, match=r"holds the examples of workers \(1, 3\) only"):
        mine(0, workers=(0, 2))
    with pytest.raises(ValueError, match=r"workers=\(3, 3\): give \(start, stop\)"):
        D.make_batch_fn(ds, workers=(3, 3), **kw)
