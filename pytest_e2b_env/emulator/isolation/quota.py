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
  cgroup v2 is not used yet (no memory quota on hosts with only v2).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

#: What the control plane reports for every sandbox (``memoryMB``, ``diskSizeMB``), as E2B's default.
DEFAULT_MEMORY_MB = 512
DEFAULT_DISK_MB = 1024
#: Files and directories one sandbox may create (tmpfs inodes).
FILES = 131072
_TAG = "pytest-e2b-env-"


def _own_memory_cgroup() -> tuple[Path | None, str]:
    """The directory of this process's cgroup v1 memory cgroup, or None and why not."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError as exc:
        return None, f"cannot read /proc/self: {exc.strerror}"
    path = next((ln.split(":", 2)[2] for ln in lines if "memory" in ln.split(":")[1].split(",")), None)
    if path is None:
        return None, "no cgroup v1 memory controller (cgroup v2 is not supported yet)"
    for line in mounts:
        left, _, right = line.partition(" - ")
        fields, extra = left.split(), right.split()
        if len(extra) >= 3 and extra[0] == "cgroup" and "memory" in extra[2].split(","):
            root, point = fields[3], fields[4]
            if path.startswith(root):
                return Path(point) / path[len(root) :].lstrip("/"), ""
    return None, "the cgroup v1 memory controller is not mounted"


class MemoryCgroups:
    """One memory cgroup per sandbox below ``parent/pytest-e2b-env-<pid>``."""

    def __init__(self, parent: Path) -> None:
        self.parent = parent
        self.root = parent / f"{_TAG}{os.getpid()}"
        self.root.mkdir(exist_ok=True)
        self._home = parent / "tasks"

    @classmethod
    def open(cls) -> tuple[MemoryCgroups | None, str]:
        """The controller for this emulator, or None and the reason."""
        parent, why = _own_memory_cgroup()
        if parent is None:
            return None, why
        _sweep(parent)
        try:
            return cls(parent), ""
        except OSError as exc:
            return None, f"cannot create a memory cgroup below {parent}: {exc.strerror}"

    def create(self, name: str, limit_mb: int) -> Path:
        """A cgroup for one sandbox, limited to ``limit_mb`` MiB."""
        path = self.root / name
        path.mkdir()
        try:
            (path / "memory.limit_in_bytes").write_text(str(limit_mb << 20))
        except OSError:
            self.remove(path)
            raise
        return path

    @contextlib.contextmanager
    def forking_into(self, path: Path) -> Iterator[None]:
        """Children forked by this thread inside the block are born in ``path``."""
        tid = str(threading.get_native_id())
        (path / "tasks").write_text(tid)
        try:
            yield
        finally:
            self._home.write_text(tid)

    def remove(self, path: Path) -> None:
        """Remove a sandbox's cgroup (it must be empty: its processes are gone)."""
        with contextlib.suppress(FileNotFoundError):
            path.rmdir()

    def close(self) -> None:
        """Remove every cgroup of this emulator (best effort: a busy one is swept later)."""
        _remove_tree(self.root)


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
