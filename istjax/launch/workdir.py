"""A run directory, checked before it is touched: named, claimed, checked, and only then written.

`istjax.launch.driver.train_and_evaluate` takes a workdir in this order:

1. `named`: an empty ``--workdir=`` is refused (it would train into the current folder, beside the user's files).
2. `claim`: the directory is made if need be and its lock taken (`istjax.launch.lock`), remembering what was there.
3. Every check that can refuse the run, reading only: `check_run` (a directory holding another run), the memory cap
   (`istjax.launch.driver.check_memory_cap`, which compiles), the checkpoints against the config
   (`mismatch_refusal`: a verified checkpoint of another layout is a config problem, never damage).
4. Only then is anything written: with ``overwrite`` the previous run is deleted, naming the checkpoints it held
   (`clear_run`), then ``config.json``.

A run refused in step 3 rolls its claim back (`Claim.roll_back`): the directory is exactly as it was found (one it
created is removed again, with the parents it created; a lock file it created is deleted, one it found gets its old
contents back), so the corrected command runs in the same workdir. No refusal's advice is ``--overwrite`` while the
workdir holds checkpoints: it would delete them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Optional

import istjax.launch.config as config_lib
from istjax.launch.config import ConfigError
from istjax.launch.lock import WorkdirLock, lock_workdir

if TYPE_CHECKING:  # the command line names a workdir (`named`) before JAX and orbax are imported
    from istjax.launch.checkpoint import CheckpointMismatch

__all__ = ["RUN_FILES", "EnvironmentFailure", "Claim", "named", "claim", "check_workdir", "check_run", "clear_run",
           "mismatch_refusal"]

# What a run directory holds (removed by ``overwrite``).
RUN_FILES = ("config.json", "metrics.jsonl", "summary.json", "tensorboard", "checkpoints", "checkpoints_corrupt")


class EnvironmentFailure(RuntimeError):
    """The machine, not the config, stopped the run: a workdir that cannot be written, a full disk. The message
    names the path and the fix; the last good checkpoint is intact. Exit code 3 from the CLI."""


def named(workdir: str | os.PathLike) -> pathlib.Path:
    """``workdir`` as an absolute path; `ConfigError` for an empty name (``--workdir=``), which would otherwise
    mean the current folder."""
    if not str(workdir).strip():
        raise ConfigError([f"workdir={str(workdir)!r} is empty: name the run directory (--workdir=DIR), or leave "
                           f"--workdir out for ./runs/<name>-<timestamp>."])
    return pathlib.Path(workdir).absolute()


@dataclasses.dataclass
class Claim:
    """A workdir taken by the writing process: its lock, and the folders the claim created (deepest first)."""

    workdir: pathlib.Path
    lock: WorkdirLock
    created: list[pathlib.Path]

    def release(self) -> None:
        """Lets the next run in (the run was written)."""
        self.lock.release()

    def roll_back(self) -> None:
        """Leaves the workdir as the claim found it (a refused run): the lock file's old state, no created folder."""
        self.lock.roll_back()
        for folder in self.created:
            try:
                folder.rmdir()  # only when empty: what a refused run created and nothing else
            except OSError:
                break


def claim(workdir: pathlib.Path) -> tuple[Optional[Claim], Optional[Exception]]:
    """On the writing process: checks the workdir can be one (`check_workdir`) and takes its lock. Returns
    ``(claim, None)``, or ``(None, the refusal)`` for the driver to raise on every process at once (under MPI the
    other ranks learn of it through the runtime, so none waits for a rank that left); a refusal leaves nothing."""
    created = [p for p in [workdir, *workdir.parents] if not p.exists()]
    try:
        check_workdir(workdir)
        return Claim(workdir, lock_workdir(workdir), created), None
    except (ConfigError, EnvironmentFailure) as e:
        for folder in created:
            with contextlib.suppress(OSError):
                folder.rmdir()
        return None, e


