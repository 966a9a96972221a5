"""The runtime interface: a runtime receives an algorithm's pieces and decides where its W workers run.

A `Runtime` is ``(name, build, description)``; ``build(algorithm, **options)`` returns the algorithm with its
``init``, ``round`` and ``runtime`` (a `RuntimeHandle`) bound. The pieces (``distribute``, ``local``, ``collect``,
``local_fused``) and declarations (``exchange``, ...) are all a runtime reads (FedJAX's ``for_each_client``
backends have this shape). Built in (the registry, `istjax.runtimes.get`, lives in the package):

* ``"simulate"``: every worker on one device (`istjax.runtimes.simulate`).
* ``"devices"``: workers split across the local devices with ``shard_map`` (`istjax.runtimes.devices`).
* ``"mpi"``: workers split across the processes of ``mpiexec`` (`istjax.runtimes.mpi`).

Every runtime maps ``local`` over the workers it holds with `map_workers` (one worker runs unmapped), passes the
round's shared input to every worker unstacked, and checks the batches with `check_batches`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp

from istjax.core import precision
from istjax.core.comm import Exchange
from istjax.core.process import is_primary
from istjax.core.state import WORKERS, first_worker, summarize

__all__ = ["Runtime", "RuntimeHandle", "WORKER_MAPS", "check_batches", "check_worker_map", "communicates", "end_round",
           "is_traced", "map_workers", "local_handle", "when_due"]

PyTree = Any


class RuntimeHandle(NamedTuple):
    """What a driver needs to know about the runtime an algorithm was bound to.

    Attributes:
      name: the runtime's name.
      fusable: the round traces inside an outer ``jit`` (so a driver may fuse batch drawing and the round).
      primary (a property, not a field): whether this process writes files and evaluates, rank 0 under MPI
        (`istjax.core.process.is_primary`: every part of istjax asks that one function).
      gather: ``state -> TrainState`` the whole state on the primary process (None elsewhere); every process must
        call it (collective under MPI).
      agree: ``int -> int``: the largest value any process passes (so every process stops after the same round).
      whole_state: the state each process holds is the whole `TrainState` (False for sharded MPI, whose pieces
        are gathered for evaluation and checkpointed shard by shard).
      rank, size: this process and the process count.
      allgather: ``value -> [value of every process]`` in rank order (collective under MPI), for small Python
        values such as each process's peak memory.
      evaluate: ``(params, model_state, batch, shared) -> (loss, aux)`` of the whole model from the part of it this
        process holds, for a runtime that keeps the state sharded and can evaluate it in place (collective: every
        process calls it and gets the same result; nothing is gathered); None: gather the state to the primary
        process, which evaluates it with ``task.evaluate``.
      round_memory: ``(state, batches, shared) -> bytes`` (shapes in, nothing allocated but compiled programs): what
        a round allocates beyond the state this process holds, for a runtime whose round is not one fused step
        (`istjax.core.memory.predict`'s ``round_bytes``); None: not estimated.
    """

    name: str
    fusable: bool
    gather: Callable[[Any], Any]
    agree: Callable[[int], int]
    whole_state: bool = True
    rank: int = 0
    size: int = 1
    allgather: Callable[[Any], list] = lambda value: [value]
    evaluate: Optional[Callable[..., Any]] = None
    round_memory: Optional[Callable[..., int]] = None

    @property
    def primary(self) -> bool:
        """Whether this process writes files and evaluates: `istjax.core.process.is_primary`, the one answer."""
        return is_primary()


def local_handle(name: str) -> RuntimeHandle:
    """The handle of a single-process runtime."""
    return RuntimeHandle(name=name, fusable=True, gather=lambda state: state, agree=lambda v: v)


class Runtime(NamedTuple):
    """A runtime: ``build(algorithm, **options) -> algorithm`` with ``init``, ``round`` and ``runtime`` bound.

    Attributes:
      name: its registry name (a config's ``runtime.name``).
      build: ``(algorithm, **options) -> algorithm``.
      description: one line, for listings.
      config_options: the ``build`` options a config's ``runtime`` section supplies, each under its own name (the
        MPI runtime's ``mode`` is ``runtime.mode``); the driver passes exactly these.
      multi_process: whether its workers span processes (it runs under ``mpiexec``; every process builds the run).
      check_launch: ``(num_workers, **options) -> None``: what the runtime refuses before any algorithm is built
        (the MPI runtime: its mode, the process count, W's fit to it); ``build`` makes the same call first, so a
        config's build can report the launch's problem before the algorithm's.
      wall_time: what a run's training wall time measures under it, in words for a plot's axis and a comparison's
        header (`istjax.launch.plot_records.wall_time_text`); ``""``: its name, mode and process count say it.
    """

    name: str
    build: Callable[..., Any]
    description: str
    config_options: tuple[str, ...] = ()
    multi_process: bool = False
    check_launch: Callable[..., None] = lambda num_workers, **options: None
    wall_time: str = ""


def end_round(algorithm, state, workers, plan, metrics_WxK: dict, batches: Any, shared: Any = None, *,
              loss_split: bool = True, split: Any = True, split_batches: Any = None) -> tuple[Any, dict]:
    """The end of a round every one-program runtime shares: ``collect`` the workers into the next state, summarise
    their metrics (`istjax.core.state.summarize`), add the algorithm's own (``algorithm.round_metrics``) and, with
    ``loss_split`` and where ``split`` (this round's: `when_due`), add the round's loss split
    (``algorithm.split``, on ``split_batches``, default ``batches``: leaves `[W, k, B, ...]` whose last step is each
    worker's last batch)."""
    new = algorithm.collect(state, workers, plan, batches, shared)
    metrics = summarize(metrics_WxK)
    if algorithm.round_metrics is not None:
        metrics.update(algorithm.round_metrics(state, new))
    if loss_split and algorithm.split is not None:
        last = batches if split_batches is None else split_batches
        metrics.update(when_due(split, lambda: algorithm.split(new, workers, last, shared)))
    return new, metrics


def is_traced(flag: Any) -> bool:
    """Whether ``flag`` (a round's ``split=``) is a tracer: the round runs inside an outer ``jit`` and decides on
    device (`when_due`); else a Python or NumPy bool the round's own ``jit`` takes as static."""
    return isinstance(flag, jax.core.Tracer)


def when_due(due: Any, compute: Callable[[], dict]) -> dict:
    """``compute()``'s metrics where ``due``, the round's loss-split flag (a round's ``split=``): a Python bool
    decides here (``{}`` when False); a traced one (the driver's fused step passes it as an argument, so one program
    serves every round) runs ``compute`` under `jax.lax.cond`, its forward passes only where it is true, and NaN in
    its place where not (the driver drops those: `istjax.launch.run`'s split window)."""
    if not is_traced(due):
        return compute() if due else {}
    shapes = jax.eval_shape(compute)
    skipped = lambda: jax.tree.map(lambda s: jnp.full(s.shape, jnp.nan, s.dtype), shapes)  # noqa: E731
    return jax.lax.cond(due, compute, skipped)


def check_batches(batches: Any, num_workers: int, local_steps: int, example_x: Any = None) -> None:
    """Raises a clear error unless every leaf of ``batches`` is `[W, K, ...]` and, given the task's example input
    (``task.example_x``, `[N, ...]`), ``batches["x"]`` holds examples of its shape (`[W, K, B, ...]`)."""
    _check_example_shape(batches, example_x)
    for path, x in jax.tree_util.tree_flatten_with_path(batches)[0]:
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) < 2 or tuple(shape[:2]) != (num_workers, local_steps):
            raise ValueError(
                f"batches{jax.tree_util.keystr(path)} has shape {shape}; a round needs [W, K, B, ...] = "
                f"[{num_workers}, {local_steps}, ...] (num_workers, local_steps first). Build batches with "
                f"istjax.data.make_batch_fn or reshape yours. Inputs every worker reads (a graph) go in shared=.")


def _check_example_shape(batches: Any, example_x: Any) -> None:
    if example_x is None or not isinstance(batches, dict) or "x" not in batches:
        return
    got, want = jax.tree.leaves(batches["x"]), jax.tree.leaves(example_x)
    for g, e in zip(got, want):
        if tuple(g.shape[3:]) != tuple(e.shape[1:]):
            raise ValueError(
                f"batches['x'] holds examples of shape {tuple(g.shape[3:])} ([W, K, B] = {tuple(g.shape[:3])} "
                f"first), but the task was built from an example input whose examples have shape "
                f"{tuple(e.shape[1:])}: the model's weights are shaped for that. Build the task from the data "
                f"these batches come from: istjax.classifier(model, data) (or its examples train_x[:2] with "
                f"num_classes=data.num_classes).")


WORKER_MAPS = ("auto", "vmap", "sequential")


def check_worker_map(worker_map: str) -> str:
    """``worker_map`` if it is one of `WORKER_MAPS`, else a clear error."""
    if worker_map not in WORKER_MAPS:
        raise ValueError(f"worker_map={worker_map!r} is not known; choose one of {WORKER_MAPS} ('auto' runs workers "
                         f"one after another on CPU when their step has a convolution, else vmaps them).")
    return worker_map


def communicates(algorithm) -> bool:
    """Whether ``algorithm``'s workers talk during the local phase (data parallel's per-step gradient mean)."""
    return algorithm.exchange == Exchange.GRADIENTS


def map_workers(local: Callable, num_workers: int, *, outer_axes: tuple[str, ...] = (),
                reduce: Optional[Callable] = None, worker_map: str = "auto",
                communicates: bool = True) -> Callable:
    """``run(workers [n], batches [n, K, ...], shared) -> (workers [n], metrics [n, K])``: ``local`` for ``n``
    workers held here, the shared input passed to each unstacked.

    ``n > 1`` maps with `vmap` over the axis named `WORKERS` (collectives then reduce over it and ``outer_axes``),
    or, with ``worker_map="sequential"``, runs the workers one after another in `lax.map` (only for a ``local`` that
    does not communicate, ``communicates=False``: IST, ResIST, local SGD). ``"auto"`` picks ``"sequential"`` where it
    pays: a non-communicating ``local`` whose step has a convolution or a bfloat16 matmul, on the CPU backend
    (`istjax.core.precision.map_in_turn`: XLA's bfloat16 kernels have no batched form). A vmap over workers with
    different kernels turns every convolution into a grouped one, which XLA:CPU runs 2-4x slower than the same
    convolutions one worker at a time (conv benchmark); matmuls batch well, and accelerators want the batch.
    ``n == 1`` runs unmapped: a vmap of size 1 is not free (XLA drops the unit batch dimension and, on the 2-layer
    speech model, computes the weight gradient transposed and transposes it back in every step: 2.3x slower;
    benchmarks study 7); collectives then reduce over ``outer_axes`` only (``()``: the identity).
    ``reduce`` (a cross-process gradient mean) is passed on to ``local``.
    """
    check_worker_map(worker_map)
    if worker_map == "sequential" and communicates:
        raise ValueError("worker_map='sequential' needs a local phase whose workers do not communicate; this "
                         "algorithm averages gradients across workers every step (data parallel). Use 'vmap' or "
                         "'auto'.")
    if num_workers == 1:
        def run_one(workers, batches, shared=None):
            out = local(first_worker(workers), first_worker(batches), shared, axis_name=outer_axes, reduce=reduce)
            return jax.tree.map(lambda x: x[None], out)

        return run_one

    axis_name = (WORKERS,) + tuple(outer_axes) if outer_axes else WORKERS

    def one(worker, batches_K, shared):
        return local(worker, batches_K, shared, axis_name=axis_name, reduce=reduce)

    mapped = jax.vmap(one, in_axes=(0, 0, None), axis_name=WORKERS)

    def in_turn(workers, batches, shared):
        return jax.lax.map(lambda wb: local(wb[0], wb[1], shared, axis_name=(), reduce=reduce), (workers, batches))

    def run(workers, batches, shared=None):
        sequential = worker_map == "sequential" or (
            worker_map == "auto" and not communicates and jax.default_backend() == "cpu"
            and (_has_convolution(local, first_worker(workers), first_worker(batches), shared)
                 or precision.map_in_turn(lambda w, b, s: local(w, b, s, axis_name=(), reduce=None),
                                          first_worker(workers), first_worker(batches), shared)))
        return (in_turn if sequential else mapped)(workers, batches, shared)

    return run


def _has_convolution(local: Callable, worker: Any, batches_K: Any, shared: Any) -> bool:
    """Whether one worker's local phase runs a convolution (traced on abstract values; nothing is computed)."""
    def abstract(x):
        return jax.ShapeDtypeStruct(jnp.shape(x), x.dtype if hasattr(x, "dtype") else jnp.result_type(x))

    args = jax.tree.map(abstract, (worker, batches_K, shared))
    jaxpr = jax.make_jaxpr(lambda w, b, s: local(w, b, s, axis_name=(), reduce=None))(*args)
    return _jaxpr_has(jaxpr.jaxpr, "conv_general_dilated")


def _jaxpr_has(jaxpr: Any, primitive: str) -> bool:
    """Whether ``primitive`` appears in ``jaxpr`` or any jaxpr nested in its equations' parameters."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == primitive:
            return True
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)  # ClosedJaxpr -> Jaxpr
                if hasattr(inner, "eqns") and _jaxpr_has(inner, primitive):
                    return True
    return False
