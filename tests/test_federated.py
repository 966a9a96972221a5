"""Federated averaging and its server optimizers (issue 58): the paper's equivalences, hand-computed server steps,
and every round equal to the plain reference loop."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import istjax
from istjax.algorithms.reference import reference_round
from istjax.models import MLP

D, C = 6, 3


class FixedClients(NamedTuple):
    """A client sampler whose every round draws the same clients with these example counts."""

    sizes: tuple

    @property
    def clients_per_round(self):
        return len(self.sizes)

    @property
    def slots(self):
        return len(self.sizes)

    def weights(self, round_index):
        del round_index
        s = jnp.asarray(self.sizes, jnp.float32)
        return s / jnp.sum(s)


def _task(batch_norm=False):
    model = MLP(hidden=(8,), num_classes=C, batch_norm=batch_norm, output_batch_norm=False)
    return istjax.classifier(model, jnp.ones((4, D)), MLP.rules(1), num_classes=C)


def _batches(W, K, B=4, seed=1, weight=None):
    kx, ky = jax.random.split(jax.random.key(seed))
    out = {"x": jax.random.normal(kx, (W, K, B, D)), "y": jax.random.randint(ky, (W, K, B), 0, C)}
    if weight is not None:
        out["weight"] = jnp.asarray(weight, jnp.float32)
    return out


def _close(a, b, **kw):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), **({"rtol": 2e-5, "atol": 2e-6} | kw))


def _grads(task, params, batch):
    loss = task.train_loss(None)
    return jax.grad(lambda p: loss(p, {}, batch)[0])(params)


def test_fedavg_full_participation_one_batch_equals_fedsgd_equals_one_data_parallel_step():
    task, W, lr = _task(), 3, 0.3
    clients = FixedClients((4, 4, 4))  # equal clients: equal weights
    b = _batches(W, 1)
    avg = istjax.fedavg(task, optax.sgd(lr), num_workers=W, local_steps=1, clients=clients)
    sgd = istjax.fedsgd(task, optax.sgd(lr), num_workers=W, local_steps=1, clients=clients)
    dp = istjax.data_parallel(task, optax.sgd(lr), num_workers=W, local_steps=1)
    state = avg.init(jax.random.key(0))
    p_avg = avg.round(state, b)[0].params
    p_sgd = sgd.round(state, b)[0].params
    p_dp = dp.round(dp.init(jax.random.key(0)), b)[0].params
    _close(p_avg, p_sgd)
    _close(p_avg, p_dp)


def test_fedavg_with_one_client_is_plain_sgd_over_its_steps():
    task, K, lr = _task(), 4, 0.2
    alg = istjax.fedavg(task, optax.sgd(lr), num_workers=1, local_steps=K, clients=FixedClients((7,)))
    state = alg.init(jax.random.key(0))
    b = _batches(1, K)
    params = state.params
    for k in range(K):  # textbook SGD
        g = _grads(task, params, jax.tree.map(lambda v: v[0, k], b))
        params = jax.tree.map(lambda p, gi: p - lr * gi, params, g)
    _close(alg.round(state, b)[0].params, params)


def test_weighted_server_mean_by_hand():
    task, lr = _task(), 0.5
    sizes = (1, 3)
    alg = istjax.fedavg(task, optax.sgd(lr), num_workers=2, local_steps=1, clients=FixedClients(sizes))
    state = alg.init(jax.random.key(0))
    b = _batches(2, 1)
    g = [_grads(task, state.params, jax.tree.map(lambda v: v[w, 0], b)) for w in range(2)]
    want = jax.tree.map(lambda p, g0, g1: p - lr * (0.25 * g0 + 0.75 * g1), state.params, *g)
    _close(alg.round(state, b)[0].params, want)


def test_fedavgm_momentum_zero_is_fedavg_and_momentum_by_hand():
    task, lr, server_lr, beta = _task(), 0.3, 1.5, 0.9
    clients = FixedClients((2, 5))
    plain = istjax.fedavg(task, optax.sgd(lr), num_workers=2, local_steps=2, clients=clients)
    m0 = istjax.fedavg(task, optax.sgd(lr), num_workers=2, local_steps=2, clients=clients, server_momentum=0.0)
    mom = istjax.fedavg(task, optax.sgd(lr), num_workers=2, local_steps=2, clients=clients,
                        server_learning_rate=server_lr, server_momentum=beta)
    s_plain = s_m0 = plain.init(jax.random.key(0))
    s_mom = mom.init(jax.random.key(0))
    velocity = jax.tree.map(jnp.zeros_like, s_mom.params)
    for r in range(2):
        b = _batches(2, 2, seed=r)
        s_plain, s_m0 = plain.round(s_plain, b)[0], m0.round(s_m0, b)[0]
        _close(s_plain.params, s_m0.params, rtol=0, atol=0)
        # FedAvgM by hand: the pseudo-gradient is the global model minus the clients' weighted mean (one FedAvg
        # round from the same model), heavy-ball momentum on it.
        one_round = plain.round(s_mom._replace(opt_state=plain.init(jax.random.key(0)).opt_state), b)[0].params
        pseudo = jax.tree.map(lambda p, m: p - m, s_mom.params, one_round)
        velocity = jax.tree.map(lambda v, d: beta * v + d, velocity, pseudo)
        want = jax.tree.map(lambda p, v: p - server_lr * v, s_mom.params, velocity)
        s_mom = mom.round(s_mom, b)[0]
        _close(s_mom.params, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("options", [
    {},
    {"server_momentum": 0.9, "server_learning_rate": 0.8},
    {"server_optimizer": "adam", "server_learning_rate": 0.05},
    {"prox_mu": 0.5},
])
def test_rounds_equal_reference_loop(options):
    task = _task(batch_norm=True)
    clients = FixedClients((3, 8, 5))
    alg = istjax.fedavg(task, optax.adam(0.01), num_workers=3, local_steps=3, clients=clients, **options)
    state = alg.init(jax.random.key(0))
    for r in range(2):
        b = _batches(3, 3, seed=r)
        fast = alg.round(state, b)[0]
        slow = reference_round(alg, state, b)
        _close(fast.params, slow.params, rtol=1e-4, atol=1e-5)
        _close(fast.model_state, slow.model_state, rtol=1e-4, atol=1e-5)
        state = fast


def test_prox_term_pulls_toward_the_global_model():
    task = _task()
    clients = FixedClients((4, 4))
    b = _batches(2, 6)
    dist = {}
    for mu in (0.0, 5.0):
        alg = istjax.fedavg(task, optax.sgd(0.3), num_workers=2, local_steps=6, clients=clients, prox_mu=mu)
        state = alg.init(jax.random.key(0))
        workers, plan = alg.distribute(state)
        trained, metrics = jax.vmap(alg.local)(workers, b)
        dist[mu] = float(sum(jnp.sum((t - p[None]) ** 2) for t, p in
                             zip(jax.tree.leaves(trained.params), jax.tree.leaves(state.params))))
        assert ("prox" in metrics) == bool(mu)
    assert dist[5.0] < 0.5 * dist[0.0]


@pytest.mark.parametrize("kwargs,field", [
    ({"server_optimizer": "yogi"}, "server_optimizer"),
    ({"server_learning_rate": 0.0}, "server_learning_rate"),
    ({"server_momentum": 1.0}, "server_momentum"),
    ({"server_optimizer": "adam", "server_momentum": 0.9}, "server_momentum"),
    ({"prox_mu": -1.0}, "prox_mu"),
    ({"num_workers": 3}, "num_workers"),
])
def test_bad_options_refused_naming_the_field(kwargs, field):
    args = {"num_workers": 2, "local_steps": 1, "clients": FixedClients((1, 1))} | kwargs
    with pytest.raises(istjax.ArgError) as e:
        istjax.fedavg(_task(), optax.sgd(0.1), **args)
    assert e.value.arg == field


def test_fedsgd_refuses_several_local_steps():
    with pytest.raises(istjax.ArgError, match="batch_size"):
        istjax.fedsgd(_task(), optax.sgd(0.1), num_workers=2, local_steps=3, clients=FixedClients((1, 1)))


@pytest.mark.slow
@pytest.mark.parametrize("n,clients_per_round", [(2, 3), (3, 4)])
def test_mpi_equals_simulate_with_unequal_clients(n, clients_per_round):
    """FedAvg, FedAvgM, FedAdam, FedProx and a bfloat16 exchange on ``mpiexec -n 2`` and ``-n 3``: clients of
    unequal sizes (padded steps), weighted on the way through the all-reduce, == simulate; bytes == analytic. The
    clients fall unevenly over the ranks: 3 in 4 slots on 2 ranks, 4 in 6 slots on 3 (pad slots of weight 0)."""
    from test_mpi import MPIEXEC, _mpiexec

    if not MPIEXEC.exists():
        pytest.skip("mpiexec not installed (pip install mpich)")
    out = _mpiexec(n, "federated.py", str(clients_per_round), timeout=400)
    assert out.returncode == 0 and "ALL OK" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
    slots = -(-clients_per_round // n) * n
    assert f"{clients_per_round} a round in {slots} slots on {n} ranks" in out.stdout and slots > clients_per_round
    for case in ("fedavg", "fedavgm", "fedadam", "fedprox", "fedavg exchange bfloat16"):
        assert f"OK {case}: mpi == simulate" in out.stdout, case


def test_devices_runtime_equals_simulate_with_unequal_clients():
    """The devices runtime (fake CPU devices) holds two client slots a device; the weighted server mean over
    slots spread across devices equals simulate's."""
    task = _task(batch_norm=True)
    clients = FixedClients((3, 8, 5, 2))
    w = np.zeros((4, 3, 4), np.float32)
    for c, steps in enumerate((1, 3, 2, 1)):  # client c's real steps; the rest is padding (weight 0)
        w[c, :steps] = 1.0
    b = _batches(4, 3, weight=w)
    simulate = istjax.fedavg(task, optax.adam(0.01), num_workers=4, local_steps=3, clients=clients,
                             server_momentum=0.5)
    devices = istjax.fedavg(task, optax.adam(0.01), num_workers=4, local_steps=3, clients=clients,
                            server_momentum=0.5, backend="devices", devices=jax.devices()[:2])
    s_sim = s_dev = simulate.init(jax.random.key(0))
    for _ in range(2):
        s_sim, m_sim = simulate.round(s_sim, b)
        s_dev, m_dev = devices.round(s_dev, b)
    _close(s_sim.params, s_dev.params, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(m_sim["train_loss"]), float(m_dev["train_loss"]), rtol=1e-5)
    assert float(m_sim["train_examples"]) == 4 * (1 + 3 + 2 + 1)


