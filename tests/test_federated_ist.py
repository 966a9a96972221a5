"""IST on sampled clients (issue 58, item 4: `istjax.fedist`): the merge weighted by the clients' example counts,
by hand and against today's count-average; every round equal to the plain reference loop; one client with W = 1 is
plain SGD of the whole network; IST's bytes; the command line; the MPI parameter server."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
from istjax.algorithms.reference import reference_round
from istjax.core.partition import Partition
from istjax.core.spec import GroupAxis, LeafSpec, SubnetSpec
from istjax.core.subnet import merge
from istjax.launch import cli
from istjax.models import MLP
from test_federated import FixedClients  # the same fixed-clients sampler

D, C = 6, 3


def _task(batch_norm=False, hidden=(8,)):
    model = MLP(hidden=hidden, num_classes=C, batch_norm=batch_norm, output_batch_norm=False, use_bias=True)
    return istjax.classifier(model, jnp.ones((4, D)), MLP.rules(len(hidden)), num_classes=C)


def _batches(W, K, B=4, seed=1, steps=None):
    """`[W, K, B]` batches; with ``steps``, client w's first ``steps[w]`` steps are real and the rest padding."""
    kx, ky = jax.random.split(jax.random.key(seed))
    out = {"x": jax.random.normal(kx, (W, K, B, D)), "y": jax.random.randint(ky, (W, K, B), 0, C)}
    if steps is not None:
        out["weight"] = jnp.asarray([[[1.0] * B if k < n else [0.0] * B for k in range(K)] for n in steps])
    return out


def _close(a, b, **kw):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), **({"rtol": 2e-5, "atol": 2e-6} | kw))


# A leaf of 5 units held by 2 workers that overlap on units 1 and 2 (unit 4: no one), a [5, 5] leaf cut on both
# axes by the same group, and a shared leaf.
_H = GroupAxis("h")
_SPEC = SubnetSpec({"v": LeafSpec((_H,)), "m": LeafSpec((_H, _H)), "b": LeafSpec((None,))}, {"h": 5})
_PART = Partition({"h": jnp.asarray([[0, 1, 2], [1, 2, 3]], jnp.int32)}, {"h": jnp.ones((2, 3), bool)})


def _tiny(seed):
    rng = np.random.default_rng(seed)
    params = {"v": rng.normal(size=5), "m": rng.normal(size=(5, 5)), "b": rng.normal(size=2)}
    sub = {"v": rng.normal(size=(2, 3)), "m": rng.normal(size=(2, 3, 3)), "b": rng.normal(size=(2, 2))}
    return (jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), params),
            jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), sub))


def test_weighted_merge_by_hand_on_an_overlapping_partition():
    params, sub = _tiny(0)
    weights = (0.25, 0.75)
    got = merge(params, sub, _PART, _SPEC, disjoint=False, weights=jnp.asarray(weights))
    units = ([0, 1, 2], [1, 2, 3])
    s = {k: np.asarray(x) for k, x in sub.items()}

    def by_hand(old, *index):  # the holders' weight * value summed over their weights; no holder: the old value
        held = [(w, [units[w].index(i) for i in index]) for w in range(2) if all(i in units[w] for i in index)]
        if not held:
            return old
        leaf = "v" if len(index) == 1 else "m"
        return sum(weights[w] * s[leaf][(w, *at)] for w, at in held) / sum(weights[w] for w, _ in held)

    want_v = [by_hand(float(params["v"][i]), i) for i in range(5)]
    want_m = [[by_hand(float(params["m"][i, j]), i, j) for j in range(5)] for i in range(5)]
    np.testing.assert_allclose(np.asarray(got["v"]), want_v, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(got["m"]), want_m, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(got["b"]), 0.25 * s["b"][0] + 0.75 * s["b"][1], rtol=1e-6)
    # Units 0 and 3 (one holder) take that worker's value; 1 and 2 lean towards worker 1; unit 4 is untouched.
    assert float(got["v"][0]) == s["v"][0, 0] and float(got["v"][3]) == s["v"][1, 2]
    assert float(got["v"][4]) == float(params["v"][4])


