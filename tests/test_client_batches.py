"""Federated client sampling and the sampled clients' local batches (issue 58, item 2; istjax/data/client_batches.py),
read by hand on 12 examples whose feature is their own id, held by 3 clients of 2, 4 and 6 examples."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from istjax.core.errors import ArgError
from istjax.data import client_batches
from istjax.data.client_batches import ClientBatchFn, client_sampler, make_client_batch_fn
from istjax.data.clients import ClientSplit, by_group, iid
from istjax.data.dataset import Dataset

# Client 0 holds {3, 9}, client 1 {0, 5, 7, 11}, client 2 {1, 2, 4, 6, 8, 10}; x[i] = [i, -i], y[i] = i % 3.
GROUPS = np.array([1, 2, 2, 0, 2, 1, 2, 1, 2, 0, 2, 1])
SPLIT = by_group(GROUPS)
HELD = [[3, 9], [0, 5, 7, 11], [1, 2, 4, 6, 8, 10]]
X = np.stack([np.arange(12), -np.arange(12)], axis=1).astype(np.float32)
DATA = Dataset("ids", X, np.arange(12) % 3, X[:2], np.arange(2), 3)


def _batches(clients_per_round=2, epochs=2, batch_size=4, seed=1, sampler_seed=0, **kw):
    sampler = client_sampler(SPLIT, clients_per_round=clients_per_round, seed=sampler_seed)
    return make_client_batch_fn(DATA, SPLIT, sampler, epochs=epochs, batch_size=batch_size, seed=seed, **kw)


def test_the_split_is_the_one_read_by_hand():
    assert [c.tolist() for c in SPLIT.indices] == HELD and SPLIT.sizes.tolist() == [2, 4, 6]


# ----------------------------------------------------------------------------------------------------------------
# The sampler
def test_the_clients_of_a_round_are_distinct_sorted_and_a_function_of_seed_and_round():
    sampler = client_sampler(SPLIT, clients_per_round=2, seed=0)
    draws = [sampler.ids(r).tolist() for r in range(30)]
    assert all(len(d) == 2 and d[0] < d[1] and set(d) <= {0, 1, 2} for d in draws)
    assert draws == [client_sampler(SPLIT, clients_per_round=2, seed=0).ids(r).tolist() for r in range(30)]
    assert len({tuple(d) for d in draws}) == 3  # the rounds differ: all three pairs appear
    other = [client_sampler(SPLIT, clients_per_round=2, seed=1).ids(r).tolist() for r in range(30)]
    assert other != draws
    assert sampler.ids(jnp.int32(7)).dtype == jnp.int32
    assert jax.jit(sampler.ids)(jnp.int32(7)).tolist() == draws[7]


def test_every_client_is_drawn_about_equally_often():
    split = iid(np.zeros(100, np.int64), num_clients=10, seed=0)
    sampler = client_sampler(split, fraction=0.3, seed=4)
    assert sampler.clients_per_round == 3
    ids = np.asarray(jax.vmap(sampler.ids)(jnp.arange(3000, dtype=jnp.int32)))  # [3000, 3]
    assert (np.diff(ids, axis=1) > 0).all()
    counts = np.bincount(ids.reshape(-1), minlength=10)
    assert counts.sum() == 9000 and np.abs(counts - 900).max() < 100, counts  # sd 25: 4 sd


def test_the_server_weights_are_the_drawn_clients_sizes_over_their_sum():
    sampler = client_sampler(SPLIT, clients_per_round=2, seed=0)
    for r in range(6):
        ids = sampler.ids(r).tolist()
        want = np.array([[2, 4, 6][c] for c in ids], np.float32)
        np.testing.assert_allclose(sampler.weights(r), want / want.sum(), rtol=1e-6)
    np.testing.assert_allclose(client_sampler(SPLIT, fraction=1.0, seed=0).weights(0), [2 / 12, 4 / 12, 6 / 12])


def test_a_fraction_rounds_half_up_and_draws_at_least_one_client():
    assert client_sampler(SPLIT, fraction=0.5, seed=0).clients_per_round == 2  # 1.5 -> 2
    assert client_sampler(SPLIT, fraction=0.1, seed=0).clients_per_round == 1  # 0.3 -> 0 -> at least 1
    assert client_sampler(SPLIT, fraction=1, seed=0).ids(3).tolist() == [0, 1, 2]


def test_the_sampler_records_itself_as_json():
    record = client_sampler(SPLIT, fraction=0.5, seed=3).to_record()
    assert record == {"clients_per_round": 2, "num_clients": 3, "fraction": 0.5, "seed": 3, "slots": 2}
    assert json.loads(json.dumps(record)) == record
    assert client_sampler(SPLIT, clients_per_round=1, seed=0).to_record()["fraction"] is None
    assert "2 of 3 clients" in repr(client_sampler(SPLIT, fraction=0.5, seed=3))


# ----------------------------------------------------------------------------------------------------------------
# The local work of a round
def _check_round(batch_fn: ClientBatchFn, round_index: int) -> None:
    """The contract of the module docstring, read from the examples' ids in x."""
    e_, b_ = batch_fn.epochs, batch_fn.batch_size
    batch = batch_fn(round_index)
    ids = np.asarray(batch["x"][..., 0]).astype(int)  # [M, K, B]
    assert (np.asarray(batch["x"][..., 1]) == -ids).all() and (np.asarray(batch["y"]) == ids % 3).all()
    weight = np.asarray(batch["weight"])
    assert set(np.unique(weight).tolist()) <= {0.0, 1.0}
    assert ids.shape == weight.shape == (batch_fn.num_workers, e_ * math.ceil(6 / b_), b_)
    for m, c in enumerate(batch_fn.sampler.ids(round_index).tolist()):
        held, n = HELD[c], len(HELD[c])
        s = math.ceil(n / b_)  # the client's steps per epoch
        assert set(ids[m].reshape(-1).tolist()) <= set(held)  # fill too: the client's own examples
        for e in range(e_):
            steps = slice(e * s, (e + 1) * s)
            real = ids[m, steps][weight[m, steps] == 1]
            assert sorted(real.tolist()) == held  # the epoch: a permutation of the client's examples
            assert (weight[m, steps].reshape(-1)[:n] == 1).all()  # in order, the rest of the last step filled
        assert (weight[m, e_ * s:] == 0).all()  # steps past its own are fill
        counts = np.bincount(ids[m][weight[m] == 1], minlength=12)
        assert counts[held].tolist() == [e_] * n and counts.sum() == e_ * n


