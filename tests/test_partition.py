"""Property tests for the partition algebra: samplers, extract and merge."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import istjax
from istjax.core import subnet
from istjax.core.errors import ArgError
from istjax.core.partition import check_partition

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _held(p, g, size):
    """[W] list of numpy arrays: the real units each worker holds."""
    idx = np.asarray(p.indices[g])
    return [row[row < size] for row in idx]


@SETTINGS
@given(size=st.integers(1, 40), workers=st.integers(1, 8), seed=st.integers(0, 2**31 - 1), pad=st.booleans())
def test_uniform_is_disjoint_and_covers(size, workers, seed, pad):
    sampler = istjax.uniform(pad=pad)
    if workers > size or (size % workers and not pad):
        with pytest.raises(ValueError, match="num_workers"):
            sampler.slots({"h": size}, workers)
        return
    slots = sampler.slots({"h": size}, workers)
    p = sampler.sample(jax.random.key(seed), {"h": size}, workers)
    check_partition(p, {"h": size})
    assert p.indices["h"].shape == (workers, slots["h"])
    held = _held(p, "h", size)
    allunits = np.concatenate(held)
    assert sorted(allunits.tolist()) == list(range(size))  # disjoint and covering
    counts = [len(h) for h in held]
    assert max(counts) - min(counts) <= 1


@SETTINGS
@given(owners=st.integers(1, 4), workers=st.integers(1, 4), per=st.integers(1, 3), seed=st.integers(0, 10**6))
def test_stratified_equal_share_from_every_owner(owners, workers, per, seed):
    size = owners * workers * per
    p = istjax.stratified(owners).sample(jax.random.key(seed), {"h": size}, workers)
    held = _held(p, "h", size)
    assert sorted(np.concatenate(held).tolist()) == list(range(size))
    shard = size // owners
    for row in held:
        assert np.bincount(row // shard, minlength=owners).tolist() == [per] * owners


@SETTINGS
@given(size=st.integers(2, 30), workers=st.integers(1, 6), extra=st.integers(0, 10), seed=st.integers(0, 10**6))
def test_overlapping_covers_with_minimum(size, workers, extra, seed):
    if workers > size:
        return
    m = min(size, -(-size // workers) + extra)
    p = istjax.overlapping(m).sample(jax.random.key(seed), {"h": size}, workers)
    held = _held(p, "h", size)
    assert set(np.concatenate(held).tolist()) == set(range(size))
    for row in held:
        assert len(row) == m and len(set(row.tolist())) == m


@SETTINGS
@given(size=st.integers(4, 40), weights=st.lists(st.floats(0.2, 5.0), min_size=1, max_size=4),
       seed=st.integers(0, 10**6))
def test_uneven_is_disjoint_proportional(size, weights, seed):
    if len(weights) > size:
        return
    p = istjax.uneven(weights).sample(jax.random.key(seed), {"h": size}, len(weights))
    check_partition(p, {"h": size})
    held = _held(p, "h", size)
    assert sorted(np.concatenate(held).tolist()) == list(range(size))
    for row, w in zip(held, weights):
        assert abs(len(row) - size * w / sum(weights)) <= len(weights)


def test_nested_subsets():
    p = istjax.nested([0.25, 0.5, 1.0]).sample(jax.random.key(0), {"h": 8}, 3)
    held = [set(h.tolist()) for h in _held(p, "h", 8)]
    assert [len(h) for h in held] == [2, 4, 8]
    assert held[0] <= held[1] <= held[2]


def test_nested_without_shuffle_from_a_config_holds_the_same_units_every_round():
    """--config.sampler.name=nested --config.sampler.shuffle=False: one sub-network never repartitioned (the image
    study's fixed sub-network control); a value that is not a bool is refused naming the field."""
    from istjax.launch import config as config_lib
    from istjax.launch.config.parts import make_sampler

    c = config_lib.default_config()
    c.sampler.name, c.sampler.fractions, c.sampler.shuffle = "nested", (0.5,), False
    sampler = make_sampler(c)
    rounds = [set(_held(sampler.sample(jax.random.key(r), {"h": 8}, 1), "h", 8)[0].tolist()) for r in range(3)]
    assert rounds == [{0, 1, 2, 3}] * 3
    c.sampler.shuffle = True
    shuffled = make_sampler(c)
    assert len({frozenset(_held(shuffled.sample(jax.random.key(r), {"h": 8}, 1), "h", 8)[0].tolist())
                for r in range(5)}) > 1
    with pytest.raises(ArgError, match="shuffle='no'"):
        istjax.core.partition.SAMPLERS.get("nested").build({"fractions": (0.5,), "shuffle": "no"})


# --- extract / merge on random specs -------------------------------------------------------------------------

@st.composite
def spec_and_params(draw):
    """A random parameter tree over 1-3 groups; each leaf partitions 0-2 of its axes, possibly tiled."""
    # >= 3 units per group: every sampler in SAMPLERS fits two workers (overlapping(3) needs 3 units).
    groups = {f"g{i}": draw(st.integers(3, 7)) for i in range(draw(st.integers(1, 3)))}
    table, params = {}, {}
    for j in range(draw(st.integers(1, 4))):
        rank = draw(st.integers(1, 3))
        axes, shape = [], []
        for _ in range(rank):
            if draw(st.booleans()):
                g = draw(st.sampled_from(sorted(groups)))
                tiles = draw(st.integers(1, 2))
                axes.append(f"{g}*{tiles}")
                shape.append(groups[g] * tiles)
            else:
                axes.append(None)
                shape.append(draw(st.integers(1, 3)))
        params[f"leaf{j}"] = np.random.default_rng(j).normal(size=shape).astype(np.float32)
        table[f"leaf{j}"] = tuple(axes)
    params["shared"] = np.arange(3, dtype=np.float32)
    spec = istjax.spec_from_table(params, table)
    return spec, jax.tree.map(jnp.asarray, params)


SAMPLERS = [istjax.uniform(pad=True), istjax.overlapping(3), istjax.uneven([1.0, 2.0]), istjax.nested([0.5, 1.0])]


@SETTINGS
@given(sp=spec_and_params(), sampler=st.sampled_from(SAMPLERS), seed=st.integers(0, 10**6))
def test_merge_of_extract_is_identity(sp, sampler, seed):
    spec, params = sp
    if not spec.group_sizes:
        return
    p = sampler.sample(jax.random.key(seed), spec.group_sizes, 2)
    sub = istjax.extract(params, p, spec)
    back = istjax.merge(params, sub, p, spec, disjoint=sampler.disjoint)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(back)):
        np.testing.assert_array_equal(a, b)


