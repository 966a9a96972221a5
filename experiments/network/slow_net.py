"""A slow network on one machine: N network namespaces joined by shaped veth links, and ``mpiexec`` across them.

Run as root (or with CAP_NET_ADMIN) from the repository root::

    python -m experiments.network.slow_net --hosts 2 --rate 100mbit -- \\
        python -m istjax.launch.cli train --config=experiments/configs/speech2_ist.py --config.runtime.name=mpi

What it builds (every name carries a per-run tag, so two runs never touch each other's devices)::

    root namespace:  bridge  isj<tag>br   198.18.0.254/15
                        |-- veth isj<tag>b0  <->  isj<tag>h0 in namespace isj<tag>-0   198.18.0.1/15
                        |-- veth isj<tag>b1  <->  isj<tag>h1 in namespace isj<tag>-1   198.18.0.2/15
                        ...

Each host's link is shaped in both directions with ``tc``: the namespace side's egress (what the host sends) and
the bridge side's egress (what it receives) each get a token bucket (``tbf``, the rate), under ``netem`` when a
delay or a loss is asked for, so a host has a full-duplex link of the given rate (and one-way delay). Kernels built
without netem (this project's CI machines among them) shape the rate only; asking them for a delay is refused with
that reason, after removing what was created. Addresses come from
198.18.0.0/15, the range RFC 2544 sets aside for benchmarking; nothing is routed outside the namespaces.

``mpiexec`` then starts one rank per namespace through ``ip netns exec`` (MPMD syntax), with
``MPIR_CVAR_NOLOCAL=1`` and ``UCX_TLS=tcp,self``: MPICH would otherwise see one host and use shared memory,
and nothing would cross the links (`../shared/REFERENCE.md`). The links' byte counters are read before and after
and printed (and written with ``--report``), so a run shows that its traffic crossed them.

Everything is torn down on exit, on Ctrl-C, on SIGTERM and on failure; without the privileges it refuses before
creating anything. The pure parts (the address plan, the ``ip``/``tc`` command lines, the teardown list, the
``mpiexec`` line) are functions of their arguments, tested in ``tests/test_network.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import ipaddress
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, Optional

NETWORK = ipaddress.ip_network("198.18.0.0/15")  # RFC 2544 benchmarking range
BRIDGE_HOST = 254  # the bridge's address: 198.18.0.254
MAX_HOSTS = 64
CAP_NET_ADMIN = 12

_RATE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps)$")
_TIME = re.compile(r"^\d+(\.\d+)?(s|ms|us)$")
_LOSS = re.compile(r"^\d+(\.\d+)?%$")


@dataclasses.dataclass(frozen=True)
class Link:
    """How every host's link is shaped: ``rate`` (tc units, e.g. ``"100mbit"``, ``"1gbit"``), optional one-way
    ``delay`` (``"0.1ms"``) and ``loss`` (``"0.1%"``); delay and loss need the kernel's ``netem``."""

    rate: str = "1gbit"
    delay: Optional[str] = None
    loss: Optional[str] = None

    def __post_init__(self):
        if not _RATE.match(self.rate):
            raise ValueError(f"rate={self.rate!r}: use tc's units, e.g. '100mbit', '1gbit', '10gbit'.")
        if self.delay is not None and not _TIME.match(self.delay):
            raise ValueError(f"delay={self.delay!r}: use tc's units, e.g. '0.1ms', '1ms', '500us'.")
        if self.loss is not None and not _LOSS.match(self.loss):
            raise ValueError(f"loss={self.loss!r}: a percentage such as '0.1%' (or leave it out).")

    def bits_per_second(self) -> float:
        num, unit = re.match(r"^([\d.]+)(\w+)$", self.rate).groups()
        scale = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
                 "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}[unit]
        return float(num) * scale


@dataclasses.dataclass(frozen=True)
class Host:
    namespace: str
    inner: str    # the veth end inside the namespace
    outer: str    # its peer, attached to the bridge
    address: str  # with prefix length, e.g. 198.18.0.1/15


@dataclasses.dataclass(frozen=True)
class Plan:
    tag: str
    bridge: str
    bridge_address: str
    hosts: tuple[Host, ...]


