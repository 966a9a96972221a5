"""The baselines every worker trains the whole model in: data parallel, local SGD and DiLoCo (local SGD with an
outer Nesterov step).

Rounds of all algorithms consume the same `[W, K, B]` batches, so budgets compare directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import optax

from istjax.algorithms.base import (Algorithm, OptimizerStatePolicy, apply_update, bind, check_common, finish_round,
                                    init_state, local_train, loss_split, recompute_from, with_outer)
from istjax.core import compress, precision
from istjax.core.comm import CommBytes, Exchange, replicated_bytes, tree_bytes
from istjax.core.errors import ArgError
from istjax.core.schedule import at_round
from istjax.core.state import (WORKERS, RoundPlan, TrainState, WorkerState, broadcast_workers, first_worker, round_keys,
                               weighted_replicas, worker_init, worker_mean)
from istjax.core.task import Task
from istjax.core.weights import example_weights

__all__ = ["Compressed", "CompressedExchange", "compressed_exchange", "compressed_steps", "data_parallel", "diloco",
           "fused_steps", "local_sgd", "outer_optimizer", "outer_step", "replicas_mean", "replicas_of", "worker_trees"]


def _next_key(state):
    return round_keys(state.key)[0]  # the key schedule of every algorithm


def data_parallel(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
                  recompute_batches: int = 1, model_state: str = "carry", exchange_dtype: str = "float32",
                  exchange_values: str = "delta", compression: Any = "none", compression_rank: int = 2,
                  compression_fraction: float = 0.01, compression_start: int = 0,
                  backend: Union[str, Any] = "simulate", **backend_options: Any) -> Algorithm:
    """Synchronous data-parallel training: every step, workers average their gradients and apply one update.

    A round is ``local_steps`` such steps. Every worker holds a replica of the model and of the optimizer state; the
    replicas stay identical. Model state (BatchNorm running statistics, updated on each worker's own batches) is
    averaged at the end of the round. Under a bfloat16 exchange (``exchange_dtype``, `istjax.core.precision`) each
    worker's gradient is rounded to bfloat16, the mean taken in float32 and rounded again (what every worker
    receives); the model state travels as local SGD's replicas do (``exchange_values``). ``compression``
    (`compressed_exchange`): every step's gradients cross compressed, each worker's residual carried from step to
    step and round to round (`compressed_steps`).
    """
    check_common(task, num_workers, local_steps, "carry", model_state, recompute_batches)
    wire = precision.wire(exchange_dtype, exchange_values)
    loss = task.train_loss(None)
    squeeze = compressed_exchange(compression, wire, num_workers, compression_rank, compression_fraction,
                                  compression_start)

    def distribute(state):
        replica = WorkerState(state.params, wire.round(state.model_state),
                              at_round(squeeze.inner(state.opt_state), state.round))
        workers = broadcast_workers(replica, num_workers)
        if squeeze.compressor:  # each worker its own compressor row beside the shared optimizer state
            workers = workers._replace(opt_state=(workers.opt_state, state.opt_state.rows))
        return workers, RoundPlan(_next_key(state), None)

    def local(worker, batches_K, shared=None, axis_name=WORKERS, reduce=None):
        if squeeze.compressor:
            return compressed_steps(loss, optimizer, squeeze.compressor, worker, batches_K, shared, axis_name)
        mean = reduce or (lambda g, name: jax.lax.pmean(g, name))
        return local_train(loss, optimizer, worker, batches_K, shared,
                           grad_reduce=lambda g: wire.round(mean(wire.round(g), axis_name)))

    def collect(state, workers, plan, batches=None, shared=None, *, sent=False):
        first = first_worker(workers)  # params and optimizer states agree by construction
        model_state = replicas_mean(wire, workers.model_state, state.model_state, sent)
        opt_state = (squeeze.wrap(first.opt_state[0], workers.opt_state[1]) if squeeze.compressor
                     else first.opt_state)
        return finish_round(model_state_policy, state, first.params, model_state, opt_state, plan.key,
                            recompute_from(task, batches, shared, recompute_batches))

    model_state_policy = model_state
    abstract_params = jax.eval_shape(task.init, jax.random.key(0))
    abstract_state = jax.eval_shape(task.init_state, jax.random.key(0))
    comm = squeeze.comm(wire.shapes(abstract_params), wire.shapes(abstract_state), times=local_steps)
    init = squeeze.init(init_state(task, optimizer, True))
    fused = wire.exact and squeeze.compressor is None  # one replica: no gradient per worker to send
    algorithm = Algorithm(init=init, round=None, distribute=distribute, local=local,
                          collect=collect, name="data_parallel", num_workers=num_workers, local_steps=local_steps,
                          comm=comm, task=task, optimizer=optimizer, wire=wire,
                          local_fused=fused_steps(loss, optimizer, num_workers, local_steps) if fused else None,
                          whole_init=init if squeeze.compressor else None, compressor=squeeze.compressor,
                          exchange=Exchange.GRADIENTS, carries_optimizer_state=True, model_state_policy=model_state,
                          split=loss_split(task, loss), recompute_batches=recompute_batches)
    return bind(algorithm, backend, **backend_options)


def local_sgd(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
              recompute_batches: int = 1, optimizer_state: str = "reset", model_state: str = "carry",
              exchange_dtype: str = "float32", exchange_values: str = "delta", compression: Any = "none",
              compression_rank: int = 2, compression_fraction: float = 0.01, compression_start: int = 0,
              backend: Union[str, Any] = "simulate", **backend_options: Any) -> Algorithm:
    """Local SGD: every worker trains the full model for K steps, then the models (their model states and, with
    ``optimizer_state="carry"``, the optimizer states) are averaged. Under a bfloat16 exchange (``exchange_dtype``,
    ``exchange_values``: `istjax.core.precision.Wire`) workers start from the model rounded and the average is of
    what each sends back, read against the float32 model (`replicas_mean`). ``compression`` (`compressed_exchange`):
    the parameters' average change crosses compressed, with error feedback."""
    check_common(task, num_workers, local_steps, optimizer_state, model_state, recompute_batches)
    wire = precision.wire(exchange_dtype, exchange_values)
    loss = task.train_loss(None)
    carry = optimizer_state == OptimizerStatePolicy.CARRY
    squeeze = compressed_exchange(compression, wire, num_workers, compression_rank, compression_fraction,
                                  compression_start)

    def distribute(state):
        params = replicas_of(wire, state.params, num_workers)
        opt = (at_round(replicas_of(wire, squeeze.inner(state.opt_state), num_workers), state.round) if carry
               else worker_init(optimizer, params, state.round))
        return (WorkerState(params, replicas_of(wire, state.model_state, num_workers), opt),
                RoundPlan(_next_key(state), None))

    def local(worker, batches_K, shared=None, axis_name=WORKERS, reduce=None):  # workers never talk locally
        del axis_name, reduce
        return local_train(loss, optimizer, worker, batches_K, shared)

    def collect(state, workers, plan, batches=None, shared=None, *, sent=False, across=None):
        opt_state = (replicas_mean(wire, workers.opt_state, squeeze.inner(state.opt_state), sent, across=across)
                     if carry else ())
        params, rows = squeeze.mean(state, workers.params, sent, across)
        return finish_round(model_state_policy, state, params,
                            replicas_mean(wire, workers.model_state, state.model_state, sent, across=across),
                            squeeze.wrap(opt_state, rows), plan.key,
                            recompute_from(task, batches, shared, recompute_batches))

    model_state_policy = model_state
    abstract_params = jax.eval_shape(task.init, jax.random.key(0))
    abstract_opt = jax.eval_shape(optimizer.init, abstract_params) if carry else ()
    abstract_state = jax.eval_shape(task.init_state, jax.random.key(0))
    comm = squeeze.comm(wire.shapes(abstract_params), wire.shapes((abstract_state, abstract_opt)))
    init = squeeze.init(init_state(task, optimizer, carry))
    algorithm = Algorithm(init=init, round=None, distribute=distribute, local=local,
                          collect=collect, name="local_sgd", num_workers=num_workers, local_steps=local_steps,
                          comm=comm, task=task, optimizer=optimizer, exchange=Exchange.REPLICAS, wire=wire,
                          carries_optimizer_state=carry, model_state_policy=model_state,
                          split=loss_split(task, loss), recompute_batches=recompute_batches,
                          whole_init=init if squeeze.compressor else None, compressor=squeeze.compressor)
    return bind(algorithm, backend, **backend_options)


