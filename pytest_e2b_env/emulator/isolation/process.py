"""The plain-process level: no isolation, only a per-sandbox directory and best-effort kill.

Used when namespaces are unavailable (not root, no user namespaces). Commands run as the
emulator's own account in a new session; the files API sees only the sandbox directory
(``/home/user`` and ``/tmp`` there), while commands see the host. Tests that need isolation
skip on this level with the backend's reason.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from pytest_e2b_env.errors import CleanupError
from pytest_e2b_env.settings import ENV_SANDBOX_MARKER
from pytest_e2b_env.standalone.fsops import (
    MAX_DEPTH,
    MAX_ENTRIES,
    MAX_READ,
    RootedFS,
    normalize,
    remove_tree_quietly,
)

from .api import Backend, Box, SandboxFS, check_sandbox_id, check_user, envd_env, home_of
from .owners import Owner

#: Every command carries this variable so kill() can find processes that left the session.
MARKER = ENV_SANDBOX_MARKER


class ProcessFS(SandboxFS):
    """Files below the sandbox directory, which stands for the sandbox's "/"."""

    def __init__(self, root: Path) -> None:
        self._root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self._fs = RootedFS(self._root_fd)

    def close(self) -> None:
        """Release the directory handle."""
        with contextlib.suppress(OSError):
            os.close(self._root_fd)

    def host_dir(self, path: str, user: str) -> str:
        """Host path of a sandbox directory, resolved safely; raises if missing or not a directory."""
        fd = self._fs.open(normalize(path, home_of(user)), os.O_PATH | os.O_DIRECTORY)
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)

    def read(self, path: str, user: str = "user", limit: int = MAX_READ) -> bytes:
        """Whole content of a regular file of at most ``limit`` bytes."""
        return self._fs.read(normalize(path, home_of(check_user(user))), limit)

    def write(self, path: str, data: bytes, user: str = "user", limit: int = MAX_READ) -> dict[str, Any]:
        """Create or overwrite a regular file; returns its entry."""
        return self._fs.write(normalize(path, home_of(check_user(user))), bytes(data), limit)

    def stat(self, path: str, user: str = "user") -> dict[str, Any] | None:
        """Entry of ``path`` or None."""
        return self._fs.stat(normalize(path, home_of(check_user(user))))

    def listdir(
        self,
        path: str,
        depth: int = 1,
        user: str = "user",
        max_entries: int = MAX_ENTRIES,
        max_depth: int = MAX_DEPTH,
    ) -> list[dict[str, Any]]:
        """Entries below a directory (bounded in depth and count)."""
        return self._fs.listdir(normalize(path, home_of(check_user(user))), depth, max_entries, max_depth)

    def mkdir(self, path: str, user: str = "user") -> bool:
        """Create a directory with parents; False when it exists."""
        return self._fs.mkdir(normalize(path, home_of(check_user(user))))

    def move(self, src: str, dst: str, user: str = "user") -> dict[str, Any]:
        """Rename; returns the new entry."""
        home = home_of(check_user(user))
        return self._fs.move(normalize(src, home), normalize(dst, home))

    def remove(self, path: str, user: str = "user") -> None:
        """Remove a file or tree."""
        self._fs.remove(normalize(path, home_of(check_user(user))))


def _pids_with_marker(token: str) -> list[int]:
    needle = f"{MARKER}={token}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


class ProcessBox(Box):
    """A sandbox at the process level."""

    def __init__(self, sandbox_id: str, directory: Path, envs: dict[str, str]) -> None:
        self.sandbox_id = sandbox_id
        self.directory = directory
        self._envs = dict(envs)
        self._token = uuid.uuid4().hex
        self._procs: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._killed = False
        self._fs = ProcessFS(directory)

    @property
    def fs(self) -> ProcessFS:
        """The sandbox's files (its directory)."""
        return self._fs

    def spawn(
        self, cmd: str, envs: dict[str, str], cwd: str, user: str = "user", stdin: bool = False
    ) -> subprocess.Popen[bytes]:
        """Run ``bash -l -c cmd`` in a new session with the sandbox directory as its world."""
        check_user(user)
        if self._killed:
            raise ProcessLookupError(f"sandbox {self.sandbox_id} was killed")
        host_cwd = self._fs.host_dir(cwd or home_of(user), user)
        home = self._fs.host_dir(home_of(user), user)
        env = envd_env(user, home, self._envs, envs)
        env[MARKER] = self._token
        proc = subprocess.Popen(
            ["/bin/bash", "-l", "-c", cmd],
            cwd=host_cwd,
            env=env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        with self._lock:
            self._procs = [p for p in self._procs if p.poll() is None]
            self._procs.append(proc)
        return proc

    def kill(self) -> None:
        """Kill each command's session and every process carrying the sandbox marker; remove files."""
        with self._lock:
            if self._killed:
                return
            self._killed = True
            procs = list(self._procs)
        for proc in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while True:
            stray = [pid for pid in _pids_with_marker(self._token) if pid not in {p.pid for p in procs}]
            for pid in stray:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            for proc in procs:
                proc.poll()
            if not stray and all(p.returncode is not None for p in procs):
                break
            if time.monotonic() > deadline:
                raise CleanupError(
                    f"processes of sandbox {self.sandbox_id} survived SIGKILL", [self.sandbox_id]
                )
            time.sleep(0.005)
        self._fs.close()
        remove_tree_quietly(self.directory)

    def alive(self) -> bool:
        """True until killed."""
        return not self._killed


class ProcessBackend(Backend):
    """Plain subprocesses in per-sandbox directories."""

    level = "process"

    def __init__(self, root: Path, reason: str) -> None:
        self.root = root
        self._owner = Owner(root)  # what is named after this root is swept only once it is free
        self.reason = reason
        self._boxes: dict[str, ProcessBox] = {}
        self._lock = threading.Lock()
        self._closed = False

    def start(self, sandbox_id: str, internet: bool = True, envs: dict[str, str] | None = None) -> ProcessBox:
        """Make the sandbox directory (home/user, root, tmp) and return its box."""
        if self._closed:
            raise RuntimeError("the isolation backend is closed")
        directory = self.root / check_sandbox_id(sandbox_id)
        for sub, mode in (("home/user", 0o755), ("root", 0o700), ("tmp", 0o1777)):
            (directory / sub).mkdir(parents=True, exist_ok=True)
            os.chmod(directory / sub, mode)
        box = ProcessBox(sandbox_id, directory, envs or {})
        with self._lock:
            self._boxes[sandbox_id] = box
        return box

    def close(self) -> None:
        """Kill every box and remove the backend's directory."""
        self._closed = True
        with self._lock:
            boxes = list(self._boxes.values())
            self._boxes.clear()
        errors: list[str] = []
        for box in boxes:
            try:
                box.kill()
            except CleanupError as exc:
                errors.extend(exc.ids)
        remove_tree_quietly(self.root)
        self._owner.release()
        if errors:
            raise CleanupError("sandboxes survived backend close", errors)
