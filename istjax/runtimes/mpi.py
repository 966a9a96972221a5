"""The MPI runtime: an algorithm's W workers spread over the N processes of ``mpiexec -n N`` (one per host).

`mpi_runtime(algorithm, mode=...)` wraps an algorithm built by `istjax.ist`, `istjax.data_parallel` or `istjax.local_sgd`
(with any single-process backend) and returns an `MPIRuntime` whose ``init`` and ``round`` have the algorithm's
signatures. Process ``r`` runs workers ``r * L .. (r + 1) * L - 1`` (``L = W / N``), vmapped on its first local
device. Every process passes the same full ``batches`` (leaves `[W, K, B, ...]`, e.g. from
`istjax.data.make_batch_fn`) and keeps its own rows; a `[L, K, B, ...]` slice is accepted too.

Modes (``mode=``):

``"parameter_server"``
    IST: rank 0 holds the global `TrainState`; each round it samples the partition, extracts the W sub-networks and
    scatters `[N, L, ...]` of them (`mpi4jax.scatter`); every rank trains its L workers; rank 0 gathers them back
    (`mpi4jax.gather`) and merges. Other ranks hold no parameters (``state.params == ()``).
``"sharded"``
    IST: no rank ever holds the whole model. Rank ``o`` owns the contiguous slice ``[o * n / N, (o + 1) * n / N)`` of
    every neuron group and, for every partitioned weight, that slice along the weight's first partitioned axis
    (a hidden-to-hidden `[H1, H2]` weight: rows `[H1 / N, H2]`). The algorithm must sample with
    ``istjax.stratified(num_owners=N)``: every worker then gets the same number of units from every owner, so each
    round's exchange is one fixed-size `mpi4jax.alltoall` out (owners -> workers) and one back. Shared leaves are
    replicated and averaged with an allreduce. Every rank computes the round's partition from the same key; no
    partition is ever sent.

Data parallel and local SGD keep a replica of the model on every rank in both modes (every worker trains the whole
model): data parallel allreduces every step's gradients, local SGD allreduces the parameters once per round.

Every MPI exchange is its own single-device jitted step (mpi4jax cannot run inside a multi-device computation),
around the device step that trains the workers. Each round reports the bytes of the buffers it actually handed to
MPI, on the workers' side (what a worker receives: its slice of a scatter or of an all-to-all, the result of an
allreduce; what it sends: its slice of a gather or all-to-all, its allreduce input), per worker:
``metrics["measured_bytes_received"]`` and ``metrics["measured_bytes_sent"]``. A rank moves one buffer per worker
(no pre-reduction of its own workers), so these equal the analytic ``algorithm.comm``. Metrics (losses) travel by a
small host allgather that is not counted.

Evaluation and checkpoints: `MPIRuntime.gather_params` assembles the full parameters on rank 0 (``None`` on the
others); in sharded mode that is the one moment rank 0 holds the whole model.
"""

from __future__ import annotations

import dataclasses
import sys
import traceback
from collections.abc import Callable
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from istjax.algorithms.base import WORKERS, Algorithm, TrainState, WorkerState
from istjax.core.spec import GroupAxis, LeafSpec, path_str
from istjax.core.subnet import extract_leaf, merge_leaf

__all__ = ["MODES", "MPIRuntime", "mpi_runtime", "check_fit", "rank", "size", "is_primary", "abort_on_error"]

PyTree = Any
MODES = ("parameter_server", "sharded")
ROOT = 0
_OWNED = "@owned"  # the synthetic group name of a leaf's owner axis in sharded mode


def _world():
    from mpi4py import MPI  # late: importing mpi4py initialises MPI

    return MPI.COMM_WORLD


def rank() -> int:
    """This process's MPI rank (0 when not launched by mpiexec)."""
    return _world().Get_rank()


def size() -> int:
    """The number of MPI processes (1 when not launched by mpiexec)."""
    return _world().Get_size()


def is_primary() -> bool:
    """True on rank 0, the process that writes metrics, plots and checkpoints."""
    return rank() == ROOT