def diloco(task: Task, optimizer: optax.GradientTransformation, *, num_workers: int, local_steps: int,
           recompute_batches: int = 1,
           outer_learning_rate: float = 0.7, outer_momentum: float = 0.9, optimizer_state: str = "reset",
           model_state: str = "carry", exchange_dtype: str = "float32", exchange_values: str = "delta",
           compression: Any = "none", compression_rank: int = 2, compression_fraction: float = 0.01,
           compression_start: int = 0, backend: Union[str, Any] = "simulate", **backend_options: Any) -> Algorithm:
    """DiLoCo (Douillard et al. 2023): local SGD whose replicas' average is taken by an outer optimizer.

    Every worker trains the whole model for K steps with the inner ``optimizer`` (any optax transformation; the
    paper's AdamW), from a fresh inner state each round; then the outer gradient, the global parameters minus the
    workers' mean, is applied by SGD with Nesterov momentum (``outer_learning_rate``, ``outer_momentum``; the
    paper's 0.7 and 0.9), whose state travels with the global model. With W = 1, ``outer_learning_rate=1`` and
    ``outer_momentum=0`` this is plain training of one model (the tests check it). Each round moves the same bytes
    as local SGD: the model to each worker and back, rounded as local SGD's under a bfloat16 exchange, or its change
    compressed (``compression``, `compressed_exchange`).
    """
    check_common(task, num_workers, local_steps, optimizer_state, model_state, recompute_batches)
    _check_outer(outer_learning_rate, outer_momentum, optimizer_state)
    wire = precision.wire(exchange_dtype, exchange_values)
    loss = task.train_loss(None)
    outer = outer_optimizer(outer_learning_rate, outer_momentum)
    squeeze = compressed_exchange(compression, wire, num_workers, compression_rank, compression_fraction,
                                  compression_start)

    def distribute(state):
        params = replicas_of(wire, state.params, num_workers)
        return (WorkerState(params, replicas_of(wire, state.model_state, num_workers),
                            worker_init(optimizer, params, state.round)), RoundPlan(_next_key(state), None))

    def local(worker, batches_K, shared=None, axis_name=WORKERS, reduce=None):  # workers never talk locally
        del axis_name, reduce
        return local_train(loss, optimizer, worker, batches_K, shared)

    def collect(state, workers, plan, batches=None, shared=None, *, sent=False, across=None):
        mean_params, rows = squeeze.mean(state, workers.params, sent, across)
        params, outer_state = outer_step(outer, state.params, mean_params, squeeze.inner(state.opt_state))
        return finish_round(model_state, state, params,
                            replicas_mean(wire, workers.model_state, state.model_state, sent, across=across),
                            squeeze.wrap(outer_state, rows), plan.key,
                            recompute_from(task, batches, shared, recompute_batches))

    abstract_params = jax.eval_shape(task.init, jax.random.key(0))
    abstract_state = jax.eval_shape(task.init_state, jax.random.key(0))
    comm = squeeze.comm(wire.shapes(abstract_params), wire.shapes(abstract_state))
    init = squeeze.init(with_outer(init_state(task, optimizer, False), outer))
    algorithm = Algorithm(init=init, round=None,
                          distribute=distribute, local=local, collect=collect, name="diloco", wire=wire,
                          num_workers=num_workers, local_steps=local_steps, comm=comm, task=task, optimizer=optimizer,
                          exchange=Exchange.REPLICAS, carries_optimizer_state=False, model_state_policy=model_state,
                          outer_optimizer=outer, split=loss_split(task, loss), recompute_batches=recompute_batches,
                          whole_init=init if squeeze.compressor else None, compressor=squeeze.compressor)
    return bind(algorithm, backend, **backend_options)


