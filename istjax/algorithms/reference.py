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
from istjax.algorithms.codistill import Codistill
from istjax.algorithms.consensus import Consensus
from istjax.algorithms.dynamic import Dynamic
from istjax.core.comm import Exchange
from istjax.core.compress import k_of
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


def _client_step(alg: Algorithm, anchor, mu: float):
    """A replica's plain step; with a proximal term (FedProx's ``alg.prox_mu``, ADMM's ``rho``: ``mu``)
    its gradient ``mu * (w - anchor)`` added by hand to the loss's."""
    if not mu:
        return _compiled(alg, None, "step")
    grad = _compiled(alg, None, "grad")

    def step(worker: WorkerState, batch, shared):
        grads, (_, model_state) = grad(worker.params, worker.model_state, batch, shared)
        grads = jax.tree.map(lambda g, w, a: g + mu * (w - a), grads, worker.params, anchor)
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
    squeezed = alg.compressor is not None  # the optimizer state beside every worker's compressor row
    inner, rows = (state.opt_state.inner, state.opt_state.rows) if squeezed else (state.opt_state, None)
    replica = WorkerState(state.params, state.model_state, at_round(inner, state.round))
    worker_states = [_rounded(alg, state.model_state)] * W
    for k in range(K):
        grads = []
        for w in range(W):
            g, (_, worker_states[w]) = grad(replica.params, worker_states[w],
                                            jax.tree.map(lambda b: b[w, k], batches), shared)
            grads.append(_rounded(alg, g))  # what a worker sends
        if squeezed:  # the compressed mean of the gradients (their change against zero)
            mean, rows = _compressed_mean(alg.compressor, jax.tree.map(jnp.zeros_like, replica.params), grads, rows)
        else:
            mean = _rounded(alg, _mean(grads))  # what every worker receives
        replica = apply_update(alg.optimizer, mean, replica)
    model_state = _policy(alg, replica.params, _mean([_returned(alg, s, state.model_state) for s in worker_states]),
                          batches, shared)
    opt_state = state.opt_state._replace(inner=replica.opt_state, rows=rows) if squeezed else replica.opt_state
    return TrainState(replica.params, model_state, opt_state, key, state.round + 1)


def _replicas(alg: Algorithm, state: TrainState, batches, shared) -> TrainState:
    W, K = alg.num_workers, alg.local_steps
    key, _ = round_keys(state.key)
    weights = _client_weights(alg, state)
    duals = state.opt_state.duals if isinstance(alg.protocol, Consensus) else None  # ADMM's u_i, `[W, ...]`
    results, sent = [], []
    for w in range(W):
        params_in = _rounded(alg, state.params)
        start = WorkerState(params_in, _rounded(alg, state.model_state),
                            at_round(alg.optimizer.init(params_in), state.round))
        if duals is None:  # FedProx's anchor is the model received
            step = _client_step(alg, params_in, alg.prox_mu)
        else:  # ADMM's is z - u_i
            dual = jax.tree.map(lambda u: np.asarray(u[w]), duals)
            step = _client_step(alg, jax.tree.map(lambda z, u: z - u, params_in, dual), alg.protocol.rho)
        trained = _train_one(step, start, jax.tree.map(lambda b: b[w], batches), K, shared)
        own = trained.params if duals is None else jax.tree.map(lambda x, u: x + u, trained.params, dual)
        sent.append(own)  # ADMM: s_i = x_i + u_i
        results.append(WorkerState(_returned(alg, own, state.params),
                                   _returned(alg, trained.model_state, state.model_state), ()))
    if alg.compressor is not None:  # the global model plus the compressed mean of the changes
        merged, rows = _compressed_mean(alg.compressor, state.params, [r.params for r in results],
                                        state.opt_state.rows)
        params, inner = _server_step(alg, state._replace(opt_state=state.opt_state.inner), merged)
        opt_state = state.opt_state._replace(inner=inner, rows=rows)
    elif duals is None:
        params, opt_state = _server_step(alg, state, _mean([r.params for r in results], weights))
    else:  # z = the mean of what they sent; u_i = s_i - z
        params = _mean([r.params for r in results])
        opt_state = state.opt_state._replace(duals=jax.tree.map(
            lambda z, *s: jnp.stack([np.asarray(si) - np.asarray(z) for si in s]), params, *sent))
    model_state = _policy(alg, params, _mean([r.model_state for r in results], weights), batches, shared)
    return TrainState(params, model_state, opt_state, key, state.round + 1)


