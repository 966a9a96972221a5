"""IST on quadratics, after Shulgin and Richtárik, with exact predictions to check runs against.

Reference: E. Shulgin, P. Richtárik, "Towards a Better Theoretical Understanding of Independent Subnetwork
Training", arXiv 2306.16484 (ICML 2024). IST itself: Yuan et al., arXiv 1910.02120.

The problem
-----------
``n`` clients (= workers) hold ``f_i(x) = 1/2 xᵀ L_i x - b_iᵀ x`` over ``x ∈ R^d``; the goal is
``f(x) = (1/n) Σ_i f_i(x)``, minimised at ``x* = L̄⁻¹ b̄`` (``L̄ = mean_i L_i``, ``b̄ = mean_i b_i``). The problem is
*homogeneous* when all ``L_i`` are equal (the ``b_i`` may still differ) and *heterogeneous* otherwise.

The method (the paper's update, exactly)
----------------------------------------
Each round draws a permutation sketch: the ``d`` coordinates are shuffled and cut into ``n`` blocks ``S_1..S_n`` of
``m = d / n`` coordinates, and ``C_i = n · P_i`` where ``P_i`` projects onto block ``S_i``. Worker ``i`` starts from
its sub-model ``x_i = C_i x`` and takes ``K`` sketched gradient steps ``x_i <- x_i - γ C_i ∇f_i(x_i)``; the server
averages: ``x⁺ = (1/n) Σ_i x_i``. With ``K = 1`` this is the paper's

    ``x⁺ = x - γ g(x)``,  ``g(x) = (1/n) Σ_i C_i ∇f_i(C_i x)``   (because ``(1/n) Σ_i C_i = I``).

Every ``x_i`` lives on block ``S_i`` and the blocks are disjoint, so the server's average is exactly "write block
``S_i`` of ``x_i / n`` back", i.e. IST's merge. In block coordinates ``u = x[S_i]`` (what `istjax.extract` hands
worker ``i``), ``C_i x`` is ``n u`` on ``S_i`` and zero elsewhere, and one step reads

    ``u <- u - γ (n L_i[S_i, S_i] u - b_i[S_i])``,

which is plain gradient descent with step ``γ`` on the worker's sub-network loss
``h_i(u) = f_i(C_i x) / n = (n/2) uᵀ L_i[S_i,S_i] u - b_i[S_i]ᵀ u``. That is how `ist_round` runs it: the
coordinates of ``x`` are the neuron group ``"coords"`` of a `SubnetSpec`; `istjax.uniform` deals the partition;
`istjax.extract` gives each worker ``u`` and (through a second spec, with ``L_i`` partitioned on both axes) its
blocks ``L_i[S_i,S_i]``, ``b_i[S_i]``; `istjax.local_train` runs the ``K`` `optax.sgd` steps; `istjax.merge` writes
the blocks back. No other indexing code is involved.

What the theory predicts
------------------------
A round is affine in ``x``: ``x⁺ = A_p x + c_p`` for a partition ``p`` drawn independently of ``x``, so the mean
iterate obeys ``E[x⁺] = E[A] E[x] + E[c]`` and converges (when the spectral radius of ``E[A]`` is below one) to the
*expected fixed point* ``x̂ = (I - E[A])⁻¹ E[c]``. For small ``d`` both expectations are exact averages over all
``d! / (m!)ⁿ`` equally likely partitions (`all_partitions`); ``A_p`` and ``c_p`` come from running the round itself
on ``0`` and on the basis vectors (`round_map`), so the oracle exercises the same code as the runs.

Closed forms (`closed_form_fixed_point`):

* ``K = 1`` (the paper's method): ``E[g(x)] = L̃ x - b̄`` with ``L̃ = (1/n) Σ_i E[C_i L_i C_i]``. For a permutation
  sketch ``E[C_i L C_i] = n Diag(L) + n (m-1)/(d-1) Off(L)``, so ``x̂ = L̃⁻¹ b̄`` with
  ``L̃ = n Diag(L̄) + n (m-1)/(d-1) Off(L̄)``; for ``d = n`` (one coordinate per worker, the paper's main case)
  ``x̂ = (n Diag(L̄))⁻¹ b̄``. It does not depend on ``γ``, so step-size decay does not remove the bias, and it differs
  from ``x*`` unless ``L̃⁻¹ b̄ = L̄⁻¹ b̄`` (e.g. ``b̄ = 0``).
* ``K > 1``: the paper analyses a single local step; we derive the ``d = n`` case, where every coordinate evolves on
  its own: coordinate ``j`` held by worker ``i`` maps to ``a_ij^K x_j + γ b_i[j] Σ_{t<K} a_ij^t`` with
  ``a_ij = 1 - γ n L_i[j,j]``, so ``x̂_j = mean_i(γ b_i[j] Σ_t a_ij^t) / (1 - mean_i a_ij^K)``, which now depends on
  ``γ`` and ``K``. With ``m > 1`` and ``K > 1`` there is no closed form here; use `expected_fixed_point`.

Where this and the paper differ: nowhere for ``K = 1`` (the enumeration and the closed form agree to machine
precision, a test); the ``K > 1`` and ``m > 1`` formulas above are ours. Note also that ``x̂`` is the limit of the
*mean* iterate: in the heterogeneous case single runs do not converge to a point but fluctuate around ``x̂``.

The 2x2 example
---------------
With ``L = [[a, c], [c, b]]``, two workers, ``b_i = 0``: ``g(x) = n Diag(L) x`` for every partition, so a step
decreases ``f`` from every ``x`` (for small ``γ``) iff ``L Diag(L) + Diag(L) L ≻ 0``, i.e. ``c < 2ab / (a + b)``
(`descent_threshold`). Above it some ``x`` (`ascent_direction`) sees ``f`` *increase* for every small step. The
iteration ``x⁺ = (I - γ n Diag(L)) x`` still contracts to zero for ``γ < 2 / (n max(a, b))`` on both sides of the
threshold; rescaling the coordinates by ``Diag(L)^(-1/2)`` (`diag_rescale`) makes the diagonal one, so
``L' Diag(L') + Diag(L') L' = 2 L' ≻ 0`` and every step descends again.

Precision: the theory is meant for float64. The array functions follow their inputs' dtype; the numpy-returning
entry points (`expected_fixed_point`, `closed_form_fixed_point`, `simulate`) run under ``jax.enable_x64(True)``
themselves and never change the global configuration.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

import istjax.algorithms.base as algorithms_lib
import istjax.core.partition as partition_lib
import istjax.core.subnet as subnet_lib
from istjax.core.spec import SubnetSpec, spec_from_table
from istjax.core.state import WorkerState
from istjax.core.task import stateless

__all__ = [
    "COORDS",
    "Quadratic",
    "FixedPoint",
    "Trajectory",
    "quadratic",
    "random_quadratic",
    "two_by_two",
    "coordinate_spec",
    "client_spec",
    "ist_round",
    "all_partitions",
    "round_map",
    "expected_fixed_point",
    "closed_form_fixed_point",
    "simulate",
    "descent_threshold",
    "ascent_direction",
    "diag_rescale",
]

#: The neuron group of the quadratic problems: the coordinates of x.
COORDS = "coords"  # the neuron group: the coordinates of x


class Quadratic(NamedTuple):
    """``f(x) = (1/n) Σ_i (1/2 xᵀ L[i] x - b[i]ᵀ x)``, one term per client/worker.

    Attributes:
      L: `[n, d, d]` float64, symmetric positive semi-definite; ``L[i]`` is client ``i``'s Hessian.
      b: `[n, d]` float64; ``b[i]`` is client ``i``'s linear term.
    """

    L: np.ndarray
    b: np.ndarray

    @property
    def num_workers(self) -> int:
        return int(self.L.shape[0])

    @property
    def dim(self) -> int:
        return int(self.L.shape[-1])

    @property
    def L_mean(self) -> np.ndarray:
        """`[d, d]` ``L̄``."""
        return np.mean(np.asarray(self.L, np.float64), axis=0)

    @property
    def b_mean(self) -> np.ndarray:
        """`[d]` ``b̄``."""
        return np.mean(np.asarray(self.b, np.float64), axis=0)

    @property
    def homogeneous(self) -> bool:
        return bool(np.allclose(self.L, self.L[:1]))

    def minimiser(self) -> np.ndarray:
        """`[d]` ``x* = L̄⁻¹ b̄`` (least-squares solution if ``L̄`` is singular)."""
        return np.linalg.lstsq(self.L_mean, self.b_mean, rcond=None)[0]

    def loss(self, x):
        """``f(x)`` for `x: [..., d]` (numpy or jax, any leading axes)."""
        xp = jnp if isinstance(x, jax.Array) else np
        L, b = xp.asarray(self.L_mean, dtype=x.dtype), xp.asarray(self.b_mean, dtype=x.dtype)
        return 0.5 * xp.sum(x * (x @ L), axis=-1) - x @ b


def quadratic(L, b, num_workers: Optional[int] = None) -> Quadratic:
    """Builds a `Quadratic`, checking shapes.

    Args:
      L: `[d, d]` (homogeneous: every worker gets it) or `[n, d, d]`.
      b: `[d]` (every worker gets it) or `[n, d]`.
      num_workers: ``n``; needed when both ``L`` and ``b`` are shared.
    """
    L, b = np.asarray(L, np.float64), np.asarray(b, np.float64)
    n = num_workers or (L.shape[0] if L.ndim == 3 else b.shape[0] if b.ndim == 2 else None)
    if n is None:
        raise ValueError("quadratic(L, b): L is [d, d] and b is [d]; pass num_workers=n to say how many workers.")
    if L.ndim == 2:
        L = np.broadcast_to(L, (n,) + L.shape).copy()
    if b.ndim == 1:
        b = np.broadcast_to(b, (n,) + b.shape).copy()
    if L.ndim != 3 or L.shape[1] != L.shape[2] or L.shape[0] != n:
        raise ValueError(f"L has shape {L.shape}; need [n, d, d] (or [d, d]) with n={n} workers.")
    if b.shape != L.shape[:2]:
        raise ValueError(f"b has shape {b.shape} but L has shape {L.shape}; need b: [n, d] = {L.shape[:2]}.")
    if not np.allclose(L, np.swapaxes(L, 1, 2)):
        raise ValueError("L is not symmetric; pass (L + Lᵀ) / 2.")
    return Quadratic(L, b)


def random_quadratic(seed: int, *, dim: int, num_workers: int, heterogeneity: float = 1.0,
                     b_scale: float = 1.0, min_eig: float = 0.5) -> Quadratic:
    """A random well-conditioned problem.

    ``L_i = S + heterogeneity · E_i`` with ``S`` shared and ``E_i`` per worker (all PSD, ``S ⪰ min_eig · I``), and
    independent ``b_i ~ N(0, b_scale² I)``. ``heterogeneity=0`` gives a homogeneous problem.
    """
    rng = np.random.default_rng(seed)

    def psd():
        a = rng.normal(size=(dim, dim)) / math.sqrt(dim)
        return a @ a.T

    shared = psd() + min_eig * np.eye(dim)
    L = np.stack([shared + heterogeneity * psd() for _ in range(num_workers)])
    b = b_scale * rng.normal(size=(num_workers, dim))
    return quadratic(L, b)


def two_by_two(a: float, b: float, c: float) -> Quadratic:
    """The paper's 2x2 example: ``L = [[a, c], [c, b]]`` on two workers, ``b_i = 0`` (so ``x* = 0``)."""
    if a <= 0 or b <= 0 or c * c >= a * b:
        raise ValueError(f"L = [[{a}, {c}], [{c}, {b}]] is not positive definite; need a, b > 0 and c² < ab.")
    return quadratic(np.array([[a, c], [c, b]]), np.zeros(2), num_workers=2)