def replicas_of(wire: precision.Wire, tree: Any, num_workers: int) -> Any:
    """``num_workers`` copies of ``tree`` as each worker receives it (`istjax.core.precision.Wire.round`)."""
    return broadcast_workers(wire.round(tree), num_workers)


def replicas_mean(wire: precision.Wire, tree_W: Any, exact: Any, sent: bool = False, weights: Any = None,
                  across: Optional[compress.Across] = None) -> Any:
    """The mean over workers of what each sent back of its replica ``tree_W`` (`[W, ...]`) as the receiver reads it
    against its float32 ``exact`` tree (`istjax.core.precision.Wire`); with ``sent``, ``tree_W`` is what was sent
    already (the MPI runtime's sums). A float32 wire: the plain mean. ``weights`` (`[W]`, summing to 1: a federated
    round's ``plan.weights``): the weighted mean instead, each worker's tree weighted before it is sent
    (`istjax.core.state.weighted_replicas`), as the MPI runtime weighs it before its all-reduce, so both round
    alike; weights come with trees not yet sent (``sent=False``) only. ``across``: ``tree_W`` holds a process's
    rows only and ``across.mean`` is the mean over all W (`istjax.core.compress.Across`)."""
    if weights is not None:
        assert not sent, "replicas_mean: weights apply to the workers' own trees, before they are sent"
        tree_W = weighted_replicas(tree_W, exact, weights, jnp.shape(weights)[0])
    read = worker_trees(wire, tree_W, exact, sent)
    if across is None:
        return worker_mean(read, like=exact)
    return jax.tree.map(lambda x, e: _as_dtype(across.mean(x), jnp.asarray(e).dtype), read, exact)


