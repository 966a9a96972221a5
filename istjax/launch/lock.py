"""One writer per run directory: `lock_workdir` holds an exclusive lock on ``<workdir>/run.lock`` for a run's life.

``istjax train`` (`istjax.launch.driver.train_and_evaluate`) takes it before it touches the run directory; a
second run on the same directory is refused at once (`ConfigError`, exit 2), naming the process that holds it and
since when, before it resumes from, overwrites or appends to anything. The lock is an ``flock`` on the open file,
which the kernel releases when its process ends however it ends (``kill -9``, the OOM killer included): the file a
dead run leaves behind never blocks a resume, only a live holder does. The file itself records who holds it (pid,
host, start time, command) for the refusal; it is never deleted (deleting a held lock file would let a third
process lock a new one beside it), except by a run refused before it wrote anything (`WorkdirLock.roll_back`),
which leaves the file as it found it: deleted if it created it, else with its old contents. Under ``mpiexec`` only
the writing rank (rank 0) takes it, so the ranks of one job are one writer. Readers (``istjax eval``, ``istjax
plot``) take no lock: checkpoints are committed by a rename and ``metrics.jsonl`` by whole lines, so a running run
can be read.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import pathlib
import socket
import sys
from typing import Optional

from istjax.launch.config import ConfigError

__all__ = ["LOCK_FILE", "WorkdirLock", "lock_workdir"]

LOCK_FILE = "run.lock"


class WorkdirLock:
    """A held run-directory lock; `release` (or the end of the process) lets the next run in."""

    def __init__(self, fd: int, path: pathlib.Path, previous: Optional[bytes] = None):
        self.fd, self.path, self.previous = fd, path, previous  # previous: the file's contents before, None if new

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = -1

    def roll_back(self) -> None:
        """Releases the lock of a run refused before it wrote anything, leaving the lock file as `lock_workdir`
        found it: deleted if it created it (while still held, so no other process holds that file), else with its
        previous contents."""
        if self.fd >= 0:
            if self.previous is None:
                self.path.unlink(missing_ok=True)
            else:
                os.ftruncate(self.fd, 0)
                os.pwrite(self.fd, self.previous, 0)
        self.release()


def lock_workdir(workdir: pathlib.Path) -> WorkdirLock:
    """Takes ``workdir``'s lock (the directory must exist) and records this process in it.

    Raises:
      ConfigError: another live process holds it (naming its pid, host, start time and command, and the fix).
    """
    path = pathlib.Path(workdir) / LOCK_FILE
    existed = path.exists()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise ConfigError([_refusal(pathlib.Path(workdir), holder)]) from None
    except BaseException:
        os.close(fd)
        raise
    record = {"pid": os.getpid(), "host": socket.gethostname(),
              "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "command": sys.argv}
    previous = os.pread(fd, os.fstat(fd).st_size, 0) if existed else None
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
    return WorkdirLock(fd, path, previous)


def _holder(fd: int) -> dict:
    """What the holder wrote in the lock file (empty if it has not written yet)."""
    try:
        value = json.loads(os.pread(fd, 1 << 16, 0).decode() or "{}")
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _refusal(workdir: pathlib.Path, holder: dict) -> str:
    if holder:
        command = " ".join(map(str, holder.get("command") or []))
        command = command if len(command) <= 160 else command[:157] + "..."
        who = (f"process {holder.get('pid')} on {holder.get('host')}, running since {holder.get('since')} "
               f"(`{command}`),")
        stop = f"stop it: kill {holder.get('pid')}"
    else:  # it has taken the lock but not yet written its name
        who, stop = "another process", "stop it"
    return (f"workdir={str(workdir)!r} is in use: {who} holds its lock {LOCK_FILE}. A run directory has one writer: "
            f"wait for that run to finish (or {stop}; it checkpoints on SIGTERM), then resume; or choose another "
            f"--workdir.")
