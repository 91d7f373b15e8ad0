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

from .api import HOME_DIR, Backend, Box, SandboxFS
from .owners import claimed, new_name, sweep
from .process import ProcessBackend
from .quota import group_parents, remove_groups, sweep_unclaimed

__all__ = ["BASE_DIR", "HOME_DIR", "Backend", "Box", "SandboxFS", "select_backend"]

#: Parent of every emulator's sandbox files (never the host's /tmp, which sandboxes get privately).
BASE_DIR = Path("/var/tmp/pytest-e2b-env")


def _default_root() -> Path:
    BASE_DIR.mkdir(parents=True, exist_ok=True)
    if BASE_DIR.stat().st_uid == os.geteuid():
        # Shared by every account's emulators, like /tmp.
        os.chmod(BASE_DIR, 0o1777)
    parents = group_parents()  # read once for every dead emulator's groups
    sweep(BASE_DIR, also=lambda name: remove_groups(parents, name))
    sweep_unclaimed(parents, lambda name: claimed(BASE_DIR, name))
    return BASE_DIR / new_name()


def select_backend(
    root: Path | None = None,
    force: Literal["namespaces", "process"] | None = None,
    quotas: tuple[int, int] | None = None,
    unprivileged: str | None = None,
) -> Backend:
    """The isolation backend for this process: namespaces when possible, else plain processes.

    ``root`` holds the sandbox files (default ``/var/tmp/pytest-e2b-env/<pid>-<token>``, held
    by ``<root>.lock`` while the backend lives, see :mod:`.owners`); ``force``
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