@pytest.mark.parametrize("disjoint", [False, True])
def test_uniform_weights_merge_as_today(disjoint):
    params, sub = _tiny(1)
    part = _PART if not disjoint else Partition({"h": jnp.asarray([[0, 2], [1, 4]], jnp.int32)},
                                                {"h": jnp.ones((2, 2), bool)})
    if disjoint:
        sub = {"v": sub["v"][:, :2], "m": sub["m"][:, :2, :2], "b": sub["b"]}
    plain = merge(params, sub, part, _SPEC, disjoint=disjoint)
    for weights in ([0.5, 0.5], [1 / 3, 1 / 3]):  # summing to 1, or not: only their ratios count
        got = merge(params, sub, part, _SPEC, disjoint=disjoint, weights=jnp.asarray(weights, jnp.float32))
        _close(got, plain, rtol=1e-6, atol=0)
    # Halves are exact: bit for bit.
    _close(merge(params, sub, part, _SPEC, disjoint=disjoint, weights=jnp.asarray([0.5, 0.5])), plain, rtol=0, atol=0)


def test_plain_server_on_equal_clients_is_ist_bit_for_bit():
    task = _task()
    fed = istjax.fedist(task, optax.sgd(0.3), num_workers=2, local_steps=2, clients=FixedClients((5, 5)))
    ist = istjax.ist(task, optax.sgd(0.3), num_workers=2, local_steps=2)
    assert fed.outer_optimizer is None  # sgd at 1 without momentum: no server step at all
    s_fed = s_ist = fed.init(jax.random.key(0))
    for r in range(2):
        b = _batches(2, 2, seed=r)
        s_fed, s_ist = fed.round(s_fed, b)[0], ist.round(s_ist, b)[0]
        _close(s_fed.params, s_ist.params, rtol=0, atol=0)


@pytest.mark.parametrize("options", [
    {},
    {"server_momentum": 0.9, "server_learning_rate": 0.8},
    {"server_optimizer": "adam", "server_learning_rate": 0.05},
    {"sampler": istjax.overlapping(6)},  # 6 of the 8 units each: 4 held by both clients
])
def test_rounds_equal_reference_loop_with_unequal_padded_clients(options):
    task = _task(batch_norm=True)
    # (Client SGD: Adam would blow the first layer's bias, whose gradient before BatchNorm is rounding noise, up to
    # steps of its learning rate that differ between any two summation orders.)
    alg = istjax.fedist(task, optax.sgd(0.2, momentum=0.5), num_workers=2, local_steps=3,
                        clients=FixedClients((2, 7)), **options)
    state = alg.init(jax.random.key(0))
    for r in range(2):
        b = _batches(2, 3, seed=r, steps=(1, 3))  # client 0's last two steps are padding
        fast = alg.round(state, b)[0]
        slow = reference_round(alg, state, b)
        _close(fast.params, slow.params, rtol=1e-4, atol=1e-5)
        _close(fast.model_state, slow.model_state, rtol=1e-4, atol=1e-5)
        _close(fast.opt_state, slow.opt_state, rtol=1e-4, atol=1e-5)
        state = fast
    # Against IST's count-average: the unequal weights moved the shared output bias.
    ist = istjax.ist(task, optax.sgd(0.2, momentum=0.5), num_workers=2, local_steps=3, sampler=options.get("sampler"))
    b = _batches(2, 3, seed=0, steps=(1, 3))
    start = alg.init(jax.random.key(0))
    bias = lambda s: np.asarray(s.params["dense_out"]["bias"])  # noqa: E731
    assert not np.allclose(bias(alg.round(start, b)[0]), bias(ist.round(ist.init(jax.random.key(0)), b)[0]))


def test_one_client_with_one_worker_is_plain_sgd_of_the_whole_network():
    task, K, lr = _task(), 3, 0.2
    alg = istjax.fedist(task, optax.sgd(lr), num_workers=1, local_steps=K, clients=FixedClients((9,)))
    state = alg.init(jax.random.key(0))
    b = _batches(1, K, steps=(2,))  # the third step is padding: skipped
    params, loss = state.params, task.train_loss(None)
    for k in range(2):  # textbook SGD on the client's two real steps, the full network
        batch = jax.tree.map(lambda v: v[0, k], b)
        g = jax.grad(lambda p: loss(p, {}, batch)[0])(params)
        params = jax.tree.map(lambda p, gi: p - lr * gi, params, g)
    _close(alg.round(state, b)[0].params, params)


