"""A fresh account that is not root, and the project installed from its wheel where it can run it.

Users run ``pytest`` as themselves, with an interpreter of their own: so do these tests. As root
they make an account (with the subordinate ids Debian's ``useradd`` gives every new user) and a
virtualenv from the distribution's ``python3`` (the suite's own interpreter may sit where that
account cannot read it) with the project's wheel; the wheel's dependencies are the ones this
checkout's virtualenv has, seen read-only through a bind mount made for each command, so no test
downloads anything. Everything is removed afterwards: the account, its ids, the directory.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from install_helpers import build_wheel, clean_env

SYSTEM_PYTHON = "/usr/bin/python3"
TOOLS = ("useradd", "userdel", "setpriv", "unshare", "newuidmap")
#: This interpreter's site-packages: the wheel's dependencies, shown to the account read-only.
DEPENDENCIES = sysconfig.get_paths()["purelib"]
#: Enters the emulator's user namespace in the test process itself, then runs pytest: what the
#: emulator's own process does at start (tests that use a backend in-process need the same).
IN_NAMESPACE = """
import sys
from pytest_e2b_env.emulator.isolation import rootless
outer, why = rootless.enter()
if outer is None:
    sys.exit(f"could not enter a user namespace: {why}")
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


#: Run as root: a user namespace mapping root and one account to themselves, whose own
#: ``user.max_user_namespaces`` is 0 (the host's stays as it is), then exec the rest of argv.
NO_USER_NAMESPACES = """
import ctypes, os, sys
uid, gid = int(sys.argv[1]), int(sys.argv[2])
go_r, go_w = os.pipe()
done_r, done_w = os.pipe()
pid = os.fork()
if pid == 0:  # writes the maps of its parent's new namespace (root may map any id it has)
    os.read(go_r, 1)
    parent = os.getppid()
    for name, mine in (("uid_map", uid), ("gid_map", gid)):
        with open(f"/proc/{parent}/{name}", "w") as fh:
            fh.write(f"0 0 1\\n{mine} {mine} 1\\n")
    os.write(done_w, b"1")
    os._exit(0)
if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0:
    sys.exit(f"unshare: {os.strerror(ctypes.get_errno())}")
os.write(go_w, b"1")
os.read(done_r, 1)
os.waitpid(pid, 0)
with open("/proc/sys/user/max_user_namespaces", "w") as fh:
    fh.write("0")
os.execvp(sys.argv[3], sys.argv[3:])
"""


@dataclass(frozen=True)
class Account:
    """A fresh account, and where it runs things: its home, the project's venv, the dependencies."""

    name: str
    uid: int
    gid: int
    work: Path

    @property
    def python(self) -> Path:
        return self.work / "venv" / "bin" / "python"

    @property
    def home(self) -> Path:
        return self.work / "home"

    def env(self, **extra: str) -> dict[str, str]:
        """A login-like environment: its home and venv first on PATH, nothing of this checkout."""
        return {
            "HOME": str(self.home),
            "USER": self.name,
            "LOGNAME": self.name,
            "PATH": f"{self.python.parent}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "HF_HUB_OFFLINE": "1",
            **extra,
        }

    def command(self, argv: Sequence[str | Path], wrap: Sequence[str] = ()) -> list[str]:
        """``argv`` as this account, with the dependencies mounted where its venv looks for them.

        ``wrap``: a command run as root (after the mount) that execs the rest, e.g. one that makes
        a namespace first.
        """
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            'mount --bind -o ro "$1" "$2" && shift 2 && exec "$@"',
            "sh",
            DEPENDENCIES,
            str(self.work / "deps"),
            *wrap,
            "setpriv",
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--clear-groups",
            "--",
            *map(str, argv),
        ]

    def run(
        self,
        argv: Sequence[str | Path],
        cwd: Path,
        timeout: float = 900,
        wrap: Sequence[str] = (),
        **extra_env: str,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as this account in ``cwd``; its output as text."""
        return subprocess.run(
            self.command(argv, wrap),
            cwd=cwd,
            env=self.env(**extra_env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    def without_user_namespaces(self) -> list[str]:
        """A ``wrap`` after which no user namespace can be created (see :data:`NO_USER_NAMESPACES`)."""
        return [sys.executable, "-c", NO_USER_NAMESPACES, str(self.uid), str(self.gid)]

    def directory(self, name: str) -> Path:
        """A directory of its own in the work area."""
        path = self.work / name
        path.mkdir()
        os.chown(path, self.uid, self.gid)
        return path


def missing_prerequisite() -> str | None:
    """Why these tests cannot run here (they make accounts and mounts: root only), or None."""
    if os.geteuid() != 0:
        return "making a fresh account needs root (a suite run as a user already runs as one)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        tools = ", ".join(missing)
        return f"missing {tools} (scripts/bootstrap installs uidmap; util-linux and passwd have the rest)"
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return f"no {SYSTEM_PYTHON} (the distribution's interpreter, readable by every account)"
    return None


@contextmanager
def fresh_account() -> Iterator[Account]:
    """An account with subordinate ids and a venv of the project's wheel; all removed afterwards."""
    name = f"e2bt{secrets.token_hex(4)}"
    work = Path(tempfile.mkdtemp(prefix="pytest-e2b-env-user-", dir="/var/tmp"))
    os.chmod(work, 0o755)
    made = subprocess.run(
        ["useradd", "--no-create-home", "--no-user-group", "--gid", "users", "--shell", "/bin/sh", name],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    try:
        entry = pwd.getpwnam(name)
        if not any(line.startswith(f"{name}:") for line in Path("/etc/subuid").read_text().splitlines()):
            # A useradd configured without SUB_UID_COUNT gave none: give the usual 65536.
            ids = "1000000-1065535"
            subprocess.run(["usermod", "--add-subuids", ids, "--add-subgids", ids, name], check=True)
        account = Account(name, entry.pw_uid, entry.pw_gid, work)
        account.directory("home")
        (work / "deps").mkdir()
        _install(account)
        yield account
    finally:
        # Every command ran to its end (or its timeout killed it): nothing of the account is left
        # to stop userdel; if something is, userdel says so and the account stays for a look.
        subprocess.run(["userdel", name], capture_output=True, check=False)
        for table in ("/etc/subuid", "/etc/subgid"):  # userdel leaves them on some releases
            lines = Path(table).read_text().splitlines(keepends=True)
            Path(table).write_text("".join(line for line in lines if not line.startswith(f"{name}:")))
        shutil.rmtree(work, ignore_errors=True)


def _install(account: Account) -> None:
    """venv from the distribution's python3, the wheel in it, the dependencies on its path."""
    wheel = build_wheel(account.work / "build")
    venv = account.work / "venv"
    made = subprocess.run(
        [SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(venv)], capture_output=True, text=True, check=False
    )
    assert made.returncode == 0, made.stderr
    site = next((venv / "lib").glob("python3*/site-packages"))
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", site, wheel],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    (site / "pytest-e2b-env-dependencies.pth").write_text(f"{account.work / 'deps'}\n")
    scripts = site / "bin"  # pip --target puts console scripts there; the venv's bin is where users look
    for script in scripts.iterdir() if scripts.is_dir() else ():
        text = script.read_text().splitlines()
        (venv / "bin" / script.name).write_text("\n".join([f"#!{venv / 'bin' / 'python'}", *text[1:]]) + "\n")
        (venv / "bin" / script.name).chmod(0o755)
    (account.work / "in_namespace.py").write_text(IN_NAMESPACE)
