"""What every algorithm is made of: the `Algorithm` record, the local training loop and the shared checks.

Every factory (`istjax.ist`, `istjax.data_parallel`, `istjax.local_sgd`, and later families) returns an `Algorithm`,
whose ``init(key) -> TrainState`` and ``round(state, batches, shared=None) -> (state, metrics)`` are all a user needs
(as optax returns ``(init, update)``). A round is always the same three pure pieces:

``distribute(state) -> (workers, plan)``
    the per-worker starting points, stacked on a leading `[W]` axis (IST: sample a partition and extract
    sub-networks; local SGD and data parallel: copies of the global model).
``local(worker, batches_K, shared=None, axis_name=WORKERS, reduce=None) -> (worker, metrics_K)``
    one worker's K optimizer steps in `lax.scan` (all K reach the result; none is dropped). ``shared`` is the
    round's shared input, the same for every worker. Data parallel averages gradients across workers inside it with
    ``reduce(grads, axis_name)`` (default ``lax.pmean`` over ``axis_name``); a runtime that spans processes passes
    its own ``reduce`` (an MPI allreduce).
``collect(state, workers, plan, batches=None, shared=None) -> state``
    back to one global model (IST: merge; local SGD: average; data parallel: the replicas agree, take one), then the
    model-state policy (``"recompute"`` recomputes BatchNorm statistics on the merged model from the round's first
    batch of every worker).

An algorithm that exchanges sub-networks (IST, ResIST) is stated in fewer pieces still, `SubnetPieces` (its plan,
the tree it holds with its spec, how a worker starts, how a round finishes); its ``distribute`` and ``collect`` and
its round over the N owners of a sharded model (`OwnerSide`) are derived from them (`istjax.algorithms.exchange`),
with the cutting and joining of a tree, whole or by owner, from the core (`istjax.core.subnet`, `istjax.core.shard`).

An algorithm also *declares* what it is, so runtimes, the driver and the accounting never dispatch on its name:

``exchange``
    what crosses between workers and the server: ``"subnetworks"`` (``distribute`` and ``collect`` move per-worker
    pieces: IST), ``"replicas"`` (every worker starts from the global model and ``collect`` depends on the workers
    only through their mean: local SGD; a runtime may pre-reduce), ``"gradients"`` (workers stay identical and
    average gradients every step through ``reduce``: data parallel), ``"activations"`` (every worker holds a shard of
    every layer and the shards exchange activations every step: tensor parallel, run from its ``tensor`` pieces),
    ``"subsets"`` (every worker keeps its own model and sends a flag each round; only the subset a coordinator asks
    for sends its model, and takes back their average: dynamic averaging, run from its ``subsets`` pieces).
``carries_optimizer_state``
    whether the global optimizer state travels with the parameters (else workers start from ``optimizer.init``).
``model_state_policy``
    ``"carry"`` (running statistics extracted and merged with the parameters) or ``"recompute"``.

An algorithm may also give ``local_fused(workers, batches, shared=None) -> (workers, metrics)``: the local phase of
all W workers as one function on `[W, ...]` stacks, equal to mapping ``local``, which a runtime holding every worker
on one device uses instead (data parallel's: one replica and the mean of the workers' losses, instead of a
``pmean`` under ``vmap``, which XLA's CPU backend runs several times slower; see ``docs/benchmarks.md``).

Runtimes (`istjax.runtimes`) decide where the W copies of ``local`` run; the algorithm does not know which.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from istjax.core.errors import ArgError
from istjax.core.comm import EXCHANGES as EXCHANGES
from istjax.core.comm import CommBytes, Exchange
from istjax.core.partition import Sampler
from istjax.core.precision import Wire
from istjax.core.spec import SubnetSpec
from istjax.core.state import MODEL_STATE_POLICIES as MODEL_STATE_POLICIES
from istjax.core.state import OPTIMIZER_STATE_POLICIES as OPTIMIZER_STATE_POLICIES
from istjax.core.state import (WORKERS, ModelStatePolicy, OptimizerStatePolicy, RoundPlan, TrainState, WorkerState,
                               last_steps, recompute_batches)
from istjax.core.task import MIN_BATCH_STATISTICS_SPLIT, Task
from istjax.core.weights import example_weights, weighted_mean

__all__ = [
    "Algorithm",
    "OwnerSide",
    "Resident",
    "Subsets",
    "Groups",
    "SubnetPieces",
    "EXCHANGES",
    "Exchange",
    "MODEL_STATE_POLICIES",
    "OPTIMIZER_STATE_POLICIES",
    "ModelStatePolicy",
    "OptimizerStatePolicy",
    "apply_update",
    "local_train",
    "finish_round",
    "recompute_from",
    "recompute_batches",
    "loss_split",
    "check_common",
    "init_state",
    "bind",
    "WORKERS",
]

PyTree = Any



class SubnetPieces(NamedTuple):
    """An algorithm that exchanges sub-networks, stated once as pure pieces (IST and ResIST: `istjax.ist`). What a
    runtime runs is derived from them (`istjax.algorithms.exchange`): ``distribute`` / ``collect`` over the whole
    model (`istjax.core.subnet` extract / merge) and the `OwnerSide` over N owners' parts (`istjax.core.shard`).

    Attributes:
      sampler: deals the neuron groups; the groups it stratifies by owner are held in shards.
      spec: the `SubnetSpec` of ``held``'s tree (its leaves a dict of `LeafSpec` trees).
      held: ``state -> dict``: the part of a `TrainState` or `WorkerState` a round deals out and merges back (IST:
        ``params``, ``model_state`` and, when it is carried, ``opt_state``), full, one owner's part, or `[W]`
        workers' sub-networks.
      plan: ``state -> RoundPlan``: the round's next key and partition (every owner computes the same).
      start: ``(tree, round_index) -> WorkerState``: workers' starting states (leaves `[W]` or `[L]`) from their
        ``held`` pieces (IST: a reset optimizer state is built here, a carried one stamped with the round). Every
        runtime starts a worker with it, wherever the pieces arrived.
      finish: ``(state, tree, plan, recompute=None) -> TrainState``: the next state from the merged ``held`` tree;
        ``recompute`` is ``(params, model_state) -> model_state``, the statistics of the merged model where the
        model-state policy asks for them (`finish_round`), None where no batches were given.
      wire: what crosses between the held tree and the workers (`istjax.core.precision.Wire`): workers start from
        ``wire.round`` of their pieces and send back ``wire.up`` of what they trained, which ``collect`` reads
        with ``wire.back`` against the exact pieces; float32 (the default) moves every value as it is.
    """

    sampler: Sampler
    spec: SubnetSpec
    held: Callable[[Any], dict]
    plan: Callable[[TrainState], RoundPlan]
    start: Callable[[dict, jax.Array], WorkerState]
    finish: Callable[..., TrainState]
    wire: Wire = Wire()


class OwnerSide(NamedTuple):
    """An algorithm's round as the owners of a sharded model run it (the MPI runtime's sharded mode), derived from
    its `SubnetPieces` (`istjax.algorithms.exchange.owner_side`): each owner cuts and joins its part of the held
    tree with `istjax.core.shard`; a runtime puts the collectives between.

    Attributes:
      distribute: ``(layout, held, plan) -> (outbound, local)``: `istjax.core.shard.owner_distribute`.
      collect: ``(layout, state, plan, returned, gathered, sums, first=None, shared=None, reduce=None) ->
        TrainState``: `istjax.core.shard.owner_collect` and the pieces' ``finish``; under ``model_state="recompute"``
        the statistics are recomputed from this owner's slice (`istjax.OwnerPass.recompute_state`) on ``first``,
        every worker's first batch `[W, B, ...]`, with ``reduce`` the sum across owners.
      evaluate: ``(layout, collectives) -> (params, model_state, batch, shared=None) -> (loss, aux)``, the whole
        network's evaluation from this owner's part with the runtime's `istjax.core.collectives.Collectives`, or
        None when the model cannot be evaluated from its parts (`istjax.algorithms.exchange.owner_evaluate`).
    """

    distribute: Callable[..., tuple[Any, Any]]
    collect: Callable[..., TrainState]
    evaluate: Optional[Callable[..., Optional[Callable]]] = None


class Resident(NamedTuple):
    """State an algorithm keeps for each worker between rounds, where the worker runs (consensus ADMM's duals), and
    its round in the pieces a runtime needs whose processes each hold only their own workers' rows of it (the MPI
    replicas exchange, `istjax.runtimes.mpi.replicas`). The algorithm's ``distribute`` starts one worker per row the
    state holds (all W on one process; a process's L under MPI), and its ``collect`` is ``merge`` of ``outgoing``,
    then ``keep``.

    Attributes:
      rows: ``state -> tree``, the per-worker state, leaves `[n, ...]`.
      with_rows: ``(state, tree) -> state``.
      outgoing: ``workers -> WorkerState``, what each trained worker sends (ADMM: ``x_i + u_i`` as its parameters,
        its model state, no optimizer state).
      merge: ``(state, outgoing, plan, batches=None, shared=None, *, sent=False) -> state``, the next global state
        from the workers' ``outgoing`` trees, of which it reads only their mean (a runtime may hand it sums over
        processes divided by their count); its rows unchanged.
      keep: ``(new_state, outgoing) -> tree``, the workers' rows after the round, from the new global state and what
        each sent (exact, `[n, ...]`).
    """

    rows: Callable[[TrainState], PyTree]
    with_rows: Callable[[TrainState, PyTree], TrainState]
    outgoing: Callable[[WorkerState], WorkerState]
    merge: Callable[..., TrainState]
    keep: Callable[[TrainState, WorkerState], PyTree]


class Subsets(NamedTuple):
    """The round of an algorithm whose workers keep their own models and send them only when a coordinator asks
    (dynamic averaging), in the pieces a runtime needs whose processes each hold only their own workers (the MPI
    ``subsets`` exchange, `istjax.runtimes.mpi.subsets`). Each worker sends a flag every round (``flags``); from
    all W flags the coordinator asks a growing subset for their models (``decide``, then ``close`` of each level's
    subset, `istjax.algorithms.dynamic.balance`), and the average of the subset it settles on goes back to those
    workers (``settle``). The algorithm's ``collect`` is these pieces on one process.

    Attributes:
      rows: ``state -> WorkerState``, every worker's own state, leaves `[n, ...]` (all W, or a process's L).
      with_rows: ``(state, rows) -> state``.
      flags: ``(state, params_n) -> [n] float32``, what each trained worker sends every round.
      decide: ``(state, flags_W) -> (violators [W] bool, position [W] int32)``: the workers whose flag asks for a
        synchronisation and each worker's place in the order the subset grows in.
      grow: ``(position, count, level, W) -> (members [W] bool, half)``, the subset at a doubling ``level`` (0: the
        ``count`` violators) and whether it holds half the workers or more (then it takes all of them).
      close: ``(state, params_W, members [W] bool) -> [] bool``, the coordinator's check of a subset from its
        members' parameters (the rows of the others may hold anything: they are weighted zero).
      mean: ``(model_W, members [W] bool) -> model``, the subset's average (a model: ``(params, model_state)``).
      settle: ``(state, rows, synced_n, synced_W, violators_W, full, model) -> state``, the next state from the
        workers' trained rows, which of them (``synced_n``, the rows this state holds) take ``model``, the subset
        and the violators over all W, and whether it was all of them.
      whole: ``state -> state``, a state holding every worker's rows with its global fields computed from them.
    """

    rows: Callable[[TrainState], Any]
    with_rows: Callable[[TrainState, Any], TrainState]
    flags: Callable[..., jax.Array]
    decide: Callable[..., tuple[jax.Array, jax.Array]]
    grow: Callable[..., tuple[Any, Any]]
    close: Callable[..., jax.Array]
    mean: Callable[..., Any]
    settle: Callable[..., TrainState]
    whole: Callable[[TrainState], TrainState]


class Groups(NamedTuple):
    """The round of an algorithm whose workers form groups that average among themselves every round and see each
    other's models only as copies exchanged every so many rounds (codistillation), in the pieces the MPI ``groups``
    exchange needs (`istjax.runtimes.mpi.groups`). Group ``g`` is workers ``g * replicas .. (g + 1) * replicas - 1``;
    the state holds every group's model `[G, ...]` (``models``). The algorithm's ``collect`` is each group's mean of
    its replicas, then ``settle``.

    Attributes:
      count, replicas: G and the workers a group.
      exchanging: ``rounds_done -> bool`` (host), whether the round that completes ``rounds_done`` exchanges models.
      models: ``state -> model_G``, every group's model ``(params, model_state)``, leaves `[G, ...]`.
      settle: ``(state, model_G) -> state``, the next state from every group's model after the round (a process
        passes the rows it knows fresh: its own group's, every group's on an exchange round; the others as they were).
      whole: ``(state, model_G) -> state``, a state whose every group's model is ``model_G`` (its global fields
        from them), the round unchanged: what a process gathers for checkpoints and evaluation.
    """

    count: int
    replicas: int
    exchanging: Callable[[int], bool]
    models: Callable[[TrainState], Any]
    settle: Callable[..., TrainState]
    whole: Callable[..., TrainState]


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """An algorithm: ``init`` and ``round`` for users; its pieces and declarations for runtimes and drivers.

    Attributes:
      init: ``key -> TrainState`` (a runtime may hold only part of it on a process; see ``runtime``).
      round: ``(state, batches, shared=None, *, split=True) -> (state, metrics)``; ``batches`` leaves are
        `[W, K, B, ...]`, ``shared`` any pytree every worker reads. Metrics hold ``train_loss``, ``train_accuracy``
        (means over workers and steps) and ``worker_loss`` `[W]`; where ``split`` (a bool, or a traced one inside an
        outer ``jit``: `istjax.runtimes.base.when_due`) and the runtime was built with ``loss_split``, the round's
        loss split (``split`` below) too. The driver asks for it on evaluation rounds only (``loss_split_every``).
      distribute, local, collect, local_fused: the pure pieces ``round`` is made of (module docstring).
      name: for messages, metrics and plots.
      num_workers, local_steps: W and K.
      comm: bytes each worker receives and sends per round, computed from shapes (see `istjax.core.comm`).
      task, optimizer, sampler: what it was built from (``sampler`` None for algorithms without a partition).
      exchange, carries_optimizer_state, model_state_policy: declarations (module docstring).
      runtime: the `istjax.runtimes.RuntimeHandle` it runs on: process role, whole-state gather, signal agreement.
      subnet: the pieces an algorithm that exchanges subnetworks is stated in (`SubnetPieces`; ``distribute``,
        ``collect`` and ``owner_side`` are derived from them); None for other algorithms.
      owner_side: its round as the owners of a sharded model run it (`OwnerSide`), for algorithms that exchange
        subnetworks and can run sharded; None otherwise.
      tensor: the pieces of an algorithm that exchanges activations (`istjax.algorithms.tensor.TensorPieces`: a
        shard's round and evaluation against collectives the runtime supplies); None otherwise.
      outer_optimizer: an algorithm that exchanges replicas and applies their average change through an optimizer
        of its own (DiLoCo's outer Nesterov step; its state is the global state's ``opt_state``); None when the
        replicas' mean is the new model.
      split: ``(state, workers, batches, shared=None) -> metrics``, the round's loss split (`loss_split`: the
        workers' own loss, the collected model's in training and test mode, on the batches each worker trained
        last), which a runtime adds to the round's metrics; None for none.
      recompute_batches: under ``model_state="recompute"``, each worker's first this many batches of the round are
        what the statistics are recomputed from (`recompute_batches`).
      wire: what crosses between workers and the server (`istjax.core.precision.Wire`), rounded by the algorithm's
        own pieces; ``collect(..., sent=True)`` reads workers' trees that are what they sent (`Wire.up`). A runtime
        that moves bytes moves the rounded values as their 16 bits (`istjax.core.precision.pack`).
      reads_every_worker: every process's round reads every worker's batches each step (tensor parallel: each
        shard computes on all W x B examples), so a process must be given all rows of ``batches``, never only its
        own workers' (`istjax.launch.config.experiment.own_rows`).
      clients: a federated algorithm's client sampler (`istjax.data.client_batches.ClientSampler`): its workers are
        the round's sampled clients, and ``distribute``'s plan carries their server weights (``RoundPlan.weights``);
        None for every other algorithm.
      prox_mu: FedProx's proximal coefficient each local step's loss adds (`istjax.algorithms.federated`); 0: none.
      protocol: the settings of a protocol whose round the plain reference loop states on its own (`Consensus` of
        consensus ADMM, `Dynamic` of dynamic averaging, `Codistill` of codistillation: in
        `istjax.algorithms.consensus`, `.dynamic`, `.codistill`); None for every other algorithm.
      resident: the state each worker keeps between rounds and the round's pieces around it (`Resident`), for an
        algorithm whose workers keep state (ADMM); None for every other.
      subsets: the round's pieces of an algorithm that exchanges ``subsets`` (`Subsets`: dynamic averaging); None
        for every other.
      groups: the round's pieces of an algorithm that exchanges ``groups`` (`Groups`: codistillation); None for every
        other.
      collect_reads_workers: ``collect`` reads each worker's trained state, not only their mean (dynamic
        averaging's balancing, codistillation's groups): a runtime that hands ``collect`` sums over processes (the MPI
        replicas exchange) cannot run it.
      round_metrics: ``(state, new_state) -> metrics`` a runtime adds to a round's, read from the states before and
        after it, for an algorithm whose round moves a data-dependent number of bytes (dynamic averaging's
        ``measured_bytes_sent`` and ``measured_bytes_received``, counted); None for none.
      whole_init: ``key -> TrainState``, the whole global state as a checkpoint holds it, where `whole_state_init`
        cannot derive it from the declarations above (ADMM's duals); None: derived.
      compressor: the `istjax.core.compress.Compressor` a replicas algorithm's change crosses through (its state
        every worker's row of the global ``opt_state.rows``: `istjax.algorithms.replicated.Compressed`); None for an
        exact exchange.
    """

    init: Callable[[jax.Array], TrainState]
    round: Optional[Callable[..., tuple[TrainState, dict]]]
    distribute: Callable[[TrainState], tuple[WorkerState, Any]]
    local: Callable[..., tuple[WorkerState, dict]]
    collect: Callable[..., TrainState]
    name: str
    num_workers: int
    local_steps: int
    comm: CommBytes
    task: Task
    optimizer: optax.GradientTransformation
    sampler: Optional[Sampler] = None
    local_fused: Optional[Callable[..., tuple[WorkerState, dict]]] = None
    exchange: Exchange = Exchange.SUBNETWORKS
    carries_optimizer_state: bool = False
    model_state_policy: ModelStatePolicy = ModelStatePolicy.CARRY
    runtime: Any = None
    subnet: Optional[SubnetPieces] = None
    owner_side: Optional[OwnerSide] = None
    tensor: Any = None
    outer_optimizer: Optional[optax.GradientTransformation] = None
    split: Optional[Callable[..., dict]] = None
    recompute_batches: int = 1
    wire: Wire = Wire()
    reads_every_worker: bool = False
    clients: Any = None
    prox_mu: float = 0.0
    protocol: Any = None
    whole_init: Optional[Callable[[jax.Array], TrainState]] = None
    resident: Optional[Resident] = None
    compressor: Any = None
    subsets: Optional[Subsets] = None
    groups: Optional[Groups] = None
    collect_reads_workers: bool = False
    round_metrics: Optional[Callable[[TrainState, TrainState], dict]] = None

    def __post_init__(self):  # the declarations are checked where they are made, and held as their enums
        for field, policy in (("exchange", Exchange), ("model_state_policy", ModelStatePolicy)):
            value = getattr(self, field)
            try:
                object.__setattr__(self, field, policy(value))
            except ValueError:
                raise ValueError(f"Algorithm {self.name!r}: {field}={value!r}; choose one of "
                                 f"{policy.values()}.") from None


def apply_update(optimizer: optax.GradientTransformation, grads: PyTree, worker: WorkerState) -> WorkerState:
    """One optimizer update of ``worker`` with ``grads`` (its model state untouched)."""
    # optax internals (e.g. Adam's ``decay ** count``) mix Python floats with int32 counts; let them promote as optax
    # expects even when the user runs JAX with strict dtype promotion. Our own code stays strict.
    with jax.numpy_dtype_promotion("standard"):
        updates, opt_state = optimizer.update(grads, worker.opt_state, worker.params)
    return WorkerState(optax.apply_updates(worker.params, updates), worker.model_state, opt_state)


def local_train(loss, optimizer: optax.GradientTransformation, worker: WorkerState, batches_K: PyTree,
                shared: Any = None, grad_reduce: Callable[[PyTree], PyTree] = lambda g: g) -> tuple[WorkerState, dict]:
    """K optimizer steps of one worker, in `lax.scan`; returns the state after the K-th step and per-step metrics.

    Args:
      loss: ``(params, model_state, batch, shared) -> (loss, (aux, model_state))`` (`istjax.Task.train_loss`).
      optimizer: any optax transformation.
      worker: the worker's starting params, model state and optimizer state.
      batches_K: a pytree whose leaves are `[K, B, ...]`.
      shared: the round's shared input (the same for every worker), or None.
      grad_reduce: applied to every step's gradients (data parallel averages them across workers here).

    Batches with example weights (``batches_K["weight"]`` `[K, B]`, `istjax.core.weights`): each step's loss is
    their weighted mean, its metrics gain ``"examples"`` (the step's weight sum), and a step whose weights sum to 0
    (padding) changes nothing: parameters, model state and optimizer state (Adam's count included) pass through.
    Under a ``grad_reduce`` the weight sum is reduced with the gradients, in the same call, and a step is skipped
    when it is 0 across all workers, so replicas that must agree skip together.
    """
    num_steps = jax.tree.leaves(batches_K)[0].shape[0]
    weighted = example_weights(batches_K) is not None

    def step(carry: WorkerState, k):
        # Scanning over the step index and slicing the batch in place (rather than scanning over ``batches_K``)
        # keeps a vmapped `[W, K, ...]` batch where it is: scanning over it makes XLA first transpose the whole
        # batch to `[K, W, ...]`, 10 % of the 2-layer speech model's local phase (benchmarks study 1).
        batch = jax.tree.map(lambda b: jax.lax.dynamic_index_in_dim(b, k, keepdims=False), batches_K)
        (value, (aux, model_state)), grads = jax.value_and_grad(loss, has_aux=True)(
            carry.params, carry.model_state, batch, shared)
        if not weighted:
            new = apply_update(optimizer, grad_reduce(grads), carry)
            return new._replace(model_state=model_state), {"loss": value, **aux}
        examples = jnp.sum(example_weights(batch).astype(jnp.float32))
        grads, reduced = grad_reduce((grads, examples))
        new = apply_update(optimizer, grads, carry)._replace(model_state=model_state)
        kept = jax.tree.map(lambda n, c: jnp.where(reduced > 0, n, c), new, carry)  # a padded step: nothing moves
        return kept, {"loss": value, **aux, "examples": examples}

    return jax.lax.scan(step, worker, jnp.arange(num_steps, dtype=jnp.int32))


def finish_round(policy: str, state: TrainState, params, model_state, opt_state, key,
                 recompute: Optional[Callable[[PyTree, PyTree], PyTree]] = None) -> TrainState:
    """The next `TrainState` from collected pieces, after the model-state policy: ``"recompute"`` replaces the model
    state by ``recompute(params, model_state)``, the statistics of the merged model (`recompute_from`; from each
    owner's slice in the sharded mode), when the task has state and ``recompute`` is given."""
    if policy == ModelStatePolicy.RECOMPUTE and recompute is not None and jax.tree.leaves(model_state):
        model_state = recompute(params, model_state)
    return TrainState(params, model_state, opt_state, key, state.round + 1)


def recompute_from(task: Task, batches: PyTree = None, shared: Any = None,
                   steps: int = 1) -> Optional[Callable[[PyTree, PyTree], PyTree]]:
    """``(params, model_state) -> model_state``: the task's statistics of a merged model on the first ``steps``
    batches of every worker in the round (``batches`` leaves `[W, K, B, ...]`, `recompute_batches`); None without
    batches or a task that cannot recompute."""
    if batches is None or task.recompute_state is None:
        return None
    first_NxB = recompute_batches(batches, steps)
    return lambda params, model_state: task.recompute_state(params, model_state, first_NxB, shared)


def loss_split(task: Task, worker_loss: Callable) -> Callable[..., dict]:
    """``split(state, workers, batches, shared=None) -> metrics``: where a round's training loss went, on the batch
    each worker trained last (``batches`` leaves `[W, K, B, ...]`; its `[W, B, ...]` slice ``K - 1``, or with example
    weights each worker's last step that has any, `istjax.core.state.last_steps`):

    ``worker_train_loss``
        the workers' own loss after their K steps (``worker_loss``: the network each trained, a sub-network for
        IST, in training mode), mean over workers;
    ``merged_train_loss``
        the collected model ``state`` on the same batches in training mode (`Task.train_loss` at full width: batch
        statistics, no sub-network scaling), mean over workers;
    ``merged_test_loss``
        the same in test mode (`Task.evaluate`: running statistics, the test-time network), where the task
        evaluates a batch of this size (a model normalising with test-batch statistics may refuse it: then absent);
    ``merge_cost``
        ``merged_train_loss - worker_train_loss``: what collecting the workers' models lost of what they fitted
        (0 for one worker, whose model the merged one is: exactly where both losses are one function, to float
        rounding where the worker runs a sub-network's module).

    With example weights (federated clients), the means are over the workers whose last batch holds examples (a pad
    slot holds none), and ``split_workers`` counts them (what a runtime that combines several processes' splits
    weighs each by).

    The workers run one after another (`jax.lax.map`), as the evaluation of W small batches does not gain from
    being vectorised on a CPU and holds one worker's activations at a time."""
    merged_loss = task.train_loss(None)

    def split(state: TrainState, workers: WorkerState, batches: PyTree, shared: Any = None) -> dict:
        last = jax.tree.map(lambda b: b[:, 0], last_steps(batches))
        size = jax.tree.leaves(last["x"] if "x" in last else last)[0].shape[1]  # examples in a worker's batch
        test = size >= min(task.min_eval_batch, MIN_BATCH_STATISTICS_SPLIT)

        def one(args):
            worker, batch = args
            own = worker_loss(worker.params, worker.model_state, batch, shared)[0]
            merged = merged_loss(state.params, state.model_state, batch, shared)[0]
            tested = task.evaluate(state.params, state.model_state, batch, shared)[0] if test else merged
            return own, merged, tested

        own, merged, tested = jax.lax.map(one, (workers, last))
        weights = example_weights(last)  # a worker whose last batch holds no example (a pad slot) counts nothing
        if weights is None:
            out = {"worker_train_loss": jnp.mean(own), "merged_train_loss": jnp.mean(merged),
                   "merge_cost": jnp.mean(merged) - jnp.mean(own)}
            return {**out, "merged_test_loss": jnp.mean(tested)} if test else out
        counted = jnp.any(jnp.asarray(weights) != 0, axis=tuple(range(1, jnp.ndim(weights)))).astype(jnp.float32)
        mean = lambda v: weighted_mean(v, counted, axis=0)  # noqa: E731
        out = {"worker_train_loss": mean(own), "merged_train_loss": mean(merged),
               "merge_cost": mean(merged) - mean(own), "split_workers": jnp.sum(counted)}
        return {**out, "merged_test_loss": mean(tested)} if test else out

    return split


def check_common(task: Task, num_workers, local_steps, optimizer_state: str, model_state: str,
                 recompute_batches: int = 1) -> None:
    """Raises a ValueError naming the argument and the fix for anything an algorithm cannot run with."""
    if not isinstance(num_workers, int) or num_workers < 1:
        raise ArgError("num_workers", num_workers, f"num_workers={num_workers!r}: need a positive integer.", "")
    if not isinstance(local_steps, int) or local_steps < 1:
        raise ArgError("local_steps", local_steps, f"local_steps={local_steps!r}: need a positive integer",
                       "(optimizer steps per round).")
    if optimizer_state not in OPTIMIZER_STATE_POLICIES:
        raise ArgError("optimizer_state", optimizer_state, f"optimizer_state={optimizer_state!r}: unknown;",
                       f"choose one of {OPTIMIZER_STATE_POLICIES} (reset: fresh optimizer state every round; carry: "
                       f"it travels with the parameters).")
    if model_state not in MODEL_STATE_POLICIES:
        raise ArgError("model_state", model_state, f"model_state={model_state!r}: unknown;",
                       f"choose one of {MODEL_STATE_POLICIES} (carry: running statistics travel with the parameters; "
                       f"recompute: recomputed on the merged model after every round).")
    _check_recompute_batches(recompute_batches, local_steps, model_state)
    if model_state == ModelStatePolicy.RECOMPUTE and task.recompute_state is None and task.has_state:
        raise ArgError("model_state", model_state, "model_state='recompute' needs a task that can recompute its "
                       "statistics (a classifier of a module with a bn_momentum field, e.g. istjax.models.CNN);",
                       use={"model_state": "carry"})


def _check_recompute_batches(n, local_steps: int, model_state: str) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= local_steps:
        raise ArgError("recompute_batches", n, f"recompute_batches={n!r}: need an integer from 1 to "
                       f"local_steps={local_steps} (each worker's first that many batches of the round);",
                       ("e.g.", {"recompute_batches": 1}, ", or local_steps for all of them."))
    if n != 1 and model_state != ModelStatePolicy.RECOMPUTE:
        raise ArgError("recompute_batches", n, f"recompute_batches={n} says how many batches the statistics are "
                       f"recomputed from, but model_state={model_state!r} recomputes none, so it would change "
                       "nothing;", ("use", {"model_state": "recompute"}, "or drop it."))


def init_state(task: Task, optimizer: optax.GradientTransformation, carry_optimizer: bool):
    """``key -> TrainState``: fresh parameters and model state, the optimizer state if it is carried."""

    def init(key):
        key, init_key = jax.random.split(key)
        params = task.init(init_key)
        opt_state = optimizer.init(params) if carry_optimizer else ()
        return TrainState(params, task.init_state(init_key), opt_state, key, jnp.zeros((), jnp.int32))

    return init


def with_outer(init: Callable[[jax.Array], TrainState],
               outer: Optional[optax.GradientTransformation]) -> Callable[[jax.Array], TrainState]:
    """``init`` whose global ``opt_state`` is ``outer``'s state of the parameters, for an algorithm with an outer
    optimizer (DiLoCo); ``init`` itself without one."""
    if outer is None:
        return init
    return lambda key: (lambda s: s._replace(opt_state=outer.init(s.params)))(init(key))


def whole_state_init(algorithm: Algorithm) -> Callable[[jax.Array], TrainState]:
    """``key -> TrainState``: the whole global state ``algorithm`` starts from on one process, whatever part of it
    a runtime holds here (the layout of its checkpoints): parameters, model state, and the optimizer state it
    carries (the outer optimizer's, for an algorithm that has one; an algorithm's own ``whole_init`` where it gives
    one)."""
    if algorithm.whole_init is not None:
        return algorithm.whole_init
    return with_outer(init_state(algorithm.task, algorithm.optimizer, algorithm.carries_optimizer_state),
                      algorithm.outer_optimizer)


def bind(algorithm: Algorithm, backend: Any, **options: Any) -> Algorithm:
    """``algorithm`` with ``init``, ``round`` and ``runtime`` from ``backend`` (a runtime name or `Runtime`)."""
    import istjax.runtimes as runtimes  # the registry; runtimes never import algorithms

    return runtimes.get(backend).build(algorithm, **options)