def test_bytes_are_ists_and_a_fraction_of_fedavgs():
    task, clients = _task(hidden=(8, 8)), FixedClients((3, 1, 2, 2))
    fed = istjax.fedist(task, optax.sgd(0.1), num_workers=4, local_steps=1, clients=clients)
    ist = istjax.ist(task, optax.sgd(0.1), num_workers=4, local_steps=1)
    avg = istjax.fedavg(task, optax.sgd(0.1), num_workers=4, local_steps=1, clients=clients)
    assert fed.comm == ist.comm
    assert fed.comm.sent < avg.comm.sent / 2 and fed.comm.received < avg.comm.received / 2


@pytest.mark.parametrize("kwargs,field", [
    ({"optimizer_state": "carry"}, "optimizer_state"),
    ({"num_workers": 3}, "num_workers"),
    ({"server_optimizer": "yogi"}, "server_optimizer"),
    ({"server_momentum": 1.0}, "server_momentum"),
])
def test_bad_options_refused_naming_the_field(kwargs, field):
    args = {"num_workers": 2, "local_steps": 1, "clients": FixedClients((1, 1))} | kwargs
    with pytest.raises(istjax.ArgError) as e:
        istjax.fedist(_task(), optax.sgd(0.1), **args)
    assert e.value.arg == field


