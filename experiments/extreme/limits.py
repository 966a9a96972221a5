"""A command under an OS-enforced memory limit: a cgroup v1 memory group, removed on every exit.

Run as root from the repository root::

    python -m experiments.extreme.limits --limit 300MiB -- \\
        mpiexec -n 2 python -m istjax.launch.cli train --config.runtime.name=mpi --config.runtime.mode=sharded ...

prints one line (``killed by the kernel at the 300.0 MiB cgroup limit (exit 137), peak 299.9 MiB``, or ``within the
300.0 MiB cgroup limit (exit 0), peak 212.4 MiB; rank 0 190.1 MiB, rank 1 188.0 MiB``) and exits with the command's
code (137 when the kernel killed it).

Why a cgroup: the claim is about resident memory, and the memory controller limits exactly that, killing the
process that goes over (``prlimit --as`` limits address space, which JAX reserves far beyond what it touches). These
machines have the v1 controller only (no v2 ``memory.max``). The group is ``/sys/fs/cgroup/memory/istjax-<name>-<pid>``
with ``memory.limit_in_bytes`` and, where swap accounting is on, ``memory.memsw.limit_in_bytes`` at the same value
(so swap cannot hide an overrun). The command is started by a shell that writes its own pid to the group's
``cgroup.procs`` and then execs it, so everything it starts (mpiexec's proxies, the ranks) is born inside. The limit
is the group's: every process of the command together (for ``mpiexec -n N``: N ranks and mpiexec's own ~10 MiB).

What is read back: ``memory.max_usage_in_bytes`` (the group's peak, page cache of the files it read included: the
kernel reclaims that before it kills), ``oom_kill`` of ``memory.oom_control`` (kills in the group; on kernels without
the line, ``memory.failcnt`` and a SIGKILL exit stand in), and each process's peak resident memory: ``VmHWM`` of
``/proc/<pid>/status``, polled every `POLL_S` for every pid in the group while it runs. VmHWM is a high-water mark,
so the last reading is the peak up to the growth of the last interval; a rank is named by ``PMI_RANK`` in its
environment (mpiexec sets it), any other process by its name and pid.

A limit per rank (`run_ranks`): ``mpiexec -n N`` starts each rank through a shell that makes a child group
``rank<PMI_RANK>`` of the job's group with the rank's own ``memory.limit_in_bytes``, moves itself into it and execs
the rank's command; the job's group holds them all (its limit is N ranks' plus `LAUNCHER_BYTES` for mpiexec and its
proxies). The kernel then kills exactly the rank that goes over its own limit, and each child group's
``memory.max_usage_in_bytes`` is that rank's peak.

On a timeout the command's process group and then every pid left in the group are killed; the group is then removed
(``rmdir``, retried while the kernel lets its last tasks go), on success, failure, timeout, exception and Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Optional

from istjax.core.memory import format_size, parse_bytes

__all__ = ["CGROUP_ROOT", "Limited", "memory_group", "run_limited", "run_ranks", "missing_privileges", "main"]

CGROUP_ROOT = pathlib.Path("/sys/fs/cgroup/memory")
POLL_S = 0.1  # seconds between readings of the group's processes' VmHWM
KILLED = 128 + signal.SIGKILL  # 137, the shell's exit code of a process the kernel killed
LAUNCHER_BYTES = 256 << 20  # mpiexec and its hydra proxies, beside the ranks' own limits (they use ~10 MiB each)


@dataclasses.dataclass(frozen=True)
class Limited:
    """What a command under a limit did (`run_limited`).

    Attributes:
      returncode: the command's exit code, 128 + N for a process ended by signal N (137: SIGKILL, the OOM killer).
      limit_bytes: the group's limit.
      peak_bytes: the group's peak usage (``memory.max_usage_in_bytes``).
      oom_killed: the kernel killed a process of the group for going over the limit.
      timed_out: the command ran past its timeout and was killed.
      peak_rss_bytes: each process's peak resident memory (VmHWM), ``{"rank 0": ..., "mpiexec 123": ...}``.
      elapsed_s: wall time of the command.
      rank_peak_bytes: with a limit per rank (`run_ranks`), each rank group's peak usage, ``{"rank 0": ...}``;
        ``limit_bytes`` and ``peak_bytes`` are then the per-rank limit and the largest rank's peak.
      killed: with a limit per rank, the ranks the kernel killed (``("rank 1",)``).
    """

    returncode: int
    limit_bytes: int
    peak_bytes: int
    oom_killed: bool
    timed_out: bool
    peak_rss_bytes: dict
    elapsed_s: float
    rank_peak_bytes: dict = dataclasses.field(default_factory=dict)
    killed: tuple = ()

    @property
    def summary(self) -> str:
        """One line: how the command ended against the limit, the group's peak, each rank's peak."""
        limit = f"the {format_size(self.limit_bytes)} cgroup limit{' per rank' if self.rank_peak_bytes else ''}"
        if self.timed_out:
            head = f"timed out after {self.elapsed_s:.0f} s under {limit}, killed (exit {self.returncode})"
        elif self.oom_killed:
            who = f"{', '.join(self.killed)} " if self.killed else ""
            head = f"{who}killed by the kernel at {limit} (exit {self.returncode})"
        else:
            head = f"{'finished' if self.returncode == 0 else 'failed'} within {limit} (exit {self.returncode})"
        ranks = sorted((k, v) for k, v in self.peak_rss_bytes.items() if k.startswith("rank "))
        per_rank = "; " + ", ".join(f"{k} {format_size(v)}" for k, v in ranks) if ranks else ""
        return f"{head}, peak {format_size(self.peak_bytes)}{per_rank}"


def missing_privileges(root: pathlib.Path = CGROUP_ROOT) -> Optional[str]:
    """Why a memory group cannot be made here (None when it can): no v1 memory controller, or not writable."""
    if not (root / "memory.limit_in_bytes").exists():
        return f"no cgroup v1 memory controller at {root}"
    if not os.access(root, os.W_OK):
        return f"{root} is not writable (run as root)"
    return None


def _write(path: pathlib.Path, value) -> None:
    path.write_text(f"{value}\n")


def _read_int(path: pathlib.Path, default: int = 0) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def _pids(group: pathlib.Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _oom_kills(group: pathlib.Path) -> Optional[int]:
    """``oom_kill`` of the group's ``memory.oom_control`` (None on kernels without the line)."""
    try:
        for line in (group / "memory.oom_control").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def _remove(group: pathlib.Path, wait_s: float = 5.0) -> None:
    """Kills whatever is left in ``group`` and removes it (its child groups first), retrying while its last tasks
    are let go."""
    for child in [c for c in group.iterdir() if c.is_dir()] if group.exists() else []:
        _remove(child, wait_s)
    deadline = time.monotonic() + wait_s
    while group.exists():
        for pid in _pids(group):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@contextlib.contextmanager