def make_plan(num_hosts: int, tag: str) -> Plan:
    """Names and addresses for ``num_hosts`` hosts; ``tag`` (1-6 letters or digits) makes the names unique."""
    if not isinstance(num_hosts, int) or not 1 <= num_hosts <= MAX_HOSTS:
        raise ValueError(f"--hosts={num_hosts!r}: need 1 to {MAX_HOSTS} hosts (one MPI rank each).")
    if not re.fullmatch(r"[a-z0-9]{1,6}", tag):
        raise ValueError(f"tag={tag!r}: 1-6 lower-case letters or digits (interface names are at most 15 characters).")
    prefix = NETWORK.prefixlen
    base = int(NETWORK.network_address)
    hosts = tuple(Host(namespace=f"isj{tag}-{i}", inner=f"isj{tag}h{i}", outer=f"isj{tag}b{i}",
                       address=f"{ipaddress.ip_address(base + 1 + i)}/{prefix}") for i in range(num_hosts))
    return Plan(tag=tag, bridge=f"isj{tag}br", bridge_address=f"{ipaddress.ip_address(base + BRIDGE_HOST)}/{prefix}",
                hosts=hosts)


def shape_commands(device: str, link: Link, namespace: Optional[str] = None) -> list[list[str]]:
    """``tc`` lines shaping ``device``'s egress: a token bucket (``tbf``, the rate) at the root, or, with a delay or
    a loss, ``netem`` at the root and the token bucket under it."""
    # Burst: at least one timer tick's worth of bytes at this rate (tbf cannot reach the rate with too small a bucket).
    burst = max(32 * 1024, int(link.bits_per_second() / 8 / 250))
    tc = (["ip", "netns", "exec", namespace] if namespace else []) + ["tc", "qdisc", "add", "dev", device]
    tbf = ["tbf", "rate", link.rate, "burst", str(burst), "latency", "100ms"]
    if link.delay is None and link.loss is None:
        return [tc + ["root", "handle", "1:"] + tbf]
    netem = ["netem"] + (["delay", link.delay] if link.delay else []) + (["loss", link.loss] if link.loss else [])
    return [tc + ["root", "handle", "1:"] + netem, tc + ["parent", "1:", "handle", "2:"] + tbf]


def setup_commands(plan: Plan, link: Link) -> list[list[str]]:
    """Every ``ip``/``tc`` line that builds ``plan``, in order."""
    cmds = [["ip", "link", "add", plan.bridge, "type", "bridge"],
            ["ip", "addr", "add", plan.bridge_address, "dev", plan.bridge],
            ["ip", "link", "set", plan.bridge, "up"]]
    for h in plan.hosts:
        ns = ["ip", "netns", "exec", h.namespace]
        cmds += [["ip", "netns", "add", h.namespace],
                 ["ip", "link", "add", h.outer, "type", "veth", "peer", "name", h.inner],
                 ["ip", "link", "set", h.inner, "netns", h.namespace],
                 ["ip", "link", "set", h.outer, "master", plan.bridge],
                 ["ip", "link", "set", h.outer, "up"],
                 ns + ["ip", "addr", "add", h.address, "dev", h.inner],
                 ns + ["ip", "link", "set", h.inner, "up"],
                 ns + ["ip", "link", "set", "lo", "up"]]
        cmds += shape_commands(h.inner, link, h.namespace)  # what the host sends
        cmds += shape_commands(h.outer, link)  # what it receives
    return cmds


def teardown_commands(plan: Plan) -> list[list[str]]:
    """Lines that remove everything ``plan`` creates (deleting a namespace deletes its veth pair)."""
    return [["ip", "netns", "delete", h.namespace] for h in plan.hosts] + [["ip", "link", "delete", plan.bridge]]


# Runs the rank's command and, when it fails, names the rank (mpiexec names only a pid, through `ip netns exec`).
_REPORT_EXIT = ('"$@"; rc=$?; if [ $rc -ne 0 ]; then echo "slow_net: rank {rank} (namespace {namespace}) ended with '
                'status $rc$([ $rc -gt 128 ] && echo ", killed by signal $((rc - 128))")" >&2; fi; exit $rc')


def mpiexec_command(plan: Plan, command: Sequence[str], *, mpiexec: str = "mpiexec", bind: bool = True,
                    env: Optional[dict[str, str]] = None) -> list[str]:
    """One rank per host, each started inside its namespace; MPICH told to use TCP, not shared memory."""
    if not command:
        raise ValueError("no command to run: put it after `--`, e.g. `-- python -m istjax.launch.cli train ...`.")
    genv = {"MPIR_CVAR_NOLOCAL": "1", "UCX_TLS": "tcp,self", **(env or {})}
    argv = [mpiexec]
    for k, v in genv.items():
        argv += ["-genv", k, v]
    if bind:
        argv += ["-bind-to", "core"]
    for i, h in enumerate(plan.hosts):
        if i:
            argv.append(":")
        # UCX_NET_DEVICES: this rank's link only (not the namespace's loopback, which every rank has).
        argv += ["-n", "1", "-env", "UCX_NET_DEVICES", h.inner, "ip", "netns", "exec", h.namespace,
                 "sh", "-c", _REPORT_EXIT.format(rank=i, namespace=h.namespace), f"rank{i}"] + list(command)
    return argv


