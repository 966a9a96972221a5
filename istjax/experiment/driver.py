"""The training driver: ``train_and_evaluate(config, workdir)`` runs a study from a config and records it.

What a run does, in order:

1. `istjax.config.validate` checks the whole config (every problem reported at once, before anything compiles)
   and loads the dataset.
2. The workdir is checked: a workdir holding another run's config is refused unless the differences are only in
   run-control fields (``num_rounds``, ``eval_every``, ...) and ``resume`` is set, or ``overwrite`` is set. A workdir
   holding a checkpoint of the same config is resumed.
3. The model (`istjax.models.MLP`), task, optimizer and algorithm are built; the state is initialised from
   ``seed`` or restored from the newest good checkpoint (`istjax.checkpoint`).
4. Rounds run under a tqdm bar. One jitted function draws the round's batches on device
   (``make_batch_fn(...).apply(data, state.round)``, a pure function of seed and round) and runs the round, so there
   is no host round trip for data; it is compiled ahead of the loop, and compilation is timed apart from training
   (the MPI runtime, whose round exchanges buffers between device steps, runs unfused). Every ``eval_every``
   rounds (and after the last) the global model is evaluated at full width on the whole test set and on (a prefix
   of) the training set, and a record goes to ``metrics.jsonl`` and TensorBoard
   (schema: `istjax.metrics`). Every ``checkpoint_every`` rounds, at the end, and on SIGINT/SIGTERM the full state is
   checkpointed.
5. A summary is printed and written to ``summary.json``, and returned.

Failures: a non-finite loss stops the run (`TrainingError`, naming the round and the worker) after checkpointing the
last good state; SIGINT/SIGTERM checkpoint the finished round and raise `Interrupted`. `istjax.cli` maps these to
exit codes 2 (config), 1 (training failure), 130/143 (interrupted).

Only the primary process (`istjax.metrics.is_primary`) writes files or prints.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import shutil
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

import istjax.algorithms.base as algorithms
import istjax.experiment.config as config_lib
import istjax.data as data_lib
from istjax.algorithms.base import Algorithm, TrainState
from istjax.experiment.checkpoint import Checkpointer
from istjax.experiment.config import ConfigError
from istjax.experiment.metrics import MetricWriter, is_primary, read_metrics, truncate_metrics
from istjax.models import MLP
from istjax.core.task import Task, classifier

__all__ = ["train_and_evaluate", "build", "make_train_step", "make_evaluator", "TrainingError", "Interrupted",
           "ConfigError", "RUN_FILES"]

# What a run directory holds (removed by ``overwrite``).
RUN_FILES = ("config.json", "metrics.jsonl", "summary.json", "tensorboard", "checkpoints", "checkpoints_corrupt")


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


def build(config: ml_collections.ConfigDict, dataset: data_lib.Dataset) -> tuple[Task, Algorithm, data_lib.BatchFn]:
    """The task, algorithm and batch function a (validated) config describes.

    Errors the factories raise (they check their arguments before tracing) become `ConfigError`.
    """
    model = MLP(hidden=tuple(int(h) for h in config.model.hidden), num_classes=int(dataset.num_classes),
                batch_norm=bool(config.model.batch_norm), output_batch_norm=bool(config.model.output_batch_norm))
    try:
        task = classifier(model, jnp.asarray(dataset.train_x[:2]), MLP.rules(len(model.hidden)))
        optimizer = config_lib.make_optimizer(config)
        # The MPI runtime wraps an algorithm built for one process (see `_mpi_runtime`).
        backend = "simulate" if config.backend == "mpi" else config.backend
        common = dict(num_workers=int(config.num_workers), local_steps=int(config.local_steps), backend=backend)
        if config.algorithm == "ist":
            algorithm = algorithms.ist(task, optimizer, sampler=config_lib.make_sampler(config),
                                       optimizer_state=config.optimizer_state, **common)
        elif config.algorithm == "data_parallel":
            algorithm = algorithms.data_parallel(task, optimizer, **common)
        else:
            algorithm = algorithms.local_sgd(task, optimizer, optimizer_state=config.optimizer_state, **common)
        batch_fn = data_lib.make_batch_fn(dataset, num_workers=int(config.num_workers),
                                          local_steps=int(config.local_steps), batch_size=int(config.batch_size),
                                          seed=int(config.seed), sharding=config.sharding)
    except ValueError as e:
        raise ConfigError([str(e)]) from e
    return task, algorithm, batch_fn


def _mpi_runtime(config: ml_collections.ConfigDict, algorithm: Algorithm):
    """``backend="mpi"``: the algorithm's workers spread over the ``mpiexec`` processes (`istjax.distributed`)."""
    from istjax.runtimes.mpi import mpi_runtime

    try:
        return mpi_runtime(algorithm, mode=config.mpi_mode)
    except ValueError as e:
        raise ConfigError([f"backend='mpi', mpi_mode={config.mpi_mode!r}: {e}"]) from e


