"""A training run between the driver's steps: `open_run` validates the config, claims the workdir, builds everything
and checks the workdir, writing nothing; `initial_state` gives the first state, fresh from the seed or from the
newest checkpoint that restores. The `Run` holds what the steps share (the built experiment, the checkpointer, the
counters a resume carries on) and writes the workdir only in `Run.begin`, once every check has passed.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from collections.abc import Callable
from typing import Any, Optional

import jax
import ml_collections

import istjax.data as data_lib
import istjax.launch.config as config_lib
from istjax.algorithms.base import Algorithm, whole_state_init
from istjax.core.state import TrainState
from istjax.core.task import Task
from istjax.data.drift import Drift
from istjax.launch import workdir as workdir_lib
from istjax.launch.checkpoint import (Checkpointer, CheckpointMismatch, CheckpointWriteError, ShardCountMismatch,
                                      ShardedCheckpointer)
from istjax.launch.config import ConfigError, Experiment, build
from istjax.launch.metrics import COUNTED, SPLIT, is_primary, write_atomic
from istjax.launch.workdir import EnvironmentFailure

__all__ = ["Run", "initial_state", "open_run", "step_inputs"]


def step_inputs(run: "Run") -> tuple[Any, Any]:
    """What every round step reads besides the state: ``(batch_fn.data, dataset.shared)``
    (`istjax.launch.driver.make_train_step`)."""
    return run.batch_fn.data, run.dataset.shared


class _SplitWindow:
    """The round's loss split (`istjax.algorithms.base.loss_split`) averaged over the rounds since the last
    record that computed it (`istjax.launch.train_loop.split_due`: the evaluation round, and every
    ``loss_split_every``-th; the record carries the mean and ``split_rounds``, how many), and
    what the rounds counted (`istjax.launch.metrics.COUNTED`), summed. The window is part of a checkpoint's meta
    (`meta`), so a run stopped between two records and resumed reports the same rounds as one never stopped."""

    def __init__(self, sums: Optional[dict[str, float]] = None, rounds: int = 0):
        self.sums: dict[str, float] = dict(sums or {})
        self.rounds = int(rounds)

    def add(self, metrics: dict, due: bool = True) -> None:
        """Adds a round's metrics: its loss split where it was ``due`` (a round that was not holds NaN in its place
        or nothing, `istjax.runtimes.base.when_due`), and what it counted."""
        got = {k: float(metrics[k]) for k in SPLIT if k in metrics} if due else {}
        if got:
            self.rounds += 1
        got.update({k: float(metrics[k]) for k in COUNTED if k in metrics})
        for k, v in got.items():
            self.sums[k] = self.sums.get(k, 0.0) + v

    def take(self) -> dict[str, float]:
        out = {k: v / self.rounds for k, v in self.sums.items() if k in SPLIT}
        if out:
            out["split_rounds"] = self.rounds
        out.update({k: v for k, v in self.sums.items() if k in COUNTED})
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
    clients: Optional[dict] = None  # a federated run's clients (`istjax.launch.config.federated.Clients.to_record`)
    drift: Optional[Drift] = None  # the stream's concept drift (`istjax.data.drift`), which the evaluation follows

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
    config, dataset, task, algorithm, batch_fn = experiment[:5]
    if algorithm.runtime.agree(int(refusal is not None)):  # every process stops when the primary was refused
        raise refusal or ConfigError([f"workdir={str(workdir)!r}: the primary process refused it."])
    config_dict = config_lib.to_dict(config)
    workdir_lib.check_run(workdir, config_dict, resume=resume, overwrite=overwrite)
    primary = is_primary()

    def log(msg: str) -> None:
        if primary:
            print(msg, file=sys.stderr, flush=True)

    checkpointer = _checkpointer(workdir / "checkpoints", algorithm.runtime, int(config.max_to_keep))
    clients = None if experiment.clients is None else experiment.clients.to_record()
    return Run(config, config_dict, workdir, dataset, task, algorithm, batch_fn, checkpointer, log,
               overwrite=overwrite, clients=clients, drift=experiment.drift)


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
