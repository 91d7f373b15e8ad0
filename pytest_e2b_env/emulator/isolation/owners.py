"""Which emulator owns a sandbox directory or a cgroup: a lock held open for as long as it lives.

Every backend has a name of its own (``<pid>-<random>``) and holds an exclusive ``flock`` on
``<root>.lock`` beside its directory until it closes or dies. What is named after it (its
directory under ``BASE_DIR``, its cgroups ``pytest-e2b-env-<name>``) belongs to a dead emulator
exactly when that lock can be taken. A lock is true across pid namespaces and containers that
share the file system; ``kill(pid, 0)`` is not (it sees only its own pid namespace, and two
emulators in two namespaces may have the same pid), which let one emulator sweep another's
cgroups mid-run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from pytest_e2b_env.standalone.fsops import remove_tree_quietly

SUFFIX = ".lock"
#: How long a new emulator may wait for a sweep that holds its fresh lock file.
TAKE_SECONDS = 5.0
#: Directories of older releases (named by pid, no lock) are removed once this old.
LEGACY_AGE = 24 * 3600.0


def new_name() -> str:
    """A name no other emulator has, here or in another pid namespace."""
    return f"{os.getpid()}-{secrets.token_hex(4)}"


class Owner:
    """The lock of one backend's root: taken at start, released at close (or by the kernel at death)."""

    def __init__(self, root: Path) -> None:
        self.name = root.name
        self.path = root.with_name(root.name + SUFFIX)
        self._fd: int | None = self._take()
        # Made (again) only now that it is ours: a sweep that took the lock file in the moment
        # between its creation and our lock removed the directory with it.
        root.mkdir(mode=0o711, exist_ok=True)

    def _take(self) -> int:
        """Lock the file at our path, the one there now (not one a sweep just unlinked)."""
        deadline = time.monotonic() + TAKE_SECONDS
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # a sweep holds it (the name is new: nobody else would)
                os.close(fd)
            else:
                try:
                    if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                        return fd
                except FileNotFoundError:
                    pass
                os.close(fd)  # unlinked by the sweep that held it: lock a new one
            if time.monotonic() > deadline:
                raise OSError(
                    f"could not lock {self.path} within {TAKE_SECONDS:g} s (another emulator's sweep?)"
                )
            time.sleep(0.02)

    def release(self) -> None:
        """Drop the lock and its file (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()
            os.close(fd)


def _take_if_dead(lock: Path) -> int | None:
    """The lock's descriptor, locked, if its owner is gone; None while it lives (or on any doubt)."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def dead(base: Path, name: str) -> bool:
    """Whether the emulator called ``name`` (lock in ``base``) is gone; False when unknown here."""
    fd = _take_if_dead(base / (name + SUFFIX))
    if fd is None:
        return False
    os.close(fd)
    return True


def claimed(base: Path, name: str) -> bool:
    """Whether a lock in ``base`` names the emulator ``name`` (alive, or dead and not yet swept)."""
    return (base / (name + SUFFIX)).exists()


def sweep(base: Path, also: Callable[[str], bool] | None = None) -> None:
    """Remove what dead emulators left in ``base`` (and, through ``also(name)``, elsewhere).

    ``also(name)`` says whether nothing of ``name`` is left elsewhere; until then its lock file
    stays, the one mark by which a later sweep still knows the leftovers are a dead emulator's
    (a cgroup v1 group can refuse ``rmdir`` for a moment after its last task left).
    Best effort and never raising: the trees were shaped by sandboxes (any depth, odd names),
    and a leftover that cannot be removed must not stop this emulator from starting.
    """
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return
    names = {e.name for e in entries}
    for entry in entries:
        with contextlib.suppress(OSError):
            if entry.name.endswith(SUFFIX):
                name = entry.name[: -len(SUFFIX)]
                fd = _take_if_dead(entry)
                if fd is None:
                    continue
                try:
                    cleared = also is None or also(name)
                    remove_tree_quietly(base / name)
                    if cleared:
                        entry.unlink()
                finally:
                    os.close(fd)
            elif entry.is_dir() and entry.name + SUFFIX not in names and _legacy(entry):
                remove_tree_quietly(entry)


def _legacy(entry: Path) -> bool:
    """A directory of an older release (named by a pid, no lock), ours, and untouched for a day."""
    info = entry.lstat()
    return (
        entry.name.split("-", 1)[0].isdigit()
        and info.st_uid == os.geteuid()
        and time.time() - info.st_mtime > LEGACY_AGE
    )