# Every sampler with the worker counts it takes: 6 workers reach extract's worker-axis-inside gather (W > 4).
SAMPLERS_AND_WORKERS = [(istjax.uniform(pad=True), 2), (istjax.uniform(pad=True), 3), (istjax.uniform(pad=True), 6),
                        (istjax.overlapping(3), 3), (istjax.uneven([1.0, 2.0]), 2),
                        (istjax.uneven([1.0, 2.0, 1.0, 1.0, 1.0, 3.0]), 6), (istjax.nested([0.5, 1.0]), 2),
                        (istjax.stratified(2), 2), (istjax.stratified(2), 6)]


@SETTINGS
@given(sp=spec_and_params(), sampler_workers=st.sampled_from(SAMPLERS_AND_WORKERS), seed=st.integers(0, 10**6))
def test_extract_and_merge_by_slices_equal_the_gathers_by_elements_bit_for_bit(sp, sampler_workers, seed):
    # A leaf cut on one axis with more than one element after it is extracted as whole slices; every leaf's
    # element-wise gather (the path it replaced) gives the same bits, padding slots included, under every sampler.
    spec, params = sp
    sampler, workers = sampler_workers
    if not spec.group_sizes or min(spec.group_sizes.values()) < workers:
        return
    try:
        sampler.slots(spec.group_sizes, workers)  # the sampler's own check (stratified: sizes it divides)
    except ArgError:
        return
    p = sampler.sample(jax.random.key(seed), spec.group_sizes, workers)
    for s, x in zip(jax.tree.leaves(spec.leaves), jax.tree.leaves(params)):
        if s.shared:
            continue
        got = subnet.extract_leaf(x, s, p, spec.group_sizes, workers)
        want = subnet._extract_elements(x, s, p, spec.group_sizes, workers)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        if sampler.disjoint:  # merge of trained (here: shifted) pieces, with a pad slot of weight 0 or without
            trained = got * 2.0 + 1.0
            for weights in (None, jnp.arange(workers, dtype=jnp.float32)):
                merged = subnet._merge_disjoint(x, trained, s, p, spec.group_sizes, weights)
                np.testing.assert_array_equal(
                    merged, subnet._merge_elements(x, trained, s, p, spec.group_sizes, weights))


