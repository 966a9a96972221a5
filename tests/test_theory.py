"""Theory toolkit: IST on quadratics against the paper's update, exact fixed points and closed forms; the 2x2
example on both sides of the descent threshold; the masked-neuron regression task."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import istjax
import istjax.core.subnet
from istjax import theory as th
from istjax.theory import regression as reg  # noqa: F401

# Standard errors: a z-score of 4.5 per coordinate keeps a false failure below 1e-4 for a handful of coordinates;
# the seeds are fixed, so the tests are deterministic anyway.
Z = 4.5


def _paper_round(problem, x, partition, step_size, local_steps):
    """The paper's round written with explicit sketch matrices C_i = n P_i (the oracle)."""
    n, d = problem.num_workers, problem.dim
    idx = np.asarray(partition.indices[th.COORDS])
    out = np.zeros(d)
    for i in range(n):
        P = np.zeros((d, d))
        P[idx[i], idx[i]] = 1.0
        C = n * P
        xi = C @ x
        for _ in range(local_steps):
            xi = xi - step_size * C @ (problem.L[i] @ xi - problem.b[i])
        out += xi / n
    return out


@pytest.mark.parametrize("dim,n,K", [(6, 3, 1), (6, 3, 3), (4, 4, 2), (6, 2, 1)])
def test_round_is_the_papers_update(dim, n, K):
    problem = th.random_quadratic(1, dim=dim, num_workers=n, heterogeneity=1.0)
    x = np.random.default_rng(2).normal(size=dim)
    with jax.enable_x64(True):
        for seed in range(3):
            p = istjax.uniform().sample(jax.random.key(seed), {th.COORDS: dim}, n)
            got = np.asarray(th.ist_round(problem, jnp.asarray(x), p, step_size=0.07, local_steps=K))
            np.testing.assert_allclose(got, _paper_round(problem, x, p, 0.07, K), rtol=1e-12, atol=1e-12)


def test_round_goes_through_extract_and_merge(monkeypatch):
    problem = th.random_quadratic(3, dim=4, num_workers=2)
    x = jnp.asarray(np.arange(1.0, 5.0))
    calls = {"extract": [], "merge": []}
    real_extract, real_merge = istjax.core.subnet.extract, istjax.core.subnet.merge

    def spy_extract(params, partition, spec):
        calls["extract"].append(dict(spec.group_sizes))
        return real_extract(params, partition, spec)

    def spy_merge(params, sub, partition, spec, **kw):
        calls["merge"].append(dict(spec.group_sizes))
        return real_merge(params, sub, partition, spec, **kw)

    with jax.enable_x64(True):
        p = istjax.uniform().sample(jax.random.key(0), {th.COORDS: 4}, 2)
        expected = th.ist_round(problem, x, p, step_size=0.1)
        monkeypatch.setattr(istjax.core.subnet, "extract", spy_extract)
        monkeypatch.setattr(istjax.core.subnet, "merge", spy_merge)
        got = th.ist_round(problem, x, p, step_size=0.1)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
        assert calls["extract"] == [{th.COORDS: 4}, {th.COORDS: 4}]  # the iterate and the problem's blocks
        assert calls["merge"] == [{th.COORDS: 4}]
        # The new iterate is whatever merge writes: a merge that ignores the workers leaves x unchanged.
        monkeypatch.setattr(istjax.core.subnet, "merge", lambda params, sub, partition, spec, **kw: params)
        np.testing.assert_array_equal(np.asarray(th.ist_round(problem, x, p, step_size=0.1)), np.asarray(x))


