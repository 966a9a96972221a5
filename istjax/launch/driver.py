"""The training driver: ``train_and_evaluate(config, workdir)`` runs a study from a config and records it.

It reads as its steps, in order:

1. `open_run`: `istjax.launch.config.validate` checks the whole config (every problem reported at once, before
   anything compiles) and loads the dataset; the writing process claims the workdir (`istjax.launch.workdir`: its
   lock, so a workdir another live run is writing is refused); `build` makes the task (the model named by
   ``config.model.name``, `istjax.models`), the optimizer, the algorithm bound to ``config.runtime.name`` and the batch
   function; the workdir is checked (a workdir holding another run's config is refused unless the differences are
   only in run-control fields and ``resume`` is set, or ``overwrite`` is set).
2. `check_memory_cap`, then `initial_state`: fresh from ``seed``, or the newest good checkpoint
   (`istjax.launch.checkpoint`; one that does not fit the config is refused, never discarded), each process keeping
   what its runtime holds. Nothing has been written so far: a refusal rolls the claim back, leaving the workdir as
   it was; `Run.begin` then writes the run (``overwrite`` deletes the previous one, naming its checkpoints).
3. `compile_step`: one jitted function draws the round's batches on device (``make_batch_fn(...).apply(data,
   state.round)``, a pure function of seed and round) and runs the round, compiled ahead of the loop and timed
   apart from training (a runtime whose round is not traceable as a whole, such as MPI's, runs unfused).
4. `train_loop`: rounds under a tqdm bar. Every ``eval_every`` rounds (and after the last) the global model is
   evaluated at full width in test mode (`istjax.Task.evaluate`: running statistics, test-time transforms) on the
   whole test set and on (a prefix of) the training set, and a record goes to ``metrics.jsonl`` and TensorBoard
   (schema: `istjax.launch.metrics`). Every ``checkpoint_every`` rounds, at the end, and on SIGINT/SIGTERM the
   whole state is checkpointed.
5. `finish`: a summary is printed, written to ``summary.json`` and returned.

Runtime differences (which process writes, gathering a state spread over processes, agreeing on a stop signal)
live behind the algorithm's `istjax.runtimes.RuntimeHandle`; the driver has no MPI branch.

Failures: a non-finite loss stops the run (`TrainingError`, naming the round and the worker) after checkpointing the
last good state; SIGINT/SIGTERM checkpoint the finished round and raise `Interrupted`. `istjax.launch.cli` maps
these to exit codes 2 (config), 1 (training failure), 130/143 (interrupted).
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import json
import pathlib
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

import istjax.data as data_lib
import istjax.launch.config as config_lib
from istjax.algorithms import ALGORITHMS
from istjax.algorithms.base import Algorithm, whole_state_init
from istjax.core import contract
from istjax.core import memory as memory_lib
from istjax.core.state import TrainState
from istjax.core.task import Task
from istjax.data.cluster_batches import CLUSTERS
from istjax.data.text import metric_labels
from istjax.launch import provenance
from istjax.launch import workdir as workdir_lib
from istjax.launch.checkpoint import (Checkpointer, CheckpointMismatch, CheckpointWriteError, ShardCountMismatch,
                                      ShardedCheckpointer)
from istjax.launch.config import ConfigError, Experiment, build
from istjax.launch.config.collect import Collector
from istjax.launch.metrics import (SPLIT, MetricWriter, format_bytes, is_primary, metrics_text, peak_rss_mib,
                                      read_metrics, truncate_metrics, write_atomic)
from istjax.launch.workdir import RUN_FILES, EnvironmentFailure  # re-exported

__all__ = ["train_and_evaluate", "evaluate_run", "restore_run", "build", "make_train_step", "make_evaluator", "TrainingError",
           "EnvironmentFailure", "Interrupted", "ConfigError", "RUN_FILES", "ALGORITHMS"]


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. a non-finite loss). The last good state is checkpointed."""


class Interrupted(Exception):
    """SIGINT/SIGTERM arrived; the state after the current round was checkpointed.

    Attributes:
      signum: the signal; ``exit_code`` is ``128 + signum`` (130 for SIGINT, 143 for SIGTERM).
    """

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


# ----------------------------------------------------------------------------------------------------------------
# Building blocks
# ----------------------------------------------------------------------------------------------------------------


def make_train_step(algorithm: Algorithm, batch_fn: data_lib.BatchFn, *, fuse: bool = True) -> Callable:
    """``step(state, (data, shared)) -> (state, metrics)``: draws round ``state.round``'s batches on device and runs
    it.

    ``data`` is ``batch_fn.data`` and ``shared`` the dataset's shared input (a graph), both passed as arguments so
    that neither the training set nor the graph is baked into the program as a constant (XLA would fold it, seconds
    of compilation for a large graph). With ``fuse`` the batch gather and the round are one jitted function; without
    it (runtimes whose round is not traceable as a whole, e.g. ones that talk MPI between device steps) the batches
    come from ``batch_fn``'s own jitted gather and the round is called as the runtime built it (a batch function
    built for an MPI rank's workers, `own_rows`, draws only their rows). Either way no data passes through the host.
    """
    if fuse:
        @jax.jit
        def step(state: TrainState, inputs):
            data, shared = inputs
            return algorithm.round(state, batch_fn.apply(data, state.round), shared)

        return step

    def step_unfused(state: TrainState, inputs):
        _, shared = inputs  # batch_fn closes over the same arrays
        return algorithm.round(state, batch_fn(state.round), shared)

    return step_unfused