def _agree(signum: Optional[int], runtime) -> Optional[int]:
    """Under MPI every rank must stop after the same round: the largest pending signal number wins."""
    if runtime is None:
        return signum
    from mpi4py import MPI

    agreed = MPI.COMM_WORLD.allreduce(signum or 0, op=MPI.MAX)
    return agreed or None


def make_train_step(algorithm: Algorithm, batch_fn: data_lib.BatchFn, *, fuse: bool = True) -> Callable:
    """``step(state, data) -> (state, metrics)``: draws round ``state.round``'s batches on device and runs it.

    ``data`` is ``batch_fn.data`` (passed as an argument so the training set is not baked into the program). With
    ``fuse`` the batch gather and the round are one jitted function; without it (backends whose round is not
    traceable as a whole, e.g. ones that talk MPI between device steps) the batches come from ``batch_fn``'s own
    jitted gather and the round is called as the backend built it. Either way no data passes through the host.
    """
    if fuse:
        @jax.jit
        def step(state: TrainState, data):
            return algorithm.round(state, batch_fn.apply(data, state.round))

        return step

    def step_unfused(state: TrainState, data):
        del data  # batch_fn closes over the same arrays
        return algorithm.round(state, batch_fn(state.round))

    return step_unfused


def make_evaluator(task: Task, dataset: data_lib.Dataset, *, batch_size: int,
                   train_examples: int = 0) -> Callable[[Any], dict[str, float]]:
    """``evaluate(params) -> {test_loss, test_accuracy, train_loss, train_accuracy}`` of the full-width model.

    The test set is evaluated whole; the training set's first ``train_examples`` examples (0: all). Chunks of
    ``batch_size`` (`istjax.data.eval_batches`) are put on device once; results are example-weighted means. With
    batch-statistics BatchNorm a chunk's statistics are its own, so keep ``batch_size`` large.
    """
    loss_fn = task.loss_fn(None)

    @jax.jit
    def chunk(params, x, y):
        loss, aux = loss_fn(params, {"x": x, "y": y})
        return loss, aux["accuracy"]

    def put(x, y):
        return [(jnp.asarray(cx), jnp.asarray(cy), len(cy)) for cx, cy in data_lib.eval_batches(x, y, batch_size)]

    n_train = len(dataset.train_y) if train_examples in (0, None) else min(train_examples, len(dataset.train_y))
    splits = {"test": put(dataset.test_x, dataset.test_y),
              "train": put(dataset.train_x[:n_train], dataset.train_y[:n_train])}

    def evaluate(params) -> dict[str, float]:
        out = {}
        for split, chunks in splits.items():
            results = jax.device_get([(chunk(params, x, y), n) for x, y, n in chunks])
            total = sum(n for _, n in results)
            out[f"{split}_loss"] = float(sum(float(l) * n for (l, _), n in results) / total)
            out[f"{split}_accuracy"] = float(sum(float(a) * n for (_, a), n in results) / total)
        return out

    return evaluate


# ----------------------------------------------------------------------------------------------------------------
# Workdir and signals
# ----------------------------------------------------------------------------------------------------------------