def test_enumeration_is_the_uniform_samplers_support():
    dim, n = 6, 3
    parts = th.all_partitions(dim, n)
    idx = np.asarray(parts.indices[th.COORDS])
    assert idx.shape == (math.factorial(6) // 2 ** 3, 3, 2)  # 90 labelled partitions into blocks of 2
    support = {tuple(map(tuple, row)) for row in idx}
    assert len(support) == idx.shape[0]
    for row in idx:
        assert sorted(row.ravel().tolist()) == list(range(dim))
    sample = jax.jit(jax.vmap(lambda k: istjax.uniform().sample(k, {th.COORDS: dim}, n)))
    drawn = np.asarray(sample(jax.random.split(jax.random.key(0), 900)).indices[th.COORDS])
    keys = [tuple(map(tuple, row)) for row in drawn]
    assert set(keys) <= support
    # Roughly uniform: each of the 90 partitions expected 10 times out of 900; all seen, none wildly frequent.
    counts = np.bincount([sorted(support).index(k) for k in keys], minlength=len(support))
    assert counts.min() >= 1 and counts.max() <= 10 + Z * math.sqrt(10)


@pytest.mark.parametrize("dim,n,K", [(4, 2, 1), (6, 3, 1), (4, 4, 1), (4, 4, 3), (3, 3, 5)])
def test_closed_form_matches_enumeration(dim, n, K):
    problem = th.random_quadratic(4, dim=dim, num_workers=n, heterogeneity=1.5)
    fp = th.expected_fixed_point(problem, step_size=0.05, local_steps=K)
    np.testing.assert_allclose(th.closed_form_fixed_point(problem, step_size=0.05, local_steps=K), fp.x,
                               rtol=1e-10, atol=1e-12)
    assert fp.rate < 1


def test_closed_form_refuses_local_steps_with_blocks():
    problem = th.random_quadratic(0, dim=4, num_workers=2)
    with pytest.raises(ValueError, match="local_steps=2"):
        th.closed_form_fixed_point(problem, step_size=0.05, local_steps=2)


def test_single_step_bias_does_not_depend_on_step_size_but_local_steps_do():
    problem = th.random_quadratic(5, dim=4, num_workers=4, heterogeneity=1.0)
    x1 = th.expected_fixed_point(problem, step_size=0.02).x
    np.testing.assert_allclose(th.expected_fixed_point(problem, step_size=0.08).x, x1, rtol=1e-10)
    assert np.linalg.norm(x1 - problem.minimiser()) > 0.1 * np.linalg.norm(problem.minimiser())  # biased
    xk_small = th.expected_fixed_point(problem, step_size=0.02, local_steps=4).x
    xk_large = th.expected_fixed_point(problem, step_size=0.08, local_steps=4).x
    assert np.linalg.norm(xk_small - xk_large) > 1e-3


@pytest.mark.parametrize("heterogeneity,K", [(0.0, 1), (1.0, 2)])
def test_expected_fixed_point_is_the_mean_of_many_runs(heterogeneity, K):
    """Homogeneous L (b_i differ) and heterogeneous; d = 4 on 2 workers, so partitions are random."""
    problem = th.random_quadratic(7, dim=4, num_workers=2, heterogeneity=heterogeneity)
    step = 0.05
    fp = th.expected_fixed_point(problem, step_size=step, local_steps=K)
    assert fp.rate < 1
    rounds = int(math.ceil(math.log(1e-10) / math.log(fp.rate)))  # the mean's transient is below 1e-10
    runs = 4000
    x0 = np.zeros(4)
    last = th.simulate(problem, x0, seed=11, rounds=rounds, num_runs=runs, step_size=step, local_steps=K).x[:, -1]
    mean, se = last.mean(axis=0), last.std(axis=0, ddof=1) / math.sqrt(runs)
    assert np.all(se > 0)  # the iterates really fluctuate
    assert np.all(np.abs(mean - fp.x) <= Z * se), (mean, fp.x, se)
    # The test can tell the biased point from the optimum: x* is many standard errors away.
    assert np.max(np.abs(mean - problem.minimiser()) / se) > 10 * Z


def test_zero_b_converges_to_zero():
    problem = th.random_quadratic(8, dim=4, num_workers=2, heterogeneity=1.0, b_scale=0.0)
    # Stable for every partition: γ n λ_max(L_i[S, S]) < 1 for every block, since λ_max(L_i[S, S]) <= λ_max(L_i).
    step = 1.0 / (problem.num_workers * max(np.linalg.eigvalsh(L)[-1] for L in problem.L))
    x0 = np.ones(4)
    x = th.simulate(problem, x0, seed=0, rounds=400, num_runs=64, step_size=step).x
    assert np.max(np.linalg.norm(x[:, -1], axis=-1)) < 1e-8 * np.linalg.norm(x0)
    # In Diag(L̄)^(-1/2) coordinates one step size fits every problem: γ = 1/(2n) with a unit diagonal.
    scaled, _ = th.diag_rescale(problem)
    y = th.simulate(scaled, x0, seed=0, rounds=400, num_runs=64, step_size=0.25).x
    assert np.max(np.linalg.norm(y[:, -1], axis=-1)) < 1e-8 * np.linalg.norm(x0)


A, B = 1.0, 4.0  # threshold 2ab/(a+b) = 1.6; positive definite while c < sqrt(ab) = 2


def test_descent_threshold_value():
    assert th.descent_threshold(A, B) == pytest.approx(1.6)
    for c, sign in [(1.6 * 0.999, 1), (1.6 * 1.001, -1)]:
        _, value = th.ascent_direction(th.two_by_two(A, B, c))
        assert np.sign(value) == sign


def test_two_by_two_below_threshold_descends_from_every_start():
    problem = th.two_by_two(A, B, 1.2)
    step = 0.05
    for angle in np.linspace(0, np.pi, 24, endpoint=False):
        x0 = np.array([np.cos(angle), np.sin(angle)])
        traj = th.simulate(problem, x0, seed=int(angle * 100), rounds=150, num_runs=2, step_size=step)
        assert np.all(np.diff(traj.loss, axis=1) < 0), angle  # f decreases at every round
        assert np.max(np.abs(traj.x[:, -1])) < 1e-3


def test_two_by_two_above_threshold_ascends_yet_converges_and_rescaling_restores_descent():
    problem = th.two_by_two(A, B, 1.9)
    step = 0.05
    x0, value = th.ascent_direction(problem)
    assert value < 0
    traj = th.simulate(problem, x0, seed=0, rounds=300, num_runs=4, step_size=step)
    # Every partition gives the same deterministic map x -> (I - γ n Diag(L)) x on a 2x2 with 2 workers.
    np.testing.assert_allclose(traj.x[1:], traj.x[:1].repeat(3, axis=0), rtol=0, atol=0)
    np.testing.assert_allclose(traj.x[0, 1], (1 - step * 2 * np.array([A, B])) * x0, rtol=1e-12)
    assert traj.loss[0, 1] > traj.loss[0, 0]  # not a descent method: the first step increases f
    # ... but the runs still converge (the paper's threshold is about descent, not about convergence).
    assert np.max(np.abs(traj.x[:, -1])) < 1e-6
    scaled, s = th.diag_rescale(problem)
    y0 = x0 / s
    ytraj = th.simulate(scaled, y0, seed=0, rounds=300, num_runs=4, step_size=step)
    np.testing.assert_allclose(scaled.loss(y0), problem.loss(x0), rtol=1e-12)  # same function, new coordinates
    assert np.all(np.diff(ytraj.loss, axis=1) < 0)  # descent at every round from the bad start
    assert np.max(np.abs(ytraj.x[:, -1])) < 1e-6


def test_bernoulli_masks():
    n, W, xi = 400, 3, 0.3
    sampler = reg.bernoulli(xi)
    assert sampler.slots({"h": n}, W) == {"h": n} and not sampler.disjoint
    p = sampler.sample(jax.random.key(0), {"h": n}, W)
    idx, mask = np.asarray(p.indices["h"]), np.asarray(p.mask["h"])
    assert idx.shape == (W, n) and np.all(mask == (idx < n)) and np.all(np.diff(idx, axis=1) >= 0)
    for w in range(W):
        assert len(set(idx[w][mask[w]].tolist())) == mask[w].sum()  # no unit twice
    rate, se = mask.mean(), math.sqrt(xi * (1 - xi) / mask.size)
    assert abs(rate - xi) <= Z * se
    with pytest.raises(ValueError, match="keep_prob=1.5"):
        reg.bernoulli(1.5)


def test_subnetworks_average_to_the_full_network():
    """With IST's disjoint partition and output scale W, the mean of the W sub-network outputs is the full one."""
    width, W = 24, 4
    task = reg.relu_regression_task(5, width, dtype=jnp.float32)
    params = task.init(jax.random.key(1))
    x = jax.random.normal(jax.random.key(2), (7, 5))
    p = istjax.uniform().sample(jax.random.key(3), task.spec.group_sizes, W)
    sub = istjax.extract(params, p, task.spec)
    outs = jax.vmap(lambda s: reg.predict(s, x, width=width, scale=float(W)))(sub)  # [W, N]
    np.testing.assert_allclose(np.asarray(jnp.mean(outs, axis=0)), np.asarray(reg.predict(params, x, width=width)),
                               rtol=1e-5, atol=1e-6)
    loss, _ = task.loss_fn({reg.HIDDEN: width // W})(jax.tree.map(lambda v: v[0], sub),
                                                     {"x": x, "y": jnp.zeros((7,))})
    np.testing.assert_allclose(float(loss), 0.5 * float(jnp.mean(jnp.square(outs[0]))), rtol=1e-5)


def test_ist_regression_one_worker_converges_more_workers_hit_a_floor():
    data = reg.regression_data(0, num_points=8, dim=4)
    kw = dict(width=128, local_steps=2, step_size=1.0, rounds=300, seed=0)
    gd = reg.train_curve(data, num_workers=1, **kw).loss
    ist = reg.train_curve(data, num_workers=4, **kw).loss
    # W = 1 is gradient descent: linear convergence to zero training loss, still falling geometrically at the end.
    assert gd[-1] < 1e-2 * gd[150] < 1e-2 * gd[0]
    assert ist[-1] < 0.1 * ist[0]  # IST trains...
    assert reg.loss_floor(reg.LossCurve(ist)) > 1e3 * reg.loss_floor(reg.LossCurve(gd))  # ... down to a floor
