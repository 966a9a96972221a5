"""Checkpoints of the full `istjax.TrainState` with orbax, with fallback past a corrupt latest checkpoint.

A checkpoint at step ``r`` holds the state after ``r`` rounds: ``params``, ``model_state``, ``opt_state``, the PRNG ``key`` (stored as
its raw ``jax.random.key_data``, `[2]` uint32 for threefry, and re-wrapped on restore) and ``round``, plus a JSON
``meta`` item (the driver's counters: training wall time, bytes moved, the config). Batches are a pure function of
(seed, round), so the round number is the data position: restoring step ``r`` and running to ``M`` reproduces the
uninterrupted run bit for bit.

Restoring uses an abstract target built from a freshly initialised state, so optax's NamedTuple states come back as
NamedTuples (not lists) and every array keeps its dtype and sharding. A checkpoint that fails to restore (a
half-written or truncated file, a missing file) is reported, moved aside to ``<dir>_corrupt/<step>`` and the next
older one is tried.

Layout::

    workdir/checkpoints/<step>/state/...     orbax StandardSave of {params, model_state, opt_state, key_data, round}
    workdir/checkpoints/<step>/meta/...      orbax JsonSave
"""

from __future__ import annotations

import pathlib
import shutil
import sys
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp

from istjax.core.state import TrainState

__all__ = ["Checkpointer", "state_to_tree", "tree_to_state"]


def state_to_tree(state: TrainState) -> dict[str, Any]:
    """The checkpointed pytree of a state: the typed PRNG key becomes its raw key data."""
    return {"params": state.params, "model_state": state.model_state, "opt_state": state.opt_state,
            "key_data": jax.random.key_data(state.key), "round": state.round}


def tree_to_state(tree: dict[str, Any], key_impl: Optional[str] = None) -> TrainState:
    """Inverse of `state_to_tree`; ``key_impl`` names the PRNG implementation (default: JAX's default)."""
    key = jax.random.wrap_key_data(tree["key_data"], impl=key_impl)
    return TrainState(tree["params"], tree["model_state"], tree["opt_state"], key, tree["round"])


def _abstract(tree):
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


class Checkpointer:
    """Saves and restores `TrainState`s under ``directory`` (an orbax `CheckpointManager`, synchronous saves).

    Args:
      directory: where step folders go (created on first save).
      max_to_keep: the newest checkpoints kept; older ones are deleted.
      enabled: write checkpoints (False in non-primary processes, which may still restore).
    """

    def __init__(self, directory: str | pathlib.Path, *, max_to_keep: int = 3, enabled: bool = True):
        self.directory = pathlib.Path(directory).absolute()
        self.enabled = enabled
        self.max_to_keep = max_to_keep
        self._manager = self._open()

    def _open(self) -> ocp.CheckpointManager:
        options = ocp.CheckpointManagerOptions(max_to_keep=self.max_to_keep, create=self.enabled,
                                               read_only=not self.enabled, enable_async_checkpointing=False)
        return ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))

    def steps(self) -> list[int]:
        """Steps with a committed checkpoint, oldest first."""
        if not self.directory.exists():
            return []
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def latest_step(self) -> Optional[int]:
        steps = self.steps()
        return steps[-1] if steps else None

    def save(self, state: TrainState, meta: Optional[dict[str, Any]] = None) -> Optional[int]:
        """Saves ``state`` at step ``state.round`` (skipped when that step exists or writing is disabled).

        Returns the step written, or None.
        """
        if not self.enabled:
            return None
        step = int(jax.device_get(state.round))
        if step in self.steps():
            return None
        meta = dict(meta or {}, round=step, key_impl=str(jax.random.key_impl(state.key)))
        self._manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state_to_tree(state)),
                                                         meta=ocp.args.JsonSave(meta)), force=True)
        self._manager.wait_until_finished()
        return step

    def restore(self, step: int, like: TrainState) -> tuple[TrainState, dict[str, Any]]:
        """The state and meta saved at ``step``; ``like`` (e.g. ``algorithm.init(key)``) gives structure, dtypes
        and shardings. Raises whatever orbax raises for a damaged checkpoint."""
        target = _abstract(state_to_tree(like))
        out = self._manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target),
                                                                  meta=ocp.args.JsonRestore()))
        meta = dict(out.meta or {})
        state = tree_to_state(out.state, meta.get("key_impl"))
        _check_like(state, like, step)
        return state, meta

    def restore_latest(self, like: TrainState, *, log=None) -> Optional[tuple[TrainState, dict[str, Any], int]]:
        """The newest checkpoint that restores cleanly, as ``(state, meta, step)``; None when there is none.

        A checkpoint that fails to restore is reported through ``log`` (default: stderr), moved aside to
        ``<directory>_corrupt/<step>`` (when writing is enabled) so that training can save that step again, and the
        next older one is tried.
        """
        log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        for step in reversed(self.steps()):
            try:
                state, meta = self.restore(step, like)
            except Exception as e:  # noqa: BLE001 - any failure means "not usable"; we report it and go on
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                where = self.directory / str(step)
                msg = f"checkpoint {where} is damaged and was skipped ({type(e).__name__}: {first[:300]})"
                if self.enabled:
                    aside = self.directory.parent / f"{self.directory.name}_corrupt" / str(step)
                    aside.parent.mkdir(parents=True, exist_ok=True)
                    if aside.exists():
                        shutil.rmtree(aside)
                    shutil.move(str(where), str(aside))
                    msg += f"; moved to {aside}"
                log(msg + "; trying the previous checkpoint.")
                continue
            return state, meta, step
        return None

    def close(self) -> None:
        self._manager.close()

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _check_like(state: TrainState, like: TrainState, step: int) -> None:
    got = jax.tree.map(lambda x: (x.shape, x.dtype), state_to_tree(state))
    want = jax.tree.map(lambda x: (x.shape, x.dtype), state_to_tree(like))
    if got != want:
        raise ValueError(f"checkpoint step {step} holds a state of another shape than this run's model "
                         f"(got {got}, expected {want}).")
