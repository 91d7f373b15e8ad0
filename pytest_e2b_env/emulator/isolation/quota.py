"""Per-sandbox memory and disk quotas of the namespaces level.

* **Disk.** A sandbox's writable layer (the overlay's upper and work directories) lives on its
  own tmpfs of ``disk_mb`` MiB and ``FILES`` inodes, mounted by the sandbox's builder in a
  private mount namespace: writes past the quota fail with ENOSPC, nothing reaches the host's
  disk, and the layer disappears with the sandbox. Sandbox root cannot resize it (the tmpfs
  belongs to host root's user namespace).
* **Memory.** With the cgroup v1 memory controller (root only), every sandbox gets a child
  cgroup of the emulator's own memory cgroup, limited to ``memory_mb + disk_mb`` MiB: the
  layer's tmpfs pages count as the sandbox's memory, so programs keep at least ``memory_mb``.
  The builder enters it before anything of the sandbox exists; commands, forked by the
  emulator, are born in it because the forking thread enters it for the fork (v1 cgroups
  are per thread). Past the limit the kernel's OOM killer ends a process of that sandbox only.
* **CPU.** Likewise a cgroup of the v1 cpu controller: every sandbox weighs the same
  (``cpu.shares``) and may use at most its vCPUs (``cpu.cfs_quota_us``, 2 as E2B's default), so
  a fork bomb in one sandbox slows the others by a share, as on E2B, not by hundreds of
  runnable processes.
* cgroup v2 is not used yet (no memory or CPU quota on hosts with only v2).
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

#: What the control plane reports for every sandbox (``memoryMB``, ``diskSizeMB``), as E2B's default.
DEFAULT_MEMORY_MB = 512
DEFAULT_DISK_MB = 1024
#: The vCPUs the control plane reports (``cpuCount``) and the CPU quota of each sandbox.
DEFAULT_CPUS = 2
#: Files and directories one sandbox may create (tmpfs inodes).
FILES = 131072
_TAG = "pytest-e2b-env-"


def _own_cgroup(controller: str) -> tuple[Path | None, str]:
    """The directory of this process's cgroup v1 ``controller`` cgroup, or None and why not."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError as exc:
        return None, f"cannot read /proc/self: {exc.strerror}"
    path = next((ln.split(":", 2)[2] for ln in lines if controller in ln.split(":")[1].split(",")), None)
    if path is None:
        return None, f"no cgroup v1 {controller} controller (cgroup v2 is not supported yet)"
    for line in mounts:
        left, _, right = line.partition(" - ")
        fields, extra = left.split(), right.split()
        if len(extra) >= 3 and extra[0] == "cgroup" and controller in extra[2].split(","):
            root, point = fields[3], fields[4]
            if path.startswith(root):
                return Path(point) / path[len(root) :].lstrip("/"), ""
    return None, f"the cgroup v1 {controller} controller is not mounted"


class _Controller:
    """One cgroup v1 controller: a group per sandbox below ``parent/pytest-e2b-env-<pid>``."""

    def __init__(self, name: str, parent: Path) -> None:
        self.name = name
        self.parent = parent
        self.root = parent / f"{_TAG}{os.getpid()}"
        self.root.mkdir(exist_ok=True)

    @classmethod
    def open(cls, name: str) -> tuple[_Controller | None, str]:
        parent, why = _own_cgroup(name)
        if parent is None:
            return None, why
        _sweep(parent)
        try:
            return cls(name, parent), ""
        except OSError as exc:
            return None, f"cannot create a {name} cgroup below {parent}: {exc.strerror}"


class Cgroups:
    """Per-sandbox cgroups of the v1 memory and cpu controllers (either may be missing).

    * memory: ``memory.limit_in_bytes`` of ``memory_mb + disk_mb`` MiB (see the module doc);
    * cpu: an equal ``cpu.shares`` weight per sandbox and a CFS quota of the sandbox's vCPUs
      (E2B gives each sandbox CPUs of its own: here one sandbox's fork bomb gets its share of
      the host, not the whole host, so the other sandboxes' deadlines still mean something).
    """

    def __init__(self, controllers: list[_Controller], why: dict[str, str]) -> None:
        self._controllers = controllers
        self.why = why  # controller name -> why it is not used

    @classmethod
    def open(cls) -> Cgroups:
        """The controllers this emulator can use (as root, on cgroup v1), and why not the others."""
        controllers, why = [], {}
        for name in ("memory", "cpu"):
            controller, reason = _Controller.open(name)
            if controller is None:
                why[name] = reason
            else:
                controllers.append(controller)
        return cls(controllers, why)

    def has(self, name: str) -> bool:
        """Whether sandboxes get a cgroup of controller ``name``."""
        return any(c.name == name for c in self._controllers)

    def create(self, name: str, limit_mb: int, cpus: int) -> tuple[Path, ...]:
        """The cgroups of one sandbox: ``limit_mb`` MiB of memory, ``cpus`` CPUs of CFS quota."""
        made: list[Path] = []
        try:
            for controller in self._controllers:
                path = controller.root / name
                path.mkdir()
                made.append(path)
                if controller.name == "memory":
                    (path / "memory.limit_in_bytes").write_text(str(limit_mb << 20))
                else:
                    period = int((path / "cpu.cfs_period_us").read_text())
                    (path / "cpu.cfs_quota_us").write_text(str(cpus * period))
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

    def remove(self, paths: tuple[Path, ...]) -> None:
        """Remove a sandbox's cgroups (they must be empty: its processes are gone)."""
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.rmdir()

    def close(self) -> None:
        """Remove every cgroup of this emulator (best effort: a busy one is swept later)."""
        for controller in self._controllers:
            _remove_tree(controller.root)


def _remove_tree(root: Path) -> None:
    with contextlib.suppress(OSError):
        for child in root.iterdir():
            if child.is_dir():
                with contextlib.suppress(OSError):
                    child.rmdir()
        root.rmdir()


def _sweep(parent: Path) -> None:
    """Remove the cgroups of emulators that died without cleaning up."""
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            owner = entry.name.removeprefix(_TAG)
            if entry.name.startswith(_TAG) and owner.isdigit():
                try:
                    os.kill(int(owner), 0)
                except ProcessLookupError:
                    _remove_tree(entry)
                except PermissionError:
                    continue