# ----------------------------------------------------------------------------------------------------------------
# Pad slots: M clients a round in S > M worker slots (what lets M clients run on P processes that do not divide M)
def _real_clients(slots=None, clients_per_round=3):
    """Unequal clients of a toy set (a Dirichlet split of 60 examples over 9) and their batch function."""
    from istjax.data import Dataset
    from istjax.data.client_batches import client_sampler, make_client_batch_fn
    from istjax.data.clients import dirichlet

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, D)).astype(np.float32), rng.integers(0, C, size=60).astype(np.int32)
    data = Dataset(name="toy", train_x=x, train_y=y, test_x=x[:8], test_y=y[:8], num_classes=C)
    split = dirichlet(y, 9, alpha=0.5, seed=1, min_size=2)
    sampler = client_sampler(split, clients_per_round=clients_per_round, seed=2, slots=slots)
    return sampler, make_client_batch_fn(data, split, sampler, epochs=2, batch_size=3, seed=3)


def test_a_pad_slot_changes_nothing_fedavg_in_4_slots_equals_3_and_the_reference_loop():
    """M = 3 clients in S = 4 slots (the 4th a pad: weight 0, every step skipped) == the same clients in S = 3,
    to float rounding (a mean over 4 slots instead of 3); each round == the reference loop."""
    task = _task(batch_norm=True)
    padded, batches4 = _real_clients(slots=4)
    plain, batches3 = _real_clients()
    K = batches4.local_steps
    assert batches3.local_steps == K and padded.slots == 4 and plain.slots == 3
    options = {"server_momentum": 0.5, "server_learning_rate": 0.8}
    alg4 = istjax.fedavg(task, optax.sgd(0.2), num_workers=4, local_steps=K, clients=padded, **options)
    alg3 = istjax.fedavg(task, optax.sgd(0.2), num_workers=3, local_steps=K, clients=plain, **options)
    s4 = s3 = alg4.init(jax.random.key(5))
    for r in range(3):
        b4, b3 = batches4(r), batches3(r)
        assert padded.ids(r).tolist()[:3] == plain.ids(r).tolist() and float(b4["weight"][3].sum()) == 0.0
        slow = reference_round(alg4, s4, b4)
        (s4, m4), (s3, m3) = alg4.round(s4, b4), alg3.round(s3, b3)
        _close(s4.params, slow.params, rtol=1e-4, atol=1e-5)
        _close(s4.model_state, slow.model_state, rtol=1e-4, atol=1e-5)
        _close(s4.params, s3.params, rtol=1e-5, atol=1e-6)
        _close(s4.model_state, s3.model_state, rtol=1e-5, atol=1e-6)
        _close(s4.opt_state, s3.opt_state, rtol=1e-5, atol=1e-6)
        assert float(m4["train_examples"]) == float(m3["train_examples"])  # the pad trained no example
        np.testing.assert_allclose(float(m4["train_loss"]), float(m3["train_loss"]), rtol=1e-5)
        assert float(m4["split_workers"]) == float(m3["split_workers"]) == 3  # the loss split counts no pad
        for k in ("worker_train_loss", "merged_train_loss", "merge_cost"):
            np.testing.assert_allclose(float(m4[k]), float(m3[k]), rtol=1e-4, atol=1e-6, err_msg=k)


