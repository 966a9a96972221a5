"""Local SGD and consensus ADMM on heterogeneous quadratics: where each converges, in closed form.

Worker ``i`` holds ``f_i(x) = 1/2 xᵀ L_i x - b_iᵀ x`` (a `istjax.theory.Quadratic`); the goal is the minimiser of
their mean, ``x* = L̄⁻¹ b̄``. Both methods below take ``K`` gradient steps of size ``γ`` per round on every worker,
from the server's model; they differ in what the steps descend and what the server does.

Local SGD (`istjax.local_sgd` with ``optax.sgd(γ)``, its state reset): worker ``i`` maps ``x`` to
``A_i^K x + Σ_{t<K} A_i^t γ b_i`` (``A_i = I - γ L_i``) and the server averages, so a round is affine,
``x⁺ = mean_i(A_i^K) x + mean_i(Σ_t A_i^t γ b_i)``, and its fixed point (`local_sgd_fixed_point`) is

    ``x̂ = (I - mean_i A_i^K)⁻¹ mean_i Σ_{t<K} A_i^t γ b_i``,

which is ``x*`` for ``K = 1`` (one step of gradient descent on the mean) or equal ``L_i``, and otherwise biased:
each worker drifts toward its own minimiser within a round (Charles and Konečný 2021, "Convergence and Accuracy
Trade-Offs in Federated Learning and Meta-Learning", derive the same map).

Consensus ADMM (`istjax.admm`, `istjax.algorithms.consensus`): worker ``i`` starts from ``z`` and descends
``f_i(x) + ρ/2 ||x - z + u_i||²``, whose gradient is ``(L_i + ρ I) x - b_i - ρ (z - u_i)``, so after ``K`` steps
``x_i = M_i^K z + Σ_{t<K} M_i^t γ (b_i + ρ (z - u_i))`` with ``M_i = I - γ (L_i + ρ I)``; then
``z⁺ = mean_i(x_i + u_i)`` and ``u_i⁺ = x_i + u_i - z⁺`` (`admm_round`). At a fixed point every ``x_i = z``, the
duals sum to zero and ``L_i z - b_i + ρ u_i = 0``; summing over workers, ``L̄ z = b̄``: ``z = x*`` for every ``K``,
``γ`` and ``ρ > 0`` (`admm_fixed_point`, with the duals ``u_i = (b_i - L_i x*) / ρ``), when the iteration converges
(for small enough ``γ``; the tests run it).

`quadratic_task` and `quadratic_batches` state the same problem as an istjax task and its batches, so the real
algorithms run on it and are checked against these formulas. Everything here is float64 numpy.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from istjax.core.task import Task
from istjax.theory.quadratic import Quadratic, coordinate_spec

__all__ = ["AdmmPoint", "admm_fixed_point", "admm_round", "local_sgd_fixed_point", "local_sgd_round",
           "quadratic_batches", "quadratic_task"]


def _sum_of_powers(A: np.ndarray, K: int) -> np.ndarray:
    """``Σ_{t<K} A^t``."""
    total, power = np.zeros_like(A), np.eye(A.shape[-1])
    for _ in range(K):
        total, power = total + power, power @ A
    return total


def _local_map(problem: Quadratic, step_size: float, local_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """``(mean_i A_i^K, mean_i Σ_t A_i^t γ b_i)``: one local SGD round as the affine map ``x -> A x + c``."""
    eye = np.eye(problem.dim)
    A, c = [], []
    for L, b in zip(np.asarray(problem.L, np.float64), np.asarray(problem.b, np.float64)):
        step = eye - step_size * L
        A.append(np.linalg.matrix_power(step, local_steps))
        c.append(_sum_of_powers(step, local_steps) @ (step_size * b))
    return np.mean(A, axis=0), np.mean(c, axis=0)


def local_sgd_round(problem: Quadratic, x, *, step_size: float, local_steps: int) -> np.ndarray:
    """One round of local SGD (plain gradient steps, the server's plain mean) from ``x``, `[d]`."""
    A, c = _local_map(problem, step_size, local_steps)
    return A @ np.asarray(x, np.float64) + c


def local_sgd_fixed_point(problem: Quadratic, *, step_size: float, local_steps: int) -> np.ndarray:
    """`[d]` where local SGD converges (module docstring): ``(I - mean_i A_i^K)⁻¹ mean_i Σ_t A_i^t γ b_i``."""
    A, c = _local_map(problem, step_size, local_steps)
    return np.linalg.solve(np.eye(problem.dim) - A, c)


class AdmmPoint(NamedTuple):
    """ADMM's iterate: the server's ``z`` `[d]` and the workers' scaled duals ``u`` `[n, d]`."""

    z: np.ndarray
    u: np.ndarray


def admm_round(problem: Quadratic, point: AdmmPoint, *, step_size: float, local_steps: int,
               rho: float) -> AdmmPoint:
    """One consensus ADMM round (module docstring): ``K`` gradient steps per worker from ``z``, in closed form."""
    z, u = np.asarray(point.z, np.float64), np.asarray(point.u, np.float64)
    eye = np.eye(problem.dim)
    sent = []
    for i, (L, b) in enumerate(zip(np.asarray(problem.L, np.float64), np.asarray(problem.b, np.float64))):
        M = eye - step_size * (L + rho * eye)
        x = np.linalg.matrix_power(M, local_steps) @ z + _sum_of_powers(M, local_steps) @ (
            step_size * (b + rho * (z - u[i])))
        sent.append(x + u[i])
    sent = np.stack(sent)
    z_next = np.mean(sent, axis=0)
    return AdmmPoint(z_next, sent - z_next)


def admm_fixed_point(problem: Quadratic, *, rho: float) -> AdmmPoint:
    """ADMM's fixed point (module docstring): ``z = x*`` and ``u_i = (b_i - L_i x*) / ρ``, for every ``K`` and
    ``γ``."""
    if not rho > 0:
        raise ValueError(f"rho={rho!r}: the duals' fixed point needs rho > 0 (at rho = 0 ADMM is local SGD).")
    x = problem.minimiser()
    u = (np.asarray(problem.b, np.float64) - np.einsum("nij,j->ni", np.asarray(problem.L, np.float64), x)) / rho
    return AdmmPoint(x, u)


def quadratic_task(problem: Quadratic, x0=None) -> Task:
    """The problem as an istjax `Task`: parameters ``{"x": [d]}`` (``x0``, default zeros), a batch
    ``{"L": [B, d, d], "b": [B, d]}`` of worker terms whose loss is their mean ``1/2 xᵀ L x - bᵀ x`` (a worker's
    batches hold its own term: `quadratic_batches`). Float32 unless JAX runs in float64."""
    start = np.zeros(problem.dim) if x0 is None else np.asarray(x0, np.float64)

    def init(key):
        del key
        return {"x": jnp.asarray(start, jnp.result_type(float))}

    def loss_fn(units):
        del units

        def loss(params, batch):
            x = params["x"]
            values = 0.5 * jnp.einsum("i,bij,j->b", x, batch["L"], x) - batch["b"] @ x
            return jnp.mean(values), {}

        return loss

    return Task.from_loss(init, loss_fn, coordinate_spec(problem.dim))


def quadratic_batches(problem: Quadratic, local_steps: int) -> dict:
    """A round's batches for `quadratic_task`: worker ``i``'s every step holds its own ``(L_i, b_i)``, leaves
    `[n, K, 1, ...]`."""
    n, d = problem.num_workers, problem.dim
    dtype = jnp.result_type(float)
    L = np.broadcast_to(np.asarray(problem.L)[:, None, None], (n, local_steps, 1, d, d))
    b = np.broadcast_to(np.asarray(problem.b)[:, None, None], (n, local_steps, 1, d))
    return {"L": jnp.asarray(L, dtype), "b": jnp.asarray(b, dtype)}
