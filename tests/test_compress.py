"""Compressed exchanges (`istjax.core.compress`, issue 60 item 1): PowerSGD and top-k with error feedback, checked
by hand on small matrices, exact where the issue says they must be, and their bytes from the shapes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from istjax.core.compress import PowerState, identity, powersgd, stacked_exchange, top_k

M43 = np.array([[1.0, 2.0, 0.0], [0.0, 1.0, -1.0], [3.0, 0.0, 1.0], [1.0, 1.0, 1.0]], np.float32)


def _one_worker(compressor, change, state):
    """One worker's exchange (its mean is itself), its state a row of one."""
    approx, state = stacked_exchange(compressor, jax.tree.map(lambda x: x[None], change), state)
    return approx, jax.tree.map(lambda x: x[0], state)


def _row(state):
    return jax.tree.map(lambda x: x[None], state)


def test_powersgd_error_feedback_keeps_exactly_what_was_not_sent():
    c = powersgd(rank=1)
    q0 = np.array([[1.0], [1.0], [1.0]], np.float32)
    state = PowerState({"w": jnp.zeros((4, 3))}, {"w": jnp.asarray(q0)}, jnp.zeros((), jnp.int32))
    approx, state = _one_worker(c, {"w": jnp.asarray(M43)}, _row(state))
    p = M43 @ q0
    p = p / np.linalg.norm(p)  # orthonormalised (one column)
    q1 = M43.T @ p
    np.testing.assert_allclose(approx["w"], p @ q1.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.residual["w"], M43 - p @ q1.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.q["w"], q1, rtol=1e-5)  # the next exchange's warm start
    assert int(state.exchanges) == 1
    # A zero change next: what is sent is the residual's approximation, from the warm-started Q.
    approx2, state2 = _one_worker(c, {"w": jnp.zeros((4, 3))}, _row(state))
    r = M43 - p @ q1.T
    p2 = r @ q1
    p2 = p2 / np.linalg.norm(p2)
    np.testing.assert_allclose(approx2["w"], p2 @ (r.T @ p2).T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(approx2["w"] + state2.residual["w"], r, rtol=1e-5, atol=1e-6)


def test_powersgd_at_the_mean_changes_rank_is_exact_averaging():
    """Workers' changes U V_i^T share U [6, 2]: their mean has rank 2, and rank-2 PowerSGD sends it exactly; the
    residuals (each worker's own change minus the mean's approximation) sum to zero."""
    ku, kv, kq = jax.random.split(jax.random.key(0), 3)
    u = jax.random.normal(ku, (6, 2))
    changes = {"w": jnp.einsum("nr,wmr->wnm", u, jax.random.normal(kv, (3, 5, 2))), "b": jnp.arange(15.0).reshape(3, 5)}
    c = powersgd(rank=2)
    state = c.init(jax.tree.map(lambda x: x[0], changes), kq, 3)
    approx, state = stacked_exchange(c, changes, state)
    np.testing.assert_allclose(approx["w"], jnp.mean(changes["w"], 0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(approx["b"], jnp.mean(changes["b"], 0))  # a vector travels whole
    np.testing.assert_allclose(jnp.sum(state.residual["w"], 0), 0.0, atol=1e-4)
    assert state.q["b"] == () and state.q["w"].shape == (3, 5, 2)
    np.testing.assert_array_equal(state.q["w"][0], state.q["w"][2])  # every worker holds the same Q


def test_powersgd_uncompressed_start():
    c = powersgd(rank=1, start_exchanges=1)
    state = c.init({"w": jnp.zeros((4, 3))}, jax.random.key(1), 1)
    approx, state = _one_worker(c, {"w": jnp.asarray(M43)}, state)
    np.testing.assert_allclose(approx["w"], M43, rtol=1e-6)
    np.testing.assert_array_equal(state.residual["w"], 0.0)
    approx, state = _one_worker(c, {"w": jnp.asarray(M43)}, _row(state))  # compressed from the second
    assert not np.allclose(approx["w"], M43, atol=1e-3)
    np.testing.assert_allclose(approx["w"] + state.residual["w"], M43, rtol=1e-5, atol=1e-5)


def test_top_k_by_hand_and_at_every_entry_exact():
    c = top_k(0.5)
    approx, residual = _one_worker(c, {"v": jnp.array([3.0, -5.0, 1.0, 4.0])}, c.init({"v": jnp.zeros(4)}, None, 1))
    np.testing.assert_array_equal(approx["v"], [0.0, -5.0, 0.0, 4.0])
    np.testing.assert_array_equal(residual["v"], [3.0, 0.0, 1.0, 0.0])
    approx, residual = _one_worker(c, {"v": jnp.array([0.0, 0.0, 0.0, 0.0])}, _row(residual))
    np.testing.assert_array_equal(approx["v"], [3.0, 0.0, 1.0, 0.0])  # the residual goes next
    changes = {"w": jax.random.normal(jax.random.key(2), (3, 4, 5))}
    every = top_k(1.0, num_workers=3)
    approx, residual = stacked_exchange(every, changes, every.init({"w": changes["w"][0]}, None, 3))
    np.testing.assert_allclose(approx["w"], jnp.mean(changes["w"], 0), rtol=1e-6)
    np.testing.assert_array_equal(residual["w"], 0.0)


def test_identity_is_the_plain_mean():
    changes = {"w": jax.random.normal(jax.random.key(3), (2, 3, 3))}
    approx, state = stacked_exchange(identity(), changes, identity().init(changes, None, 2))
    np.testing.assert_allclose(approx["w"], jnp.mean(changes["w"], 0))


def test_bytes_from_the_shapes():
    tree = {"w": jax.ShapeDtypeStruct((100, 50), jnp.float32), "b": jax.ShapeDtypeStruct((50,), jnp.float32),
            "tiny": jax.ShapeDtypeStruct((2, 2), jnp.float32)}
    assert powersgd(rank=2).sent_bytes(tree) == 4 * ((100 + 50) * 2 + 50 + 4)  # a 2x2 is not worth factoring
    assert powersgd(rank=2).received_bytes(tree) == powersgd(rank=2).sent_bytes(tree)
    assert top_k(0.01, num_workers=4).sent_bytes(tree) == 8 * (50 + 1 + 1)
    assert top_k(0.01, num_workers=4).received_bytes(tree) == 4 * 8 * 52
    assert identity().sent_bytes(tree) == 4 * (5000 + 50 + 4)


@pytest.mark.parametrize("make,arg,value,message", [(powersgd, "rank", 0, "rank=0"),
                                                    (powersgd, "start_exchanges", -1, "start_exchanges=-1"),
                                                    (top_k, "fraction", 0.0, "fraction=0.0"),
                                                    (top_k, "fraction", 1.5, "fraction=1.5")])
def test_bad_settings_are_refused(make, arg, value, message):
    with pytest.raises(ValueError, match=message):
        make(**{arg: value})