def _sigterm_exits() -> Iterator[None]:
    """SIGTERM raises SystemExit in the main thread while a group exists, so the ``finally`` that removes it runs
    (Python's default SIGTERM ends the process at once, leaving the group and its rank groups behind)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def memory_group(limit_bytes: int, name: str = "run", root: pathlib.Path = CGROUP_ROOT) -> Iterator[pathlib.Path]:
    """A fresh memory group ``istjax-<name>-<pid>`` limited to ``limit_bytes`` (swap included where accounted),
    removed on exit whatever happens (its processes are killed first)."""
    why = missing_privileges(root)
    if why:
        raise PermissionError(f"cannot make a memory cgroup: {why}.")
    group = root / f"istjax-{name}-{os.getpid()}"
    with _sigterm_exits():
        group.mkdir()
        yield from _configured(group, limit_bytes)


def _configured(group: pathlib.Path, limit_bytes: int) -> Iterator[pathlib.Path]:
    """``group`` with its limit set, removed after the caller's block whatever happens."""
    try:
        _write(group / "memory.limit_in_bytes", limit_bytes)
        if (group / "memory.memsw.limit_in_bytes").exists():  # after limit_in_bytes: memsw may not be below it
            _write(group / "memory.memsw.limit_in_bytes", limit_bytes)
        yield group
    finally:
        _remove(group)