def abort_on_error() -> None:
    """Makes an uncaught exception on any rank end the whole job: print ``rank r of N failed`` and the traceback
    to stderr, then ``MPI_Abort``, so the other ranks cannot wait forever in a collective. Idempotent.

    A rank that dies without an exception (killed, ``os._exit``) is caught by ``mpiexec`` itself, which ends the
    job with a non-zero status naming the process that exited.
    """
    if getattr(sys.excepthook, "_istjax_abort", False):
        return
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        comm = _world()
        r, n = comm.Get_rank(), comm.Get_size()
        sys.stderr.write(f"istjax: rank {r} of {n} failed with {exc_type.__name__}: {exc}; aborting all ranks.\n")
        traceback.print_exception(exc_type, exc, tb, file=sys.stderr)
        sys.stderr.flush()
        if n > 1:
            comm.Abort(1)
        previous(exc_type, exc, tb)

    hook._istjax_abort = True
    sys.excepthook = hook


def check_fit(num_workers: int, num_processes: Optional[int] = None) -> int:
    """Returns ``L = W / N``, the workers per process; raises a ValueError naming the fix when W does not fit.

    Call it (every rank does, inside `mpi_runtime`) before anything is compiled, so every rank refuses the same config.
    """
    n = size() if num_processes is None else num_processes
    if num_workers % n:
        lower, upper = (num_workers // n) * n, (num_workers // n + 1) * n
        fix = f"{lower} or {upper}" if lower else f"{upper}"
        raise ValueError(
            f"num_workers={num_workers} does not fit {n} MPI processes: each process runs num_workers / {n} workers, "
            f"so num_workers must be a multiple of {n}. Use --config.num_workers={fix}, or launch with "
            f"mpiexec -n N for an N that divides {num_workers}.")
    return num_workers // n


@dataclasses.dataclass
class Traffic:
    """Bytes of the buffers this rank handed to MPI in one round, on its workers' side (all L of them)."""

    sent: int = 0
    received: int = 0
    by_leaf: dict = dataclasses.field(default_factory=dict)  # path -> [received, sent], sharded/PS IST only

    def add(self, *, sent: PyTree = None, received: PyTree = None, leaf_paths: bool = False):
        for tree, slot in ((received, 0), (sent, 1)):
            if tree is None:
                continue
            flat = jax.tree_util.tree_flatten_with_path(tree)[0]
            total = 0
            for path, x in flat:
                nbytes = int(x.size) * x.dtype.itemsize
                total += nbytes
                if leaf_paths:
                    self.by_leaf.setdefault(path_str(path), [0, 0])[slot] += nbytes
            if slot == 0:
                self.received += total
            else:
                self.sent += total


@dataclasses.dataclass
class MPIRuntime:
    """An algorithm running on MPI processes.

    Attributes:
      init: ``key -> state``; what the state holds depends on the mode (module docstring); `TrainState` always.
      round: ``(state, batches) -> (state, metrics)``; batches `[W, K, B, ...]` (or this rank's `[L, K, B, ...]`).
        Metrics: ``train_loss``, ``train_accuracy`` (over all W workers), ``worker_loss`` `[W]`,
        ``measured_bytes_sent`` and ``measured_bytes_received`` (per worker, this round).
      gather_params: ``state -> params`` full parameters on rank 0, ``None`` elsewhere; call it on every rank.
      algorithm, mode: what it runs.
      rank, size: this process and the process count; ``workers_per_rank``: L.
      last_traffic: the previous round's `Traffic` (per-leaf bytes for IST).
      largest_array_bytes: the largest array (state, exchange buffer, worker state) this rank has held in a round.
    """

    init: Callable
    round: Callable
    gather_params: Callable
    algorithm: Algorithm
    mode: str
    rank: int
    size: int
    workers_per_rank: int
    last_traffic: Traffic = dataclasses.field(default_factory=Traffic)
    largest_array_bytes: int = 0

    @property
    def is_primary(self) -> bool:
        return self.rank == ROOT

    def as_algorithm(self) -> Algorithm:
        """The wrapped `Algorithm` with this runtime's ``init`` and ``round``: a drop-in for code (the driver) that
        takes an Algorithm. Its ``distribute``/``local``/``collect`` are the single-process pieces."""
        return dataclasses.replace(self.algorithm, init=self.init, round=self.round)

    def _track(self, *trees):
        for x in jax.tree.leaves(trees):
            self.largest_array_bytes = max(self.largest_array_bytes, int(x.size) * x.dtype.itemsize)


def _next_key(key):
    """The key of the next state; every algorithm's ``distribute`` splits ``key -> (next, round_key)``."""
    return jax.random.split(key)[0]


def _summary(metrics_LxK: dict, comm) -> dict:
    """Per-lane means of this rank's workers, allgathered; the same dict on every rank."""
    lane = {k: np.asarray(jnp.mean(v, axis=1)) for k, v in metrics_LxK.items()}
    everyone = comm.allgather(lane)
    per_worker = {k: np.concatenate([d[k] for d in everyone]) for k in lane}
    out = {"train_loss": float(per_worker["loss"].mean()), "worker_loss": per_worker["loss"]}
    for k, v in per_worker.items():
        if k != "loss":
            out[f"train_{k}"] = float(v.mean())
    return out


def _split_ranks(tree, n):
    """Leaves `[W, ...]` -> `[N, L, ...]` (worker ``w`` is on rank ``w // L``)."""
    return jax.tree.map(lambda x: x.reshape((n, x.shape[0] // n) + x.shape[1:]), tree)


def _join_ranks(tree):
    return jax.tree.map(lambda x: x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:]), tree)


def _mean_of_sum(total, count, like_dtype):
    if jnp.issubdtype(like_dtype, jnp.integer):
        return jnp.round(total / count).astype(like_dtype)
    return (total / count).astype(like_dtype)


def mpi_runtime(algorithm: Algorithm, *, mode: str = "parameter_server", comm=None) -> MPIRuntime:
    """Runs ``algorithm`` on the MPI processes of this job (see the module docstring).

    Validates everything on every rank before compiling: the mode, that W is a multiple of the process count,
    and (sharded IST) the sampler and the spec. Installs `abort_on_error`.

    Args:
      algorithm: from `istjax.ist`, `istjax.data_parallel` or `istjax.local_sgd`.
      mode: ``"parameter_server"`` or ``"sharded"``.
      comm: an mpi4py communicator (default ``COMM_WORLD``).
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: choose one of {MODES} (--config.mpi_mode).")
    if algorithm.name not in ("ist", "data_parallel", "local_sgd"):
        raise ValueError(f"algorithm {algorithm.name!r} has no MPI runtime; use ist, data_parallel or local_sgd.")
    comm = _world() if comm is None else comm
    n, r = comm.Get_size(), comm.Get_rank()
    lanes = check_fit(algorithm.num_workers, n)
    abort_on_error()
    build = {"ist": _ist_sharded if mode == "sharded" else _ist_parameter_server,
             "data_parallel": _data_parallel, "local_sgd": _local_sgd}[algorithm.name]
    runtime = MPIRuntime(init=None, round=None, gather_params=None, algorithm=algorithm, mode=mode, rank=r, size=n,
                         workers_per_rank=lanes)
    build(runtime, comm)
    return runtime


# ----------------------------------------------------------------------------------------------------------------
# Exchange steps: single-device jitted functions around mpi4jax collectives.


class _Exchange:
    def __init__(self, comm):
        import mpi4jax  # late: needs MPI

        self.comm = comm
        self.n = comm.Get_size()
        self.rank = comm.Get_rank()
        c = comm
        self.alltoall = jax.jit(lambda t: jax.tree.map(lambda x: mpi4jax.alltoall(x, comm=c), t))
        self.scatter = jax.jit(lambda t: jax.tree.map(lambda x: mpi4jax.scatter(x, ROOT, comm=c), t))
        self.gather = jax.jit(lambda t: jax.tree.map(lambda x: mpi4jax.gather(x, ROOT, comm=c), t))
        from mpi4py import MPI

        self.allreduce = jax.jit(lambda t: jax.tree.map(lambda x: mpi4jax.allreduce(x, op=MPI.SUM, comm=c), t))


def _my_rows(batches, runtime):
    lanes, w = runtime.workers_per_rank, runtime.algorithm.num_workers
    lead = {x.shape[0] for x in jax.tree.leaves(batches)}
    if lead == {w}:
        start = runtime.rank * lanes
        return jax.tree.map(lambda x: x[start:start + lanes], batches)
    if lead == {lanes}:
        return batches
    raise ValueError(f"batches have leading sizes {sorted(lead)}; the MPI runtime takes all W={w} workers' batches "
                     f"[W, K, B, ...] (each rank keeps its rows) or this rank's L={lanes} rows [L, K, B, ...].")


def _check_batches(batches, runtime):
    k = runtime.algorithm.local_steps
    for path, x in jax.tree_util.tree_flatten_with_path(batches)[0]:
        if np.ndim(x) < 2 or np.shape(x)[1] != k:
            raise ValueError(f"batches{jax.tree_util.keystr(path)} has shape {np.shape(x)}; a round needs "
                             f"[W, K, B, ...] with K = local_steps = {k}.")


def _lane_step(algorithm: Algorithm, reset_optimizer: bool):
    """The device step: this rank's L workers, vmapped (as the simulate backend runs all W)."""
    opt = algorithm.optimizer

    def step(workers: WorkerState, batches_L):
        if reset_optimizer:
            workers = WorkerState(workers.params, jax.vmap(opt.init)(workers.params))
        return jax.vmap(algorithm.local, axis_name=WORKERS)(workers, batches_L)

    return jax.jit(step)


def _is_carry(algorithm: Algorithm) -> bool:
    abstract = jax.eval_shape(algorithm.init, jax.random.key(0))
    return bool(jax.tree.leaves(abstract.opt_state))


# ----------------------------------------------------------------------------------------------------------------
# IST, parameter server.


def _ist_parameter_server(rt: MPIRuntime, comm):
    alg = rt.algorithm
    x = _Exchange(comm)
    n, lanes, root = rt.size, rt.workers_per_rank, rt.rank == ROOT
    carry = _is_carry(alg)
    abstract_state = jax.eval_shape(alg.init, jax.random.key(0))
    abstract_workers, _ = jax.eval_shape(alg.distribute, abstract_state)
    mine = WorkerState(abstract_workers.params, abstract_workers.opt_state if carry else ())
    template = jax.tree.map(lambda s: jnp.zeros((lanes,) + s.shape[1:], s.dtype), mine)  # non-root scatter input
    distribute, collect = jax.jit(alg.distribute), jax.jit(alg.collect)
    train = _lane_step(alg, reset_optimizer=not carry)

    def init(key):
        state = jax.jit(alg.init)(key)
        return state if root else TrainState((), (), state.key, state.round)

    def round_fn(state, batches):
        _check_batches(batches, rt)
        batches = _my_rows(batches, rt)
        traffic = Traffic()
        if root:
            workers, plan = distribute(state)
            send = _split_ranks(WorkerState(workers.params, workers.opt_state if carry else ()), n)
            rt._track(state, send)
        else:
            send = template
        got = x.scatter(send)  # [L, ...]: this rank's workers' sub-networks
        traffic.add(received=got.params, leaf_paths=True)
        traffic.add(received=got.opt_state)
        trained, metrics = train(got, batches)
        back = WorkerState(trained.params, trained.opt_state if carry else ())
        traffic.add(sent=back.params, leaf_paths=True)
        traffic.add(sent=back.opt_state)
        gathered = x.gather(back)  # root: [N, L, ...]
        rt._track(got, trained)
        if root:
            workers = _join_ranks(gathered)
            if not carry:
                workers = WorkerState(workers.params, ())
            rt._track(gathered)
            state = collect(state, workers, plan)
        else:
            state = TrainState((), (), _next_key(state.key), state.round + 1)
        return state, _finish(rt, traffic, metrics, comm)

    def gather_params(state):
        return state.params if root else None

    rt.init, rt.round, rt.gather_params = init, round_fn, gather_params


def _finish(rt: MPIRuntime, traffic: Traffic, metrics, comm) -> dict:
    rt.last_traffic = traffic
    out = _summary(metrics, comm)
    out["measured_bytes_sent"] = traffic.sent // rt.workers_per_rank
    out["measured_bytes_received"] = traffic.received // rt.workers_per_rank
    return out


# ----------------------------------------------------------------------------------------------------------------
# IST, sharded.


def _owner_axis(leaf: LeafSpec) -> Optional[int]:
    return leaf.partitioned_axes[0] if not leaf.shared else None


def _check_sharded(alg: Algorithm, n: int):
    want = f"stratified{n}"
    if alg.sampler is None or alg.sampler.name != want:
        got = None if alg.sampler is None else alg.sampler.name
        raise ValueError(
            f"mode='sharded' with {n} processes needs the partition sampler istjax.stratified(num_owners={n}) (so each "
            f"round's exchange is a fixed-size all-to-all); the algorithm samples with {got!r}. Build it with "
            f"istjax.ist(..., sampler=istjax.stratified(num_owners={n})), or use mode='parameter_server'.")
    if _is_carry(alg):
        raise ValueError("mode='sharded' supports optimizer_state='reset' only (a carried optimizer state would be "
                         "sharded like the parameters; not implemented). Use optimizer_state='reset' or "
                         "mode='parameter_server'.")
    for path, leaf in jax.tree_util.tree_flatten_with_path(alg.task.spec.leaves)[0]:
        a = _owner_axis(leaf)
        if a is not None and leaf.axes[a].tiles != 1:
            raise ValueError(f"parameter {path_str(path)!r}: its first partitioned axis holds {leaf.axes[a].tiles} "
                             f"tiles of group {leaf.axes[a].group!r}; mode='sharded' needs tiles == 1 there. Use "
                             f"mode='parameter_server'.")


def _ist_sharded(rt: MPIRuntime, comm):
    alg = rt.algorithm
    n, me, lanes, w = rt.size, rt.rank, rt.workers_per_rank, alg.num_workers
    _check_sharded(alg, n)
    x = _Exchange(comm)
    spec, sampler = alg.task.spec, alg.sampler
    sizes = dict(spec.group_sizes)
    leaves_spec = spec.leaves
    train = _lane_step(alg, reset_optimizer=True)

    def shard_of(leaf: LeafSpec, v, owner):
        a = _owner_axis(leaf)
        if a is None:
            return v
        s = v.shape[a] // n
        return jax.lax.slice_in_dim(v, owner * s, (owner + 1) * s, axis=a)

    def owned_view(leaf: LeafSpec, p):
        """The leaf's spec and partition as this owner sees its shard: the owner axis indexes shard-local units."""
        a = _owner_axis(leaf)
        g = leaf.axes[a].group
        shard, per = sizes[g] // n, sizes[g] // (n * w)
        local = p.indices[g][:, me * per:(me + 1) * per] - me * shard  # [W, per], stratified: owner blocks in order
        axes = tuple(GroupAxis(_OWNED, 1) if i == a else ax for i, ax in enumerate(leaf.axes))
        part = type(p)({**p.indices, _OWNED: local}, {**p.mask, _OWNED: jnp.ones(local.shape, bool)})
        return LeafSpec(axes), part, {**sizes, _OWNED: shard}

    def init(key):
        key, init_key = jax.random.split(key)
        # One jit: XLA computes only this rank's slice of every initialiser (the full leaves are never outputs).
        params = jax.jit(lambda k: jax.tree.map(lambda s, v: shard_of(s, v, me), leaves_spec, alg.task.init(k)))(
            init_key)
        return TrainState(params, (), key, jnp.zeros((), jnp.int32))

    @jax.jit
    def outbound(state):
        """Sample the round's partition (every rank, same key) and cut this owner's pieces for every worker."""
        key, round_key = jax.random.split(state.key)
        p = sampler.sample(round_key, sizes, w)

        def piece(leaf, v):
            if leaf.shared:
                return None
            s, part, sz = owned_view(leaf, p)
            return _split_ranks(extract_leaf(v, s, part, sz, w), n)  # [N(dest rank), L, ..per.., ...]

        return key, p, jax.tree.map(piece, leaves_spec, state.params)

    @jax.jit
    def assemble(params, received):
        """[N(owner), L, ..., per@a, ...] -> [L, ..., N*per@a, ...]; shared leaves broadcast to [L, ...]."""

        def one(leaf, v, got):
            if leaf.shared:
                return jnp.broadcast_to(v, (lanes,) + v.shape)
            a = 1 + _owner_axis(leaf)
            moved = jnp.moveaxis(got, 0, a)  # [L, ..., N, per, ...]
            return moved.reshape(moved.shape[:a] + (moved.shape[a] * moved.shape[a + 1],) + moved.shape[a + 2:])

        return jax.tree.map(one, leaves_spec, params, received)

    @jax.jit
    def outgoing(sub):
        """[L, ..., N*per@a, ...] -> [N(owner), L, ..., per@a, ...] for partitioned leaves; shared as they are."""

        def one(leaf, v):
            if leaf.shared:
                return None
            a = 1 + _owner_axis(leaf)
            split = v.reshape(v.shape[:a] + (n, v.shape[a] // n) + v.shape[a + 1:])
            return jnp.moveaxis(split, a, 0)

        return jax.tree.map(one, leaves_spec, sub)

    @jax.jit
    def write_back(state, p, key, returned, shared_sums):
        def one(leaf, v, got, total):
            if leaf.shared:
                return _mean_of_sum(jnp.sum(total, axis=0), w, v.dtype)
            s, part, sz = owned_view(leaf, p)
            return merge_leaf(v, _join_ranks(got), s, part, sz, disjoint=True)

        params = jax.tree.map(one, leaves_spec, state.params, returned, shared_sums)
        return TrainState(params, (), key, state.round + 1)

    def round_fn(state, batches):
        _check_batches(batches, rt)
        batches = _my_rows(batches, rt)
        traffic = Traffic()
        key, p, pieces = outbound(state)
        received = x.alltoall(pieces)
        traffic.add(received=received, leaf_paths=True)
        sub = assemble(state.params, received)
        trained, metrics = train(WorkerState(sub, ()), batches)
        back = outgoing(trained.params)
        traffic.add(sent=back, leaf_paths=True)
        returned = x.alltoall(back)
        shared = jax.tree.map(lambda leaf, v: v if leaf.shared else None, leaves_spec, trained.params)
        traffic.add(sent=shared, received=shared, leaf_paths=True)  # allreduce: in and out, one buffer per worker
        shared_sums = x.allreduce(shared)
        rt._track(state, pieces, received, sub, trained, back, returned)
        state = write_back(state, p, key, returned, shared_sums)
        return state, _finish(rt, traffic, metrics, comm)

    def gather_params(state):
        def one(leaf, v):
            got = x.gather(v)  # root: [N, ...]
            if me != ROOT:
                return None
            if leaf.shared:
                return got[0]  # replicas agree (averaged by an allreduce)
            return jnp.concatenate(list(got), axis=_owner_axis(leaf))

        full = jax.tree.map(one, leaves_spec, state.params)
        return full if me == ROOT else None

    rt.init, rt.round, rt.gather_params = init, round_fn, gather_params


# ----------------------------------------------------------------------------------------------------------------
# Replicated algorithms: local SGD (allreduce of parameters per round), data parallel (of gradients per step).


def _replicated_init(alg):
    init = jax.jit(alg.init)
    return lambda key: init(key)


def _local_sgd(rt: MPIRuntime, comm):
    alg = rt.algorithm
    x, lanes, w = _Exchange(comm), rt.workers_per_rank, alg.num_workers
    carry = _is_carry(alg)
    train = _lane_step(alg, reset_optimizer=not carry)

    @jax.jit
    def start(state):
        bcast = lambda t: jax.tree.map(lambda v: jnp.broadcast_to(v, (lanes,) + v.shape), t)
        return WorkerState(bcast(state.params), bcast(state.opt_state) if carry else ())

    @jax.jit
    def finish(state, sums):
        mean = lambda t, like: jax.tree.map(lambda s, v: _mean_of_sum(jnp.sum(s, axis=0), w, v.dtype), t, like)
        opt = mean(sums.opt_state, state.opt_state) if carry else ()
        return TrainState(mean(sums.params, state.params), opt, _next_key(state.key), state.round + 1)

    def round_fn(state, batches):
        _check_batches(batches, rt)
        batches = _my_rows(batches, rt)
        traffic = Traffic()
        trained, metrics = train(start(state), batches)
        out = WorkerState(trained.params, trained.opt_state if carry else ())
        traffic.add(sent=out, received=out)
        sums = x.allreduce(out)
        rt._track(state, trained, sums)
        return finish(state, sums), _finish(rt, traffic, metrics, comm)

    rt.init, rt.round = _replicated_init(alg), round_fn
    rt.gather_params = lambda state: state.params if rt.rank == ROOT else None


def _data_parallel(rt: MPIRuntime, comm):
    alg = rt.algorithm
    x, w = _Exchange(comm), alg.num_workers
    loss_fn, opt = alg.task.loss_fn(None), alg.optimizer

    @jax.jit
    def grads(params, batch_L):
        """Every lane's loss, metrics and gradients at the shared params: `[L, ...]`."""
        (loss, aux), g = jax.vmap(jax.value_and_grad(loss_fn, has_aux=True), in_axes=(None, 0))(params, batch_L)
        return g, {"loss": loss, **aux}

    @jax.jit
    def apply(state_params, opt_state, sums):
        import optax

        g = jax.tree.map(lambda s: jnp.sum(s, axis=0) / w, sums)
        with jax.numpy_dtype_promotion("standard"):  # as istjax.local_train: optax mixes Python floats and ints
            updates, opt_state = opt.update(g, opt_state, state_params)
        return optax.apply_updates(state_params, updates), opt_state

    def round_fn(state, batches):
        _check_batches(batches, rt)
        batches = _my_rows(batches, rt)
        traffic = Traffic()
        params, opt_state = state.params, state.opt_state
        steps = []
        for k in range(alg.local_steps):
            g, m = grads(params, jax.tree.map(lambda v: v[:, k], batches))
            traffic.add(sent=g, received=g)
            sums = x.allreduce(g)  # [L, ...] summed over ranks; one buffer per worker
            params, opt_state = apply(params, opt_state, sums)
            steps.append(m)
            rt._track(g, sums)
        metrics = jax.tree.map(lambda *s: jnp.stack(s, axis=1), *steps)  # [L, K]
        rt._track(params)
        state = TrainState(params, opt_state, _next_key(state.key), state.round + 1)
        return state, _finish(rt, traffic, metrics, comm)

    rt.init, rt.round = _replicated_init(alg), round_fn
    rt.gather_params = lambda state: state.params if rt.rank == ROOT else None


def _refuse_as_backend(**_):
    raise ValueError(
        "backend='mpi' wraps a whole algorithm rather than its round: build the algorithm with backend='simulate', "
        "then runtime = istjax.distributed.mpi_runtime(algorithm, mode='parameter_server' or 'sharded') on every rank "
        "and use runtime.init / runtime.round / runtime.gather_params (or runtime.as_algorithm()).")


def _register():
    import istjax.runtimes.base as backends

    backends.register(backends.Backend("mpi", _refuse_as_backend,
                                       "MPI processes (mpiexec): use istjax.distributed.mpi_runtime(algorithm, mode=...)"))


_register()
