"""Per-sandbox and aggregate bounds of the namespaces level: memory, processes, disk and CPU.

* **Disk.** A sandbox's writable layer lives on its own tmpfs of ``disk_mb`` MiB and ``FILES``
  inodes, mounted by the sandbox's builder in a private mount namespace: writes past the quota
  fail with ENOSPC, nothing reaches the host's disk, and the layer disappears with the sandbox.
* **Processes.** Each sandbox's user namespace is created with RLIMIT_NPROC (``max_procs``, see
  ``sandbox_init.make_userns``): the kernel caps every sandbox at that many processes, as root
  or not. In aggregate, across all sandboxes of an emulator: a pids cgroup (v1 ``pids``, or v2
  ``pids.max``), or, without one, the RLIMIT_NPROC the emulator's own user namespace was created
  with (rootless; that count includes the user's other processes).
* **Memory.** A cgroup per sandbox limited to ``memory_mb + disk_mb`` MiB (the layer's tmpfs
  pages count as the sandbox's memory), below the emulator's group limited to the aggregate:
  cgroup v1 ``memory`` (root), or a cgroup v2 subtree the emulator may write (root, or one
  delegated to the user). Without either, :mod:`.watchdog` bounds the same sums.
* **CPU.** With a cgroup (v1 ``cpu``, v2 ``cpu.max``), every sandbox weighs the same and may use at
  most its vCPUs (2, E2B's default), so a fork bomb in one sandbox slows the others by a share.

Cgroups are named after the emulator's owner name (``pytest-e2b-env-<name>``, see :mod:`.owners`)
and swept only once that owner's lock shows it dead; a root removed under a running emulator is
made again.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: What the control plane reports for every sandbox (``memoryMB``, ``diskSizeMB``), as E2B's default.
DEFAULT_MEMORY_MB = 512
DEFAULT_DISK_MB = 1024
#: The vCPUs the control plane reports (``cpuCount``) and the CPU quota of each sandbox.
DEFAULT_CPUS = 2
#: Files and directories one sandbox may create (tmpfs inodes).
FILES = 131072
TAG = "pytest-e2b-env-"
#: An unclaimed group (no lock names it) is removed once this old.
STALE_AGE = 24 * 3600.0
#: Bounds of the aggregate process cap (see :func:`aggregate_procs`).
MIN_AGGREGATE_PROCS = 256
MAX_AGGREGATE_PROCS = 16384
CFS_PERIOD_US = 100000


def _read_int(path: Path, default: int) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def aggregate_procs(proc: Path = Path("/proc")) -> int:
    """Processes all sandboxes of one emulator may have together: half the host's free pid space.

    Sized below what the host has left (``kernel.pid_max`` less the processes alive now), so that
    bombs in many sandboxes at once leave the host able to fork.
    """
    pid_max = _read_int(proc / "sys" / "kernel" / "pid_max", 32768)
    threads = _read_int(proc / "sys" / "kernel" / "threads-max", pid_max)
    try:
        alive = sum(1 for entry in os.listdir(proc) if entry.isdigit())
    except OSError:
        alive = 0
    free = min(pid_max, threads) - alive
    return max(MIN_AGGREGATE_PROCS, min(MAX_AGGREGATE_PROCS, free // 2))


def aggregate_memory_mb(meminfo: Path = Path("/proc/meminfo")) -> int:
    """Memory (files included) all sandboxes of one emulator may use together: 3/4 of what is free."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return max(256, int(line.split()[1]) * 3 // 4 // 1024)
    except (OSError, ValueError, IndexError):
        pass
    return 4096


@dataclass(frozen=True)
class Limits:
    """The bounds one emulator applies."""

    memory_mb: int  # per sandbox, files included
    cpus: int
    aggregate_memory_mb: int
    aggregate_procs: int


