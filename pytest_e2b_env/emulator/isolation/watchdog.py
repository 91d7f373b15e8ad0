"""Memory bounds without a memory cgroup: a watchdog over each sandbox's processes and files.

Where no memory cgroup can be written (a user who is not root on a host whose cgroups are not
delegated to them), every ``period`` seconds the watchdog adds up, per sandbox, the resident
memory of its processes (the init's tree, and each command's, read from ``/proc``) and what its
files take on its tmpfs (``statvfs`` of its root). Past the sandbox's quota, or when all
sandboxes together pass the aggregate, the largest process of the sandbox over its quota (or of
the largest sandbox) gets SIGKILL, as the kernel's OOM killer would do it: exit 137 to the caller.

It is coarser than a cgroup: a program that allocates faster than one ``period`` can briefly
exceed its quota, and memory outside processes (kernel buffers) is not counted. Each pass reads
at most ``max_reads`` ``/proc`` files, so a fork bomb cannot make the watchdog itself expensive.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

PAGE = os.sysconf("SC_PAGE_SIZE")
PERIOD = 0.25
MAX_READS = 20000


@dataclass
class Usage:
    """One sandbox's memory in one pass."""

    name: str
    files: int = 0
    processes: dict[int, int] = field(default_factory=dict)  # pid -> resident bytes

    @property
    def total(self) -> int:
        return self.files + sum(self.processes.values())


@dataclass(frozen=True)
class Watched:
    """What the watchdog needs of a sandbox: its name, init pid, the pids of running commands, and
    the path whose file system holds its files (``/proc/<init>/root``; None: no files counted)."""

    name: str
    init_pid: int
    commands: tuple[int, ...]
    files_root: str | None


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(x) for x in fh.read().split()]
    return out


def _resident(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _files(root: str | None) -> int:
    if root is None:
        return 0
    try:
        st = os.statvfs(root)
    except OSError:
        return 0
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def measure(box: Watched, budget: list[int]) -> Usage:
    """Resident memory of every process below the init and the commands, plus the files (bounded reads)."""
    usage = Usage(box.name, files=_files(box.files_root))
    todo = [box.init_pid, *box.commands]
    seen: set[int] = set()
    while todo and budget[0] > 0:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        budget[0] -= 2
        if pid != box.init_pid:  # the init is small and never the one to kill
            usage.processes[pid] = _resident(pid)
        todo += _children(pid)
    return usage


class Watchdog:
    """The emulator's memory watchdog (one thread; started only where no memory cgroup applies)."""

    def __init__(
        self,
        quota_bytes: int,
        aggregate_bytes: int,
        boxes: Callable[[], Iterable[Watched]],
        period: float = PERIOD,
        max_reads: int = MAX_READS,
    ) -> None:
        self.quota = quota_bytes
        self.aggregate = aggregate_bytes
        self.period = period
        self.max_reads = max_reads
        self._boxes = boxes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="e2b-memory-watchdog", daemon=True)
        #: How many processes it killed, by reason (the control API's info shows them).
        self.kills: dict[str, int] = {"quota": 0, "aggregate": 0}

    def start(self) -> Watchdog:
        """Start watching."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self.check()
            except Exception as exc:  # the watchdog must outlive any odd /proc state
                print(
                    f"pytest-e2b-env emulator: memory watchdog: {type(exc).__name__}: {exc}", file=sys.stderr
                )

    def check(self) -> list[int]:
        """One pass: kill what is over a quota; the pids killed."""
        budget = [self.max_reads]
        usages = [measure(box, budget) for box in list(self._boxes())]
        killed = []
        for usage in usages:
            if usage.total > self.quota and usage.processes:
                killed.append(self._kill_largest(usage, "quota"))
        total = sum(u.total for u in usages)
        if total > self.aggregate:
            over = max((u for u in usages if u.processes), key=lambda u: u.total, default=None)
            if over is not None:
                killed.append(self._kill_largest(over, "aggregate"))
        return killed

    def _kill_largest(self, usage: Usage, why: str) -> int:
        pid = max(usage.processes, key=lambda p: usage.processes[p])
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        usage.processes.pop(pid)
        self.kills[why] += 1
        return pid
