"""The training loop (`train_loop`): rounds under a progress bar from the state's round to ``num_rounds``. Every
``eval_every`` rounds (and after the last) the global model is evaluated (`evaluated`) and a record written to
``metrics.jsonl`` and TensorBoard; every ``checkpoint_every`` rounds, at the end, on reaching the target and on a
signal the state is checkpointed. With ``stop_at_target`` the run ends after the first evaluation that reaches the
config's target (`istjax.launch.config.target.reached`: test accuracy at or above ``target_accuracy``, or test loss
at or below ``target_loss``), every process agreeing. A non-finite loss stops the run (`TrainingError`, after
checkpointing the last good state); SIGINT/SIGTERM checkpoint the finished round and raise `Interrupted`.
"""

from __future__ import annotations

import contextlib
import faulthandler
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Optional

import jax
import numpy as np

from istjax.algorithms.base import Algorithm
from istjax.core.process import process_index
from istjax.core.state import TrainState
from istjax.launch.config import target
from istjax.launch.metrics import MetricWriter, is_primary
from istjax.launch.run import Run, step_inputs
from istjax.launch.summary import round_shape

__all__ = ["Interrupted", "TrainingError", "evaluated", "split_due", "train_loop"]


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


def evaluated(run: Run, state: TrainState, evaluate) -> Optional[dict]:
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
    W, K, B = round_shape(c, run.clients)
    results = evaluated(run, state, evaluate)
    if results is None:
        return None
    sent, received = _round_bytes(metrics, run.algorithm)
    return {"round": done, "step": done * K, "samples_seen": done * W * K * B, "wall_time_s": run.wall,
            **results, "round_loss": float(metrics["train_loss"]),
            "round_accuracy": float(metrics.get("train_accuracy", float("nan"))),
            "bytes_sent_per_worker": sent, "bytes_received_per_worker": received,
            "bytes_total": run.bytes_total, "algorithm": run.algorithm.name, "num_workers": W}


def split_due(config, done: int, evaluating: bool) -> bool:
    """Whether round ``done`` (1-based) computes the loss split (`istjax.algorithms.base.loss_split`: forward passes
    of every worker's and the merged model on the round's last batches, a fifth of a small model's round): with
    ``runtime.loss_split``, on the evaluation rounds (``evaluating``), and with ``loss_split_every`` = n > 0 on
    every n-th round too, the record averaging those since the last one."""
    every = int(config.loss_split_every)
    return bool(config.runtime.loss_split) and (evaluating or (every > 0 and done % every == 0))


def straggler_delay(run: Run) -> float:
    """The seconds this process sleeps after a round per second the round took: ``slow_factor - 1`` on the process
    ``runtime.slow_rank`` (logged), 0 on every other (a rank the launch lacks is refused with the config)."""
    rank, factor = int(run.config.runtime.slow_rank), float(run.config.runtime.slow_factor)
    if rank < 0 or factor <= 1 or process_index() != rank:
        return 0.0
    print(f"istjax: process {rank} is the straggler: each of its rounds made {factor:g}x as long "
          f"(runtime.slow_factor).", file=sys.stderr, flush=True)
    return factor - 1.0


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
    slower = straggler_delay(run)
    try:
        with _stop_on_signals(run.log) as stop:
            for r in range(start, n):
                done = r + 1
                evaluating = done % int(c.eval_every) == 0 or done == n
                due = split_due(c, done, evaluating)
                t0 = time.perf_counter()
                new_state, metrics = step_fn(state, inputs, due)
                metrics = jax.device_get(metrics)
                if slower:  # the straggler: its round made slow_factor times as long
                    time.sleep(slower * (time.perf_counter() - t0))
                run.wall += time.perf_counter() - t0
                _check_finite(run, state, metrics, r)
                state = new_state
                split.add(metrics, due)
                sent, received = _round_bytes(metrics, alg)
                run.bytes_total += w * (sent + received)
                postfix = {"loss": f"{float(metrics['train_loss']):.4f}"}
                record = None
                if evaluating:
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
                reached = c.stop_at_target and alg.runtime.agree(int(target.reached(c, record)))
                if done % int(c.checkpoint_every) == 0 or done == n or reached:
                    run.save(state)
                if reached:
                    run.log(f"reached {target.target_of(c).words()} at round {done}; stopping (stop_at_target).")
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
