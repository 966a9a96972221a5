"""Checkpoints of the full `istjax.TrainState` with orbax, with fallback past a corrupt latest checkpoint.

A checkpoint at step ``r`` holds the state after ``r`` rounds: ``params``, ``model_state``, ``opt_state``, the PRNG ``key`` (stored as
its raw ``jax.random.key_data``, `[2]` uint32 for threefry, and re-wrapped on restore) and ``round``, plus a JSON
``meta`` item (the driver's counters: training wall time, bytes moved, the config). Batches are a pure function of
(seed, round), so the round number is the data position: restoring step ``r`` and running to ``M`` reproduces the
uninterrupted run bit for bit.

Every checkpoint proves itself. At save, the SHA-256 digest of every array (its dtype, shape and bytes), the layout of
the state (every array's dtype and shape, `tree_layout`) and the digest of the metadata are recorded in the
metadata; at restore each is recomputed and compared. A checkpoint that fails to restore or to verify (a
half-written or truncated file, a missing file, a flipped byte that still decodes) is reported in one line naming the
step and the first array that failed, moved aside to ``<dir>_corrupt/<step>``, and the next older one is tried:
training never continues from state that did not verify.

A checkpoint is corrupt only when its bytes are. Before orbax reads an array, the layout the checkpoint recorded
(checked against the metadata's digest; for checkpoints written before layouts were recorded, orbax's own tree
metadata) is compared with the layout the run expects: a state of another shape, dtype or tree is the run's config
disagreeing with the checkpoint, not damage. `CheckpointMismatch` names the first differing array with both layouts
and the config the checkpoint was written with, and nothing is moved.

Restoring uses an abstract target built from a freshly initialised state, so optax's NamedTuple states come back as
NamedTuples (not lists) and every array keeps its dtype and sharding.

A save that cannot be written (a full disk, a directory that became read-only) raises `CheckpointWriteError`
naming the directory, the cause and the last good checkpoint, which orbax's write-then-rename leaves intact.

Layout::

    workdir/checkpoints/<step>/state/...     orbax StandardSave of {params, model_state, opt_state, key_data, round}
    workdir/checkpoints/<step>/meta/...      orbax JsonSave
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import re
import shutil
import sys
from typing import Any, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp

from istjax.core.spec import path_str
from istjax.core.state import TrainState

__all__ = ["Checkpointer", "ShardedCheckpointer", "ShardCountMismatch", "CheckpointWriteError", "CheckpointCorrupt",
           "CheckpointMismatch", "state_to_tree", "tree_to_state", "tree_digests", "tree_layout"]


@contextlib.contextmanager
def _quiet_orbax():
    """orbax logs a failed write or read at length from its worker threads (hundreds of lines for a full disk); the
    exception carries the cause, which `Checkpointer` reports in one line."""
    from absl import logging as absl_logging

    level = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.FATAL)
    try:
        yield
    finally:
        absl_logging.set_verbosity(level)


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (an environment failure: disk full, read-only, permissions)."""


class CheckpointCorrupt(ValueError):
    """A checkpoint restored but does not match the digests recorded when it was saved."""


class CheckpointMismatch(ValueError):
    """A checkpoint whose metadata verifies holds a state of another layout than the run expects: a config problem,
    not damage (the checkpoint is left where it is).

    Attributes:
      step: the checkpoint's step.
      leaf: the first array (``"params/dense_0/kernel"``) whose dtype or shape differs, or that only one side has.
      stored, wanted: its layout in the checkpoint and in the run (``"float32[64,512]"``, or ``"absent"``).
      config: the config the checkpoint was written with (its metadata's ``config``; None if it has none).
    """

    def __init__(self, step: int, leaf: str, stored: str, wanted: str, config: Optional[dict]):
        super().__init__(f"checkpoint {step} holds {leaf} as {stored}; this run makes it {wanted}")
        self.step, self.leaf, self.stored, self.wanted, self.config = step, leaf, stored, wanted, config