def coordinate_spec(dim: int) -> SubnetSpec:
    """The spec of the iterate ``{"x": [d]}``: its only axis is neuron group `COORDS` of ``d`` units."""
    return spec_from_table({"x": np.zeros(dim)}, {"x": (COORDS,)})


def client_spec(num_workers: int, dim: int) -> SubnetSpec:
    """The spec of the problem data ``{"L": [n, d, d], "b": [n, d]}``: coordinate axes are group `COORDS`.

    Extracting with it gives every worker ``L[:, S_w, S_w]`` and ``b[:, S_w]`` (all clients' blocks on its own
    coordinates); `ist_round` keeps client ``w``'s.
    """
    data = {"L": np.zeros((num_workers, dim, dim)), "b": np.zeros((num_workers, dim))}
    return spec_from_table(data, {"L": (None, COORDS, COORDS), "b": (None, COORDS)})


def _check_layout(dim: int, num_workers: int) -> None:
    partition_lib.uniform().slots({COORDS: dim}, num_workers)  # raises the sampler's own message if d % n != 0


def ist_round(problem: Quadratic, x, partition: partition_lib.Partition, *, step_size, local_steps: int = 1):
    """One IST round on the quadratic, through extract -> K local SGD steps -> merge.

    Args:
      problem: the quadratic (its arrays are converted to ``x``'s dtype).
      x: `[d]` the global iterate.
      partition: ``indices[COORDS]: [n, m]``, e.g. from ``istjax.uniform().sample(key, {COORDS: d}, n)``.
      step_size: ``γ``.
      local_steps: ``K``.

    Returns:
      `[d]` the next iterate (the paper's ``(1/n) Σ_i x_i`` after ``K`` sketched steps; see the module docstring).
    """
    n, d = problem.num_workers, problem.dim
    sub_x = subnet_lib.extract({"x": x}, partition, coordinate_spec(d))["x"]  # [n, m]
    data = {"L": jnp.asarray(problem.L, x.dtype), "b": jnp.asarray(problem.b, x.dtype)}
    blocks = subnet_lib.extract(data, partition, client_spec(n, d))  # L: [n(worker), n(client), m, m]
    own = jnp.arange(n)
    L_own = blocks["L"][own, own]  # [n, m, m]: worker w's own client's block L_w[S_w, S_w]
    b_own = blocks["b"][own, own]  # [n, m]

    def sub_loss(u_m, batch):  # h_w(u) = f_w(C_w x) / n
        Lu = batch["L"] @ u_m
        return 0.5 * n * jnp.dot(u_m, Lu) - jnp.dot(batch["b"], u_m), {}

    optimizer = optax.sgd(step_size)

    def worker(u_m, L_mm, b_m):
        batches = {"L": jnp.broadcast_to(L_mm, (local_steps,) + L_mm.shape),
                   "b": jnp.broadcast_to(b_m, (local_steps,) + b_m.shape)}
        state = WorkerState(u_m, {}, optimizer.init(u_m))
        state, _ = algorithms_lib.local_train(stateless(sub_loss), optimizer, state, batches)
        return state.params

    trained = jax.vmap(worker)(sub_x, L_own, b_own)  # [n, m]
    return subnet_lib.merge({"x": x}, {"x": trained}, partition, coordinate_spec(d))["x"]