def _rank_name(pid: int) -> str:
    """``rank R`` for an MPI rank (``PMI_RANK`` in its environment), else ``<comm> <pid>``."""
    try:
        env = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        for item in env:
            if item.startswith(b"PMI_RANK="):
                return f"rank {int(item[9:])}"
        return f"{pathlib.Path(f'/proc/{pid}/comm').read_text().strip()} {pid}"
    except (OSError, ValueError):
        return f"pid {pid}"


def _hwm(pid: int) -> Optional[int]:
    """VmHWM of ``pid`` in bytes (None when it is gone, or a kernel thread)."""
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _poll_peaks(group: pathlib.Path, peaks: dict, names: dict) -> None:
    for pid in _pids(group):
        hwm = _hwm(pid)
        if hwm is None:
            continue
        names.setdefault(pid, _rank_name(pid))
        peaks[names[pid]] = max(peaks.get(names[pid], 0), hwm)


def _exit_code(returncode: int) -> int:
    """Popen's ``-N`` for signal N as the shell's ``128 + N``."""
    return 128 - returncode if returncode < 0 else returncode


def _stop(proc: subprocess.Popen, group: pathlib.Path) -> None:
    """Kills the command's process group, then any process of the memory group left (mpiexec's proxies may start
    sessions of their own), and reaps the command."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in [p for g in [group, *_rank_groups(group)] for p in _pids(g)]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _joining(group: pathlib.Path, cmd: Sequence[str]) -> list[str]:
    """``cmd`` behind a shell that writes its own pid to the group's ``cgroup.procs`` and then execs it: the command
    and all it starts are charged to the group from their first page. (A ``preexec_fn`` would do the same, but forces
    a fork of this process, which JAX, multithreaded, warns may deadlock.)"""
    return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group / "cgroup.procs"), *cmd]


def run_limited(cmd: Sequence[str], limit_bytes: int, *, timeout: Optional[float] = None, name: str = "run",
                root: pathlib.Path = CGROUP_ROOT, **popen) -> Limited:
    """Runs ``cmd`` with all its processes in a memory group limited to ``limit_bytes``; waits at most ``timeout``
    seconds (then kills it); removes the group; returns what happened (`Limited`). ``popen``: passed to
    `subprocess.Popen` (``stdout``, ``env``, ``cwd``, ...)."""
    with memory_group(limit_bytes, name, root) as group:
        return _run_in(group, _joining(group, cmd), limit_bytes, timeout, popen)


def _rank_shim(group: pathlib.Path, limit_bytes: int) -> list[str]:
    """The prefix that starts one rank in its own child group ``rank<PMI_RANK>`` of ``group``, limited to
    ``limit_bytes`` (swap included where accounted), then execs the rank's command."""
    script = ('g="$0/rank$PMI_RANK" && mkdir "$g" && echo {n} > "$g/memory.limit_in_bytes" && '
              '{{ [ ! -e "$g/memory.memsw.limit_in_bytes" ] || echo {n} > "$g/memory.memsw.limit_in_bytes"; }} && '
              'echo $$ > "$g/cgroup.procs" && exec "$@"').format(n=int(limit_bytes))
    return ["/bin/sh", "-c", script, str(group)]