@pytest.mark.parametrize("epochs,batch_size", [(1, 1), (2, 4), (3, 3), (2, "all"), (1, 5)])
def test_each_sampled_client_runs_its_epochs_over_its_own_examples(epochs, batch_size):
    batch_fn = _batches(clients_per_round=3, epochs=epochs, batch_size=batch_size)
    b = 6 if batch_size == "all" else batch_size
    assert batch_fn.batch_size == b and batch_fn.local_steps == epochs * math.ceil(6 / b)
    for r in (0, 1, 7):
        _check_round(batch_fn, r)


def test_batch_size_all_is_one_full_step_per_epoch():
    batch_fn = _batches(clients_per_round=3, epochs=2, batch_size="all")
    assert (batch_fn.local_steps, batch_fn.batch_size) == (2, 6)
    batch = batch_fn(0)
    assert np.asarray(batch["weight"]).sum(axis=(1, 2)).tolist() == [4.0, 8.0, 12.0]
    assert np.asarray(batch["weight"])[:, 0].sum(axis=1).tolist() == [2.0, 4.0, 6.0]  # each epoch one step
    _check_round(_batches(clients_per_round=2, epochs=1, batch_size="all"), 4)


def test_the_hand_read_fill_of_the_smallest_client():
    """Client 0 (examples 3 and 9) at B = 4, E = 2: steps 0 and 1 are its epochs, 2 real examples then 2 fills of
    the same epoch's order; K = 2 * ceil(6 / 4) = 4, so steps 2 and 3 are whole fill steps."""
    batch_fn = _batches(clients_per_round=3, epochs=2, batch_size=4)
    batch = batch_fn(2)
    ids, weight = np.asarray(batch["x"][0, ..., 0]).astype(int), np.asarray(batch["weight"][0])
    assert weight.tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    for step in (0, 1):
        first, second = ids[step, :2].tolist()
        assert {first, second} == {3, 9} and ids[step, 2:].tolist() == [first, second]


