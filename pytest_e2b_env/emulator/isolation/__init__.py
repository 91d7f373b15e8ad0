"""Per-sandbox isolation for the local emulator.

``select_backend()`` picks the strongest level this machine allows:

* ``namespaces``: each sandbox is its own user (sandbox root = an unprivileged host uid range),
  pid, mount, net, ipc and uts namespaces with a copy-on-write root file system; needs root.
* ``process``: plain subprocesses in a per-sandbox directory; no isolation at all.

``backend.level`` and ``backend.reason`` say which one and why, so the emulator prints them at
start-up and isolation tests skip with that reason instead of passing falsely.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pytest_e2b_env.standalone.fsops import remove_tree_quietly

from .api import HOME_DIR, Backend, Box, SandboxFS
from .process import ProcessBackend

__all__ = ["BASE_DIR", "HOME_DIR", "Backend", "Box", "SandboxFS", "select_backend"]

#: Parent of every emulator's sandbox files (never the host's /tmp, which sandboxes get privately).
BASE_DIR = Path("/var/tmp/pytest-e2b-env")


def _sweep_stale(base: Path) -> None:
    """Remove sandbox directories left by emulators that died (the directory name starts with a dead pid).

    Best effort and never raising: the trees were shaped by sandboxes (any depth, odd names),
    and a leftover that cannot be removed must not stop this emulator from starting.
    """
    try:
        entries = list(base.iterdir())
    except OSError:
        return
    for entry in entries:
        owner = entry.name.split("-", 1)[0]  # "<pid>" or "<pid>-<label>"
        try:
            if not owner.isdigit() or entry.lstat().st_uid != os.geteuid():
                continue
            os.kill(int(owner), 0)
        except ProcessLookupError:
            remove_tree_quietly(entry)
        except (OSError, OverflowError, ValueError):
            continue


def _default_root() -> Path:
    BASE_DIR.mkdir(parents=True, exist_ok=True)
    if BASE_DIR.stat().st_uid == os.geteuid():
        # Shared by every account's emulators, like /tmp.
        os.chmod(BASE_DIR, 0o1777)
    _sweep_stale(BASE_DIR)
    return BASE_DIR / str(os.getpid())


def select_backend(
    root: Path | None = None,
    force: Literal["namespaces", "process"] | None = None,
    quotas: tuple[int, int] | None = None,
    unprivileged: str | None = None,
) -> Backend:
    """The isolation backend for this process: namespaces when possible, else plain processes.

    ``root`` holds the sandbox files (default ``/var/tmp/pytest-e2b-env/<pid>``); ``force``
    pins a level (``force="namespaces"`` raises EmulatorError, with the reason, when impossible);
    ``quotas`` is ``(memory_mb, disk_mb)`` per sandbox (default E2B's 512 / 1024).
    Namespaces need root: the host's, or of a user namespace this process entered
    (:func:`.rootless.enter`); ``unprivileged`` says why a process that is neither could not.
    """
    if force not in (None, "namespaces", "process"):
        raise ValueError(f"force={force!r} is not an isolation level. Use 'namespaces', 'process' or None.")
    root = Path(root) if root is not None else _default_root()
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o711)
    if force == "process":
        return ProcessBackend(root, "plain-process level forced by the caller")
    from . import namespaces

    memory_mb, disk_mb = quotas or (namespaces.quota.DEFAULT_MEMORY_MB, namespaces.quota.DEFAULT_DISK_MB)
    backend, why = namespaces.open_backend(root, memory_mb, disk_mb, unprivileged=unprivileged)
    if backend is not None:
        return backend
    if force == "namespaces":
        from pytest_e2b_env.errors import EmulatorError

        raise EmulatorError(f"namespace isolation is unavailable: {why}")
    return ProcessBackend(root, f"plain-process level (no isolation): {why}")
