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
@pytest.mark.parametrize("n,clients_per_round", [(2, 4), (3, 3)])
def test_mpi_equals_simulate_with_unequal_clients(n, clients_per_round):
    """FedAvg, FedAvgM, FedAdam, FedProx and a bfloat16 exchange on ``mpiexec -n 2`` and ``-n 3``: clients of
    unequal sizes (padded steps), weighted on the way through the all-reduce, == simulate; bytes == analytic."""
    from test_mpi import MPIEXEC, _mpiexec

    if not MPIEXEC.exists():
        pytest.skip("mpiexec not installed (pip install mpich)")
    out = _mpiexec(n, "federated.py", str(clients_per_round), timeout=400)
    assert out.returncode == 0 and "ALL OK" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
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