def run_ranks(num_ranks: int, rank_cmd: Sequence[str], per_rank_bytes: int, *, mpiexec: str = "mpiexec",
              timeout: Optional[float] = None, name: str = "ranks", root: pathlib.Path = CGROUP_ROOT,
              **popen) -> Limited:
    """``mpiexec -n num_ranks rank_cmd`` with every rank limited to ``per_rank_bytes`` on its own (module docstring):
    the kernel kills a rank that goes over. ``peak_rss_bytes`` holds each rank's VmHWM and ``rank_peak_bytes``
    each rank group's peak; ``oom_killed`` is True when the kernel killed any rank."""
    with memory_group(num_ranks * per_rank_bytes + LAUNCHER_BYTES, name, root) as group:
        cmd = [mpiexec, "-n", str(num_ranks), *_rank_shim(group, per_rank_bytes), *rank_cmd]
        return _run_in(group, _joining(group, cmd), per_rank_bytes, timeout, popen, per_rank=True)


def _rank_groups(group: pathlib.Path) -> list[pathlib.Path]:
    return sorted(c for c in group.iterdir() if c.is_dir() and c.name.startswith("rank"))


def _run_in(group: pathlib.Path, cmd: list[str], limit_bytes: int, timeout: Optional[float], popen: dict, *,
            per_rank: bool = False) -> Limited:
    """Runs ``cmd`` (which joins ``group`` itself) to the end or the timeout, polling its processes' peaks, and reads
    the group (and, ``per_rank``, its rank groups) back before it is removed."""
    peaks: dict = {}
    names: dict = {}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, start_new_session=True, **popen)
    timed_out = False
    try:
        while proc.poll() is None:
            for g in [group, *(_rank_groups(group) if per_rank else [])]:
                _poll_peaks(g, peaks, names)
            if timeout is not None and time.monotonic() - t0 > timeout:
                timed_out = True
                break
            time.sleep(POLL_S)
    finally:
        if proc.poll() is None:
            _stop(proc, group)
    elapsed = time.monotonic() - t0
    groups = _rank_groups(group) if per_rank else [group]
    kills = [_oom_kills(g) for g in groups]
    returncode = _exit_code(proc.returncode)
    if all(k is not None for k in kills):
        oom = sum(kills) > 0
    else:
        oom = returncode in (KILLED, 9) and any(_read_int(g / "memory.failcnt") > 0 for g in groups) \
            and not timed_out
    rank_peaks = {f"rank {g.name[4:]}": _read_int(g / "memory.max_usage_in_bytes") for g in groups} \
        if per_rank else {}
    peak = max(rank_peaks.values(), default=0) if per_rank else _read_int(group / "memory.max_usage_in_bytes")
    killed = tuple(f"rank {g.name[4:]}" for g, k in zip(groups, kills) if k) if per_rank else ()
    return Limited(returncode, limit_bytes, peak, oom, timed_out, peaks, elapsed, rank_peaks, killed)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m experiments.extreme.limits --limit SIZE [--timeout S] [--name N] -- CMD ...``: prints the one-line
    summary (to stderr, after the command's own output) and returns the command's exit code."""
    ap = argparse.ArgumentParser(prog="python -m experiments.extreme.limits", description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", required=True, help="memory limit: bytes or a size such as 300MiB, 1.5GiB, 2GB")
    ap.add_argument("--timeout", type=float, default=None, help="seconds before the command is killed")
    ap.add_argument("--name", default="run", help="part of the group's name, istjax-<name>-<pid>")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- and the command to run")
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("give the command after --")
    try:
        limit = parse_bytes(args.limit, "limit")
    except ValueError as e:
        ap.error(str(e))
    if not limit:
        ap.error("--limit must be above 0")
    why = missing_privileges()
    if why:
        print(f"limits: cannot make a memory cgroup: {why}.", file=sys.stderr)
        return 2
    result = run_limited(cmd, limit, timeout=args.timeout, name=args.name)
    print(result.summary, file=sys.stderr, flush=True)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