def _leaf_digest(x) -> str:
    a = np.ascontiguousarray(np.asarray(jax.device_get(x)))
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def tree_digests(tree) -> dict[str, str]:
    """``{"params/dense_0/kernel": sha256, ...}`` of every array of a pytree (dtype, shape and bytes)."""
    return {path_str(p): _leaf_digest(x) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def tree_layout(tree) -> dict[str, str]:
    """``{"params/dense_0/kernel": "float32[64,512]", ...}``: every array's dtype and shape (arrays, shape structs or
    orbax's array metadata alike), in tree order."""
    return {path_str(p): f"{np.dtype(x.dtype).name}[{','.join(map(str, x.shape))}]"
            for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _check_layout(stored: Optional[dict[str, str]], like: TrainState, step: int, meta: dict) -> None:
    """Raises `CheckpointMismatch` for the first array whose stored layout differs from ``like``'s (no-op when the
    checkpoint's layout is unknown: orbax then reads it and any failure is damage)."""
    if stored is None:
        return
    wanted = tree_layout(jax.eval_shape(state_to_tree, like))
    for leaf in [*wanted, *(k for k in stored if k not in wanted)]:
        if stored.get(leaf) != wanted.get(leaf):
            raise CheckpointMismatch(step, leaf, stored.get(leaf, "absent"), wanted.get(leaf, "absent"),
                                     meta.get("config"))


def _meta_digest(meta: dict) -> str:
    body = {k: v for k, v in meta.items() if k != "meta_digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def _verify_meta(meta: dict, step: int) -> None:
    """Raises `CheckpointCorrupt` when the metadata does not match its own digest."""
    if meta.get("meta_digest") != _meta_digest(meta):
        raise CheckpointCorrupt(f"checkpoint {step}: its metadata does not match its digest")


def _verify(tree, meta: dict, step: int) -> None:
    """Raises `CheckpointCorrupt` naming the first array whose digest does not match (the metadata verified)."""
    recorded = meta.get("digests")
    if not isinstance(recorded, dict):
        raise CheckpointCorrupt(f"checkpoint {step}: no array digests recorded (written by an older istjax?)")
    got = tree_digests(tree)
    if set(got) != set(recorded):
        raise CheckpointCorrupt(f"checkpoint {step}: holds arrays {sorted(set(got) ^ set(recorded))[:3]} that its "
                                f"digests do not (or the reverse)")
    for path, digest in got.items():
        if recorded[path] != digest:
            raise CheckpointCorrupt(f"array {path} does not match the digest recorded when it was saved")


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
        options = ocp.CheckpointManagerOptions(max_to_keep=self.max_to_keep, create=False,
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
        tree = state_to_tree(state)
        meta = dict(meta or {}, round=step, key_impl=str(jax.random.key_impl(state.key)), digests=tree_digests(tree),
                    layout=tree_layout(tree))
        meta["meta_digest"] = _meta_digest(meta)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)  # created by the first save, never by opening
            with _quiet_orbax():
                self._manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(tree),
                                                                 meta=ocp.args.JsonSave(meta)), force=True)
                self._manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001 - orbax wraps OS errors in its own; report the cause in one line
            raise CheckpointWriteError(self._write_failure(step, e)) from e
        return step

    def _write_failure(self, step: int, error: BaseException) -> str:
        cause = _root_cause(error)
        self._remove_partial(step)
        good = [s for s in self.steps() if s != step]
        kept = (f"the last good checkpoint {self.directory / str(good[-1])} is intact" if good
                else "no earlier checkpoint exists")
        return (f"could not write checkpoint {self.directory / str(step)}: {cause}; {kept}. Free space or fix "
                f"permissions under {self.directory}, then rerun the same command to resume.")

    def _remove_partial(self, step: int) -> None:
        for p in (self.directory.glob(f"{step}.orbax-checkpoint-tmp*") if self.directory.exists() else ()):
            shutil.rmtree(p, ignore_errors=True)

    def restore(self, step: int, like: TrainState) -> tuple[TrainState, dict[str, Any]]:
        """The state and meta saved at ``step``; ``like`` (e.g. ``algorithm.init(key)``) gives structure, dtypes
        and shardings.

        Raises:
          CheckpointMismatch: the checkpoint's metadata verifies but records another layout than ``like``'s
            (checked before any array is read).
          Exception: whatever orbax raises for a damaged checkpoint, or `CheckpointCorrupt`.
        """
        with _quiet_orbax():
            meta = dict(self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta or {})
        _verify_meta(meta, step)
        _check_layout(meta.get("layout") or self._orbax_layout(step), like, step, meta)
        target = _abstract(state_to_tree(like))
        with _quiet_orbax():
            out = self._manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target)))
        _verify(out.state, meta, step)
        return tree_to_state(out.state, meta.get("key_impl")), meta

    def _orbax_layout(self, step: int) -> Optional[dict[str, str]]:
        """The layout orbax recorded for a checkpoint written before istjax recorded its own (None if unreadable)."""
        try:
            with _quiet_orbax():
                return tree_layout(ocp.StandardCheckpointHandler().metadata(self.directory / str(step) / "state"))
        except Exception:  # noqa: BLE001 - unreadable metadata: let the restore itself say what is wrong
            return None

    def restore_latest(self, like: TrainState, *, log=None) -> Optional[tuple[TrainState, dict[str, Any], int]]:
        """The newest checkpoint that restores cleanly, as ``(state, meta, step)``; None when there is none.

        A checkpoint that fails to restore is reported through ``log`` (default: stderr), moved aside to
        ``<directory>_corrupt/<step>`` (when writing is enabled) so that training can save that step again, and the
        next older one is tried. A `CheckpointMismatch` (the run expects another layout) is raised, nothing moved.
        """
        log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        for step in reversed(self.steps()):
            try:
                state, meta = self.restore(step, like)
            except CheckpointMismatch:
                raise  # a config problem: the checkpoint stays where it is
            except Exception as e:  # noqa: BLE001 - any failure means "not usable"; we report it and go on
                where = self.directory / str(step)
                msg = f"checkpoint {where} is damaged and was skipped ({_root_cause(e)})"
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