def test_fedist_trains_from_the_command_line_on_digits_clients(tmp_path):
    flags = ["--config.algorithm.name=fedist", "--config.clients.split=iid", "--config.clients.num_clients=20",
             "--config.num_workers=4", "--config.clients.fraction=0.2", "--config.num_rounds=2",
             "--config.eval_every=2", "--config.model.hidden=(16,)", "--config.progress=False",
             "--config.eval_train_examples=256"]
    assert cli.main(["istjax", "train", *flags, f"--workdir={tmp_path}"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["algorithm"] == "fedist" and summary["rounds"] == 2 and summary["num_workers"] == 4
    assert summary["clients"]["sampler"]["clients_per_round"] == 4
    assert np.isfinite(summary["test_loss"]) and 0 <= summary["test_accuracy"] <= 1


@pytest.mark.slow
def test_mpi_parameter_server_equals_simulate_with_unequal_clients():
    """fedist (plain server, server momentum, a bfloat16 exchange) on ``mpiexec -n 2``'s parameter server, 3
    unequal clients a round in 4 slots (rank 1: a client and a pad of weight 0), == simulate in the same 4 slots;
    measured bytes == analytic; the sharded mode refused."""
    from test_mpi import MPIEXEC, _mpiexec

    if not MPIEXEC.exists():
        pytest.skip("mpiexec not installed (pip install mpich)")
    out = _mpiexec(2, "federated_ist.py", "3", timeout=400)
    assert out.returncode == 0 and "ALL OK" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
    assert "3 a round in 4 slots on 2 ranks" in out.stdout
    for case in ("fedist", "fedist server momentum", "fedist exchange bfloat16"):
        assert f"OK {case}: mpi parameter_server == simulate" in out.stdout, case
    assert "OK fedist sharded: refused" in out.stdout


# ----------------------------------------------------------------------------------------------------------------
# Pad slots (a sampler's slots past its M clients, weight 0): in the weighted merge they return nothing
_PADDED = Partition({"h": jnp.asarray([[0, 1, 2], [1, 2, 3], [3, 4, 0]], jnp.int32)}, {"h": jnp.ones((3, 3), bool)})


def test_a_weight_0_worker_returns_nothing_in_the_overlapping_merge():
    """Worker 2 (weight 0) holds unit 4 alone, unit 3 with worker 1 and unit 0 with worker 0: the merge equals the
    two others' without it, bit for bit; unit 4, held by it alone, keeps its old value as a unit held by nobody."""
    params, sub = _tiny(2)
    pad = jax.tree.map(lambda s: jnp.concatenate([s, 100.0 + s[:1]]), sub)  # the pad's values, far off
    weights = jnp.asarray([0.25, 0.75, 0.0])
    got = merge(params, pad, _PADDED, _SPEC, disjoint=False, weights=weights)
    want = merge(params, sub, _PART, _SPEC, disjoint=False, weights=weights[:2])
    _close(got, want, rtol=0, atol=0)
    assert float(got["v"][4]) == float(params["v"][4]) and float(got["m"][4, 4]) == float(params["m"][4, 4])
    assert float(got["v"][3]) == float(sub["v"][1, 2])  # held by worker 1 and the pad: worker 1's value


def test_a_weight_0_worker_returns_nothing_in_the_disjoint_merge():
    """A disjoint partition: the units dealt to worker 2 (weight 0) keep their old value whatever it sends back."""
    params, sub = _tiny(3)
    part = Partition({"h": jnp.asarray([[0, 2], [1, 4], [3, 5]], jnp.int32)},  # worker 2: unit 3 and a padding slot
                     {"h": jnp.asarray([[True, True], [True, True], [True, False]])})
    sub = {"v": sub["v"][:, :2], "m": sub["m"][:, :2, :2], "b": sub["b"]}
    sub3 = jax.tree.map(lambda s: jnp.concatenate([s, 100.0 + s[:1]]), sub)
    got = merge(params, sub3, part, _SPEC, disjoint=True, weights=jnp.asarray([0.4, 0.6, 0.0]))
    assert float(got["v"][3]) == float(params["v"][3]) and float(got["m"][3, 3]) == float(params["m"][3, 3])
    assert [float(got["v"][i]) for i in (0, 2, 1, 4)] == [float(sub3["v"][w, k]) for w in (0, 1) for k in (0, 1)]
    np.testing.assert_allclose(np.asarray(got["b"]), 0.4 * np.asarray(sub["b"][0]) + 0.6 * np.asarray(sub["b"][1]),
                               rtol=1e-6)
    # Without weights every holder returns its value: the pad's unit 3 would be written.
    assert float(merge(params, sub3, part, _SPEC, disjoint=True)["v"][3]) == float(sub3["v"][2, 0])


@pytest.mark.parametrize("options", [{}, {"exchange_dtype": "bfloat16", "exchange_values": "params"}])
def test_fedist_in_4_slots_for_3_clients_equals_the_reference_loop_and_the_pad_keeps_its_units(options):
    """M = 3 unequal clients in S = 4 slots (the 4th a pad): every round == the reference loop (where a holder of
    weight 0 adds nothing); with the plain server the units dealt to the pad keep their global value, bit for bit.
    (Not equal to fedist in 3 slots: IST deals the units over the 4 slots, so the pad's quarter trains nothing.)"""
    from test_federated import _real_clients

    from istjax.core.state import round_keys

    task = _task(batch_norm=True)
    clients, batches = _real_clients(slots=4)
    K = batches.local_steps
    alg = istjax.fedist(task, optax.sgd(0.2, momentum=0.5), num_workers=4, local_steps=K, clients=clients, **options)
    state = alg.init(jax.random.key(0))
    for r in range(2):
        b = batches(r)
        assert clients.ids(r).tolist()[3] == -1 and float(clients.weights(r)[3]) == 0.0
        fast = alg.round(state, b)[0]
        slow = reference_round(alg, state, b)
        _close(fast.params, slow.params, rtol=1e-4, atol=1e-5)
        _close(fast.model_state, slow.model_state, rtol=1e-4, atol=1e-5)
        part = alg.sampler.sample(round_keys(state.key)[1], task.spec.group_sizes, 4)
        pad = np.asarray(part.indices["hidden_0"])[3]  # the pad slot's units (uniform: 2 of the 8)
        before, after = state.params["dense_0"]["kernel"], fast.params["dense_0"]["kernel"]
        np.testing.assert_array_equal(np.asarray(after)[:, pad], np.asarray(before)[:, pad])
        np.testing.assert_array_equal(np.asarray(fast.params["dense_out"]["kernel"])[pad],
                                      np.asarray(state.params["dense_out"]["kernel"])[pad])
        others = np.setdiff1d(np.arange(8), pad)
        assert not np.array_equal(np.asarray(after)[:, others], np.asarray(before)[:, others])  # the clients' moved
        state = fast