def all_partitions(dim: int, num_workers: int) -> partition_lib.Partition:
    """Every partition `istjax.uniform` can draw, each equally likely, stacked on a leading `[P]` axis.

    ``P = d! / (m!)ⁿ`` (worker ``w``'s block is a set; blocks are labelled by worker). Indices are sorted per worker,
    as the sampler returns them: ``indices[COORDS]: [P, n, m]`` int32, ``mask[COORDS]`` all True.
    """
    _check_layout(dim, num_workers)
    m = dim // num_workers
    count = math.factorial(dim) // math.factorial(m) ** num_workers
    if count > 200_000:
        raise ValueError(f"dim={dim}, num_workers={num_workers} has {count} partitions; enumerate at most 200000 "
                         f"(use a smaller dim, or estimate with simulate()).")

    def deal(rest):
        if not rest:
            yield ()
            return
        for block in itertools.combinations(rest, m):
            left = tuple(i for i in rest if i not in block)
            for tail in deal(left):
                yield (block,) + tail

    idx = np.asarray(list(deal(tuple(range(dim)))), np.int32)  # [P, n, m]
    return partition_lib.Partition({COORDS: jnp.asarray(idx)}, {COORDS: jnp.ones(idx.shape, bool)})


@functools.partial(jax.jit, static_argnames=("local_steps",))
def _round_maps(L, b, partitions, step_size, local_steps):
    problem = Quadratic(L, b)
    d = L.shape[-1]
    eye = jnp.eye(d, dtype=L.dtype)

    def one(p):
        c = ist_round(problem, jnp.zeros((d,), L.dtype), p, step_size=step_size, local_steps=local_steps)
        cols = jax.vmap(lambda e: ist_round(problem, e, p, step_size=step_size, local_steps=local_steps))(eye)
        return (cols - c[None, :]).T, c  # A[:, j] = round(e_j) - round(0)

    return jax.vmap(one)(partitions)


