"""Plain reference rounds: Python loops over workers and steps, numpy indexing, no vmap, no scan.

These read like the papers' pseudocode and share no gather/scatter code with `istjax.extract` / `istjax.merge`: they
are the oracle the vectorised and distributed rounds are tested against (as FedJAX keeps a plain ``fed_avg`` beside
the fast one). They cover model state (BatchNorm statistics sliced with their channels, averaged where shared, or
recomputed), the round's shared input, and any sampler (`istjax.per_group` included: every element is the mean of
the workers that hold it, which for a disjoint group is the one worker's value). Slow; for tests and for reading.

`reference_round(algorithm, state, batches, shared)` takes what ``algorithm.round`` takes and returns the next
state. It dispatches on what the algorithm declares (its ``exchange``), never on its name. A bfloat16 exchange
(``algorithm.wire``) is rounded here with numpy's bfloat16 (ml_dtypes), step by step as `istjax.core.precision`
states it: what a worker receives rounded; what it sends back, its change or its values, rounded; the server's
float32 copy plus the change.
"""

from __future__ import annotations

import collections

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from istjax.algorithms.base import Algorithm, ModelStatePolicy, apply_update
from istjax.core.comm import Exchange
from istjax.core.precision import ExchangeValues
from istjax.core.schedule import at_round
from istjax.core.spec import tile_positions
from istjax.core.state import TrainState, WorkerState, round_keys

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
        units = idx[a.group][w]
        units = units[units < group_sizes[a.group]]
        full.append(tile_positions(units, group_sizes[a.group], a.tiles))
        sub.append(tile_positions(np.arange(len(units)), slots[a.group], a.tiles))
    return np.ix_(*full), np.ix_(*sub)


def _sub_shape(leaf_spec, shape, slots):
    return tuple(dim if a is None else slots[a.group] * a.tiles for dim, a in zip(shape, leaf_spec.axes))


class _Slicer:
    """Worker slices of one tree (params or model state) and the by-count write-back: every element the sum of its
    holders' ``weight * value`` over the sum of their weights (each weight 1 but federated clients')."""

    def __init__(self, tree, spec, idx, slots):
        self.spec_leaves = jax.tree.leaves(spec.leaves)
        flat, self.treedef = jax.tree.flatten(tree)
        self.full = [np.asarray(x) for x in flat]
        self.sums = [np.zeros(x.shape, np.float64) for x in self.full]
        self.counts = [np.zeros(x.shape) for x in self.full]
        self.group_sizes, self.idx, self.slots = spec.group_sizes, idx, slots

    def extract(self, w):
        out = []
        for s, x in zip(self.spec_leaves, self.full):
            sub = np.zeros(_sub_shape(s, x.shape, self.slots), x.dtype)
            full_ix, sub_ix = _worker_slices(s, self.idx, self.group_sizes, self.slots, w, x.shape)
            sub[sub_ix] = x[full_ix]
            out.append(jnp.asarray(sub))
        return jax.tree.unflatten(self.treedef, out)

    def add(self, w, trained, weight=1.0):
        for i, (s, x, y) in enumerate(zip(self.spec_leaves, self.full, jax.tree.leaves(trained))):
            y = np.asarray(y)
            full_ix, sub_ix = _worker_slices(s, self.idx, self.group_sizes, self.slots, w, x.shape)
            self.sums[i][full_ix] += weight * y[sub_ix]
            self.counts[i][full_ix] += weight

    def merged(self):
        new = [np.where(c > 0, s / np.where(c > 0, c, 1), x).astype(x.dtype)
               for s, c, x in zip(self.sums, self.counts, self.full)]
        return jax.tree.unflatten(self.treedef, [jnp.asarray(v) for v in new])


def _rounded(alg: Algorithm, tree):
    """Every floating leaf of ``tree`` rounded to the wire's dtype and back (numpy), or ``tree`` on a float32 wire."""
    if alg.wire.exact:
        return tree
    low = np.dtype(alg.wire.dtype)

    def one(x):
        x = np.asarray(x)
        return jnp.asarray(x.astype(low).astype(x.dtype)) if np.issubdtype(x.dtype, np.floating) else jnp.asarray(x)

    return jax.tree.map(one, tree)


def _returned(alg: Algorithm, trained, exact):
    """What the server holds of a worker's ``trained`` tree that started from ``_rounded(exact)``: the rounded
    values (``"params"``), or ``exact`` plus the rounded change (``"delta"``)."""
    if alg.wire.exact:
        return trained
    if alg.wire.values == ExchangeValues.PARAMS:
        return _rounded(alg, trained)
    change = jax.tree.map(lambda t, s: np.asarray(t) - np.asarray(s), trained, _rounded(alg, exact))
    return jax.tree.map(lambda e, d: jnp.asarray(np.asarray(e) + np.asarray(d)), exact, _rounded(alg, change))