def _own_cgroup(controller: str) -> tuple[Path | None, str]:
    """The directory of this process's cgroup v1 ``controller`` cgroup, or None and why not."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError as exc:
        return None, f"cannot read /proc/self: {exc.strerror}"
    path = next((ln.split(":", 2)[2] for ln in lines if controller in ln.split(":")[1].split(",")), None)
    if path is None:
        return None, f"no cgroup v1 {controller} controller"
    for line in mounts:
        left, _, right = line.partition(" - ")
        fields, extra = left.split(), right.split()
        if len(extra) >= 3 and extra[0] == "cgroup" and controller in extra[2].split(","):
            root, point = fields[3], fields[4]
            if path.startswith(root):
                return Path(point) / path[len(root) :].lstrip("/"), ""
    return None, f"the cgroup v1 {controller} controller is not mounted"


def _remove_tree(root: Path) -> None:
    """Remove a cgroup and its children (they must be empty of processes)."""
    with contextlib.suppress(OSError):
        for child in sorted(root.iterdir(), reverse=True):
            if child.is_dir():
                _remove_tree(child)
        root.rmdir()


def sweep_groups(parent: Path, dead: Callable[[str], bool]) -> None:
    """Remove ``pytest-e2b-env-<name>`` groups below ``parent`` whose emulator ``dead(name)`` says is gone."""
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            if entry.name.startswith(TAG) and entry.is_dir() and dead(entry.name[len(TAG) :]):
                _remove_tree(entry)


def sweep_unclaimed(parents: list[Path], claimed: Callable[[str], bool]) -> None:
    """Remove day-old groups below ``parents`` that no lock claims (releases that unlinked a lock
    too early left them). ``rmdir`` refuses a group with a task in it: nothing running loses one."""
    for parent in parents:
        with contextlib.suppress(OSError):
            for entry in parent.iterdir():
                if not entry.name.startswith(TAG) or not entry.is_dir():
                    continue
                if not claimed(entry.name[len(TAG) :]) and _stale(entry):
                    _remove_tree(entry)


def _stale(group: Path) -> bool:
    try:
        return time.time() - group.stat().st_mtime > STALE_AGE
    except OSError:
        return False


def group_parents() -> list[Path]:
    """Where emulators in this process's cgroups make theirs: each v1 controller's, the v2 candidates."""
    parents = [p for c in ("memory", "cpu", "pids") if (p := _own_cgroup(c)[0]) is not None]
    mount, own = _v2_mount(), _v2_own()
    if mount is not None and own is not None:
        parents += _v2_candidates(mount, own)
    return parents


def remove_groups(parents: list[Path], name: str) -> bool:
    """Remove the dead emulator ``name``'s groups below ``parents``; whether none is left."""
    left = False
    for parent in parents:
        group = parent / f"{TAG}{name}"
        if group.is_dir():
            _remove_tree(group)
            left = left or group.exists()
    return not left


class _V1:
    """One cgroup v1 controller: the emulator's group ``parent/pytest-e2b-env-<name>``."""

    def __init__(self, controller: str, parent: Path, name: str, limits: Limits) -> None:
        self.controller = controller
        self.parent = parent
        self.root = parent / f"{TAG}{name}"
        self.limits = limits
        self._make_root()

    def _make_root(self) -> None:
        self.root.mkdir(exist_ok=True)
        if self.controller == "memory":
            (self.root / "memory.limit_in_bytes").write_text(str(self.limits.aggregate_memory_mb << 20))
        elif self.controller == "pids":
            (self.root / "pids.max").write_text(str(self.limits.aggregate_procs))

    def create(self, sandbox: str) -> Path:
        """The sandbox's group (the emulator's own group for pids: the cap is the aggregate)."""
        if not self.root.is_dir():  # removed under us (by another host's sweep): made again
            self._make_root()
        if self.controller == "pids":
            return self.root
        path = self.root / sandbox
        path.mkdir()
        if self.controller == "memory":
            (path / "memory.limit_in_bytes").write_text(str(self.limits.memory_mb << 20))
        else:
            period = _read_int(path / "cpu.cfs_period_us", CFS_PERIOD_US)
            (path / "cpu.cfs_quota_us").write_text(str(self.limits.cpus * period))
        return path