_TS_ERRNO = re.compile(r"os_error_code='?(\d+)")
_TS_FILE = re.compile(r'Failed (?:writing|reading|to open)[^"]*"([^"]+)"')


def _root_cause(error: BaseException) -> str:
    """One line for an exception chain: the innermost OS error when there is one (TensorStore reports them inside
    a ValueError text, ``... [os_error_code='28']``), else the first line."""
    e, seen = error, set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.strerror:
            return f"{e.strerror}" + (f" ({e.filename})" if e.filename else "")
        code = _TS_ERRNO.search(str(e))
        if code:
            where = _TS_FILE.search(str(e))
            return os.strerror(int(code.group(1))) + (f" ({where.group(1)})" if where else "")
        e = e.__cause__ or e.__context__
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {first[:200]}" if first else type(error).__name__


class ShardedCheckpointer:
    """Checkpoints of a state spread over MPI ranks (sharded mode): no rank gathers the model.

    Each rank saves its own shard with a `Checkpointer` of its own under ``<directory>/rank_<r>`` (digests
    included). A step is *committed* only when every rank has written its part: the ranks agree (``agree_all``), then
    rank 0 records the step in ``<directory>/committed.json`` (written to a temporary file and renamed, so it is
    never half-written). Restoring considers committed steps only, newest first; every rank restores and verifies
    its part and the ranks agree, so either all continue from the same step or all fall back to the previous one.
    A job with another number of ranks than the checkpoint's is refused (`ShardCountMismatch`), and a part of
    another layout than the run's makes every rank raise `CheckpointMismatch`.

    Args:
      directory: the run's checkpoint directory.
      rank, size: this process and the process count.
      agree_all: ``ok -> bool``, True when every rank passed True (collective).
      max_to_keep: committed steps kept.
    """

    def __init__(self, directory: str | pathlib.Path, *, rank: int, size: int, agree_all, max_to_keep: int = 3):
        self.directory = pathlib.Path(directory).absolute()
        self.rank, self.size, self.agree_all, self.max_to_keep = rank, size, agree_all, max_to_keep
        self.part = Checkpointer(self.directory / f"rank_{rank}", max_to_keep=max_to_keep + 2)
        self.enabled = True

    @property
    def _ledger(self) -> pathlib.Path:
        return self.directory / "committed.json"

    def committed(self) -> dict[str, Any]:
        """``{"ranks": N, "steps": [...]}`` (empty when nothing is committed)."""
        if not self._ledger.exists():
            return {"ranks": self.size, "steps": []}
        return json.loads(self._ledger.read_text())

    def steps(self) -> list[int]:
        return sorted(self.committed()["steps"])

    def save(self, state: TrainState, meta: Optional[dict[str, Any]] = None) -> Optional[int]:
        """Every rank saves its shard at ``state.round``; the step is committed once all have (collective)."""
        step = int(jax.device_get(state.round))
        if step in self.steps():
            return None
        error: Optional[BaseException] = None
        try:
            self.part.save(state, dict(meta or {}, rank=self.rank, ranks=self.size))
        except CheckpointWriteError as e:
            error = e
        if not self.agree_all(error is None):
            raise CheckpointWriteError(str(error) if error is not None else
                                       f"another rank could not write its part of checkpoint {step}; "
                                       f"the last committed checkpoint is intact")
        if self.rank == 0:
            kept = (self.steps() + [step])[-self.max_to_keep:]
            tmp = self._ledger.with_suffix(".tmp")
            tmp.write_text(json.dumps({"ranks": self.size, "steps": kept}))
            tmp.replace(self._ledger)
        self.agree_all(True)  # every rank sees the ledger before pruning its old parts
        keep = set(self.steps())
        for old in self.part.steps():
            if old not in keep and old < step:
                self.part._manager.delete(old)
        return step

    def restore_latest(self, like: TrainState, *, log=None):
        """This rank's shard of the newest committed step that every rank restores and verifies, as
        ``(state, meta, step)``; None when nothing is committed (collective)."""
        log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        ledger = self.committed()
        if ledger["steps"] and int(ledger["ranks"]) != self.size:
            raise ShardCountMismatch(
                f"the checkpoints in {self.directory} were written by {ledger['ranks']} MPI ranks (each holds a "
                f"shard), but this job has {self.size}. Launch with mpiexec -n {ledger['ranks']} to resume them, or "
                f"start a new run in another --workdir.")
        for step in reversed(sorted(ledger["steps"])):
            mismatch = None
            try:
                state, meta = self.part.restore(step, like)
                ok, why = True, ""
            except CheckpointMismatch as e:
                ok, why, mismatch = False, str(e), e
            except Exception as e:  # noqa: BLE001 - reported in one line, then every rank falls back together
                ok, why = False, _root_cause(e)
            if not self.agree_all(mismatch is None):  # a config problem on some rank: every rank refuses
                raise mismatch or CheckpointMismatch(step, "another rank's part", "another layout",
                                                     "this run's layout", None)
            if self.agree_all(ok):
                return state, meta, step
            if not ok:
                log(f"rank {self.rank}: its part of checkpoint {self.directory / f'rank_{self.rank}' / str(step)} "
                    f"is damaged ({why}); every rank falls back to the previous committed checkpoint.")
        return None

    def close(self) -> None:
        self.part.close()


class ShardCountMismatch(ValueError):
    """Sharded checkpoints written by another number of MPI ranks than this job has."""
