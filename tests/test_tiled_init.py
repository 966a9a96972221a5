"""`istjax.core.tiled_init`: any block of a tiled leaf, drawn alone, is the same slice of the whole draw; a rank's
sharded init (IST's owners, tensor parallel's shards) equals the full init cut, and never makes the whole leaf."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from istjax.core import shard as shard_lib
from istjax.core import tiled_init
from istjax.core.task import classifier
from istjax.models.sparse_mlp import SparseMLP

# 15 draws, as test_partition.py: each draws a new shape and compiles anew (25 took 53-64 s of the default suite).
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def blocks(draw):
    shape = tuple(draw(st.lists(st.integers(1, 23), min_size=1, max_size=3)))
    axis = draw(st.integers(0, len(shape) - 1))
    size = draw(st.integers(1, shape[axis]))
    start = draw(st.integers(0, shape[axis] - size))
    return shape, axis, start, size, draw(st.integers(1, 9)), draw(st.booleans())


@SETTINGS
@given(case=blocks(), seed=st.integers(0, 2**31 - 1))
def test_a_block_drawn_alone_is_the_slice_of_the_whole_leaf(case, seed):
    shape, axis, start, size, tile, truncated = case
    init = tiled_init.Tiled(truncated=truncated, tile=tile)
    key = jax.random.key(seed)
    whole = init(key, shape)
    want = np.asarray(jax.lax.slice_in_dim(whole, start, start + size, axis=axis))
    alone = init.block(key, shape, jnp.float32, axis, start, size)
    traced = jax.jit(lambda s: init.block(key, shape, jnp.float32, axis, s, size))(start)
    assert whole.shape == shape
    # The same computation on the same tiles: equal to the last bit under XLA's default optimisation; the suite
    # compiles at -O0 (tests/conftest.py), where an array's last, unvectorised elements may round once differently.
    np.testing.assert_array_max_ulp(alone, want, maxulp=1)
    np.testing.assert_allclose(traced, want, rtol=1e-6, atol=1e-7)  # compiled: the same up to XLA's rounding


def test_the_entries_have_the_stated_scale_and_differ_by_key():
    k0, k1 = jax.random.key(0), jax.random.key(1)
    lecun = tiled_init.lecun_normal()(k0, (400, 300))
    normal = tiled_init.normal(2.0)(k0, (400, 300))
    assert abs(float(lecun.std()) * 20.0 - 1.0) < 0.02 and float(jnp.abs(lecun).max()) <= 2.0 / 20 / 0.8796 + 1e-6
    assert abs(float(normal.std()) - 2.0) < 0.03 and abs(float(normal.mean())) < 0.02
    assert not np.array_equal(tiled_init.normal()(k1, (400, 300)), tiled_init.normal()(k0, (400, 300)))
    tiles = np.asarray(tiled_init.normal(tile=100)(k0, (400, 300))).reshape(4, 100, 3, 100).transpose(0, 2, 1, 3)
    corr = np.corrcoef(tiles.reshape(12, -1))
    assert np.abs(corr[~np.eye(12, dtype=bool)]).max() < 0.05  # every tile its own draw


def test_block_outside_deferred_or_of_another_initialiser_slices():
    x = nn.initializers.normal(1.0)(jax.random.key(0), (6, 8))
    assert np.array_equal(tiled_init.block(x, 1, 2, 4), x[:, 2:6])
    with tiled_init.deferred():
        y = tiled_init.normal()(jax.random.key(0), (6, 8))
        z = y + 0.0  # not the recorded array: sliced, not redrawn
        assert np.array_equal(tiled_init.block(z, 0, 1, 3), y[1:4])
    with pytest.raises(ValueError, match="size=9"):
        tiled_init.normal().block(jax.random.key(0), (6, 8), jnp.float32, 1, 0, 9)


def _close(a, b) -> bool:  # compiled programs agree up to XLA's rounding
    return jax.tree.all(jax.tree.map(lambda x, y: bool(np.allclose(x, y, rtol=1e-6, atol=1e-7)), a, b))


def _sparse_task(hidden=64, features=3000, labels=2000):
    model = SparseMLP(hidden=(hidden,), num_classes=labels, num_features=features)
    return classifier(model, jnp.zeros((2, 8, 2), jnp.float32), num_classes=labels)


def test_an_owners_shard_drawn_alone_equals_the_full_init_sharded_and_is_not_made_whole():
    task = _sparse_task(hidden=512, features=20000, labels=20000)  # blocks of 128 units: whole tiles
    spec = task.spec.leaves
    layout = shard_lib.Layout(num_owners=4, owner=2, num_workers=4, group_sizes={"hidden_0": 512},
                              owned=frozenset({"hidden_0"}))
    key = jax.random.key(5)
    full = task.init(key)

    def owned(k):
        with tiled_init.deferred():
            return jax.tree.map(layout.shard, spec, task.init(k))

    mine = jax.jit(owned)(key)
    want = jax.tree.map(layout.shard, spec, full)
    assert _close(mine, want)
    assert mine["bag"]["kernel"].shape == (20000, 128) and mine["dense_out"]["kernel"].shape == (128, 20000)
    memory = jax.jit(owned).lower(key).compile().memory_analysis()
    whole_bytes = sum(x.size * 4 for x in jax.tree.leaves(full))
    assert memory.output_size_in_bytes * 3 < whole_bytes and memory.temp_size_in_bytes < whole_bytes / 2


def test_a_tensor_parallel_shard_drawn_alone_equals_the_full_init_cut():
    import optax

    from istjax.algorithms import tensor

    task = _sparse_task(hidden=32, features=500, labels=600)
    alg = tensor.tensor_parallel_pieces(task, optax.adam(1e-3), num_workers=2, local_steps=1, batch_size=4)
    key = jax.random.key(1)
    whole = alg.init(key)
    for index in (0, 1):
        shard = jax.jit(alg.tensor.init)(key, index)
        want = alg.tensor.cut(whole, index)
        assert _close(shard.params, want.params) and _close(shard.opt_state, want.opt_state)