def _as_dtype(m, dtype):
    """A mean in ``dtype``, rounded back to an integer for integer leaves (as `istjax.core.state.worker_mean`)."""
    return jnp.round(m).astype(dtype) if jnp.issubdtype(dtype, jnp.integer) else m.astype(dtype)


def worker_trees(wire: precision.Wire, tree_W: Any, exact: Any, sent: bool = False) -> Any:
    """Each worker's tree ``tree_W`` (`[W, ...]`) as the receiver reads what it sent, against its float32 ``exact``
    tree (`istjax.core.precision.Wire`; ``sent``: ``tree_W`` is what was sent already); a float32 wire: as is."""
    if wire.exact:
        return tree_W
    exact_W = jax.tree.map(lambda t, e: jnp.broadcast_to(e, t.shape), tree_W, exact)
    return wire.back(tree_W, exact_W) if sent else wire.returned(tree_W, exact_W)


class Compressed(NamedTuple):
    """The global ``opt_state`` of an algorithm whose exchange is compressed: ``inner``, what it holds without
    compression (local SGD's carried optimizer state, DiLoCo's outer state, or ``()``), and ``rows``, every worker's
    compressor state (`istjax.core.compress`: its residual, PowerSGD's warm-started factors), leaves `[W, ...]`."""

    inner: Any
    rows: Any


class CompressedExchange(NamedTuple):
    """How a replicas algorithm averages its workers' parameters: exactly (``compressor`` None: every method the
    identity of the plain exchange) or as the mean of their compressed changes (`compressed_exchange`)."""

    compressor: Optional[compress.Compressor]
    num_workers: int
    wire: precision.Wire

    def inner(self, opt_state):
        return opt_state.inner if self.compressor else opt_state

    def wrap(self, inner, rows):
        return Compressed(inner, rows) if self.compressor else inner

    def mean(self, state, params_W, sent: bool = False, across: Optional[compress.Across] = None):
        """``(mean parameters, next rows)``: the plain mean of what the workers sent (`replicas_mean`), or the
        global parameters plus the compressed mean of each worker's change (its tree as the server reads it, less
        the global one), each worker's residual kept in its row; rows None without compression. ``across``: the
        collectives over all W when ``params_W`` holds only a process's rows (an MPI rank's, with its own rows of
        the state: `istjax.runtimes.mpi.compressed`); None: every worker's rows are here."""
        if not self.compressor:
            return replicas_mean(self.wire, params_W, state.params, sent, across=across), None
        read = worker_trees(self.wire, params_W, state.params, sent)
        change = jax.tree.map(lambda t, p: t.astype(jnp.float32) - p.astype(jnp.float32)[None], read, state.params)
        approx, rows = self.compressor.exchange(change, state.opt_state.rows, across or compress.one_process())
        return jax.tree.map(lambda p, a: (p + a).astype(p.dtype), state.params, approx), rows

    def init(self, init: Callable[[jax.Array], TrainState]) -> Callable[[jax.Array], TrainState]:
        """``init`` whose ``opt_state`` is `Compressed` (every worker's fresh compressor state; PowerSGD's first
        factors from the init key: the seed every worker shares)."""
        if not self.compressor:
            return init

        def compressed_init(key):
            state = init(key)
            rows = self.compressor.init(state.params, jax.random.fold_in(key, 1), self.num_workers)
            return state._replace(opt_state=Compressed(state.opt_state, rows))

        return compressed_init

    def comm(self, params, rest, times: int = 1) -> CommBytes:
        """Per-worker bytes of a round: ``params``' shapes ``times`` times each way (the model once; data
        parallel's gradients every step) and ``rest`` once, or ``params`` at the compressor's sizes (an all-reduce
        or all-gather: `istjax.core.compress`) and ``rest`` whole."""
        if not self.compressor:
            return replicated_bytes(params, times=times, once=rest)
        return CommBytes(times * self.compressor.received_bytes(params) + tree_bytes(rest),
                         times * self.compressor.sent_bytes(params) + tree_bytes(rest))