def test_the_epochs_are_fresh_permutations():
    batch_fn = _batches(clients_per_round=3, epochs=1, batch_size=6)
    orders = {tuple(np.asarray(batch_fn(r)["x"][2, 0, :, 0]).astype(int).tolist()) for r in range(40)}
    assert len(orders) > 30  # 720 orders of client 2's 6 examples
    firsts = np.asarray(jax.vmap(lambda r: batch_fn.indices(r)[0][1, 0, 0])(jnp.arange(800, dtype=jnp.int32)))
    counts = np.bincount(firsts, minlength=12)[HELD[1]]
    assert counts.sum() == 800 and np.abs(counts - 200).max() < 60, counts  # sd 12


def test_jit_in_the_round_equals_the_eager_call_and_apply():
    batch_fn = _batches()
    eager = batch_fn(5)
    for other in (jax.jit(batch_fn)(jnp.int32(5)), jax.jit(batch_fn.apply)(batch_fn.data, jnp.int32(5))):
        assert other.keys() == eager.keys() == {"x", "y", "weight"}
        for k in eager:
            assert other[k].dtype == eager[k].dtype and np.array_equal(other[k], eager[k])
    assert eager["x"].dtype == jnp.float32 and eager["y"].dtype == jnp.int32 and eager["weight"].dtype == jnp.float32


def test_a_ranks_rows_equal_the_full_rounds_rows():
    full = _batches(clients_per_round=3)
    own = _batches(clients_per_round=3, workers=(1, 3))
    assert own.rows == (1, 3) and own.clients(4).tolist() == full.sampler.ids(4).tolist()[1:]
    for r in (0, 4):
        whole = full(r)
        for part in (own(r), own(r, workers=(1, 3)), full(r, workers=(1, 3)), jax.jit(own)(jnp.int32(r))):
            for k in whole:
                assert np.array_equal(part[k], whole[k][1:3])
    with pytest.raises(ArgError, match="workers"):
        own(0, workers=(0, 1))
    with pytest.raises(ArgError, match="workers"):
        _batches(clients_per_round=3, workers=(2, 4))


def test_two_builds_with_the_same_seeds_draw_the_same_and_seeds_matter():
    a, b = _batches(seed=3)(6), _batches(seed=3)(6)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    other = _batches(seed=4)(6)  # the same clients, other orders
    assert _batches(seed=4).sampler.ids(6).tolist() == _batches(seed=3).sampler.ids(6).tolist()
    assert not np.array_equal(np.asarray(other["x"]), np.asarray(a["x"]))


def test_equal_shapes_share_compiled_code():
    _batches(seed=1)(0)
    size = client_batches._jit_batch._cache_size()
    _batches(seed=2, sampler_seed=5)(3)
    assert client_batches._jit_batch._cache_size() == size


def test_the_batch_function_describes_itself():
    text = repr(_batches(clients_per_round=2, epochs=2, batch_size=4, seed=1))
    for part in ("clients_per_round=2 of 3", "epochs=2", "batch_size=4", "local_steps=4", "max_client_size=6",
                 "seed=1"):
        assert part in text
    assert _batches().describe() == repr(_batches())


# ----------------------------------------------------------------------------------------------------------------
# Refusals: each names its field, the value and the fix
@pytest.mark.parametrize("kwargs,field,words", [
    ({"fraction": 0.0}, "fraction", r"fraction=0.0.*\(0, 1\].*fraction=0.1"),
    ({"fraction": 1.5}, "fraction", r"fraction=1.5"),
    ({"fraction": True}, "fraction", r"fraction=True"),
    ({"clients_per_round": 0}, "clients_per_round", r"clients_per_round=0 must be >= 1"),
    ({"clients_per_round": 4}, "clients_per_round", r"clients_per_round=4 is more than the split's 3.*"
                                                    r"clients_per_round=3"),
    ({"fraction": 0.5, "clients_per_round": 2}, ("fraction", "clients_per_round"), r"both.*fraction=0.1 or "),
    ({}, ("fraction", "clients_per_round"), r"neither"),
    ({"clients_per_round": 1, "seed": -1}, "seed", r"seed=-1"),
])
def test_a_bad_sampler_is_refused(kwargs, field, words):
    kwargs = {"seed": 0, **kwargs}
    with pytest.raises(ArgError, match=words) as info:
        client_sampler(SPLIT, **kwargs)
    assert info.value.arg == field


