"""Masked-neuron regression after Liao and Kyrillidis: a wide one-hidden-layer ReLU network trained with IST.

Reference: F. Liao, A. Kyrillidis, "On the Convergence of Shallow Neural Network Training with Randomly Masked
Neurons", TMLR 2022 (arXiv 2112.02668). IST: Yuan et al., arXiv 1910.02120.

The network (the paper's lazy-regime model)::

    u(x) = (1 / sqrt(m)) Σ_r a_r relu(w_rᵀ x),   w_r ~ N(0, κ² I),   a_r = ±1 fixed (not trained),

on ``N`` unit-norm inputs with a squared loss ``(1/2N) Σ_i (u(x_i) - y_i)²`` and full-batch gradient steps. The
hidden units form neuron group `HIDDEN`: ``w: [D, m]`` is partitioned on axis 1 and ``a: [m]`` on axis 0.

A sub-network holds a subset ``S`` of the units and predicts ``(s / sqrt(m)) Σ_{r∈S} a_r relu(w_rᵀ x)`` with the
output scale ``s = 1 / ξ`` (``ξ``: the probability that a unit is held), so that its prediction is unbiased for the
full network's, as in the paper (and as inverted dropout does). With IST's disjoint partition into ``W`` equal parts
``ξ = 1 / W``, so ``s = m / |S| = W`` (the default when `relu_regression_task` is given no ``output_scale``).

What the paper states (abstract and main theorem): the training error converges linearly up to a neighbourhood of
the optimum whose size, *for a fixed neuron selection probability* ``ξ``, decreases as the number of sub-networks
(surrogate models) grows and increases with the number of local steps. `bernoulli` is that sampling scheme (every
sub-network keeps every unit independently with probability ``ξ``; units held by several sub-networks are averaged
by `istjax.merge`, units held by none keep their value). IST is the special case of a disjoint partition, where
``ξ = 1 / W`` shrinks as ``W`` grows; `loss_floor` measures both (see ``docs/theory.md`` for the numbers).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from istjax.algorithms.ist import ist
import istjax.core.partition as partition_lib
from istjax.core.spec import spec_from_table
from istjax.core.task import Task

__all__ = ["HIDDEN", "RegressionData", "regression_data", "predict", "relu_regression_task", "bernoulli",
           "LossCurve", "train_curve", "loss_floor"]

HIDDEN = "hidden"


class RegressionData(NamedTuple):
    """A regression set. `x: [N, D]` unit-norm rows; `y: [N]` targets in ``[-1, 1]``."""

    x: np.ndarray
    y: np.ndarray


def regression_data(seed: int, *, num_points: int = 32, dim: int = 8) -> RegressionData:
    """Unit-norm Gaussian inputs and a smooth non-linear target ``y = sin(3 vᵀx) · cos(2 v'ᵀx)``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_points, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    v, v2 = rng.normal(size=dim), rng.normal(size=dim)
    y = np.sin(3 * x @ v / np.linalg.norm(v)) * np.cos(2 * x @ v2 / np.linalg.norm(v2))
    return RegressionData(x, y)


def predict(params, x_NxD, *, width: int, scale=1.0):
    """``(scale / sqrt(width)) Σ_r a_r relu(w_rᵀ x)`` for `x: [N, D]` -> `[N]`; ``params``: ``w: [D, s]``, ``a: [s]``.

    ``width`` is the full network's ``m`` (the NTK normalisation), whatever the number ``s`` of units held.
    """
    h_NxS = jax.nn.relu(x_NxD @ params["w"])
    return (scale / math.sqrt(width)) * (h_NxS @ params["a"])


def relu_regression_task(dim: int, width: int, *, init_scale: float = 1.0,
                         output_scale: Optional[float] = None, dtype=jnp.float64) -> Task:
    """The one-hidden-layer ReLU regression network as an istjax `Task`.

    Args:
      dim: input dimension ``D``.
      width: hidden units ``m``.
      init_scale: ``κ``, the standard deviation of the first-layer weights.
      output_scale: sub-network output scale ``s`` (``1 / ξ``); None: ``m / slots``, i.e. ``W`` for IST's equal
        disjoint partition. The full network (``units=None``) always uses 1.
      dtype: parameter dtype (float64 needs ``jax.enable_x64(True)`` around init and training).
    """
    if width < 1 or dim < 1:
        raise ValueError(f"relu_regression_task(dim={dim}, width={width}): both must be positive integers.")

    def init(key):
        kw, ka = jax.random.split(key)
        w = init_scale * jax.random.normal(kw, (dim, width), dtype)
        a = jnp.where(jax.random.bernoulli(ka, 0.5, (width,)), 1.0, -1.0).astype(dtype)
        return {"a": a, "w": w}

    spec = spec_from_table(jax.eval_shape(init, jax.random.key(0)), {"w": (None, HIDDEN), "a": (HIDDEN,)})

    def loss_fn(units):
        if units is None:
            scale = 1.0
        else:
            scale = float(output_scale) if output_scale is not None else width / units[HIDDEN]

        def loss(params, batch):
            fixed = {"w": params["w"], "a": jax.lax.stop_gradient(params["a"])}  # output layer fixed (paper)
            u = predict(fixed, batch["x"], width=width, scale=scale)  # [N]
            return 0.5 * jnp.mean(jnp.square(u - batch["y"])), {}

        return loss

    return Task.from_loss(init, loss_fn, spec)


def bernoulli(keep_prob: float) -> partition_lib.Sampler:
    """Every worker independently holds every unit with probability ``keep_prob`` (the paper's random masks).

    Workers get all ``size`` slots, the units they do not hold being padding (masked, zero-filled by extract,
    dropped by merge), so the compiled round is the same every round. Units held by several workers are averaged.
    """
    if not 0 < keep_prob <= 1:
        raise ValueError(f"keep_prob={keep_prob!r}: need a probability in (0, 1].")

    def slots(group_sizes, num_workers):
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers={num_workers!r}: need a positive integer.")
        return dict(group_sizes)

    def sample(key, group_sizes, num_workers):
        indices, mask = {}, {}
        for i, (g, n) in enumerate(sorted(group_sizes.items())):
            keep = jax.random.bernoulli(jax.random.fold_in(key, i), keep_prob, (num_workers, n))
            idx = jnp.sort(jnp.where(keep, jnp.arange(n, dtype=jnp.int32)[None, :], jnp.int32(n)), axis=1)
            indices[g], mask[g] = idx, idx < n
        return partition_lib.Partition(indices, mask)

    return partition_lib.Sampler(sample, slots, disjoint=False, name=f"bernoulli{keep_prob:g}")


class LossCurve(NamedTuple):
    """`loss: [T + 1]` the full network's training loss before round 0 and after every round."""

    loss: np.ndarray


def train_curve(data: RegressionData, *, width: int, num_workers: int, local_steps: int, step_size: float,
                rounds: int, seed: int = 0, keep_prob: Optional[float] = None, init_scale: float = 1.0) -> LossCurve:
    """Trains the network with `istjax.ist` (full-batch SGD steps on every worker) and records the full loss.

    Args:
      data: the regression set; every worker sees all of it at every local step (gradient descent, as the paper).
      width: ``m``.
      num_workers: ``W`` sub-networks per round.
      local_steps: ``K`` gradient steps per round.
      step_size: the workers' learning rate.
      rounds: ``T``.
      seed: initialisation and partition seed.
      keep_prob: None for IST's disjoint `istjax.uniform` partition (``ξ = 1/W``); a probability for `bernoulli`
        masks with output scale ``1 / keep_prob``.
      init_scale: ``κ``.
    """
    with jax.enable_x64(True):
        sampler = None if keep_prob is None else bernoulli(keep_prob)
        task = relu_regression_task(data.x.shape[1], width, init_scale=init_scale,
                                    output_scale=None if keep_prob is None else 1.0 / keep_prob)
        alg = ist(task, optax.sgd(step_size), num_workers=num_workers, local_steps=local_steps,
                  sampler=sampler)
        batch = {"x": jnp.asarray(data.x), "y": jnp.asarray(data.y)}
        batches = jax.tree.map(lambda v: jnp.broadcast_to(v, (num_workers, local_steps) + v.shape), batch)
        full_loss = task.loss_fn(None)
        loss = _curve(alg.round.compiled, full_loss, alg.init(jax.random.key(seed)), batches, rounds)
        return LossCurve(np.asarray(loss))


def _curve(round_fn, full_loss, state, batches, rounds):
    batch = jax.tree.map(lambda v: v[0, 0], batches)

    @jax.jit
    def go(state):
        def body(s, _):
            s, _ = round_fn(s, batches)
            return s, full_loss(s.params, batch)[0]

        _, losses = jax.lax.scan(body, state, None, length=rounds)
        return jnp.concatenate([full_loss(state.params, batch)[0][None], losses])

    return go(state)


def loss_floor(curve: LossCurve, tail: float = 0.25) -> float:
    """The loss floor: the mean full-network loss over the last ``tail`` fraction of rounds."""
    t = max(1, int(round(tail * (len(curve.loss) - 1))))
    return float(np.mean(curve.loss[-t:]))
