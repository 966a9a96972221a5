"""The training driver: ``train_and_evaluate(config, workdir)`` runs a study from a config and records it.

It reads as its steps, in order:

1. `open_run` (`istjax.launch.run`): `istjax.launch.config.validate` checks the whole config (every problem
   reported at once, before anything compiles) and loads the dataset; the writing process claims the workdir
   (`istjax.launch.workdir`: its lock, so a workdir another live run is writing is refused); `build` makes the task
   (the model named by ``config.model.name``, `istjax.models`), the optimizer, the algorithm bound to
   ``config.runtime.name`` and the batch function; the workdir is checked (a workdir holding another run's config is
   refused unless the differences are only in run-control fields and ``resume`` is set, or ``overwrite`` is set).
2. `check_memory_cap`, then `initial_state` (`istjax.launch.run`): fresh from ``seed``, or the newest good checkpoint
   (`istjax.launch.checkpoint`; one that does not fit the config is refused, never discarded), each process keeping
   what its runtime holds. Nothing has been written so far: a refusal rolls the claim back, leaving the workdir as
   it was; `Run.begin` then writes the run (``overwrite`` deletes the previous one, naming its checkpoints).
3. `compile_step`: one jitted function draws the round's batches on device (``make_batch_fn(...).apply(data,
   state.round)``, a pure function of seed and round) and runs the round, compiled ahead of the loop and timed
   apart from training (a runtime whose round is not traceable as a whole, such as MPI's, runs unfused).
4. `train_loop` (`istjax.launch.train_loop`): rounds under a tqdm bar. Every ``eval_every`` rounds (and after the
   last) the global model is evaluated (`istjax.launch.evaluator`) at full width in test mode
   (`istjax.Task.evaluate`: running statistics, test-time transforms) on the whole test set and on (a prefix of) the
   training set, and a record goes to ``metrics.jsonl`` and TensorBoard (schema: `istjax.launch.metrics`). Every
   ``checkpoint_every`` rounds, at the end, and on SIGINT/SIGTERM the whole state is checkpointed.
5. `finish`: a summary (`istjax.launch.summary`) is printed, written to ``summary.json`` and returned.

A saved run is rebuilt and evaluated without training by `istjax.launch.restore` (``istjax eval``).

Runtime differences (which process writes, gathering a state spread over processes, agreeing on a stop signal)
live behind the algorithm's `istjax.runtimes.RuntimeHandle`; the driver has no MPI branch.

Failures: a non-finite loss stops the run (`TrainingError`, naming the round and the worker) after checkpointing the
last good state; SIGINT/SIGTERM checkpoint the finished round and raise `Interrupted`. `istjax.launch.cli` maps
these to exit codes 2 (config), 1 (training failure), 130/143 (interrupted).
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Callable
from typing import Any

import jax
import ml_collections

import istjax.data as data_lib
from istjax.algorithms import ALGORITHMS
from istjax.algorithms.base import Algorithm
from istjax.core import memory as memory_lib
from istjax.core.state import TrainState
from istjax.data.text import metric_labels
from istjax.launch.config import ConfigError, build
from istjax.launch.config.collect import Collector
from istjax.launch.evaluator import Evaluator, make_evaluator
from istjax.launch.metrics import is_primary, peak_rss_mib, read_metrics, truncate_metrics, write_atomic
from istjax.launch.restore import evaluate_run, restore_run
from istjax.launch.run import Run, initial_state, open_run, step_inputs
from istjax.launch.summary import clients_text, run_summary, step_examples, summary_text
from istjax.launch.train_loop import Interrupted, TrainingError, evaluated, train_loop
from istjax.launch.workdir import RUN_FILES, EnvironmentFailure  # re-exported

__all__ = ["train_and_evaluate", "evaluate_run", "restore_run", "build", "make_train_step", "make_evaluator",
           "Evaluator", "TrainingError", "EnvironmentFailure", "Interrupted", "ConfigError", "RUN_FILES", "ALGORITHMS",
           "check_memory_cap", "compile_step", "step_examples"]


def make_train_step(algorithm: Algorithm, batch_fn: data_lib.BatchFn, *, fuse: bool = True) -> Callable:
    """``step(state, (data, shared), split) -> (state, metrics)``: draws round ``state.round``'s batches on device
    and runs it, with the round's loss split where ``split`` (a bool: `train_loop` asks on evaluation rounds).

    ``data`` is ``batch_fn.data`` and ``shared`` the dataset's shared input (a graph), both passed as arguments so
    that neither the training set nor the graph is baked into the program as a constant (XLA would fold it, seconds
    of compilation for a large graph). With ``fuse`` the batch gather and the round are one jitted function; without
    it (runtimes whose round is not traceable as a whole, e.g. ones that talk MPI between device steps) the batches
    come from ``batch_fn``'s own jitted gather and the round is called as the runtime built it (a batch function
    built for an MPI rank's workers, `own_rows`, draws only their rows). Either way no data passes through the host.
    Fused, ``split`` is an argument of the one compiled program (the split runs under `jax.lax.cond`:
    `istjax.runtimes.base.when_due`).
    """
    if fuse:
        @jax.jit
        def step(state: TrainState, inputs, split):
            data, shared = inputs
            return algorithm.round(state, batch_fn.apply(data, state.round), shared, split=split)

        return step

    def step_unfused(state: TrainState, inputs, split: bool = True):
        _, shared = inputs  # batch_fn closes over the same arrays
        return algorithm.round(state, batch_fn(state.round), shared, split=split)

    return step_unfused


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
        memory = step.lower(held, step_inputs(run), True).compile().memory_analysis()
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
        # collectives match): it compiles every piece, the loss split's too, so that no round's time counts
        # compilation.
        # ``compile_time_s`` is its time: compilation plus one round's work.
        t = time.perf_counter()
        jax.block_until_ready(step(state, inputs))
        run.compile_time = time.perf_counter() - t
        return step
    t = time.perf_counter()
    step = make_train_step(alg, run.batch_fn, fuse=True).lower(state, inputs, True).compile()
    run.compile_time = time.perf_counter() - t
    return step


def finish(run: Run, state: TrainState, records: list[dict], evaluate, start: int) -> dict[str, Any]:
    """Evaluates a run that had nothing left to train, writes and prints the summary (step 5)."""
    # The same decision on every process, since evaluating is collective under MPI.
    results = evaluated(run, state, evaluate) if start >= int(run.config.num_rounds) else None
    if is_primary() and results is not None:
        records.append({"round": start, **results})
    peak_rss = run.algorithm.runtime.allgather(peak_rss_mib())  # collective: every process, in rank order
    if not is_primary():
        return {"workdir": str(run.workdir), "rounds": max(start, int(run.config.num_rounds)), "primary": False}
    summary = run_summary(run.config, run.algorithm, records, run.workdir, compile_time=run.compile_time,
                       wall=run.wall, bytes_total=run.bytes_total, clients=run.clients)
    summary["peak_rss_mib_per_process"] = peak_rss
    # What the summary calls its metrics: the data's (text: validation nats/char), else the task's (XMC: P@1, PSP@k).
    summary["metric_labels"] = metric_labels(run.dataset) or dict(run.task.summary_metrics) or None
    summary["eval_compile_time_s"] = getattr(evaluate, "compile_time", None)  # compile_time_s is the step's
    write_atomic(run.workdir / "summary.json", json.dumps(summary, indent=2) + "\n")
    print(summary_text(summary), flush=True)
    return summary


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
      the target when the config sets one (``target_accuracy`` or ``target_loss``), and ``workdir``.

    Raises:
      ConfigError: a bad config or workdir (before anything is compiled).
      TrainingError: a non-finite loss.
      Interrupted: SIGINT/SIGTERM (after checkpointing).
    """
    run = open_run(config, workdir, resume=resume, overwrite=overwrite)
    try:
        evaluate = make_evaluator(run.task, run.dataset, batch_size=int(config.eval_batch_size),
                                  evaluate_fn=run.algorithm.runtime.evaluate,
                                  train_examples=int(config.eval_train_examples), log=run.log, drift=run.drift)
        check_memory_cap(run)  # before any state exists: a model over the cap is refused, not killed by the OS
        state = initial_state(run, resume=resume)
        run.begin()  # every check has passed: only now is the workdir written
        if run.clients is not None:  # a federated run: which clients, how many a round, their K
            run.log(clients_text(run.clients))
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