class Cgroups:
    """The cgroups of one emulator: v1 ``memory``, ``cpu`` and ``pids`` where writable (root).

    Any controller may be missing; :attr:`why` says why. A sandbox's groups are entered by the
    threads that fork its processes (v1 membership is per thread: ``enter_thread``).
    """

    version = 1

    def __init__(self, controllers: list[_V1], why: dict[str, str]) -> None:
        self._controllers = controllers
        self.why = why  # controller name -> why it is not used

    @classmethod
    def open(cls, name: str, limits: Limits, dead: Callable[[str], bool]) -> Cgroups:
        """The controllers this emulator can use (as root, on cgroup v1), and why not the others."""
        controllers, why = [], {}
        for controller in ("memory", "cpu", "pids"):
            parent, reason = _own_cgroup(controller)
            if parent is None:
                why[controller] = reason
                continue
            sweep_groups(parent, dead)
            try:
                controllers.append(_V1(controller, parent, name, limits))
            except OSError as exc:
                why[controller] = f"cannot create a {controller} cgroup below {parent}: {exc.strerror}"
        return cls(controllers, why)

    def has(self, name: str) -> bool:
        """Whether sandboxes get a cgroup of controller ``name``."""
        return any(c.controller == name for c in self._controllers)

    def create(self, sandbox: str) -> tuple[Path, ...]:
        """The groups of one sandbox, made (removed again if one of them fails)."""
        made: list[Path] = []
        try:
            for controller in self._controllers:
                made.append(controller.create(sandbox))
        except OSError:
            self.remove(tuple(made))
            raise
        return tuple(made)

    def enter_thread(self, paths: tuple[Path, ...]) -> None:
        """Move the calling thread into ``paths`` for good: what it forks is born there (v1: per thread)."""
        tid = str(threading.get_native_id())
        for path in paths:
            (path / "tasks").write_text(tid)

    def leave_thread(self) -> None:
        """Move the calling thread back to the emulator's own cgroups (then a sandbox's can go)."""
        tid = str(threading.get_native_id())
        for controller in self._controllers:
            (controller.parent / "tasks").write_text(tid)

    def command_prefix(self, paths: tuple[Path, ...]) -> list[str]:
        """Argv that puts a command in ``paths`` before it runs: none with v1 (the thread did)."""
        return []

    def remove(self, paths: tuple[Path, ...]) -> None:
        """Remove a sandbox's groups (they must be empty: its processes are gone)."""
        roots = {c.root for c in self._controllers}
        for path in paths:
            if path not in roots:
                with contextlib.suppress(FileNotFoundError):
                    path.rmdir()

    def close(self) -> None:
        """Remove every cgroup of this emulator (best effort: a busy one is swept later)."""
        for controller in self._controllers:
            _remove_tree(controller.root)

    def describe(self, limits: Limits) -> dict[str, str]:
        """Per bound, what applies (for the level's reason)."""
        out = {}
        if self.has("memory"):
            out["memory"] = (
                f"memory quota {limits.memory_mb} MiB incl. files, {limits.aggregate_memory_mb} MiB for all "
                "sandboxes together (cgroup v1 memory)"
            )
        if self.has("cpu"):
            out["cpu"] = f"{limits.cpus} CPUs each, equal shares (cgroup v1 cpu)"
        if self.has("pids"):
            out["pids"] = f"{limits.aggregate_procs} processes for all sandboxes together (cgroup v1 pids)"
        return out


def _v2_mount(mountinfo: Path = Path("/proc/self/mountinfo")) -> Path | None:
    """Where the unified (v2) hierarchy is mounted, if it is."""
    with contextlib.suppress(OSError):
        for line in mountinfo.read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, extra = left.split(), right.split()
            if extra and extra[0] == "cgroup2" and len(fields) > 4:
                return Path(fields[4])
    return None