def _compressed_mean(compressor, params, trees, rows):
    """``(params + the compressed mean of each tree's change, the workers' next rows)``, leaf by leaf with plain
    loops over the workers (`istjax.core.compress` states the two compressors)."""
    leaves, treedef = jax.tree.flatten(params)
    changes = [[np.asarray(t, np.float32) - np.asarray(p, np.float32) for t, p in zip(treedef.flatten_up_to(tree),
                                                                                    leaves)] for tree in trees]
    if compressor.name == "powersgd":
        res, qs = treedef.flatten_up_to(rows.residual), treedef.flatten_up_to(rows.q)
        exact = int(np.asarray(rows.exchanges)[0]) < compressor.options["start_exchanges"]
        out = [_powersgd_leaf([c[i] for c in changes], np.asarray(res[i]), qs[i], exact) for i in range(len(leaves))]
        new_rows = rows._replace(residual=jax.tree.unflatten(treedef, [o[1] for o in out]),
                                 q=jax.tree.unflatten(treedef, [o[2] for o in out]), exchanges=rows.exchanges + 1)
    else:
        res = treedef.flatten_up_to(rows)
        out = [_top_k_leaf([c[i] for c in changes], np.asarray(res[i]), compressor.options["fraction"])
               for i in range(len(leaves))]
        new_rows = jax.tree.unflatten(treedef, [o[1] for o in out])
    merged = [(np.asarray(p, np.float32) + o[0]).astype(np.asarray(p).dtype) for p, o in zip(leaves, out)]
    return jax.tree.unflatten(treedef, merged), new_rows


def _powersgd_leaf(changes, residuals, q, exact):
    """One leaf of PowerSGD over the workers (Vogels et al., Algorithm 1): ``(mean approximation, residuals `[W,
    ...]`, the next Q `[W, m, r]` or ``()``)``."""
    m_all = [c + e for c, e in zip(changes, residuals)]
    if exact or not hasattr(q, "shape"):
        return np.mean(m_all, axis=0), np.zeros_like(residuals), q
    q0 = np.asarray(q)[0]
    mats = [m.reshape(-1, m.shape[-1]) for m in m_all]
    p = np.mean([m @ q0 for m in mats], axis=0)
    for i in range(p.shape[1]):  # Gram-Schmidt, column by column
        col = p[:, i] - p[:, :i] @ (p[:, :i].T @ p[:, i])
        norm = np.linalg.norm(col)
        p[:, i] = col / norm if norm > 1e-12 else 0.0
    q_new = np.mean([m.T @ p for m in mats], axis=0)
    approx = (p @ q_new.T).reshape(m_all[0].shape)
    return approx, np.stack([m - approx for m in m_all]), np.broadcast_to(q_new, np.shape(q)).copy()


def _top_k_leaf(changes, residuals, fraction):
    """One leaf of top-k with error feedback: each worker's largest-magnitude entries (lower index first on ties)
    averaged, the rest its residual."""
    sent, kept = [], []
    for c, e in zip(changes, residuals):
        flat = (c + e).reshape(-1)
        keep = np.zeros(flat.shape, bool)
        keep[np.argsort(-np.abs(flat), kind="stable")[:k_of(flat.size, fraction)]] = True
        sent.append(np.where(keep, flat, 0.0).reshape(c.shape))
        kept.append(np.where(keep, 0.0, flat).reshape(c.shape))
    return np.mean(sent, axis=0), np.stack(kept)


def _row(tree, w):
    return jax.tree.map(lambda v: jnp.asarray(np.asarray(v)[w]), tree)


def _squared(a, b) -> float:
    return float(sum(np.sum(np.square(np.asarray(x, np.float64) - np.asarray(y, np.float64)))
                     for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))))


def _dynamic(alg: Algorithm, state: TrainState, batches, shared) -> TrainState:
    """Dynamic averaging (`istjax.algorithms.dynamic`) as its paper states it: every worker's K steps from its own
    model; the violators of ``||w_i - r||^2 <= delta``; ``B`` from them, doubled from the round's random order of
    the others until its average is within ``delta`` of ``r`` or it holds half the workers (then all, and ``r``
    moves); ``B``'s models replaced by their average."""
    W, K, delta = alg.num_workers, alg.local_steps, alg.protocol.delta
    key, round_key = round_keys(state.key)
    old, step = state.opt_state, _compiled(alg, None, "step")
    trained = []
    for w in range(W):
        own = WorkerState(*(_row(t, w) for t in old.workers))
        own = own._replace(opt_state=at_round(own.opt_state, state.round))
        trained.append(_train_one(step, own, jax.tree.map(lambda b: b[w], batches), K, shared))
    violators = [w for w in range(W) if _squared(trained[w].params, old.reference) > delta]
    others = [int(w) for w in np.asarray(jax.random.permutation(round_key, W)) if w not in violators]
    synced, full = list(violators), False
    while synced:
        if 2 * len(synced) >= W:
            synced, full = list(range(W)), True
            break
        if _squared(_mean([trained[w].params for w in synced]), old.reference) <= delta:
            break
        synced += others[:len(synced)]  # doubled with the next of the random order
        others = [o for o in others if o not in synced]
    if synced:
        params = _mean([trained[w].params for w in synced])
        model_state = _mean([trained[w].model_state for w in synced])
        trained = [t._replace(params=params, model_state=model_state) if w in synced else t
                   for w, t in enumerate(trained)]
    stack = lambda trees: jax.tree.map(lambda *xs: jnp.stack([np.asarray(x) for x in xs]), *trees)  # noqa: E731
    workers = WorkerState(stack([t.params for t in trained]), stack([t.model_state for t in trained]),
                          stack([t.opt_state for t in trained]))
    counts = np.asarray(old.transfers) + np.isin(np.arange(W), synced)
    dynamic = old._replace(workers=workers, reference=params if full else old.reference,
                           transfers=jnp.asarray(counts, jnp.float32),
                           violations=old.violations + len(violators),
                           syncs=old.syncs + jnp.asarray([bool(synced) and not full, full], jnp.int32))
    return TrainState(_mean([t.params for t in trained]), _mean([t.model_state for t in trained]), dynamic, key,
                      state.round + 1)