def test_a_split_with_an_empty_client_or_no_split_is_refused():
    empty = ClientSplit("groups", None, (np.arange(3), np.zeros(0, np.int64)), 3)
    with pytest.raises(ArgError, match=r"client 1 .*no examples.*min_size=1") as info:
        client_sampler(empty, clients_per_round=1, seed=0)
    assert info.value.arg == "split"
    with pytest.raises(ArgError, match="not a ClientSplit"):
        client_sampler(HELD, clients_per_round=1, seed=0)


@pytest.mark.parametrize("kwargs,field,words", [
    ({"epochs": 0}, "epochs", r"epochs=0 must be >= 1"),
    ({"batch_size": 0}, "batch_size", r"batch_size=0 must be >= 1"),
    ({"batch_size": "full"}, "batch_size", r"batch_size='full'.*batch_size='all' or 10\."),
    ({"batch_size": 7}, "batch_size", r"batch_size=7 is more than the largest client's 6.*batch_size='all' or "
                                      r"6\."),
    ({"batch_size": 2.5}, "batch_size", r"batch_size=2.5"),
    ({"seed": 2**32}, "seed", r"seed=4294967296"),
])
def test_bad_local_work_is_refused(kwargs, field, words):
    with pytest.raises(ArgError, match=words) as info:
        _batches(**kwargs)
    assert info.value.arg == field


def test_a_split_or_sampler_of_other_data_is_refused():
    sampler = client_sampler(SPLIT, clients_per_round=2, seed=0)
    short = Dataset("ids", X[:10], np.arange(10) % 3, X[:2], np.arange(2), 3)
    with pytest.raises(ArgError, match=r"index 12 examples but the dataset's training split has 10") as info:
        make_client_batch_fn(short, SPLIT, sampler, epochs=1, batch_size=2, seed=0)
    assert info.value.arg == "split"
    other = client_sampler(iid(np.zeros(12, np.int64), 3, seed=0), clients_per_round=2, seed=0)  # sizes 4, 4, 4
    with pytest.raises(ArgError, match=r"not made from this split.*client_sampler\(split") as info:
        make_client_batch_fn(DATA, SPLIT, other, epochs=1, batch_size=2, seed=0)
    assert info.value.arg == "sampler"


def test_a_round_too_big_to_hold_is_refused_naming_the_largest_client(monkeypatch):
    nbytes = 2 * 6 * 2 * 2 * 4  # M = 2 slots x K = 2 * ceil(6 / 2) steps x B = 2 x 2 float32 features
    monkeypatch.setattr(client_batches, "MAX_ROUND_BYTES", nbytes - 1)
    with pytest.raises(ArgError, match=r"largest client's 6 examples \(median 4\).*split the largest clients") as info:
        _batches(clients_per_round=2, epochs=2, batch_size=2)
    assert info.value.arg == ("split", "clients_per_round", "epochs")
    monkeypatch.setattr(client_batches, "MAX_ROUND_BYTES", nbytes)
    assert _batches(clients_per_round=2, epochs=2, batch_size=2).local_steps == 6


