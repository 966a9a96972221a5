"""Plain reference rounds: Python loops over workers and steps, numpy indexing, no vmap, no scan.

These read like the papers' pseudocode and share no indexing code with `istjax.extract` / `istjax.merge`: they are
the oracle the vectorised and distributed rounds are tested against (as FedJAX keeps a plain ``fed_avg`` beside the
fast one). Slow; for tests and for reading.

Each function takes the same ``(algorithm, state, batches)`` as ``algorithm.round`` and returns the next state.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from istjax.algorithms.base import Algorithm, TrainState

__all__ = ["reference_round"]

PyTree = Any


def _worker_slices(leaf_spec, idx: dict[str, np.ndarray], group_sizes, slots, w: int, shape):
    """Worker w's slice of a leaf as two ``np.ix_`` indices: ``full`` into the global leaf and ``sub`` into the
    worker's (padded) sub-leaf. Padding slots sit at the end of each tile and are left out of both."""
    full, sub = [], []
    for dim, a in zip(shape, leaf_spec.axes):
        if a is None:
            full.append(np.arange(dim))
            sub.append(np.arange(dim))
            continue
        size = group_sizes[a.group]
        units = idx[a.group][w]
        units = units[units < size]
        full.append(np.concatenate([units + t * size for t in range(a.tiles)]))
        sub.append(np.concatenate([np.arange(len(units)) + t * slots[a.group] for t in range(a.tiles)]))
    return np.ix_(*full), np.ix_(*sub)


def _train_one(loss_fn, optimizer, params, opt_state, batches_K, num_steps):
    for k in range(num_steps):
        batch = jax.tree.map(lambda b: b[k], batches_K)
        grads = jax.grad(lambda p: loss_fn(p, batch)[0])(params)
        with jax.numpy_dtype_promotion("standard"):
            updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
    return params, opt_state


def _ist(alg: Algorithm, state: TrainState, batches) -> TrainState:
    spec, W, K = alg.task.spec, alg.num_workers, alg.local_steps
    key, round_key = jax.random.split(state.key)
    part = alg.sampler.sample(round_key, spec.group_sizes, W)
    idx = {g: np.asarray(v) for g, v in part.indices.items()}
    slots = alg.sampler.slots(spec.group_sizes, W)
    loss_fn = alg.task.loss_fn(slots)
    flat_spec = jax.tree.leaves(spec.leaves)
    flat_params, treedef = jax.tree.flatten(state.params)
    flat_np = [np.asarray(x) for x in flat_params]
    sums = [np.zeros_like(x) for x in flat_np]
    counts = [np.zeros(x.shape) for x in flat_np]
    for w in range(W):
        # The worker's sub-network: slices of partitioned leaves (zero padding where it has fewer units).
        sub_flat = []
        for s, x in zip(flat_spec, flat_np):
            full_ix, sub_ix = _worker_slices(s, idx, spec.group_sizes, slots, w, x.shape)
            sub = np.zeros(tuple(dim if a is None else slots[a.group] * a.tiles for dim, a in zip(x.shape, s.axes)),
                           x.dtype)
            sub[sub_ix] = x[full_ix]
            sub_flat.append(jnp.asarray(sub))
        sub_params = jax.tree.unflatten(treedef, sub_flat)
        opt_state = alg.optimizer.init(sub_params)
        batches_w = jax.tree.map(lambda b: b[w], batches)
        sub_params, _ = _train_one(loss_fn, alg.optimizer, sub_params, opt_state, batches_w, K)
        for i, (s, x, y) in enumerate(zip(flat_spec, flat_np, jax.tree.leaves(sub_params))):
            y = np.asarray(y)
            if s.shared:
                sums[i] += y
                counts[i] += 1
                continue
            full_ix, sub_ix = _worker_slices(s, idx, spec.group_sizes, slots, w, x.shape)
            sums[i][full_ix] += y[sub_ix]
            counts[i][full_ix] += 1
    new = [np.where(c > 0, s_ / np.maximum(c, 1), x).astype(x.dtype) for s_, c, x in zip(sums, counts, flat_np)]
    return TrainState(jax.tree.unflatten(treedef, [jnp.asarray(v) for v in new]), (), key, state.round + 1)


def _replicated(alg: Algorithm, state: TrainState, batches) -> TrainState:
    W, K = alg.num_workers, alg.local_steps
    key, _ = jax.random.split(state.key)
    loss_fn = alg.task.loss_fn(None)
    if alg.name == "data_parallel":
        params, opt_state = state.params, state.opt_state
        for k in range(K):
            grads = [jax.grad(lambda p: loss_fn(p, jax.tree.map(lambda b: b[w, k], batches))[0])(params)
                     for w in range(W)]
            mean = jax.tree.map(lambda *g: sum(g[1:], g[0]) / W, *grads)
            with jax.numpy_dtype_promotion("standard"):
                updates, opt_state = alg.optimizer.update(mean, opt_state, params)
            params = optax.apply_updates(params, updates)
        return TrainState(params, opt_state, key, state.round + 1)
    # local SGD with the optimizer state reset every round
    results = []
    for w in range(W):
        p, _ = _train_one(loss_fn, alg.optimizer, state.params, alg.optimizer.init(state.params),
                          jax.tree.map(lambda b: b[w], batches), K)
        results.append(p)
    params = jax.tree.map(lambda *p: sum(p[1:], p[0]) / W, *results)
    return TrainState(params, (), key, state.round + 1)


def reference_round(algorithm: Algorithm, state: TrainState, batches: PyTree) -> TrainState:
    """One round of ``algorithm`` computed with plain loops (IST with optimizer_state="reset"; data parallel;
    local SGD with optimizer_state="reset")."""
    if algorithm.name == "ist":
        if state.opt_state != ():
            raise NotImplementedError("the reference IST round resets the optimizer state; build ist() with "
                                      "optimizer_state='reset' to compare against it.")
        return _ist(algorithm, state, batches)
    if algorithm.name in ("data_parallel", "local_sgd"):
        if algorithm.name == "local_sgd" and state.opt_state != ():
            raise NotImplementedError("the reference local SGD round resets the optimizer state.")
        return _replicated(algorithm, state, batches)
    raise ValueError(f"no reference round for algorithm {algorithm.name!r}")