def _codistill(alg: Algorithm, state: TrainState, batches, shared) -> TrainState:
    """Codistillation (`istjax.algorithms.codistill`): every worker's K steps from its group's model on its loss plus
    the weight times ``KL(teacher || student)``, the teacher the mean of the other groups' stale copies' predicted
    distributions (each teacher run on its own, their mean in numpy); each group's model the mean of its replicas;
    the copies retaken every ``teacher_every`` rounds."""
    W, K, c, task = alg.num_workers, alg.local_steps, alg.protocol, alg.task
    R, old = W // c.groups, state.opt_state
    weight = c.weight if int(state.round) >= c.burn_in else 0.0
    predict = jax.jit(lambda p, s, batch: jax.nn.softmax(task.logits(p, s, batch, shared, train=False)[0], axis=-1))

    @jax.jit
    def grad(params, model_state, batch, teacher):
        def loss(p):
            logits, new_state = task.logits(p, model_state, batch, shared, train=True)
            kl = jnp.mean(jnp.sum(teacher * (jnp.log(jnp.maximum(teacher, 1e-30)) - jax.nn.log_softmax(logits)), -1))
            return task.score(logits, batch["y"])[0] + weight * kl, new_state
        return jax.grad(loss, has_aux=True)(params)

    trained = []
    for w in range(W):
        g = w // R
        worker = WorkerState(_row(old.groups[0], g), _row(old.groups[1], g), None)
        worker = worker._replace(opt_state=at_round(alg.optimizer.init(worker.params), state.round))
        for k in range(K):
            batch = jax.tree.map(lambda b: b[w, k], batches)
            probs = [np.asarray(predict(_row(old.teachers[0], h), _row(old.teachers[1], h), batch))
                     for h in range(c.groups) if h != g]
            grads, model_state = grad(worker.params, worker.model_state, batch, jnp.asarray(np.mean(probs, axis=0)))
            worker = apply_update(alg.optimizer, grads, worker)._replace(model_state=model_state)
        trained.append(worker)
    stack = lambda trees: jax.tree.map(lambda *xs: jnp.stack([np.asarray(x) for x in xs]), *trees)  # noqa: E731
    groups = (stack([_mean([trained[g * R + i].params for i in range(R)]) for g in range(c.groups)]),
              stack([_mean([trained[g * R + i].model_state for i in range(R)]) for g in range(c.groups)]))
    done = int(state.round) + 1
    exchange = done % c.teacher_every == 0
    first = jax.tree.map(lambda v: v[0], groups)
    return TrainState(first[0], first[1], old._replace(groups=groups, teachers=groups if exchange else old.teachers,
                                                       taken=jnp.asarray(done if exchange else old.taken, jnp.int32)),
                      round_keys(state.key)[0], state.round + 1)


def reference_round(algorithm: Algorithm, state: TrainState, batches: PyTree, shared: Any = None) -> TrainState:
    """One round of ``algorithm`` computed with plain loops.

    Covers every exchange an algorithm declares: ``"subnetworks"`` (IST, any sampler, optimizer state reset; on
    federated clients, merged by example counts, the server optimizer's step),
    ``"gradients"`` (data parallel) and ``"replicas"`` (local SGD, optimizer state reset; DiLoCo's outer step;
    federated clients: weighted by their example counts, FedProx's term, the server optimizer's step; consensus
    ADMM: each worker's dual, its penalty around ``z - u_i``, the server's mean of ``x_i + u_i``), dynamic averaging
    (each worker's own model, the balancing as its paper states it) and codistillation (groups, stale teachers).
    """
    if isinstance(algorithm.protocol, Dynamic):  # every worker keeps its own optimizer state
        return _dynamic(algorithm, state, batches, shared)
    if isinstance(algorithm.protocol, Codistill):
        return _codistill(algorithm, state, batches, shared)
    if algorithm.exchange in (Exchange.SUBNETWORKS, Exchange.REPLICAS) and algorithm.carries_optimizer_state:
        raise NotImplementedError(f"the reference {algorithm.exchange} round resets the optimizer state every round; "
                                  f"build {algorithm.name} with optimizer_state='reset' to compare against it.")
    rounds = {Exchange.SUBNETWORKS: _subnetworks, Exchange.GRADIENTS: _gradients, Exchange.REPLICAS: _replicas}
    if algorithm.exchange not in rounds:
        raise ValueError(f"no reference round for exchange {algorithm.exchange!r} (algorithm {algorithm.name!r})")
    return rounds[algorithm.exchange](algorithm, state, batches, shared)