def check_workdir(workdir: pathlib.Path) -> None:
    """Raises `ConfigError` for a workdir that cannot be one (under a file, a file itself) and `EnvironmentFailure`
    for one that cannot be written (permissions, a read-only or full file system), naming the path and the fix."""
    for parent in [workdir, *workdir.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError([f"workdir={str(workdir)!r}: {str(parent)!r} is a file, not a directory; choose a "
                                   f"--workdir whose parents are directories."])
            break
    probe = workdir / ".istjax-write-probe"
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"0" * 4096)
        probe.unlink()
    except OSError as e:
        raise EnvironmentFailure(f"workdir={str(workdir)!r} cannot be written ({e.strerror or e}); choose a --workdir "
                                 f"you can write to, or fix its permissions / free space on its disk.") from e


def check_run(workdir: pathlib.Path, config_dict: dict, *, resume: bool, overwrite: bool) -> None:
    """Refuses, reading only, a workdir holding another run: another config, or this run's with other run-control
    values and no ``resume``; with ``overwrite`` nothing is refused (`clear_run` replaces the run once every check
    has passed)."""
    if overwrite:
        return
    ckpt = workdir / "checkpoints"
    has_ckpt = ckpt.is_dir() and any(ckpt.iterdir())
    if not (workdir / "config.json").exists():
        if has_ckpt:
            raise ConfigError([f"workdir={str(workdir)!r} holds checkpoints but no config.json, so they cannot be "
                               f"matched to this config. Choose another --workdir (the checkpoints stay)."])
        if resume:
            raise ConfigError([f"resume=True but workdir={str(workdir)!r} holds no run to resume (no config.json). "
                               f"Drop --resume to start a new run there."])
        return
    # Read through from_dict: a field the run's file lacks (added since it was written) takes its default, the value
    # that keeps what the run computed.
    old = config_lib.to_dict(config_lib.load_run_config(workdir))
    computing = config_lib.differences(old, config_dict, ignore=config_lib.run_control_fields(old))
    elsewhere = ("Choose another --workdir for this config (the run there keeps its checkpoints)." if has_ckpt else
                 "Choose another --workdir, or pass --overwrite to replace that run.")
    if computing:
        fix = ("--resume continues that run with its own config (config.json in the workdir): drop the overrides "
               "that change what it computes, or start the new config in another --workdir." if resume else
               f"Its checkpoints cannot continue this config. {elsewhere}")
        raise ConfigError([f"workdir={str(workdir)!r} holds a run with a different config; differing fields "
                           f"(workdir -> now): {'; '.join(computing)}. {fix}"])
    control = config_lib.differences(old, config_dict)
    if control and not resume:
        raise ConfigError([f"workdir={str(workdir)!r} holds this run with other run-control values "
                           f"({'; '.join(control)}). Pass --resume to continue it with the new values, or "
                           + ("choose another --workdir." if has_ckpt else "--overwrite to start over.")])


def clear_run(workdir: pathlib.Path, steps: list[int], log: Callable[[str], None]) -> None:
    """``overwrite``: deletes the run in ``workdir`` (`RUN_FILES`), saying in one line which checkpoints go."""
    if any((workdir / name).exists() for name in RUN_FILES):
        log(f"--overwrite: deleting the run in {workdir}" + (f", with its checkpoints at steps "
                                                             f"{', '.join(map(str, steps))}." if steps else "."))
    for name in RUN_FILES:
        p = workdir / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def mismatch_refusal(error: "CheckpointMismatch", config_dict: dict, workdir: pathlib.Path) -> ConfigError:
    """The one-line refusal of a verified checkpoint that does not fit the run's config: the config fields that
    differ from the ones it was written with (or the first differing array), both values, and the fix."""
    written = error.config or {}
    fields = config_lib.differences(written, config_dict, ignore=config_lib.run_control_fields(written)) \
        if written else []
    what = (f"differing fields (checkpoint -> this config): {'; '.join(fields)}" if fields else
            f"its array {error.leaf} is {error.stored}, this config makes it {error.wanted}")
    return ConfigError([f"workdir={str(workdir)!r}: checkpoint {error.step} (left in place) was written "
                        f"by another config; {what}. Put those values back in {workdir / 'config.json'} to resume it, "
                        f"or start this config in a new --workdir."])
