"""The contract between the emulator server and an isolation level: Backend, Box, SandboxFS."""

from __future__ import annotations

import abc
import contextlib
import re
import signal
import subprocess
from pathlib import Path
from typing import Any, Literal

from pytest_e2b_env.standalone.fsops import MAX_DEPTH, MAX_ENTRIES, MAX_READ

HOME_DIR = "/home/user"
#: envd's PATH (the E2B base template's).
ENVD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
USERS = ("user", "root")

Level = Literal["namespaces", "process"]
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def home_of(user: str) -> str:
    """Home directory of a sandbox account, as envd resolves relative paths."""
    return "/root" if user == "root" else HOME_DIR


def check_user(user: str) -> str:
    """Reject accounts the sandbox does not have, naming the value and the fix."""
    if user not in USERS:
        raise ValueError(f"user={user!r} is not a sandbox account. Use 'user' (the default) or 'root'.")
    return user


def check_sandbox_id(sandbox_id: str) -> str:
    """Sandbox ids become directory names: letters, digits, '-' and '_' only."""
    if not _ID.fullmatch(sandbox_id):
        raise ValueError(
            f"sandbox_id={sandbox_id!r} is not a valid id. "
            "Use 1-64 letters, digits, '-' or '_' (e.g. 'i1a2b3')."
        )
    return sandbox_id


def envd_env(user: str, home: str, box_envs: dict[str, str], envs: dict[str, str]) -> dict[str, str]:
    """Command env as envd builds it: PATH, HOME, USER, LOGNAME, then sandbox envs, then command envs."""
    env = {"PATH": ENVD_PATH, "HOME": home, "USER": user, "LOGNAME": user}
    env.update(box_envs)
    env.update(envs)
    return env


class SandboxFS(abc.ABC):
    """File operations inside one sandbox, with the permissions of ``user``.

    Paths are sandbox paths (relative ones start at the user's home). Errors are the builtin
    ``FileNotFoundError``, ``NotADirectoryError``, ``FileExistsError``, ``PermissionError`` and
    ``IsADirectoryError``. Entries are dicts: name, type ("file"|"dir"|"symlink"), path, size,
    mode, permissions, owner, group, modified_time (epoch float), symlink_target (or None).
    """

    @abc.abstractmethod
    def read(self, path: str, user: str = "user", limit: int = MAX_READ) -> bytes:
        """Whole content of a regular file of at most ``limit`` bytes.

        A FIFO, device or socket, or a larger file, is a ValueError; nothing ever blocks.
        """

    @abc.abstractmethod
    def write(self, path: str, data: bytes, user: str = "user", limit: int = MAX_READ) -> dict[str, Any]:
        """Create or overwrite a regular file (missing parents made, owned by ``user``); returns its entry."""

    @abc.abstractmethod
    def stat(self, path: str, user: str = "user") -> dict[str, Any] | None:
        """Entry of ``path`` (a symlink itself, not its target), None when missing."""

    @abc.abstractmethod
    def listdir(
        self,
        path: str,
        depth: int = 1,
        user: str = "user",
        max_entries: int = MAX_ENTRIES,
        max_depth: int = MAX_DEPTH,
    ) -> list[dict[str, Any]]:
        """Entries below a directory, ``depth`` levels deep; ValueError beyond either cap."""

    @abc.abstractmethod
    def mkdir(self, path: str, user: str = "user") -> bool:
        """Create a directory with parents; False when it already exists."""

    @abc.abstractmethod
    def move(self, src: str, dst: str, user: str = "user") -> dict[str, Any]:
        """Rename; returns the entry at ``dst``."""

    @abc.abstractmethod
    def remove(self, path: str, user: str = "user") -> None:
        """Remove a file, symlink or directory tree."""


class Box(abc.ABC):
    """One running sandbox: spawn commands in it, reach its files, kill it."""

    sandbox_id: str
    home_dir: str = HOME_DIR

    @property
    @abc.abstractmethod
    def fs(self) -> SandboxFS:
        """The sandbox's files."""

    @abc.abstractmethod
    def spawn(
        self, cmd: str, envs: dict[str, str], cwd: str, user: str = "user", stdin: bool = False
    ) -> subprocess.Popen[bytes]:
        """Start ``/bin/bash -l -c cmd`` in the sandbox as ``user``.

        Raises FileNotFoundError / NotADirectoryError for a bad ``cwd`` before anything runs.
        ``proc.pid`` is the leader's host pid; stdout and stderr are pipes; stdin is a pipe when
        ``stdin`` else /dev/null.
        """

    def signal(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the command's leader only (a no-op once it has exited)."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)

    @abc.abstractmethod
    def kill(self) -> None:
        """Kill every process of the sandbox, confirm they are gone, remove its files. Idempotent."""

    @abc.abstractmethod
    def alive(self) -> bool:
        """True until the sandbox is killed or has died."""


class Backend(abc.ABC):
    """Starts sandboxes at one isolation level."""

    level: Level
    reason: str
    root: Path

    @abc.abstractmethod
    def start(self, sandbox_id: str, internet: bool = True, envs: dict[str, str] | None = None) -> Box:
        """Start a sandbox ready to run commands."""

    @abc.abstractmethod
    def close(self) -> None:
        """Kill every sandbox this backend started and remove its directory. Idempotent."""