def _train_one(step, worker: WorkerState, batches_K, num_steps, shared) -> WorkerState:
    """K plain optimizer steps: the loss's gradient, one optax update, the model state the loss returned. A step
    whose batch carries example weights that are all zero (a federated client's padding) is skipped."""
    for k in range(num_steps):
        batch = jax.tree.map(lambda b: b[k], batches_K)
        if isinstance(batch, dict) and "weight" in batch and not np.any(np.asarray(batch["weight"])):
            continue
        worker = step(worker, batch, shared)
    return worker


def _step_fn(loss, optimizer):
    """One plain step, compiled on its own: the loop around it stays in Python (a step run op by op would re-trace
    every `lax.scan` of the model at every call, minutes for a small ResNet, and computes the same numbers)."""

    @jax.jit
    def step(worker: WorkerState, batch, shared):
        grads, (_, model_state) = _grad_fn(loss)(worker.params, worker.model_state, batch, shared)
        return apply_update(optimizer, grads, worker)._replace(model_state=model_state)

    return step


_COMPILED: collections.OrderedDict = collections.OrderedDict()


def _compiled(alg: Algorithm, units, kind: str):
    """The compiled step (``kind="step"``) or gradient (``"grad"``) of ``alg`` at ``units``, built once and reused
    by every worker and round (a few recent algorithms are kept; the algorithm itself is kept with its entry, so
    an id is never mistaken for another's)."""
    key = (id(alg), kind, None if units is None else tuple(sorted(units.items())))
    hit = _COMPILED.get(key)
    if hit is not None and hit[0] is alg:
        _COMPILED.move_to_end(key)
        return hit[1]
    loss = alg.task.train_loss(units)
    fn = _step_fn(loss, alg.optimizer) if kind == "step" else jax.jit(_grad_fn(loss))
    _COMPILED[key] = (alg, fn)
    while len(_COMPILED) > 8:
        _COMPILED.popitem(last=False)
    return fn


def _grad_fn(loss):
    """``(params, model_state, batch, shared) -> (grads, (aux, model_state))``."""
    return jax.grad(lambda p, model_state, batch, shared: _loss_and_state(loss, p, model_state, batch, shared),
                    has_aux=True)


def _loss_and_state(loss, params, model_state, batch, shared):
    value, (aux, new_state) = loss(params, model_state, batch, shared)
    return value, (aux, new_state)


def _mean(trees, weights=None):
    """The mean of ``trees`` (float64 sums), weighted by ``weights`` (summing to 1) when given."""
    w = np.full(len(trees), 1 / len(trees)) if weights is None else np.asarray(weights, np.float64)
    return jax.tree.map(lambda *xs: sum(wi * np.asarray(x, np.float64) for wi, x in zip(w, xs)).astype(xs[0].dtype),
                        *trees)


def _client_step(alg: Algorithm, anchor):
    """A replica's plain step; with FedProx (``alg.prox_mu``) the proximal term's gradient ``mu * (w - anchor)``
    added by hand to the loss's."""
    if not alg.prox_mu:
        return _compiled(alg, None, "step")
    grad = _compiled(alg, None, "grad")

    def step(worker: WorkerState, batch, shared):
        grads, (_, model_state) = grad(worker.params, worker.model_state, batch, shared)
        grads = jax.tree.map(lambda g, w, a: g + alg.prox_mu * (w - a), grads, worker.params, anchor)
        return apply_update(alg.optimizer, grads, worker)._replace(model_state=model_state)

    return step


def _policy(alg: Algorithm, params, model_state, batches, shared):
    """The model-state policy on the merged model (see `istjax.algorithms.base.finish_round`)."""
    if alg.model_state_policy == ModelStatePolicy.RECOMPUTE and jax.tree.leaves(model_state):
        model_state = alg.task.recompute_state(params, model_state, jax.tree.map(lambda b: b[:, 0], batches), shared)
    return model_state


def _subnetworks(alg: Algorithm, state: TrainState, batches, shared) -> TrainState:
    spec, state_spec, W, K = alg.task.spec, alg.task.state_spec, alg.num_workers, alg.local_steps
    key, round_key = round_keys(state.key)
    part = alg.sampler.sample(round_key, spec.group_sizes, W)
    idx = {g: np.asarray(v) for g, v in part.indices.items()}
    slots = alg.sampler.slots(spec.group_sizes, W)
    step = _compiled(alg, slots, "step")
    weights = _client_weights(alg, state)
    params, stats = _Slicer(state.params, spec, idx, slots), _Slicer(state.model_state, state_spec, idx, slots)
    for w in range(W):
        # The worker's sub-network and model state: slices of partitioned leaves (zero padding past its units).
        sub, sub_stats = params.extract(w), stats.extract(w)
        start = _rounded(alg, sub)
        worker = WorkerState(start, _rounded(alg, sub_stats), at_round(alg.optimizer.init(start), state.round))
        worker = _train_one(step, worker, jax.tree.map(lambda b: b[w], batches), K, shared)
        weight = 1.0 if weights is None else weights[w]
        params.add(w, _returned(alg, worker.params, sub), weight)
        stats.add(w, _returned(alg, worker.model_state, sub_stats), weight)
    new_params, opt_state = _server_step(alg, state, params.merged())
    model_state = _policy(alg, new_params, stats.merged(), batches, shared)
    return TrainState(new_params, model_state, opt_state, key, state.round + 1)