def round_map(problem: Quadratic, partitions: partition_lib.Partition, *, step_size: float, local_steps: int = 1):
    """The affine maps ``x -> A_p x + c_p`` of rounds under the given partitions (leading `[P]` axis).

    Built by running `ist_round` on ``0`` and on the basis vectors, so it is exact for any affine round.

    Returns:
      ``(A: [P, d, d], c: [P, d])`` as jax arrays in ``problem``'s dtype (call under ``jax.enable_x64(True)`` for
      float64).
    """
    L, b = jnp.asarray(problem.L), jnp.asarray(problem.b)
    return _round_maps(L, b, partitions, jnp.asarray(step_size, L.dtype), local_steps)


class FixedPoint(NamedTuple):
    """The mean iterate's dynamics ``E[x⁺] = EA E[x] + Ec`` and its fixed point.

    Attributes:
      x: `[d]` ``x̂ = (I - EA)⁻¹ Ec``.
      EA: `[d, d]` ``E[A_p]``.
      Ec: `[d]` ``E[c_p]``.
      rate: spectral radius of ``EA``; the mean converges to ``x̂`` like ``rate^t`` when it is below one.
      num_partitions: how many partitions were averaged.
    """

    x: np.ndarray
    EA: np.ndarray
    Ec: np.ndarray
    rate: float
    num_partitions: int