def _prepare_workdir(workdir: pathlib.Path, config_dict: dict, *, resume: bool, overwrite: bool,
                     primary: bool) -> None:
    """Refuses a workdir holding another run (see the module docstring); clears it with ``overwrite``."""
    config_path = workdir / "config.json"
    if overwrite:
        if primary:
            for name in RUN_FILES:
                p = workdir / name
                if p.is_dir():
                    shutil.rmtree(p)
                elif p.exists():
                    p.unlink()
        return
    has_ckpt = (workdir / "checkpoints").is_dir() and any((workdir / "checkpoints").iterdir())
    if not config_path.exists():
        if has_ckpt:
            raise ConfigError([f"workdir={str(workdir)!r} holds checkpoints but no config.json, so they cannot be "
                               f"matched to this config. Pass --overwrite to start over or choose another "
                               f"--workdir."])
        if resume:
            raise ConfigError([f"resume=True but workdir={str(workdir)!r} holds no run to resume (no config.json). "
                               f"Drop --resume to start a new run there."])
        return
    old = json.loads(config_path.read_text())
    computing = config_lib.differences(old, config_dict, ignore=config_lib.RUN_CONTROL_FIELDS)
    if computing:
        raise ConfigError([f"workdir={str(workdir)!r} holds a run with a different config; differing fields "
                           f"(workdir -> now): {'; '.join(computing)}. Its checkpoints cannot continue this config. "
                           f"Pass --overwrite to replace that run, or choose another --workdir."])
    control = config_lib.differences(old, config_dict)
    if control and not resume:
        raise ConfigError([f"workdir={str(workdir)!r} holds this run with other run-control values "
                           f"({'; '.join(control)}). Pass --resume to continue it with the new values, or "
                           f"--overwrite to start over."])


@contextlib.contextmanager
def _stop_on_signals(log: Callable[[str], None]):
    """Yields a dict whose ``"signum"`` is set by the first SIGINT/SIGTERM; a second one aborts at once."""
    flag: dict[str, Optional[int]] = {"signum": None}
    if threading.current_thread() is not threading.main_thread():
        yield flag  # signal handlers can only be installed from the main thread
        return

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


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n}"


def _round_bytes(metrics: dict, algorithm: Algorithm) -> tuple[float, float]:
    """Per-worker (sent, received) bytes of one round: measured by the backend when it reports them, else
    analytic. A measured value may be a scalar (per worker) or a `[W]` vector (each worker's); vectors are
    averaged."""
    def per_worker(key, analytic):
        if key not in metrics:
            return float(analytic)
        return float(np.mean(np.asarray(metrics[key], np.float64)))

    return (per_worker("measured_bytes_sent", algorithm.comm.sent),
            per_worker("measured_bytes_received", algorithm.comm.received))