def fused_steps(loss, optimizer: optax.GradientTransformation, num_workers: int, local_steps: int) -> Callable:
    """Data parallel's local phase with all W workers on one device (``local_fused``): one replica stepped by the
    gradient of the workers' mean loss, each worker keeping its own model state (its batches' statistics)."""

    def local_fused(workers, batches, shared=None):  # all W workers on one device: one replica, the mean loss
        if example_weights(batches) is not None:  # static: refused before anything is traced
            raise ArgError("batches", "weight", "data parallel's fused step averages the workers' mean losses and "
                           "does not read example weights (batches['weight']: federated clients' padding);",
                           "train weighted batches with a federated algorithm (fedavg, fedsgd), or drop the "
                           "weights.")
        first = first_worker(workers)  # replicas agree; each worker keeps its own model state (its batches' stats)

        def per_worker(params, states_W, batch_W):  # vmapped; in turn where a batched matmul would be slow
            one = jax.tree.map(lambda v: v[0], (states_W, batch_W))
            if precision.map_in_turn(lambda p, s, b: loss(p, s, b, shared), first.params, *one):
                return jax.lax.map(lambda sb: loss(params, sb[0], sb[1], shared), (states_W, batch_W))
            return jax.vmap(loss, in_axes=(None, 0, 0, None))(params, states_W, batch_W, shared)

        def mean_loss(params, states_W, batch_W):
            losses, (aux, states_W) = per_worker(params, states_W, batch_W)
            return jnp.mean(losses), ({"loss": losses, **aux}, states_W)

        def step(carry: WorkerState, k):
            batch_W = jax.tree.map(lambda b: jax.lax.dynamic_index_in_dim(b, k, axis=1, keepdims=False), batches)
            (_, (metrics_W, states_W)), grads = jax.value_and_grad(mean_loss, has_aux=True)(
                carry.params, carry.model_state, batch_W)
            return apply_update(optimizer, grads, carry)._replace(model_state=states_W), metrics_W

        start = first._replace(model_state=workers.model_state)
        last, metrics_KW = jax.lax.scan(step, start, jnp.arange(local_steps, dtype=jnp.int32))
        replicas = broadcast_workers(WorkerState(last.params, {}, last.opt_state), num_workers)
        return replicas._replace(model_state=last.model_state), jax.tree.map(lambda m: jnp.swapaxes(m, 0, 1),
                                                                            metrics_KW)

    return local_fused