def expected_fixed_point(problem: Quadratic, *, step_size: float, local_steps: int = 1) -> FixedPoint:
    """The exact expected fixed point, averaging the round's affine map over all partitions (float64 numpy)."""
    with jax.enable_x64(True):
        parts = all_partitions(problem.dim, problem.num_workers)
        A, c = round_map(problem, parts, step_size=step_size, local_steps=local_steps)
        EA, Ec = np.asarray(jnp.mean(A, axis=0)), np.asarray(jnp.mean(c, axis=0))
    x = np.linalg.solve(np.eye(problem.dim) - EA, Ec)
    rate = float(np.max(np.abs(np.linalg.eigvals(EA))))
    return FixedPoint(x, EA, Ec, rate, int(A.shape[0]))


def closed_form_fixed_point(problem: Quadratic, *, step_size: float, local_steps: int = 1) -> np.ndarray:
    """``x̂`` from the formulas in the module docstring (the paper's for ``K = 1``; ours for ``d = n``, ``K > 1``).

    Raises:
      ValueError: for ``K > 1`` with more than one coordinate per worker (no closed form; use
        `expected_fixed_point`).
    """
    n, d = problem.num_workers, problem.dim
    _check_layout(d, n)
    m = d // n
    if local_steps == 1:
        Lbar = problem.L_mean
        diag = np.diag(np.diag(Lbar))
        off = Lbar - diag
        Ltilde = n * diag + (n * (m - 1) / (d - 1) if d > 1 else 0.0) * off
        return np.linalg.solve(Ltilde, problem.b_mean)
    if m != 1:
        raise ValueError(f"closed_form_fixed_point: local_steps={local_steps} with {m} coordinates per worker has no "
                         f"closed form here; use expected_fixed_point (exact enumeration) or local_steps=1.")
    a = 1.0 - step_size * n * np.diagonal(problem.L, axis1=1, axis2=2)  # [n, d]: a_ij
    geometric = sum(a ** t for t in range(local_steps))  # Σ_{t<K} a^t
    Ec = np.mean(step_size * problem.b * geometric, axis=0)
    EA = np.mean(a ** local_steps, axis=0)
    return Ec / (1.0 - EA)