@SETTINGS
@given(sp=spec_and_params(), seed=st.integers(0, 10**6))
def test_extract_matches_numpy_ix(sp, seed):
    spec, params = sp
    if not spec.group_sizes or min(spec.group_sizes.values()) < 2:
        return
    p = istjax.uniform(pad=True).sample(jax.random.key(seed), spec.group_sizes, 2)
    sub = istjax.extract(params, p, spec)
    for s, x, y in zip(jax.tree.leaves(spec.leaves), jax.tree.leaves(params), jax.tree.leaves(sub)):
        for w in range(2):
            ix = []
            for dim, a in zip(x.shape, s.axes):
                if a is None:
                    ix.append(np.arange(dim))
                else:
                    u = np.asarray(p.indices[a.group][w])
                    u = u[u < spec.group_sizes[a.group]]
                    ix.append(np.concatenate([u + t * spec.group_sizes[a.group] for t in range(a.tiles)]))
            want = np.asarray(x)[np.ix_(*ix)]
            got = np.asarray(y[w])
            # padded slots (zeros) sit at the end of each tile; compare the real part only
            real = [np.arange(dim) if a is None else np.concatenate(
                [np.arange(len(i) // a.tiles) + t * (got.shape[k] // a.tiles) for t in range(a.tiles)])
                for k, (dim, a, i) in enumerate(zip(x.shape, s.axes, ix))]
            np.testing.assert_array_equal(got[np.ix_(*real)], want)


def test_merge_writes_trained_values_and_averages_shared():
    params = {"k": jnp.zeros((2, 4)), "b": jnp.zeros(())}
    spec = istjax.spec_from_table(params, {"k": (None, "h")})
    p = istjax.Partition({"h": jnp.array([[0, 2], [1, 3]], jnp.int32)}, {"h": jnp.ones((2, 2), bool)})
    sub = {"k": jnp.stack([jnp.full((2, 2), 1.0), jnp.full((2, 2), 2.0)]), "b": jnp.array([1.0, 3.0])}
    out = istjax.merge(params, sub, p, spec)
    np.testing.assert_array_equal(out["k"], [[1, 2, 1, 2], [1, 2, 1, 2]])
    assert float(out["b"]) == 2.0


def test_merge_overlap_averages_by_count():
    params = {"k": jnp.zeros((3,))}
    spec = istjax.spec_from_table(params, {"k": ("h",)})
    p = istjax.Partition({"h": jnp.array([[0, 1], [1, 3]], jnp.int32)},  # unit 2 held by nobody; 3 = padding
                         {"h": jnp.array([[True, True], [True, False]])})
    sub = {"k": jnp.array([[1.0, 2.0], [4.0, 9.0]])}
    out = istjax.merge(params, sub, p, spec, disjoint=False)
    np.testing.assert_array_equal(out["k"], [1.0, 3.0, 0.0])


def test_concat_input_is_idx_and_idx_plus_h():
    H = 4
    params = {"w": jnp.arange(2 * H * 3, dtype=jnp.float32).reshape(2 * H, 3)}
    spec = istjax.spec_from_table(params, {"w": ("h*2", None)})
    p = istjax.Partition({"h": jnp.array([[1, 3], [0, 2]], jnp.int32)}, {"h": jnp.ones((2, 2), bool)})
    sub = istjax.extract(params, p, spec)
    np.testing.assert_array_equal(sub["w"][0], np.asarray(params["w"])[[1, 3, 1 + H, 3 + H]])


def test_conv_channels_partitioned_on_both_sides():
    # conv1: [3, 3, Cin, C] out-channels group c; conv2: [3, 3, C, Cout] in-channels group c.
    params = {"conv1": jnp.ones((3, 3, 2, 6)), "conv2": jnp.ones((3, 3, 6, 5)), "bias1": jnp.ones(6)}
    spec = istjax.spec_from_table(params, {"conv1": (None, None, None, "c"), "conv2": (None, None, "c", None),
                                           "bias1": ("c",)})
    assert spec.group_sizes == {"c": 6}
    p = istjax.uniform().sample(jax.random.key(0), spec.group_sizes, 3)
    shapes = jax.tree.map(jnp.shape, istjax.extract(params, p, spec))
    assert shapes == {"conv1": (3, 3, 3, 2, 2), "conv2": (3, 3, 3, 2, 5), "bias1": (3, 2)}


def test_uniform_idle_gives_each_unit_to_one_random_worker():
    """A group smaller than W (ResIST's dealt first blocks): every unit held by exactly one worker, the others
    padding; which worker holds it changes with the key. Without idle such a group is refused; idle needs pad."""
    s = istjax.uniform(pad=True, idle=True)
    assert s.slots({"g": 1, "h": 2}, 4) == {"g": 1, "h": 1}
    holders = set()
    for k in range(12):
        p = s.sample(jax.random.key(k), {"g": 1, "h": 2}, 4)
        for g, n in (("g", 1), ("h", 2)):
            idx, mask = np.asarray(p.indices[g]), np.asarray(p.mask[g])
            assert sorted(idx[mask].tolist()) == list(range(n)) and (idx[~mask] == n).all()
        holders.add(int(np.argmax(np.asarray(p.mask["g"])[:, 0])))
    assert len(holders) > 1
    with pytest.raises(ValueError, match="larger than neuron group 'g'"):
        istjax.uniform(pad=True).slots({"g": 1}, 4)
    with pytest.raises(ValueError, match=r"idle=True\) needs pad=True"):
        istjax.uniform(idle=True)