# ---------------------------------------------------------------------------------------------------------------
# The parts that touch the machine


def missing_privileges() -> Optional[str]:
    """Why this process cannot build namespaces (None when it can): root or CAP_NET_ADMIN, and ``ip``/``tc``."""
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian: apt-get install iproute2)."
    if os.geteuid() == 0:
        return None
    try:
        with open("/proc/self/status") as f:
            caps = next(line for line in f if line.startswith("CapEff:"))
        if int(caps.split()[1], 16) >> CAP_NET_ADMIN & 1:
            return None
    except (OSError, StopIteration, ValueError):
        pass
    return ("creating network namespaces needs root or CAP_NET_ADMIN; run it with sudo (or in a container with "
            "--cap-add NET_ADMIN). Nothing was created.")


def _run(cmd: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True)


def read_counters(plan: Plan) -> dict[str, dict[str, int]]:
    """``namespace -> {"tx_bytes", "rx_bytes"}`` of each host's link, from the kernel's counters."""
    out = {}
    for h in plan.hosts:
        stats = {}
        for what in ("tx_bytes", "rx_bytes"):
            r = _run(["ip", "netns", "exec", h.namespace, "cat", f"/sys/class/net/{h.inner}/statistics/{what}"])
            stats[what] = int(r.stdout.strip())
        out[h.namespace] = stats
    return out


def teardown(plan: Plan) -> list[str]:
    """Removes what ``plan`` made (whatever exists of it); returns the lines that failed for another reason."""
    failed = []
    for cmd in teardown_commands(plan):
        r = _run(cmd, check=False)
        if r.returncode and "No such" not in r.stderr and "Cannot find" not in r.stderr \
                and "does not exist" not in r.stderr:
            failed.append(" ".join(cmd) + ": " + r.stderr.strip())
    return failed


def leftovers(plan: Plan) -> list[str]:
    """The namespaces and devices of ``plan`` that still exist."""
    names = _run(["ip", "netns", "list"], check=False).stdout
    left = [h.namespace for h in plan.hosts if re.search(rf"^{re.escape(h.namespace)}\b", names, re.M)]
    if _run(["ip", "link", "show", plan.bridge], check=False).returncode == 0:
        left.append(plan.bridge)
    return left


class _Interrupted(Exception):
    pass


@contextlib.contextmanager
def slow_network(num_hosts: int, link: Link, tag: Optional[str] = None) -> Iterator[Plan]:
    """Builds the namespaces and links, yields the `Plan`, and removes everything on the way out, also on Ctrl-C
    and SIGTERM (turned into an exception so the ``finally`` runs)."""
    why = missing_privileges()
    if why:
        raise PermissionError(why)
    plan = make_plan(num_hosts, tag or f"{os.getpid() % 1_000_000:d}"[-6:])
    if leftovers(plan):
        raise RuntimeError(f"namespaces or devices of tag {plan.tag!r} already exist ({leftovers(plan)}); remove "
                           f"them (`ip netns delete ...`) or pass another --tag.")
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def interrupt(signum, frame):
        raise _Interrupted(f"signal {signal.Signals(signum).name}")

    for s in previous:
        signal.signal(s, interrupt)
    try:
        for cmd in setup_commands(plan, link):
            r = _run(cmd, check=False)
            if r.returncode and "netem" in cmd and "unknown" in r.stderr:
                raise RuntimeError("this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM), so it cannot add a delay "
                                   "or a loss; run without --delay and --loss (the rate is shaped with tbf), or on "
                                   "a kernel with netem. Everything created was removed.")
            if r.returncode:
                raise RuntimeError(f"`{' '.join(cmd)}` failed: {r.stderr.strip()}")
        yield plan
    finally:
        failed = teardown(plan)
        for s, h in previous.items():
            signal.signal(s, h)
        if failed:
            print("slow_net: teardown could not remove:\n  " + "\n  ".join(failed), file=sys.stderr)