def test_num_workers_must_be_the_samplers_slots_and_the_refusal_names_both_fixes():
    padded, batches = _real_clients(slots=4)
    with pytest.raises(istjax.ArgError, match=r"num_workers=3, but the sampler draws 3 clients a round in 4 slots.*"
                                              r"num_workers=4 or client_sampler\(split, \.\.\., slots=3\)") as info:
        istjax.fedavg(_task(), optax.sgd(0.1), num_workers=3, local_steps=batches.local_steps, clients=padded)
    assert info.value.arg == "num_workers"
    plain, _ = _real_clients()
    with pytest.raises(istjax.ArgError, match=r"num_workers=4, but the sampler draws 3 clients a round: .*"
                                              r"num_workers=3 or client_sampler\(split, \.\.\., slots=4\)"):
        istjax.fedavg(_task(), optax.sgd(0.1), num_workers=4, local_steps=batches.local_steps, clients=plain)


def test_a_config_on_p_processes_rounds_the_slots_up_to_a_multiple_of_p(monkeypatch):
    """`istjax train` under ``mpiexec -n P`` (the launch's size, read from its environment) with runtime.name=mpi:
    S = M rounded up to a multiple of P; on one process, or another runtime, S = M."""
    from istjax.data import Dataset
    from istjax.launch.args import parse_train_args
    from istjax.launch.config.collect import Collector
    from istjax.launch.config.federated import client_slots, make_clients

    flags = ["istjax", "--config.algorithm.name=fedavg", "--config.clients.num_clients=9", "--config.num_workers=4",
             "--config.clients.fraction=0.34", "--config.clients.batch_size=5"]  # M = round(0.34 * 9) = 3
    mpi = parse_train_args([*flags, "--config.runtime.name=mpi"])[0]
    one = parse_train_args(flags)[0]
    assert client_slots(mpi, 3) == 3  # not launched by mpiexec: one process
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert [client_slots(mpi, m) for m in (1, 2, 3, 4)] == [2, 2, 4, 4] and client_slots(one, 3) == 3
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "3")
    assert [client_slots(mpi, m) for m in (3, 4)] == [3, 6]
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(90, D)).astype(np.float32), rng.integers(0, C, size=90)
    data = Dataset(name="toy", train_x=x, train_y=y, test_x=x[:8], test_y=y[:8], num_classes=C)
    collector = Collector(mpi)
    clients = make_clients(mpi, data, collector)
    assert collector.problems == []
    assert (clients.sampler.clients_per_round, clients.sampler.slots, clients.batch_fn.num_workers) == (3, 4, 4)
    assert clients.to_record()["sampler"]["slots"] == 4