def step_inputs(run: "Run") -> tuple[Any, Any]:
    """What every round step reads besides the state: ``(batch_fn.data, dataset.shared)`` (`make_train_step`)."""
    return run.batch_fn.data, run.dataset.shared


def step_examples(config: ml_collections.ConfigDict) -> int:
    """What one local step consumes, counted in ``samples_seen``: ``batch_size`` examples, or with
    ``graph_batches="clusters"`` the ``clusters_per_step`` clusters of a Cluster-GCN step."""
    if config.data.graph_batches == CLUSTERS:
        return int(config.data.clusters_per_step)
    return int(config.batch_size)


def make_evaluator(task: Task, dataset: data_lib.Dataset, *, batch_size: int, train_examples: int = 0,
                   evaluate_fn: Optional[Callable] = None,
                   log: Optional[Callable[[str], None]] = None) -> "Evaluator":
    """``evaluate(state) -> {test_loss, test_accuracy, train_loss, train_accuracy}`` of the full-width model, plus
    ``test_<metric>`` and ``train_<metric>`` for every other metric the task's evaluation returns (a multi-label
    model's ``precision_at_k``, `istjax.xmc.loss`; a metric returned as ``<name>_numerator`` and
    ``<name>_denominator`` is reported as ``<name>``, the ratio of their means over the split: ``psp_at_k``).

    The model runs in test mode (`istjax.Task.evaluate`: running statistics where the model keeps them, and any
    test-time transform it declares). The test set is evaluated whole; the training set's first ``train_examples``
    examples (0: all). Chunks of ``batch_size`` (`istjax.data.eval_batches`) are put on device once; results are
    example-weighted means. Chunks are equal (``len // batch_size`` of them), never shorter than ``batch_size`` nor
    than the task's ``min_eval_batch`` (a model with batch-statistics BatchNorm normalises each chunk with its own
    statistics). ``evaluate_fn`` replaces ``task.evaluate`` (a runtime that evaluates a sharded state in place:
    `istjax.runtimes.RuntimeHandle.evaluate`). A split smaller than ``min_eval_batch`` (your own table's test set) is
    evaluated as one batch, and ``log`` is told that its score depends on the split's size.
    """
    evaluate_fn = task.evaluate if evaluate_fn is None else evaluate_fn

    def chunk_scores(params, model_state, x, y, shared):
        return evaluate_fn(params, model_state, {"x": x, "y": y}, shared)  # (loss, {metric: value})

    size = max(int(batch_size), task.min_eval_batch)

    def put(x, y):
        # Equal chunks of at least `size` examples (no short last chunk: with batch-statistics BatchNorm a chunk's
        # statistics are its own); a split smaller than `size` is one chunk.
        chunks = np.array_split(np.arange(len(y)), max(1, len(y) // size))
        return [(jnp.asarray(x[i]), jnp.asarray(y[i]), len(i)) for i in chunks if len(i)]

    n_train = len(dataset.train_y) if train_examples in (0, None) else min(train_examples, len(dataset.train_y))
    splits = {"test": put(dataset.test_x, dataset.test_y),
              "train": put(dataset.train_x[:n_train], dataset.train_y[:n_train])}
    small = {split: n for split, n in (("test", len(dataset.test_y)), ("train", n_train)) if n < task.min_eval_batch}
    if small and log is not None:
        log(_small_split_note(task, small))
    return Evaluator(jax.jit(chunk_scores), splits, dataset.shared)


class Evaluator:
    """``evaluate(state) -> {test_loss, test_accuracy, train_loss, train_accuracy}`` (`make_evaluator`): the jitted
    chunk function, the shared input passed as an argument (never folded into the program as a constant).
    ``compile_time`` counts the first call at each chunk shape: its compilation plus that one chunk's evaluation (an
    ahead-of-time compile cannot run under the MPI runtime: mpi4jax's ordered effects add a token argument)."""

    def __init__(self, chunk: Callable, splits: dict[str, list], shared: Any):
        self.chunk, self.splits, self.shared = chunk, splits, shared
        self.seen: set = set()
        self.compile_time = 0.0

    def _scores(self, state: TrainState, x, y):
        args = (state.params, state.model_state, x, y, self.shared)
        key = (x.shape, y.shape)  # the state's and the shared input's shapes are the run's, fixed
        if key in self.seen:
            return self.chunk(*args)
        t = time.perf_counter()
        out = jax.block_until_ready(self.chunk(*args))
        self.compile_time += time.perf_counter() - t
        self.seen.add(key)
        return out

    def __call__(self, state: TrainState) -> dict[str, float]:
        out = {}
        for split, chunks in self.splits.items():
            results = jax.device_get([(self._scores(state, x, y), n) for x, y, n in chunks])
            total = sum(n for _, n in results)
            out[f"{split}_loss"] = float(sum(float(l) * n for (l, _), n in results) / total)
            means = {name: float(sum(float(aux[name]) * n for (_, aux), n in results) / total)
                     for name in results[0][0][1]}  # every metric, example-weighted: "accuracy" first
            out.update({f"{split}_{name}": v for name, v in contract.ratios(means).items()})  # PSP@k's parts
        return out


def _small_split_note(task: Task, small: dict[str, int]) -> str:
    """The warning for splits evaluated as one batch smaller than ``task.min_eval_batch`` (`make_evaluator`)."""
    fix = contract.batch_statistics_fix(task.module)
    splits = " and ".join(f"the {split} split ({n} examples)" for split, n in small.items())
    return (f"note: {splits} evaluated as one batch, smaller than the {task.min_eval_batch} examples "
            f"{type(task.module).__name__} should be evaluated in: it normalises with the batch's statistics at test "
            f"time, so the score depends on the batch (docs/your_data.md)"
            + (f"; without that: {', '.join(f'model.{k}={v!r}' for k, v in fix.items())}." if fix else "."))


# ----------------------------------------------------------------------------------------------------------------
# Workdir and signals
# ----------------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _stop_on_signals(log: Callable[[str], None]):
    """Yields a dict whose ``"signum"`` is set by the first SIGINT/SIGTERM; a second one aborts at once. SIGUSR1
    prints every thread's Python stack to stderr and training goes on (`faulthandler`): where a run that seems
    stuck is (``kill -USR1 <pid>``; `experiments.network.slow_net` sends it to a job that runs past its timeout)."""
    flag: dict[str, Optional[int]] = {"signum": None}
    if threading.current_thread() is not threading.main_thread():
        yield flag  # signal handlers can only be installed from the main thread
        return
    dumps = hasattr(signal, "SIGUSR1")
    try:
        if dumps:
            faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (AttributeError, ValueError, OSError):  # stderr without a file descriptor (a notebook, captured output)
        dumps = False

    def handler(signum, frame):
        if flag["signum"] is not None:
            raise KeyboardInterrupt(f"second signal {signal.Signals(signum).name}: aborting without checkpoint")
        flag["signum"] = signum
        log(f"\n{signal.Signals(signum).name} received: checkpointing at the end of this round, then stopping "
            f"(send it again to abort without a checkpoint).")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        if dumps:
            faulthandler.unregister(signal.SIGUSR1)


def _round_bytes(metrics: dict, algorithm: Algorithm) -> tuple[float, float]:
    """Per-worker (sent, received) bytes of one round: measured by the runtime when it reports them, else
    analytic. A measured value may be a scalar (per worker) or a `[W]` vector (each worker's); vectors are
    averaged."""
    def per_worker(key, analytic):
        if key not in metrics:
            return float(analytic)
        return float(np.mean(np.asarray(metrics[key], np.float64)))

    return (per_worker("measured_bytes_sent", algorithm.comm.sent),
            per_worker("measured_bytes_received", algorithm.comm.received))


# ----------------------------------------------------------------------------------------------------------------
# The driver's steps
# ----------------------------------------------------------------------------------------------------------------


class _SplitWindow:
    """The round's loss split (`istjax.algorithms.base.loss_split`) averaged over the rounds since the last
    record: one batch per worker a round is noisy; the record carries the mean and ``split_rounds``, how many. The
    window is part of a checkpoint's meta (`meta`), so a run stopped between two records and resumed averages the
    same rounds as one that was never stopped."""

    def __init__(self, sums: Optional[dict[str, float]] = None, rounds: int = 0):
        self.sums: dict[str, float] = dict(sums or {})
        self.rounds = int(rounds)

    def add(self, metrics: dict) -> None:
        got = {k: float(metrics[k]) for k in SPLIT if k in metrics}
        if got:
            self.rounds += 1
            for k, v in got.items():
                self.sums[k] = self.sums.get(k, 0.0) + v

    def take(self) -> dict[str, float]:
        out = {k: v / self.rounds for k, v in self.sums.items()}
        if out:
            out["split_rounds"] = self.rounds
        self.sums, self.rounds = {}, 0
        return out

    def meta(self) -> dict[str, Any]:
        return {"sums": dict(self.sums), "rounds": self.rounds}


@dataclasses.dataclass
class Run:
    """Everything one training run holds between its steps."""

    config: ml_collections.ConfigDict
    config_dict: dict
    workdir: pathlib.Path
    dataset: data_lib.Dataset
    task: Task
    algorithm: Algorithm
    batch_fn: data_lib.BatchFn
    checkpointer: Checkpointer
    log: Callable[[str], None]
    # Counters carried across a resume (checkpoint meta).
    wall: float = 0.0
    bytes_total: float = 0.0
    compile_time: Optional[float] = None
    split: _SplitWindow = dataclasses.field(default_factory=_SplitWindow)  # the loss split since the last record
    restored_from: Optional[pathlib.Path] = None  # the checkpoint the run resumed from
    claim: Optional[workdir_lib.Claim] = None  # the workdir's lock, held by the writing process
    overwrite: bool = False  # `begin` deletes the previous run
    began: bool = False  # `begin` has written the run into its workdir

    def save(self, state: TrainState) -> None:
        """Checkpoints the state: the whole state on the primary process, or every rank's shard where the runtime
        keeps the state sharded (no rank gathers the model). Every process must call this."""
        meta = {"wall_time_s": self.wall, "bytes_total": self.bytes_total, "config": self.config_dict,
                "split_window": self.split.meta()}
        try:
            if not self.algorithm.runtime.whole_state:
                self.checkpointer.save(state, meta)
                return
            whole = self.algorithm.runtime.gather(state)
            if whole is not None:
                self.checkpointer.save(whole, meta)
        except CheckpointWriteError as e:
            raise EnvironmentFailure(str(e)) from e

    def begin(self) -> None:
        """Writes the run into its workdir once every check has passed: ``overwrite`` deletes the previous run
        (naming its checkpoints), then ``config.json``. Every process must call this."""
        if is_primary():
            if self.overwrite:
                workdir_lib.clear_run(self.workdir, self.checkpointer.steps(), self.log)
            write_atomic(self.workdir / "config.json", json.dumps(self.config_dict, indent=2, sort_keys=True) + "\n")
        self.algorithm.runtime.agree(0)  # every process waits until the primary has written the workdir
        if self.overwrite:  # a checkpointer on what the primary deleted
            self.checkpointer.close()
            self.checkpointer = _checkpointer(self.checkpointer.directory, self.algorithm.runtime,
                                              int(self.config.max_to_keep))
        self.began = True

    def close(self) -> None:
        """Closes the checkpointer and lets the next run into the workdir; a run refused before `begin` leaves the
        workdir as it found it (`istjax.launch.workdir.Claim.roll_back`)."""
        self.checkpointer.close()
        if self.claim is not None:
            self.claim.release() if self.began else self.claim.roll_back()


def open_run(config: ml_collections.ConfigDict, workdir: str | pathlib.Path, *, resume: bool,
             overwrite: bool) -> Run:
    """Validates the config, claims the workdir, builds everything and checks the workdir, writing nothing (step 1;
    `Run.begin` writes). The returned run holds the workdir's lock until `Run.close`, which rolls the claim back
    when the run never began."""
    if resume and overwrite:
        raise ConfigError(["resume=True and overwrite=True contradict each other; pass one of them."])
    workdir = workdir_lib.named(workdir)
    experiment = build(config)
    claim, refusal = workdir_lib.claim(workdir) if is_primary() else (None, None)
    try:
        run = _start_run(experiment, workdir, refusal, resume=resume, overwrite=overwrite)
    except BaseException:
        if claim is not None:
            claim.roll_back()
        raise
    run.claim = claim
    return run


def _start_run(experiment: Experiment, workdir: pathlib.Path, refusal: Optional[Exception], *, resume: bool,
               overwrite: bool) -> Run:
    """The run of the built ``experiment`` once every process knows whether the primary claimed the workdir;
    checks it (`istjax.launch.workdir.check_run`)."""
    config, dataset, task, algorithm, batch_fn = experiment
    if algorithm.runtime.agree(int(refusal is not None)):  # every process stops when the primary was refused
        raise refusal or ConfigError([f"workdir={str(workdir)!r}: the primary process refused it."])
    config_dict = config_lib.to_dict(config)
    workdir_lib.check_run(workdir, config_dict, resume=resume, overwrite=overwrite)
    primary = is_primary()

    def log(msg: str) -> None:
        if primary:
            print(msg, file=sys.stderr, flush=True)

    checkpointer = _checkpointer(workdir / "checkpoints", algorithm.runtime, int(config.max_to_keep))
    return Run(config, config_dict, workdir, dataset, task, algorithm, batch_fn, checkpointer, log,
               overwrite=overwrite)


def _checkpointer(directory: pathlib.Path, runtime, max_to_keep: int):
    """The whole state, written by the primary process; or, for a runtime that keeps the state sharded, every
    rank's shard, committed when all have written (`istjax.launch.checkpoint.ShardedCheckpointer`)."""
    if runtime.whole_state:
        return Checkpointer(directory, max_to_keep=max_to_keep, enabled=is_primary())
    return ShardedCheckpointer(directory, rank=runtime.rank, size=runtime.size, max_to_keep=max_to_keep,
                               agree_all=lambda ok: runtime.agree(0 if ok else 1) == 0)


def _keep_local(state: TrainState, restored: TrainState) -> TrainState:
    """What this process keeps of a restored whole state: all of it where the runtime holds the whole state here;
    only the key and round where it holds no parameters (an MPI parameter-server worker rank)."""
    if jax.tree.leaves(state.params):
        return restored
    return state._replace(key=restored.key, round=restored.round)


def initial_state(run: Run, *, resume: bool) -> TrainState:
    """Fresh from the seed, or the newest checkpoint that restores (step 2)."""
    alg = run.algorithm
    key = jax.random.key(int(run.config.seed))
    state = alg.init(key)
    try:
        if run.overwrite:  # the previous run's checkpoints are deleted by `Run.begin`
            restored = None
        elif alg.runtime.whole_state:
            like = jax.jit(whole_state_init(alg))(key)  # the layout
            restored = run.checkpointer.restore_latest(like, log=run.log)
            del like
        else:  # this rank's shard is the layout of its part of a sharded checkpoint
            restored = run.checkpointer.restore_latest(state, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    except ShardCountMismatch as e:
        raise ConfigError([str(e)]) from e
    except CheckpointMismatch as e:  # a config problem: the checkpoint stays
        raise workdir_lib.mismatch_refusal(e, run.config_dict, run.workdir) from None
    if restored is not None:
        saved, meta, step = restored
        state = _keep_local(state, saved) if alg.runtime.whole_state else saved
        run.wall, run.bytes_total = float(meta.get("wall_time_s", 0.0)), float(meta.get("bytes_total", 0.0))
        window = meta.get("split_window") or {}  # absent from checkpoints written before it
        run.split = _SplitWindow(window.get("sums"), window.get("rounds", 0))
        run.restored_from = run.checkpointer.directory / str(step)
        run.log(f"Resuming from {run.restored_from} (round {step}); it verified against its digests.")
    elif resume:
        raise ConfigError([f"resume=True but workdir={str(run.workdir)!r} holds no usable checkpoint. Drop --resume, "
                           f"or pass --overwrite to start over."])
    return state


def check_memory_cap(run: Run) -> None:
    """Refuses a run whose ranks would not fit ``runtime.memory_limit`` (`ConfigError` on every process, naming each
    rank over the cap with its predicted and allowed bytes), before any state is allocated.

    Each rank predicts its own share (`istjax.core.memory.predict`): the process as it is now (interpreter, JAX, the
    data, the compiled step), the state its runtime gives it (`jax.eval_shape` of its ``init``: a sharded rank's slice, nothing on a
    parameter-server worker rank), and, where the round is one fused step, that step compiled on those shapes and
    its memory analysis (one extra compilation, paid only with a cap set), or the runtime's own estimate of a
    round of several device steps (`RuntimeHandle.round_memory`). The ranks share their verdicts, so all stop
    together. A no-op without a cap."""
    limit = memory_lib.parse_bytes(run.config.runtime.memory_limit)
    if not limit:
        return
    alg, handle = run.algorithm, run.algorithm.runtime
    held = jax.eval_shape(alg.init, jax.random.key(int(run.config.seed)))
    memory = round_bytes = None
    if handle.fusable:
        step = make_train_step(alg, run.batch_fn, fuse=True)
        memory = step.lower(held, step_inputs(run)).compile().memory_analysis()
    elif handle.round_memory is not None:  # a round of several device steps around MPI calls: its own estimate
        batches = jax.eval_shape(run.batch_fn.apply, run.batch_fn.data, held.round)
        round_bytes = handle.round_memory(held, batches, run.dataset.shared)
    # Measured after the compilation: XLA keeps ~120 MiB of it resident (tiny digits MLP: 370 MiB after the build,
    # 489 after compiling the step, 525 after a round, 536 after an evaluation), and still before any state.
    baseline = max(memory_lib.resident_bytes(), memory_lib.BARE_JAX_BYTES)
    what = f"rank {handle.rank} of {handle.size}" if handle.size > 1 else "this process"
    collector = Collector(run.config)
    predicted = memory_lib.predict(held, memory, baseline=baseline, round_bytes=round_bytes)
    collector.step(lambda: memory_lib.check_memory(predicted, limit, what=what),
                   {"memory_limit": "runtime.memory_limit"}, "")
    problems = [p for rank_problems in handle.allgather(collector.problems) for p in rank_problems]
    if problems:
        raise ConfigError(problems)


def compile_step(run: Run, state: TrainState) -> Callable:
    """The round step, fused with the batch draw and compiled ahead of time where the runtime allows, else compiled
    by a warm-up round whose result is dropped (step 3); ``run.compile_time`` is the time either took."""
    alg, inputs = run.algorithm, step_inputs(run)
    if not alg.runtime.fusable:  # its round exchanges buffers between device steps: compiled in the first round
        step = make_train_step(alg, run.batch_fn, fuse=False)
        # A warm-up round, run once and thrown away (the round is pure in the state; every rank runs it, so the
        # collectives match): it compiles every piece, so that no round's time counts compilation.
        # ``compile_time_s`` is its time: compilation plus one round's work.
        t = time.perf_counter()
        jax.block_until_ready(step(state, inputs))
        run.compile_time = time.perf_counter() - t
        return step
    t = time.perf_counter()
    step = make_train_step(alg, run.batch_fn, fuse=True).lower(state, inputs).compile()
    run.compile_time = time.perf_counter() - t
    return step


def _check_finite(run: Run, state: TrainState, metrics: dict, r: int) -> None:
    """Raises `TrainingError` (after checkpointing the last good state) when round ``r + 1`` diverged."""
    worker_loss = np.asarray(metrics["worker_loss"])
    if np.all(np.isfinite(worker_loss)) and np.isfinite(metrics["train_loss"]):
        return
    bad = [int(w) for w in np.flatnonzero(~np.isfinite(worker_loss))]
    n, w = int(run.config.num_rounds), int(run.config.num_workers)
    if run.restored_from is not None and r == int(run.restored_from.name):
        raise TrainingError(f"non-finite loss in round {r + 1} of {n}, the first round after restoring checkpoint "
                            f"{run.restored_from} (worker losses: {worker_loss.tolist()}). That checkpoint verified "
                            f"against its digests, so it holds what was saved: the state was already unstable when "
                            f"it was written. Evaluate it with `istjax eval --workdir={run.workdir}` or restart from "
                            f"an earlier one (move the newer checkpoints aside).")
    run.save(state)  # the last good state (a no-op if already checkpointed)
    kept = f"The last good state (after round {r}) is checkpointed in {run.checkpointer.directory}. "
    raise TrainingError(f"non-finite loss in round {r + 1} of {n} at worker(s) {bad} of {w} (worker losses: "
                        f"{worker_loss.tolist()}); stopping. {kept}Lower learning_rate={run.config.learning_rate}, "
                        f"or check the data.")


def _evaluated(run: Run, state: TrainState, evaluate) -> Optional[dict]:
    """``evaluate`` of the whole model on the primary process (None elsewhere); every process must call it. A
    runtime that evaluates a sharded state in place (`RuntimeHandle.evaluate`) has every process evaluate its part
    and gathers nothing; otherwise the state is gathered to the primary, which evaluates it."""
    handle = run.algorithm.runtime
    if handle.evaluate is not None:
        results = evaluate(state)  # collective: the partial sums are reduced across the processes
        return results if is_primary() else None
    whole = handle.gather(state)
    return None if whole is None else evaluate(whole)


def _record(run: Run, state: TrainState, metrics: dict, done: int, evaluate) -> Optional[dict]:
    """The evaluation record after round ``done`` (every process takes part; the primary's is the record)."""
    c = run.config
    W, K, B = int(c.num_workers), int(c.local_steps), step_examples(c)
    results = _evaluated(run, state, evaluate)
    if results is None:
        return None
    sent, received = _round_bytes(metrics, run.algorithm)
    return {"round": done, "step": done * K, "samples_seen": done * W * K * B, "wall_time_s": run.wall,
            **results, "round_loss": float(metrics["train_loss"]),
            "round_accuracy": float(metrics.get("train_accuracy", float("nan"))),
            "bytes_sent_per_worker": sent, "bytes_received_per_worker": received,
            "bytes_total": run.bytes_total, "algorithm": run.algorithm.name, "num_workers": W}


def train_loop(run: Run, state: TrainState, step_fn: Callable, evaluate, records: list[dict]) -> TrainState:
    """Rounds from ``state.round`` to ``num_rounds``: evaluate, record, checkpoint, stop on signals (step 4)."""
    from tqdm.auto import tqdm

    c, alg = run.config, run.algorithm
    start, n, w = int(jax.device_get(state.round)), int(c.num_rounds), int(c.num_workers)
    writer = MetricWriter(run.workdir, enabled=is_primary(), purge_step=start + 1 if start else None)
    bar = tqdm(total=n, initial=start, unit="round", dynamic_ncols=True, file=sys.stderr,
               disable=not (is_primary() and c.progress), desc=f"{alg.name} W={w}")
    inputs = step_inputs(run)
    split = run.split
    try:
        with _stop_on_signals(run.log) as stop:
            for r in range(start, n):
                t0 = time.perf_counter()
                new_state, metrics = step_fn(state, inputs)
                metrics = jax.device_get(metrics)
                run.wall += time.perf_counter() - t0
                _check_finite(run, state, metrics, r)
                state = new_state
                split.add(metrics)
                sent, received = _round_bytes(metrics, alg)
                run.bytes_total += w * (sent + received)
                done = r + 1
                postfix = {"loss": f"{float(metrics['train_loss']):.4f}"}
                record = None
                if done % int(c.eval_every) == 0 or done == n:
                    record = _record(run, state, metrics, done, evaluate)
                    window = split.take()
                    if record is not None:
                        record.update(window)
                        records.append(record)
                        writer.write(record)
                        postfix["test_acc"] = f"{record['test_accuracy']:.4f}"
                bar.set_postfix(postfix, refresh=False)
                bar.update(1)
                # Every process takes the same decision (the primary evaluated; agree shares its answer).
                reached = c.stop_at_target and alg.runtime.agree(int(_reached(record, c.target_accuracy)))
                if done % int(c.checkpoint_every) == 0 or done == n or reached:
                    run.save(state)
                if reached:
                    run.log(f"reached test accuracy {c.target_accuracy} at round {done}; stopping "
                            f"(stop_at_target).")
                    break
                signum = alg.runtime.agree(stop["signum"] or 0) or None
                if signum is not None:
                    run.save(state)
                    where = (f"checkpoint in {run.checkpointer.directory / str(done)}. Continue with the same command "
                             f"(or --resume).")
                    raise Interrupted(signum, f"{signal.Signals(signum).name}: stopped after round {done} of {n}; "
                                              f"{where}")
    finally:
        bar.close()
        writer.close()
    return state


def _reached(record: Optional[dict], target: Optional[float]) -> bool:
    return record is not None and target is not None and (record.get("test_accuracy") or 0.0) >= target


def finish(run: Run, state: TrainState, records: list[dict], evaluate, start: int) -> dict[str, Any]:
    """Evaluates a run that had nothing left to train, writes and prints the summary (step 5)."""
    # The same decision on every process, since evaluating is collective under MPI.
    results = _evaluated(run, state, evaluate) if start >= int(run.config.num_rounds) else None
    if is_primary() and results is not None:
        records.append({"round": start, **results})
    peak_rss = run.algorithm.runtime.allgather(peak_rss_mib())  # collective: every process, in rank order
    if not is_primary():
        return {"workdir": str(run.workdir), "rounds": max(start, int(run.config.num_rounds)), "primary": False}
    summary = _summary(run.config, run.algorithm, records, run.workdir, compile_time=run.compile_time,
                       wall=run.wall, bytes_total=run.bytes_total)
    summary["peak_rss_mib_per_process"] = peak_rss
    # What the summary calls its metrics: the data's (text: validation nats/char), else the task's (XMC: P@1, PSP@k).
    summary["metric_labels"] = metric_labels(run.dataset) or dict(run.task.summary_metrics) or None
    summary["eval_compile_time_s"] = getattr(evaluate, "compile_time", None)  # compile_time_s is the step's
    write_atomic(run.workdir / "summary.json", json.dumps(summary, indent=2) + "\n")
    print(_summary_text(summary), flush=True)
    return summary


def restore_run(workdir: str | pathlib.Path, *, checkpoint: Optional[int] = None,
                model_module: Optional[str] = None):
    """A saved run rebuilt on one process: ``(config, experiment, state, step)`` from its own config and its newest
    checkpoint that verifies (or step ``checkpoint``). ``model_module`` names the model's class for a run whose
    config does not record ``model.module``.

    Raises:
      ConfigError: no run in ``workdir``, or no usable checkpoint (naming what was found).
    """
    workdir = pathlib.Path(workdir).absolute()
    config = config_lib.load_run_config(workdir)
    # The state is whole in a checkpoint; evaluation needs no workers: the default runtime, with none of the run's
    # runtime options (the MPI mode it trained in).
    config.runtime = config_lib.default_config().runtime
    if model_module:
        with config.model.unlocked():
            config.model.module = model_module
    experiment = build(config)
    task, algorithm = experiment.task, experiment.algorithm
    like = jax.jit(whole_state_init(algorithm))(jax.random.key(int(config.seed)))
    recorded = config_lib.to_dict(config_lib.load_run_config(workdir))  # with the run's own runtime
    with Checkpointer(workdir / "checkpoints", enabled=False) as ckpt, _refused_mismatch(recorded, workdir):
        steps = ckpt.steps()
        if not steps:
            raise ConfigError([f"workdir={str(workdir)!r} holds no checkpoint to evaluate."])
        if checkpoint is None:
            restored = ckpt.restore_latest(like)
            if restored is None:
                raise ConfigError([f"no checkpoint in {ckpt.directory} verifies (steps {steps})."])
            state, _, step = restored
        elif checkpoint not in steps:
            raise ConfigError([f"checkpoint={checkpoint}: {ckpt.directory} holds steps {steps}; pick one of them."])
        else:
            try:
                state, _ = ckpt.restore(checkpoint, like)
            except CheckpointMismatch:
                raise  # a config problem (`_refused_mismatch`), not damage
            except Exception as e:  # noqa: BLE001 - damaged or unverified: say which and why, in one line
                raise ConfigError([f"checkpoint {ckpt.directory / str(checkpoint)} does not restore or verify "
                                   f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})."]) from e
            step = checkpoint
    return config, experiment, state, step


@contextlib.contextmanager
def _refused_mismatch(config_dict: dict, workdir: pathlib.Path):
    """A checkpoint that does not fit the run's config, refused as a config problem (`restore_run`)."""
    try:
        yield
    except CheckpointMismatch as e:
        raise workdir_lib.mismatch_refusal(e, config_dict, workdir) from None


def evaluate_run(workdir: str | pathlib.Path, *, checkpoint: Optional[int] = None,
                 model_module: Optional[str] = None) -> dict[str, Any]:
    """Evaluates a saved run without training (`restore_run`): its own config, its newest checkpoint that verifies
    (or step ``checkpoint``), on one process. Returns ``{"round", "checkpoint", test/train loss and accuracy}``.

    Raises:
      ConfigError: no run in ``workdir``, or no usable checkpoint (naming what was found).
    """
    workdir = pathlib.Path(workdir).absolute()
    config, experiment, state, step = restore_run(workdir, checkpoint=checkpoint, model_module=model_module)
    evaluate = make_evaluator(experiment.task, experiment.dataset, batch_size=int(config.eval_batch_size),
                              train_examples=int(config.eval_train_examples))
    return {"round": int(jax.device_get(state.round)), "checkpoint": str(workdir / "checkpoints" / str(step)),
            **evaluate(state)}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | pathlib.Path, *, resume: bool = False,
                       overwrite: bool = False) -> dict[str, Any]:
    """Trains the study ``config`` describes, recording everything in ``workdir``; returns the summary.

    Args:
      config: a config (start from `istjax.launch.config.default_config()`; see its fields there).
      workdir: the run directory: ``config.json``, ``metrics.jsonl``, ``tensorboard/``, ``checkpoints/``,
        ``summary.json``.
      resume: continue the run in ``workdir`` (allows new run-control values such as a larger ``num_rounds``).
        A workdir holding a checkpoint of exactly this config is resumed without it.
      overwrite: delete the run in ``workdir`` first.

    Returns:
      The summary: final metrics (``test_accuracy``, ``test_loss``, ``train_loss``, ...), ``samples_seen``,
      ``time_per_round_s``, ``compile_time_s``, bytes per worker per round, time/samples to
      ``target_accuracy`` when set, and ``workdir``.

    Raises:
      ConfigError: a bad config or workdir (before anything is compiled).
      TrainingError: a non-finite loss.
      Interrupted: SIGINT/SIGTERM (after checkpointing).
    """
    run = open_run(config, workdir, resume=resume, overwrite=overwrite)
    try:
        evaluate = make_evaluator(run.task, run.dataset, batch_size=int(config.eval_batch_size),
                                  evaluate_fn=run.algorithm.runtime.evaluate,
                                  train_examples=int(config.eval_train_examples), log=run.log)
        check_memory_cap(run)  # before any state exists: a model over the cap is refused, not killed by the OS
        state = initial_state(run, resume=resume)
        run.begin()  # every check has passed: only now is the workdir written
        start = int(jax.device_get(state.round))
        records: list[dict] = []
        if is_primary():
            truncate_metrics(run.workdir / "metrics.jsonl", start)
            if (run.workdir / "metrics.jsonl").exists():
                records = read_metrics(run.workdir / "metrics.jsonl")
        step_fn = compile_step(run, state) if start < int(config.num_rounds) else None
        state = train_loop(run, state, step_fn, evaluate, records)
        return finish(run, state, records, evaluate, start)
    finally:
        run.close()


def _summary(config, algorithm: Algorithm, records: list[dict], workdir: pathlib.Path, *, compile_time: float,
             wall: float, bytes_total: float) -> dict[str, Any]:
    last = records[-1]
    rounds = int(last["round"])
    W, K, B = int(config.num_workers), int(config.local_steps), step_examples(config)
    out = {
        "name": config.name, "algorithm": algorithm.name, "dataset": config.data.name, "num_workers": W,
        "local_steps": K, "batch_size": B, "rounds": rounds, "samples_seen": rounds * W * K * B,
        "graph_batches": config.data.graph_batches, "runtime": config.runtime.name,
        "runtime_mode": config.runtime.mode if algorithm.runtime.size > 1 else None,
        "num_processes": int(algorithm.runtime.size),
        **dict.fromkeys(("test_accuracy", "test_loss", "train_loss", "train_accuracy")),
        **{k: v for k, v in last.items() if k.startswith(("test_", "train_"))},  # every metric the evaluation gave
        "wall_time_s": wall, "time_per_round_s": wall / rounds if rounds else float("nan"),
        "compile_time_s": compile_time,
        "bytes_sent_per_worker_per_round": last.get("bytes_sent_per_worker", float(algorithm.comm.sent)),
        "bytes_received_per_worker_per_round": last.get("bytes_received_per_worker",
                                                        float(algorithm.comm.received)),
        **{k: last[k] for k in SPLIT if k in last},  # the last window's loss split
        "bytes_total": bytes_total, "workdir": str(workdir),
        "code": provenance.code_version(), "machine": provenance.machine(),  # what trained it, as it trained
    }
    if (target := config.target_accuracy) is not None:  # only a config that sets a target has one
        hit = next((r for r in records if (r.get("test_accuracy") or 0.0) >= target and "wall_time_s" in r), None)
        out.update(target_accuracy=target, round_to_target=hit and hit["round"],
                   samples_to_target=hit and hit["samples_seen"], time_to_target_s=hit and hit["wall_time_s"])
    return out


def _runtime_text(s: dict[str, Any]) -> str:
    """``simulate, 1 process`` / ``mpi (sharded), 2 processes``, from a summary (older ones lack the fields)."""
    n = s.get("num_processes", 1)
    mode = f" ({s['runtime_mode']})" if s.get("runtime_mode") else ""
    return f"{s.get('runtime', 'simulate')}{mode}, {n} process{'es' if n != 1 else ''}"


def _summary_text(s: dict[str, Any]) -> str:
    lines = [
        f"Finished {s['rounds']} rounds of {s['algorithm']} on {s['dataset']} (W={s['num_workers']}, "
        f"K={s['local_steps']}, " + (f"{s['batch_size']} cluster(s) per step)." if s.get("graph_batches") == CLUSTERS
                                      else f"B={s['batch_size']})."),
        f"  runtime {_runtime_text(s)}",
        f"  {metrics_text(s)}",
        f"  samples seen {s['samples_seen']:,}; {1000 * s['time_per_round_s']:.1f} ms per round "
        f"(training {s['wall_time_s']:.1f} s, "
        + ("compilation included in the first round" if s["compile_time_s"] is None
           else f"compiling the step {s['compile_time_s']:.1f} s")
        + (f", the evaluation {s['eval_compile_time_s']:.1f} s)" if s.get("eval_compile_time_s") is not None
           else ")"),
        f"  per worker per round: received {format_bytes(s['bytes_received_per_worker_per_round'])}, sent "
        f"{format_bytes(s['bytes_sent_per_worker_per_round'])}; all workers so far {format_bytes(s['bytes_total'])}",
    ]
    if s.get("target_accuracy") is not None:  # named as the task names its accuracy (XMC: test P@1)
        what = f"{(s.get('metric_labels') or {}).get('test_accuracy', 'test accuracy')} {s['target_accuracy']}"
        lines.append(f"  {what} not reached" if s["round_to_target"] is None else
                     f"  reached {what} at round {s['round_to_target']} ({s['samples_to_target']:,} samples, "
                     f"{s['time_to_target_s']:.1f} s of training)")
    if s.get("peak_rss_mib_per_process"):
        per = s["peak_rss_mib_per_process"]
        lines.append(f"  peak resident memory {max(per):,.0f} MiB" + (
            f" (per process, rank 0 first: {', '.join(f'{m:,.0f}' for m in per)})" if len(per) > 1 else ""))
    lines.append(f"  results: {s['workdir']} (metrics.jsonl, summary.json, tensorboard/, checkpoints/); plot with "
                 f"`istjax plot {s['workdir']}`")
    return "\n".join(lines)