def run_command(plan: Plan, command: Sequence[str], *, mpiexec: str, bind: bool, timeout: Optional[float]
                ) -> dict[str, Any]:
    """Runs ``command`` under ``mpiexec`` across the hosts; returns its exit code, wall time and link counters."""
    before = read_counters(plan)
    argv = mpiexec_command(plan, command, mpiexec=mpiexec, bind=bind)
    t0 = time.time()
    proc = subprocess.Popen(argv, start_new_session=True)
    try:
        rc = proc.wait(timeout=timeout)
    except (subprocess.TimeoutExpired, _Interrupted, KeyboardInterrupt) as stopped:
        if isinstance(stopped, subprocess.TimeoutExpired):  # a job past its timeout: record where it was first
            print(snapshot(plan, proc.pid), file=sys.stderr, flush=True)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    wall = time.time() - t0
    after = read_counters(plan)
    links = {ns: {k: after[ns][k] - before[ns][k] for k in after[ns]} for ns in after}
    return {"returncode": rc, "wall_s": wall, "links": links, "argv": argv}


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...), from ``/proc``."""
    children: dict[int, list[int]] = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended while we looked
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def snapshot(plan: Plan, pid: int, wait: float = 3.0) -> str:
    """What a job that ran past its timeout is doing, before it is killed: SIGUSR1 to every process under ``pid``
    (an ``istjax train`` rank answers with every thread's Python stack on its stderr, which mpiexec passes on),
    then per host its TCP sockets (``ss -tin``: retransmissions, congestion window, RTO, bytes unacknowledged)
    and its link's queue counters (``tc -s qdisc``: drops, overlimits, backlog)."""
    for child in descendants(pid):
        with contextlib.suppress(OSError):
            comm = pathlib.Path(f"/proc/{child}/comm").read_text().strip()
            if comm.startswith("python"):
                os.kill(child, signal.SIGUSR1)
    time.sleep(wait)  # the ranks write their stacks
    lines = [f"slow_net: the job ran past its timeout; its state before it is killed "
             f"(the ranks' Python stacks are above, each under 'Thread'):"]
    for h in plan.hosts:
        for cmd in (["ss", "-tin"], ["tc", "-s", "qdisc", "show", "dev", h.inner]):
            r = _run(["ip", "netns", "exec", h.namespace, *cmd], check=False)
            lines.append(f"--- {h.namespace}: {' '.join(cmd)}\n{(r.stdout or r.stderr).strip()}")
        r = _run(["tc", "-s", "qdisc", "show", "dev", h.outer], check=False)
        lines.append(f"--- root namespace: tc -s qdisc show dev {h.outer}\n{(r.stdout or r.stderr).strip()}")
    return "\n".join(lines)


def default_mpiexec() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else (shutil.which("mpiexec") or "mpiexec")


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(prog="python -m experiments.network.slow_net", description=__doc__.split("\n\n")[0],
                                 epilog="Everything after `--` is the command each rank runs.")
    ap.add_argument("--hosts", type=int, default=2, help="namespaces = MPI ranks (default 2)")
    ap.add_argument("--rate", default="1gbit", help="each host's link rate, tc units (default 1gbit)")
    ap.add_argument("--delay", default=None, help="one-way delay per link, e.g. 0.1ms (needs netem; default none)")
    ap.add_argument("--loss", default=None, help="packet loss per link, e.g. 0.1%% (default none)")
    ap.add_argument("--tag", default=None, help="name tag of this run's devices (default: from the pid)")
    ap.add_argument("--no-bind", action="store_true", help="do not pass -bind-to core to mpiexec")
    ap.add_argument("--timeout", type=float, default=None, help="seconds before the job is killed")
    ap.add_argument("--report", default=None, help="write the link counters and timing here (JSON)")
    ap.add_argument("--mpiexec", default=None, help="mpiexec to use (default: the one beside this Python)")
    args = ap.parse_args(own)
    try:
        link = Link(args.rate, args.delay, args.loss)
        make_plan(args.hosts, args.tag or "x")  # validate before anything is created
        if not command:
            raise ValueError("no command to run: put it after `--`, e.g. `-- python -m istjax.launch.cli train ...`.")
    except ValueError as e:
        ap.error(str(e))
    try:
        with slow_network(args.hosts, link, args.tag) as plan:
            print(f"slow_net: {args.hosts} hosts on {plan.bridge}, links {link.rate}"
                  f"{', delay ' + link.delay if link.delay else ''}{', loss ' + link.loss if link.loss else ''}",
                  flush=True)
            result = run_command(plan, command, mpiexec=args.mpiexec or default_mpiexec(), bind=not args.no_bind,
                                 timeout=args.timeout)
    except (PermissionError, RuntimeError) as e:
        print(f"slow_net: {e}", file=sys.stderr)
        return 2
    except (_Interrupted, KeyboardInterrupt) as e:
        print(f"slow_net: interrupted ({e or 'Ctrl-C'}); namespaces removed.", file=sys.stderr)
        return 130
    except subprocess.TimeoutExpired:
        print(f"slow_net: the job ran past --timeout={args.timeout} s and was killed; namespaces removed.",
              file=sys.stderr)
        return 124
    result.update(hosts=args.hosts, link=dataclasses.asdict(link))
    for ns, c in result["links"].items():
        print(f"slow_net: {ns}: sent {c['tx_bytes']:,} B, received {c['rx_bytes']:,} B over its link")
    if args.report:
        with open(args.report, "w") as f:
            json.dump(result, f, indent=2)
    return int(result["returncode"])


if __name__ == "__main__":
    sys.exit(main())
