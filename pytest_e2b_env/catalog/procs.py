"""The processes of a run, read from ``/proc``: what a case host started, and who waited for a CPU.

Containment: a case host makes itself a child subreaper before any subject code runs, so every
process the subject starts stays in the host's tree (a ``setsid`` daemon whose parent exits is
adopted by the host, not by init); the template hosts are forked from is one too, so what a
crashed host leaves is adopted by the template. Every host and template also carries a marker in
its environment (:data:`MARKER`: this run's token, and the host's serial), inherited by what the
subject starts, so the controller finds a process that left the tree through its environment.
No namespace, cgroup or privilege is needed, so this works for a user who is not root.

Accounting: the seconds a process's threads spent runnable but waiting for a CPU (``schedstat``),
and the CPU a process tree used, so a deadline overrun can be told apart from a starved machine.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import threading
import time

from pytest_e2b_env.settings import ENV_HOST_MARKER
from pytest_e2b_env.standalone import linux as L

#: The environment variable naming a process as this run's subject code (see the module doc).
MARKER = ENV_HOST_MARKER


def new_token() -> str:
    """A fresh token for the hosts and templates of one run (:data:`MARKER` carries it)."""
    return "pe2b-" + secrets.token_hex(8)


#: The token of hosts and templates made without one of their own (library use).
RUN_TOKEN = new_token()
#: Most processes walked or killed at once (a fork bomb is bounded by its sandbox, not here).
MAX_PROCS = 4096
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def become_subreaper() -> bool:
    """Adopt this process's orphaned descendants (``PR_SET_CHILD_SUBREAPER``); False if refused."""
    try:
        L.prctl(L.PR_SET_CHILD_SUBREAPER, 1)
    except OSError:
        return False
    return True


def _read(path: str, size: int = 1 << 16) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except OSError:
        return None


def children(pid: int) -> list[int]:
    """The live children of ``pid`` (every thread's), from ``/proc``."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        for child in (_read(f"/proc/{pid}/task/{tid}/children") or b"").split():
            if child.isdigit():
                found.append(int(child))
    return found


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, parents before their children (bounded)."""
    out: list[int] = []
    seen = {pid}
    todo = [pid]
    while todo and len(out) < MAX_PROCS:
        for child in children(todo.pop(0)):
            if child not in seen:
                seen.add(child)
                out.append(child)
                todo.append(child)
    return out


def state(pid: int) -> str | None:
    """The process's state letter (``R``, ``S``, ``Z``...), None when it is gone."""
    raw = _read(f"/proc/{pid}/stat", 1024)
    if raw is None:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return fields[0].decode() if fields else None


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended; only its exit status waits to be collected)."""
    return state(pid) not in (None, "Z", "X")


def _kill(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_tree(root: int, *, include_root: bool = False, rounds: int = 20) -> list[int]:
    """SIGKILL every descendant of ``root`` (and ``root`` itself if asked); the pids killed.

    Each round stops what it finds first, so nothing forks while the round kills, and repeats
    until a walk finds nothing alive (a process forking as we walk is caught the next round).
    """
    killed: list[int] = []
    for _ in range(rounds):
        found = [p for p in descendants(root) if alive(p)]
        if include_root and alive(root):
            found.insert(0, root)
        if not found:
            break
        _kill(found, signal.SIGSTOP)
        _kill(found, signal.SIGKILL)
        killed += [p for p in found if p not in killed]
        time.sleep(0.01)
    return killed


def marked(token: str) -> list[int]:
    """Processes whose environment names them as ``token``'s (exactly, or a host under it)."""
    wanted = f"{MARKER}={token}".encode()
    found: list[int] = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        environ = _read(f"/proc/{name}/environ", 1 << 20)
        if not environ:
            continue
        for item in environ.split(b"\0"):
            if item == wanted or item.startswith(wanted + b":"):
                found.append(int(name))
                break
    return found


def kill_marked(token: str) -> list[int]:
    """SIGKILL every live process marked as ``token``'s, with its descendants; the pids killed."""
    killed: list[int] = []
    for _ in range(5):
        found = [p for p in marked(token) if alive(p)]
        if not found:
            break
        _kill(found, signal.SIGSTOP)
        for pid in found:
            killed += kill_tree(pid, include_root=True)
    return killed