class Trajectory(NamedTuple):
    """Iterates of independent runs: `x: [R, T + 1, d]` (round 0 is the start) and `loss: [R, T + 1]` (``f``)."""

    x: np.ndarray
    loss: np.ndarray


@functools.partial(jax.jit, static_argnames=("rounds", "local_steps", "num_workers"))
def _simulate(L, b, x0, keys, step_size, decay, rounds, local_steps, num_workers):
    problem = Quadratic(L, b)
    d = L.shape[-1]
    sampler = partition_lib.uniform()

    def run(key):
        def body(x, inputs):
            t, k = inputs
            p = sampler.sample(k, {COORDS: d}, num_workers)
            gamma = step_size / (1.0 + decay * t)
            x = ist_round(problem, x, p, step_size=gamma, local_steps=local_steps)
            return x, x

        ts = jnp.arange(rounds).astype(L.dtype)
        _, xs = jax.lax.scan(body, x0, (ts, jax.random.split(key, rounds)))
        return jnp.concatenate([x0[None, :], xs], axis=0)

    return jax.vmap(run)(keys)


def simulate(problem: Quadratic, x0, *, seed: int, rounds: int, num_runs: int = 1, step_size: float,
             local_steps: int = 1, decay: float = 0.0) -> Trajectory:
    """Runs IST (`ist_round` with `istjax.uniform` partitions) from ``x0`` in float64.

    Args:
      problem: the quadratic.
      x0: `[d]` starting point, shared by all runs.
      seed: PRNG seed; run ``r`` uses the ``r``-th split of ``jax.random.key(seed)``.
      rounds: ``T``.
      num_runs: ``R`` independent runs (different partitions), vmapped.
      step_size: ``γ`` (at round ``t`` the step is ``γ / (1 + decay · t)``).
      local_steps: ``K``.
      decay: step-size decay rate (0: constant).
    """
    _check_layout(problem.dim, problem.num_workers)
    with jax.enable_x64(True):
        keys = jax.random.split(jax.random.key(seed), num_runs)
        xs = _simulate(jnp.asarray(problem.L), jnp.asarray(problem.b), jnp.asarray(x0, jnp.float64), keys,
                       jnp.asarray(step_size, jnp.float64), jnp.asarray(decay, jnp.float64), rounds,
                       local_steps, problem.num_workers)
        xs = np.asarray(xs)
    return Trajectory(xs, problem.loss(xs))


def descent_threshold(a: float, b: float) -> float:
    """``2ab / (a + b)``: for ``c`` above it the 2x2 method is not a descent method (see the module docstring)."""
    return 2.0 * a * b / (a + b)


def ascent_direction(problem: Quadratic) -> tuple[np.ndarray, float]:
    """The unit ``x`` minimising ``⟨∇f(x), g(x)⟩ = xᵀ L̄ n Diag(L̄) x`` (homogeneous, ``b = 0``, ``d = n``).

    Returns:
      ``(x: [d], value)``; ``value < 0`` means a small IST step from ``x`` increases ``f``.
    """
    L = problem.L_mean
    D = np.diag(np.diag(L))
    sym = problem.num_workers * (L @ D + D @ L) / 2.0
    w, v = np.linalg.eigh(sym)
    return v[:, 0], float(w[0])


def diag_rescale(problem: Quadratic) -> tuple[Quadratic, np.ndarray]:
    """The problem in coordinates ``y = Diag(L̄)^(1/2) x``: ``L' = D^(-1/2) L D^(-1/2)``, ``b' = D^(-1/2) b``.

    Returns:
      ``(rescaled problem, s: [d])`` with ``x = s * y`` (``s = diag(L̄)^(-1/2)``).
    """
    s = 1.0 / np.sqrt(np.diag(problem.L_mean))
    return Quadratic(problem.L * s[None, :, None] * s[None, None, :], problem.b * s[None, :]), s