# ----------------------------------------------------------------------------------------------------------------
# Pad slots: more worker slots than clients drawn (M clients on P processes that do not divide M)
def test_pad_slots_follow_the_drawn_clients_with_id_pad_and_weight_0():
    plain = client_sampler(SPLIT, clients_per_round=2, seed=0)
    padded = client_sampler(SPLIT, clients_per_round=2, seed=0, slots=4)
    assert (padded.clients_per_round, padded.slots, plain.slots) == (2, 4, 2)
    for r in range(8):
        drawn = plain.ids(r).tolist()
        assert padded.ids(r).tolist() == drawn + [client_batches.PAD] * 2 == drawn + [-1, -1]
        sizes = [[2, 4, 6][c] for c in drawn]
        want = [sizes[0] / sum(sizes), sizes[1] / sum(sizes), 0.0, 0.0]  # the same clients, the same weights
        np.testing.assert_allclose(padded.weights(r), want, rtol=1e-6)
        assert np.asarray(padded.weights(r))[2:].tolist() == [0.0, 0.0]
        np.testing.assert_array_equal(np.asarray(padded.weights(r))[:2], np.asarray(plain.weights(r)))
    assert jax.jit(padded.ids)(jnp.int32(5)).tolist() == padded.ids(5).tolist()
    record = padded.to_record()
    assert record["slots"] == 4 and record["clients_per_round"] == 2 and json.loads(json.dumps(record)) == record
    assert "2 of 3 clients a round (clients_per_round) in 4 slots" in repr(padded)
    assert client_sampler(SPLIT, clients_per_round=3, seed=0, slots=3).ids(0).tolist() == [0, 1, 2]


def test_a_pad_slot_trains_on_the_first_drawn_clients_examples_at_weight_0():
    """M = 2 clients in S = 3 slots, E = 2, B = 4 (K = 4): the drawn slots are exactly the unpadded batches; the
    pad slot holds the round's first drawn client's batches, every weight 0."""
    sampler = client_sampler(SPLIT, clients_per_round=2, seed=0, slots=3)
    padded = make_client_batch_fn(DATA, SPLIT, sampler, epochs=2, batch_size=4, seed=1)
    plain = _batches(clients_per_round=2, epochs=2, batch_size=4, seed=1)
    assert (padded.num_workers, padded.slots, padded.clients_per_round, padded.local_steps) == (3, 3, 2, 4)
    assert "slots=3" in repr(padded)
    for r in (0, 3, 7):
        b, want = padded(r), plain(r)
        assert b["x"].shape == (3, 4, 4, 2) and b["weight"].shape == (3, 4, 4)
        for k in want:
            np.testing.assert_array_equal(np.asarray(b[k][:2]), np.asarray(want[k]))  # drawn slots unchanged
            np.testing.assert_array_equal(np.asarray(b[k][2]), np.asarray(want[k][0]) * (k != "weight"))
        assert np.asarray(b["weight"][2]).sum() == 0.0
        first = sampler.ids(r).tolist()[0]
        assert set(np.asarray(b["x"][2, ..., 0]).astype(int).reshape(-1).tolist()) <= set(HELD[first])
        assert padded.clients(r).tolist() == sampler.ids(r).tolist()


def test_a_ranks_rows_of_padded_slots_equal_the_full_rounds_rows():
    """Two ranks of 2 slots for M = 3 clients: rank 1 holds the third client and the pad."""
    sampler = client_sampler(SPLIT, clients_per_round=3, seed=0, slots=4)
    full = make_client_batch_fn(DATA, SPLIT, sampler, epochs=1, batch_size=2, seed=2)
    own = make_client_batch_fn(DATA, SPLIT, sampler, epochs=1, batch_size=2, seed=2, workers=(2, 4))
    assert own.clients(1).tolist() == [2, -1]
    whole, part = full(1), own(1)
    for k in whole:
        np.testing.assert_array_equal(np.asarray(part[k]), np.asarray(whole[k][2:4]))
    assert np.asarray(part["weight"][1]).sum() == 0.0 and np.asarray(part["weight"][0]).sum() == 6.0


@pytest.mark.parametrize("slots,words", [(1, r"slots=1 is fewer than the 2 clients.*slots=2 or None"),
                                         (0, r"slots=0 must be >= 1")])
def test_fewer_slots_than_clients_are_refused(slots, words):
    with pytest.raises(ArgError, match=words) as info:
        client_sampler(SPLIT, clients_per_round=2, seed=0, slots=slots)
    assert info.value.arg == "slots"