# ---------------------------------------------------------------------- CPU accounting
def waited(pid: int) -> dict[int, float]:
    """Seconds each thread of ``pid`` has spent runnable, waiting for a CPU (``schedstat``)."""
    out: dict[int, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        raw = _read(f"/proc/{pid}/task/{tid}/schedstat", 128)
        with contextlib.suppress(ValueError, IndexError, AttributeError):
            out[int(tid)] = int(raw.split()[1]) / 1e9  # type: ignore[union-attr]
    return out


def tree_cpu(pid: int) -> float:
    """CPU seconds ``pid`` and its live descendants used (their reaped children's included)."""
    total = 0
    for each in [pid, *descendants(pid)]:
        raw = _read(f"/proc/{each}/stat", 1024)
        if raw is None:
            continue
        with contextlib.suppress(ValueError, IndexError):
            total += sum(int(f) for f in raw[raw.rfind(b")") + 2 :].split()[11:15])
    return total / CLOCK_TICKS


class Starvation:
    """Around one call: the longest any harness thread waited for a CPU, and the subject's own CPU.

    ``harness`` are the target's server process (the emulator; live, this process with its proxy)
    and ``subject`` the process running the subject (its case host). An overrun is the machine's
    when a harness thread waited at least that long while the subject's tree used no more CPU
    than that wait: a subject that is the load itself is not excused.
    """

    def __init__(self, harness: list[int], subject: int | None) -> None:
        self.harness = [p for p in harness if p]
        self.subject = subject
        self._before = {pid: waited(pid) for pid in self.harness}
        self._cpu = tree_cpu(subject) if subject else 0.0

    def measure(self) -> dict[str, float]:
        """``{"harness_waited_s", "subject_cpu_s"}`` since this object was made."""
        longest = 0.0
        for pid, before in self._before.items():
            for tid, now in waited(pid).items():
                longest = max(longest, now - before.get(tid, 0.0))
        cpu = (tree_cpu(self.subject) - self._cpu) if self.subject else 0.0
        return {"harness_waited_s": round(longest, 3), "subject_cpu_s": round(max(cpu, 0.0), 3)}


#: Sockets a process tree may hold that :func:`fixed_ports` looks at (bounded like the walk).
MAX_SOCKETS = 4096


def _socket_inodes(pids: list[int]) -> set[int]:
    inodes: set[int] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds[:MAX_SOCKETS]:
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(int(link[8:-1]))
    return inodes


def _ephemeral_low() -> int:
    raw = _read("/proc/sys/net/ipv4/ip_local_port_range", 64) or b"32768 60999"
    with contextlib.suppress(ValueError, IndexError):
        return int(raw.split()[0])
    return 32768


def fixed_ports(pid: int) -> list[int]:
    """TCP ports that ``pid`` or a descendant listens on below the ephemeral range: a port chosen
    in the code (a server on a fixed port, shared by every process of the machine), not one the
    kernel picked for ``bind(port=0)``. Sorted, from ``/proc/net/tcp{,6}`` of this namespace."""
    inodes = _socket_inodes([pid, *descendants(pid)])
    low = _ephemeral_low()
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in (_read(table, 1 << 22) or b"").splitlines()[1:]:
            fields = line.split()
            if len(fields) < 10 or fields[3] != b"0A":  # 0A: LISTEN
                continue
            with contextlib.suppress(ValueError):
                port = int(fields[1].rsplit(b":", 1)[1], 16)
                if int(fields[9]) in inodes and port < low:
                    ports.add(port)
    return sorted(ports)


class PortWatch:
    """:func:`fixed_ports` of a process tree, looked at every ``every`` seconds from a thread until
    :meth:`stop`: a subject may hold its server only while it is open (a pool's metrics endpoint
    opened with the pool and closed with it), so one look after its case would miss it."""

    def __init__(self, pid: int, every: float = 0.1) -> None:
        self.pid, self.every = pid, every
        self.ports: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="pe2b-port-watch", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # a tree gone mid-look: nothing to add
                self.ports.update(fixed_ports(self.pid))
            if self._stop.wait(self.every):
                return

    def stop(self) -> list[int]:
        """Stop looking (after one last look); every fixed port seen, sorted."""
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(Exception):
            self.ports.update(fixed_ports(self.pid))
        return sorted(self.ports)