class CgroupsV2(Cgroups):
    """A cgroup v2 subtree the emulator may write: the emulator's group below a parent it owns.

    The parent is the emulator's cgroup's parent (root writes anywhere), or its own cgroup when
    only that one is delegated to it (``systemd-run --user --scope -p Delegate=yes``, a CI job's
    cgroup); the processes already there move into a leaf first (cgroup v2 lets no group with
    processes give controllers to its children). v2 membership is per process, so a command
    joins its sandbox's group itself, before it execs anything (:meth:`command_prefix`).
    """

    version = 2

    def __init__(self, root: Path, controllers: set[str], limits: Limits, why: dict[str, str]) -> None:
        super().__init__([], why)
        self.root = root
        self.controllers = controllers
        self.limits = limits

    @classmethod
    def open_v2(
        cls,
        name: str,
        limits: Limits,
        dead: Callable[[str], bool],
        mount: Path | None = None,
        own: str | None = None,
    ) -> CgroupsV2 | str:
        """The emulator's v2 subtree, or why there is none (``mount``/``own``: for tests)."""
        mount = mount if mount is not None else _v2_mount()
        if mount is None:
            return "no cgroup v2 hierarchy is mounted"
        own = own if own is not None else _v2_own()
        if own is None:
            return "this process has no cgroup v2 group"
        mine = mount / own.lstrip("/")
        for parent in _v2_candidates(mount, own):
            if not os.access(parent, os.W_OK) or not os.access(parent / "cgroup.procs", os.W_OK):
                continue
            try:
                if parent == mine and mine != mount:
                    _make_room(mine)
                available = set((parent / "cgroup.controllers").read_text().split())
                wanted = available & {"memory", "pids", "cpu"}
                if wanted:
                    _enable(parent, wanted)
                sweep_groups(parent, dead)
                root = parent / f"{TAG}{name}"
                root.mkdir(exist_ok=True)
                if wanted:
                    _enable(root, wanted)
                groups = cls(root, wanted, limits, {})
                groups._limit(root, aggregate=True)
                return groups
            except OSError as exc:
                last = f"cannot use cgroup v2 below {parent}: {exc.strerror or exc}"
                continue
        return locals().get("last") or f"no writable cgroup v2 group at or above {mine} (not delegated)"

    def _limit(self, path: Path, aggregate: bool) -> None:
        memory = self.limits.aggregate_memory_mb if aggregate else self.limits.memory_mb
        if "memory" in self.controllers:
            (path / "memory.max").write_text(str(memory << 20))
        if "pids" in self.controllers and aggregate:
            (path / "pids.max").write_text(str(self.limits.aggregate_procs))
        if "cpu" in self.controllers and not aggregate:
            (path / "cpu.max").write_text(f"{self.limits.cpus * CFS_PERIOD_US} {CFS_PERIOD_US}")

    def has(self, name: str) -> bool:
        """Whether sandboxes get controller ``name``'s bound."""
        return name in self.controllers

    def create(self, sandbox: str) -> tuple[Path, ...]:
        """The sandbox's group below the emulator's (the emulator's made again if it was removed)."""
        if not self.root.is_dir():
            self.root.mkdir()
            if self.controllers:
                _enable(self.root, self.controllers)
            self._limit(self.root, aggregate=True)
        path = self.root / sandbox
        path.mkdir()
        try:
            self._limit(path, aggregate=False)
        except OSError:
            path.rmdir()
            raise
        return (path,)

    def enter_thread(self, paths: tuple[Path, ...]) -> None:
        """Nothing: v2 groups hold whole processes; each command joins by itself."""

    def leave_thread(self) -> None:
        """Nothing (see :meth:`enter_thread`)."""

    def command_prefix(self, paths: tuple[Path, ...]) -> list[str]:
        """``sh`` moving itself into the sandbox's group, then ``exec`` of the rest of the argv."""
        if not paths:
            return []
        return ["/bin/sh", "-c", 'echo 0 > "$0" && exec "$@"', str(paths[0] / "cgroup.procs")]

    def remove(self, paths: tuple[Path, ...]) -> None:
        """Remove a sandbox's group (its processes are gone)."""
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.rmdir()

    def close(self) -> None:
        """Remove the emulator's group (best effort)."""
        _remove_tree(self.root)

    def describe(self, limits: Limits) -> dict[str, str]:
        """Per bound, what applies (for the level's reason)."""
        out = {}
        if "memory" in self.controllers:
            out["memory"] = (
                f"memory quota {limits.memory_mb} MiB incl. files, {limits.aggregate_memory_mb} MiB for all "
                f"sandboxes together (cgroup v2 below {self.root.parent})"
            )
        if "cpu" in self.controllers:
            out["cpu"] = f"{limits.cpus} CPUs each (cgroup v2 cpu.max)"
        if "pids" in self.controllers:
            out["pids"] = (
                f"{limits.aggregate_procs} processes for all sandboxes together (cgroup v2 pids.max)"
            )
        return out


def _v2_candidates(mount: Path, own: str) -> list[Path]:
    """Where an emulator in the v2 group ``own`` makes its group: the parent of its own, then its own."""
    mine = mount / own.lstrip("/")
    return [mine.parent if mine != mount else mine, mine]


def _v2_own() -> str | None:
    """This process's cgroup v2 path (``0::`` in /proc/self/cgroup), if it has one."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:]
    return None


def _enable(path: Path, controllers: set[str]) -> None:
    """Give ``path``'s children the controllers (each only if the parent has it)."""
    have = set((path / "cgroup.subtree_control").read_text().split())
    missing = sorted(controllers - have)
    if missing:
        (path / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))


def _make_room(group: Path) -> None:
    """Move ``group``'s processes into a leaf ``pytest-e2b-env-processes`` (v2: no internal processes)."""
    if set((group / "cgroup.subtree_control").read_text().split()):
        return  # already a parent of groups with controllers: nothing lives in it
    leaf = group / f"{TAG}processes"
    leaf.mkdir(exist_ok=True)
    for pid in (group / "cgroup.procs").read_text().split():
        try:
            (leaf / "cgroup.procs").write_text(pid)
        except OSError as exc:
            if exc.errno != errno.ESRCH:  # one that just exited needs no room
                raise


def open_cgroups(name: str, limits: Limits, dead: Callable[[str], bool]) -> Cgroups:
    """cgroup v1 where its controllers are writable (root), else a writable v2 subtree, else none."""
    v1 = Cgroups.open(name, limits, dead)
    if v1.has("memory"):
        return v1
    v2 = CgroupsV2.open_v2(name, limits, dead)
    if isinstance(v2, CgroupsV2):
        v1.close()
        return v2
    v1.why["v2"] = v2
    return v1