# ----------------------------------------------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------------------------------------------


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | pathlib.Path, *, resume: bool = False,
                       overwrite: bool = False) -> dict[str, Any]:
    """Trains the study ``config`` describes, recording everything in ``workdir``; returns the summary.

    Args:
      config: a config (start from `istjax.config.default_config()`; see its fields there).
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
    if resume and overwrite:
        raise ConfigError(["resume=True and overwrite=True contradict each other; pass one of them."])
    dataset = config_lib.validate(config)
    primary = is_primary()
    workdir = pathlib.Path(workdir).absolute()
    config_dict = config_lib.to_dict(config)
    _prepare_workdir(workdir, config_dict, resume=resume, overwrite=overwrite, primary=primary)

    def log(msg: str) -> None:
        if primary:
            print(msg, file=sys.stderr, flush=True)

    task, algorithm, batch_fn = build(config, dataset)
    base, runtime = algorithm, None
    if config.backend == "mpi":
        runtime = _mpi_runtime(config, algorithm)
        algorithm = runtime.as_algorithm()
    # Sharded MPI state lives in pieces on every rank; it is not checkpointed (yet).
    checkpointing = runtime is None or runtime.mode != "sharded"
    W, K, B, N = (int(config.num_workers), int(config.local_steps), int(config.batch_size),
                  int(config.num_rounds))

    if primary:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "config.json").write_text(json.dumps(config_dict, indent=2, sort_keys=True) + "\n")

    # State: fresh, or the newest good checkpoint.
    key = jax.random.key(int(config.seed))
    full = jax.jit(base.init)(key)  # one compile, not one per op; the checkpoint layout
    state = full if runtime is None else runtime.init(key)
    ckpt = Checkpointer(workdir / "checkpoints", max_to_keep=int(config.max_to_keep),
                        enabled=primary and checkpointing)
    meta: dict[str, Any] = {}
    restored = ckpt.restore_latest(full, log=log) if checkpointing else None
    if restored is not None:
        restored_state, meta, step = restored
        if jax.tree.leaves(state.params):
            state = restored_state
        else:  # an MPI parameter-server worker rank holds no parameters, only the key and round
            state = TrainState(state.params, state.opt_state, restored_state.key, restored_state.round)
        del restored_state
        log(f"Resuming from {ckpt.directory / str(step)} (round {step}).")
    elif resume:
        raise ConfigError([f"resume=True but workdir={str(workdir)!r} holds no usable checkpoint. Drop --resume, "
                           f"or pass --overwrite to start over."])
    start = int(jax.device_get(state.round))
    if primary:
        truncate_metrics(workdir / "metrics.jsonl", start)
    records = read_metrics(workdir / "metrics.jsonl") if primary and (workdir / "metrics.jsonl").exists() else []
    del full
    wall = float(meta.get("wall_time_s", 0.0))
    bytes_total = float(meta.get("bytes_total", 0.0))

    evaluate = make_evaluator(task, dataset, batch_size=int(config.eval_batch_size),
                              train_examples=int(config.eval_train_examples))
    data = batch_fn.data
    step_fn = make_train_step(algorithm, batch_fn, fuse=False)
    compile_time = None  # an unfused round compiles inside the first round, whose time then includes it
    if runtime is None and start < N:  # the MPI runtime's round talks MPI between device steps: never fused
        t = time.perf_counter()
        try:
            step_fn = make_train_step(algorithm, batch_fn, fuse=True).lower(state, data).compile()
            compile_time = time.perf_counter() - t
        except Exception as e:  # noqa: BLE001 - a backend whose round is not traceable as a whole runs unfused
            if config.backend == "simulate":
                raise
            log(f"backend={config.backend!r}: its round does not trace inside jit ({type(e).__name__}); running "
                f"it unfused (batches from their own jitted gather).")

    def save(s: TrainState) -> None:
        ckpt.save(s, {"wall_time_s": wall, "bytes_total": bytes_total, "config": config_dict})

    def global_params(s: TrainState):
        """The full parameters on the primary process (MPI: gathered; every rank must call this)."""
        return s.params if runtime is None else runtime.gather_params(s)

    from tqdm.auto import tqdm

    writer = MetricWriter(workdir, enabled=primary, purge_step=start + 1 if start else None)
    bar = tqdm(total=N, initial=start, unit="round", dynamic_ncols=True, file=sys.stderr,
               disable=not (primary and config.progress), desc=f"{algorithm.name} W={W}")
    sent = received = 0.0
    last_round_loss = float("nan")
    try:
        with _stop_on_signals(log) as stop:
            for r in range(start, N):
                t0 = time.perf_counter()
                new_state, metrics = step_fn(state, data)
                metrics = jax.device_get(metrics)
                wall += time.perf_counter() - t0
                worker_loss = np.asarray(metrics["worker_loss"])
                if not (np.all(np.isfinite(worker_loss)) and np.isfinite(metrics["train_loss"])):
                    bad = [int(w) for w in np.flatnonzero(~np.isfinite(worker_loss))]
                    save(state)  # the last good state (a no-op if already checkpointed)
                    kept = (f"The last good state (after round {r}) is checkpointed in {ckpt.directory}. "
                            if checkpointing else "")
                    raise TrainingError(
                        f"non-finite loss in round {r + 1} of {N} at worker(s) {bad} of {W} (worker losses: "
                        f"{worker_loss.tolist()}); stopping. {kept}Lower learning_rate={config.learning_rate}, "
                        f"or check the data.")
                state = new_state
                sent, received = _round_bytes(metrics, algorithm)
                bytes_total += W * (sent + received)
                last_round_loss = float(metrics["train_loss"])
                done = r + 1
                if done % int(config.eval_every) == 0 or done == N:
                    params = global_params(state)
                    scores = evaluate(params) if primary else {}
                    record = {"round": done, "step": done * K, "samples_seen": done * W * K * B,
                              "wall_time_s": wall, **scores, "round_loss": last_round_loss,
                              "round_accuracy": float(metrics.get("train_accuracy", float("nan"))),
                              "bytes_sent_per_worker": sent, "bytes_received_per_worker": received,
                              "bytes_total": bytes_total, "algorithm": algorithm.name, "num_workers": W}
                    records.append(record)
                    writer.write(record)
                    if primary:
                        bar.set_postfix(loss=f"{last_round_loss:.4f}", test_acc=f"{record['test_accuracy']:.4f}",
                                        refresh=False)
                else:
                    bar.set_postfix(loss=f"{last_round_loss:.4f}", refresh=False)
                bar.update(1)
                if done % int(config.checkpoint_every) == 0 or done == N:
                    save(state)
                signum = _agree(stop["signum"], runtime)
                if signum is not None:
                    save(state)
                    name = signal.Signals(signum).name
                    where = (f"checkpoint in {ckpt.directory / str(done)}. Continue with the same command (or "
                             f"--resume)." if checkpointing else "this mode keeps no checkpoint.")
                    raise Interrupted(signum, f"{name}: stopped after round {done} of {N}; {where}")
    finally:
        bar.close()
        writer.close()
        ckpt.close()

    # Nothing ran (a finished run resumed): evaluate what is there. The same decision on every rank, since
    # gathering the parameters is collective under MPI.
    params = global_params(state) if start >= N else None
    if not primary:
        return {"workdir": str(workdir), "rounds": max(start, N), "primary": False}
    if params is not None:
        records.append({"round": start, **evaluate(params)})
    summary = _summary(config, algorithm, records, workdir, compile_time=compile_time, wall=wall,
                       bytes_total=bytes_total)
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(_summary_text(summary), flush=True)
    return summary


def _summary(config, algorithm: Algorithm, records: list[dict], workdir: pathlib.Path, *, compile_time: float,
             wall: float, bytes_total: float) -> dict[str, Any]:
    last = records[-1]
    rounds = int(last["round"])
    W, K, B = int(config.num_workers), int(config.local_steps), int(config.batch_size)
    out = {
        "name": config.name, "algorithm": algorithm.name, "dataset": config.dataset, "num_workers": W,
        "local_steps": K, "batch_size": B, "rounds": rounds, "samples_seen": rounds * W * K * B,
        "test_accuracy": last.get("test_accuracy"), "test_loss": last.get("test_loss"),
        "train_loss": last.get("train_loss"), "train_accuracy": last.get("train_accuracy"),
        "wall_time_s": wall, "time_per_round_s": wall / rounds if rounds else float("nan"),
        "compile_time_s": compile_time,
        "bytes_sent_per_worker_per_round": last.get("bytes_sent_per_worker", float(algorithm.comm.sent)),
        "bytes_received_per_worker_per_round": last.get("bytes_received_per_worker",
                                                        float(algorithm.comm.received)),
        "bytes_total": bytes_total, "workdir": str(workdir),
    }
    target = config.target_accuracy
    if target is not None:
        hit = next((r for r in records if (r.get("test_accuracy") or 0.0) >= target and "wall_time_s" in r), None)
        out.update(target_accuracy=target, round_to_target=hit and hit["round"],
                   samples_to_target=hit and hit["samples_seen"], time_to_target_s=hit and hit["wall_time_s"])
    return out


def _summary_text(s: dict[str, Any]) -> str:
    lines = [
        f"Finished {s['rounds']} rounds of {s['algorithm']} on {s['dataset']} (W={s['num_workers']}, "
        f"K={s['local_steps']}, B={s['batch_size']}).",
        f"  test accuracy {s['test_accuracy']:.4f}, test loss {s['test_loss']:.4f}, train loss "
        f"{s['train_loss']:.4f}",
        f"  samples seen {s['samples_seen']:,}; {1000 * s['time_per_round_s']:.1f} ms per round "
        f"(training {s['wall_time_s']:.1f} s, "
        + ("compilation included in the first round)" if s["compile_time_s"] is None
           else f"compilation {s['compile_time_s']:.1f} s)"),
        f"  per worker per round: received {_fmt_bytes(s['bytes_received_per_worker_per_round'])}, sent "
        f"{_fmt_bytes(s['bytes_sent_per_worker_per_round'])}; all workers so far {_fmt_bytes(s['bytes_total'])}",
    ]
    if "target_accuracy" in s:
        if s["round_to_target"] is None:
            lines.append(f"  test accuracy {s['target_accuracy']} not reached")
        else:
            lines.append(f"  reached test accuracy {s['target_accuracy']} at round {s['round_to_target']} "
                         f"({s['samples_to_target']:,} samples, {s['time_to_target_s']:.1f} s of training)")
    lines.append(f"  results: {s['workdir']} (metrics.jsonl, summary.json, tensorboard/, checkpoints/); plot with "
                 f"`istjax plot {s['workdir']}`")
    return "\n".join(lines)