def compressed_steps(loss, optimizer: optax.GradientTransformation, compressor: compress.Compressor,
                     worker: WorkerState, batches_K: Any, shared: Any, axis_name) -> tuple[WorkerState, dict]:
    """Data parallel's K steps of one worker (under the ``vmap`` over workers named ``axis_name``) with every step's
    gradient crossing compressed: the workers' compressed mean applied by the optimizer, this worker's compressor row
    (``worker.opt_state[1]``, beside the optimizer state) carried from step to step. Example weights are refused."""
    if example_weights(batches_K) is not None:  # static: refused before anything is traced
        raise ArgError("batches", "weight", "data parallel with compression averages unweighted gradients and does "
                       "not read example weights (batches['weight']: federated clients' padding);",
                       "drop the weights, or compression='none'.")
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    across = compress.one_process() if not names else compress.Across(
        mean=lambda x: jax.lax.pmean(x[0], names), gather=lambda x: jax.lax.all_gather(x[0], names, tiled=False)
        .reshape((-1,) + x.shape[1:]))

    def step(carry, k):
        w, row = carry
        batch = jax.tree.map(lambda b: jax.lax.dynamic_index_in_dim(b, k, keepdims=False), batches_K)
        (value, (aux, model_state)), grads = jax.value_and_grad(loss, has_aux=True)(w.params, w.model_state, batch,
                                                                                  shared)
        approx, rows = compressor.exchange(jax.tree.map(lambda g: g[None], grads),
                                           jax.tree.map(lambda r: r[None], row), across)
        new = apply_update(optimizer, approx, w)._replace(model_state=model_state)
        return (new, jax.tree.map(lambda r: r[0], rows)), {"loss": value, **aux}

    inner, row = worker.opt_state
    (last, row), metrics = jax.lax.scan(step, (worker._replace(opt_state=inner), row),
                                        jnp.arange(jax.tree.leaves(batches_K)[0].shape[0], dtype=jnp.int32))
    return last._replace(opt_state=(last.opt_state, row)), metrics


def compressed_exchange(name: Any, wire: precision.Wire, num_workers: int, rank: int = 2, fraction: float = 0.01,
                        start: int = 0) -> CompressedExchange:
    """The exchange a replicas algorithm's ``compression`` options name (`istjax.core.compress.compressor`:
    ``"none"``, ``"powersgd"`` at ``rank`` after ``start`` uncompressed exchanges, ``"top_k"`` of ``fraction``)."""
    squeeze = compress.compressor(name, num_workers=num_workers, rank=rank, fraction=fraction, start_exchanges=start)
    if squeeze is not None and not wire.exact:
        raise ArgError("compression", getattr(squeeze, "name", name),
                       f"compression={squeeze.name!r} sends float32 factors and values; a bfloat16 exchange with "
                       f"compression is not built yet;", use=[{"exchange_dtype": "float32"}, {"compression": "none"}])
    return CompressedExchange(squeeze, num_workers, wire)


def outer_optimizer(learning_rate: float, momentum: float) -> optax.GradientTransformation:
    """DiLoCo's outer optimizer: SGD with Nesterov momentum (plain SGD when ``momentum`` is 0)."""
    return optax.sgd(learning_rate, momentum=momentum or None, nesterov=bool(momentum))


def outer_step(outer: optax.GradientTransformation, params, mean_params, outer_state):
    """One outer step: the outer gradient ``params - mean_params`` (the replicas' average change, negated) through
    ``outer``. Returns the new parameters and outer state."""
    delta = jax.tree.map(lambda p, m: (p - m).astype(p.dtype), params, mean_params)
    with jax.numpy_dtype_promotion("standard"):  # optax's Adam mixes Python floats with its int32 count
        updates, outer_state = outer.update(delta, outer_state, params)
    return optax.apply_updates(params, updates), outer_state


def _check_outer(learning_rate, momentum, optimizer_state: str) -> None:
    for name, v, low in (("outer_learning_rate", learning_rate, "> 0"), ("outer_momentum", momentum, "in [0, 1)")):
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (v > 0 if name == "outer_learning_rate"
                                                                          else 0 <= v < 1)
        if not ok:
            raise ArgError(name, v, f"diloco({name}={v!r}): must be a number {low};",
                           ("the paper uses", {"outer_learning_rate": 0.7, "outer_momentum": 0.9}, "."))
    if optimizer_state != OptimizerStatePolicy.RESET:
        raise ArgError("optimizer_state", optimizer_state,
                       "diloco(optimizer_state='carry'): the outer optimizer's state is what travels with the global "
                       "model; the inner optimizer starts fresh every round here.",
                       use={"optimizer_state": "reset"})