def _client_weights(alg: Algorithm, state: TrainState):
    """Federated clients: the server weighs each by its example count (the sampler's weights of this round,
    float64); None for every other algorithm."""
    return None if alg.clients is None else np.asarray(alg.clients.weights(state.round), np.float64)


def _server_step(alg: Algorithm, state: TrainState, merged):
    """``(params, opt_state)``: the merged parameters, or, with an outer optimizer (DiLoCo's; a federated server's),
    the global ones stepped along ``global - merged`` by it."""
    if alg.outer_optimizer is None:
        return merged, ()
    outer_grad = jax.tree.map(lambda p, m: p - m, state.params, merged)
    with jax.numpy_dtype_promotion("standard"):  # as `istjax.algorithms.replicated.outer_step`
        updates, opt_state = alg.outer_optimizer.update(outer_grad, state.opt_state, state.params)
    return jax.tree.map(lambda p, u: p + u, state.params, updates), opt_state


def _gradients(alg: Algorithm, state: TrainState, batches, shared) -> TrainState:
    W, K = alg.num_workers, alg.local_steps
    key, _ = round_keys(state.key)
    grad = _compiled(alg, None, "grad")
    replica = WorkerState(state.params, state.model_state, at_round(state.opt_state, state.round))
    worker_states = [_rounded(alg, state.model_state)] * W
    for k in range(K):
        grads = []
        for w in range(W):
            g, (_, worker_states[w]) = grad(replica.params, worker_states[w],
                                            jax.tree.map(lambda b: b[w, k], batches), shared)
            grads.append(_rounded(alg, g))  # what a worker sends
        replica = apply_update(alg.optimizer, _rounded(alg, _mean(grads)), replica)  # what every worker receives
    model_state = _policy(alg, replica.params, _mean([_returned(alg, s, state.model_state) for s in worker_states]),
                          batches, shared)
    return TrainState(replica.params, model_state, replica.opt_state, key, state.round + 1)


def _replicas(alg: Algorithm, state: TrainState, batches, shared) -> TrainState:
    W, K = alg.num_workers, alg.local_steps
    key, _ = round_keys(state.key)
    weights = _client_weights(alg, state)
    results = []
    for w in range(W):
        params_in = _rounded(alg, state.params)
        start = WorkerState(params_in, _rounded(alg, state.model_state),
                            at_round(alg.optimizer.init(params_in), state.round))
        trained = _train_one(_client_step(alg, params_in), start, jax.tree.map(lambda b: b[w], batches), K, shared)
        results.append(WorkerState(_returned(alg, trained.params, state.params),
                                   _returned(alg, trained.model_state, state.model_state), ()))
    params, opt_state = _server_step(alg, state, _mean([r.params for r in results], weights))
    model_state = _policy(alg, params, _mean([r.model_state for r in results], weights), batches, shared)
    return TrainState(params, model_state, opt_state, key, state.round + 1)


def reference_round(algorithm: Algorithm, state: TrainState, batches: PyTree, shared: Any = None) -> TrainState:
    """One round of ``algorithm`` computed with plain loops.

    Covers every exchange an algorithm declares: ``"subnetworks"`` (IST, any sampler, optimizer state reset; on
    federated clients, merged by example counts, the server optimizer's step),
    ``"gradients"`` (data parallel) and ``"replicas"`` (local SGD, optimizer state reset; DiLoCo's outer step;
    federated clients: weighted by their example counts, FedProx's term, the server optimizer's step).
    """
    if algorithm.exchange in (Exchange.SUBNETWORKS, Exchange.REPLICAS) and algorithm.carries_optimizer_state:
        raise NotImplementedError(f"the reference {algorithm.exchange} round resets the optimizer state every round; "
                                  f"build {algorithm.name} with optimizer_state='reset' to compare against it.")
    rounds = {Exchange.SUBNETWORKS: _subnetworks, Exchange.GRADIENTS: _gradients, Exchange.REPLICAS: _replicas}
    if algorithm.exchange not in rounds:
        raise ValueError(f"no reference round for exchange {algorithm.exchange!r} (algorithm {algorithm.name!r})")
    return rounds[algorithm.exchange](algorithm, state, batches, shared)
