"""Checkpoints: exact round trip of a TrainState (NamedTuple optimizer states, typed PRNG keys), retention, and
fallback past a damaged newest checkpoint."""

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from istjax.core.state import TrainState
from istjax.launch.checkpoint import Checkpointer, state_to_tree, tree_to_state


def make_state(seed: int, round_: int) -> TrainState:
    k1, k2 = jax.random.split(jax.random.key(seed))
    params = {"dense": {"kernel": jax.random.normal(k1, (5, 3))}, "bias": jnp.arange(3, dtype=jnp.float32) + seed}
    opt_state = optax.chain(optax.sgd(0.1, momentum=0.9), optax.scale_by_adam()).init(params)
    opt_state = jax.tree.map(lambda x: x + seed if jnp.issubdtype(x.dtype, jnp.floating) else x, opt_state)
    model_state = {"batch_stats": {"bn": {"mean": jnp.arange(3, dtype=jnp.float32) * seed}}}
    return TrainState(params, model_state, opt_state, k2, jnp.asarray(round_, jnp.int32))


def assert_same(a: TrainState, b: TrainState):
    assert jax.tree.structure(a) == jax.tree.structure(b)  # NamedTuples stay NamedTuples, key stays a key
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_state_tree_round_trip():
    s = make_state(3, 7)
    t = state_to_tree(s)
    assert t["key_data"].dtype == jnp.uint32
    assert_same(tree_to_state(t), s)


def test_save_restore_exact_and_typed(tmp_path):
    s = make_state(1, 5)
    with Checkpointer(tmp_path / "ck") as ck:
        assert ck.save(s, {"wall_time_s": 1.5}) == 5
        assert ck.save(s) is None  # an existing step is not rewritten
        restored, meta = ck.restore(5, like=make_state(0, 0))
    assert meta["wall_time_s"] == 1.5 and meta["round"] == 5
    assert type(restored.opt_state[0][0]).__name__ == "TraceState"  # not a list
    assert_same(restored, s)
    # The next key drawn from the restored key equals the original's.
    np.testing.assert_array_equal(jax.random.uniform(restored.key, (4,)), jax.random.uniform(s.key, (4,)))


def test_keeps_max_to_keep(tmp_path):
    with Checkpointer(tmp_path / "ck", max_to_keep=3) as ck:
        for r in range(1, 6):
            ck.save(make_state(r, r))
        assert ck.steps() == [3, 4, 5]


@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_damaged_latest_falls_back_to_previous(tmp_path, damage):
    with Checkpointer(tmp_path / "ck") as ck:
        for r in (1, 2, 3):
            ck.save(make_state(r, r))
    state_dir = tmp_path / "ck" / "3" / "state"
    if damage == "truncate":  # a half-written file
        for f in state_dir.rglob("*"):
            if f.is_file():
                f.write_bytes(f.read_bytes()[:7])
    else:  # a missing item
        shutil.rmtree(state_dir)
    messages = []
    with Checkpointer(tmp_path / "ck") as ck:
        state, _, step = ck.restore_latest(make_state(0, 0), log=messages.append)
        assert step == 2
        assert_same(state, make_state(2, 2))
        assert len(messages) == 1 and "damaged" in messages[0] and "/3" in messages[0]
        assert ck.steps() == [1, 2]
        assert (tmp_path / "ck_corrupt" / "3").is_dir()
        assert ck.save(make_state(3, 3)) == 3  # the step can be written again
        assert ck.restore_latest(make_state(0, 0))[2] == 3


def test_restore_latest_empty_and_read_only(tmp_path):
    with Checkpointer(tmp_path / "none", enabled=False) as ck:
        assert ck.restore_latest(make_state(0, 0)) is None
        assert ck.save(make_state(1, 1)) is None
    assert not (tmp_path / "none").exists()
