"""Full isolation for a user who is not root: the emulator enters an unprivileged user namespace.

Inside a user namespace of its own the invoking user is root: it can make pid, mount, net, ipc and
uts namespaces, mount tmpfs and overlayfs, and write the id maps of the namespaces it creates, so
the namespaces level runs there as it runs for host root. What no unprivileged namespace gives:

* **Ids.** The namespace maps its root to the invoking uid and, through the setuid helpers
  ``newuidmap``/``newgidmap`` (package ``uidmap``), ids 1..N to the user's subordinate range of
  ``/etc/subuid`` and ``/etc/subgid`` (Debian's and Ubuntu's ``useradd`` give every new user
  65536). Each sandbox gets three of them, its own root, ``user`` and ``nobody``, so sandboxes,
  their accounts and the emulator never share an id. Without subordinate ids there is one id only
  (no distinct ``user``, no unprivileged account for reward cases): the level is not offered.
* **The host's files** owned by host root stay owned by an id the namespace does not map: inside a
  sandbox they appear owned by ``nobody`` and sandbox root cannot change them (it can add files
  and replace the ones the sandbox layer generates: accounts, hosts); setuid programs (``sudo``)
  do not raise privileges. docs/isolation.md lists what differs from root's level.

:func:`enter` runs first thing in the emulator process, before any thread exists (a process with
threads cannot change its user namespace), after :func:`check` proved the whole way works in a
throwaway child: a process whose map could not be written would be stuck without any id.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import resource
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_e2b_env.standalone import linux as L

#: Ids a sandbox takes from the subordinate range: its root, ``user`` and ``nobody``.
IDS_PER_SANDBOX = 3
#: Fewer subordinate ids than this cannot give the emulator's sandboxes ids of their own.
MIN_SUBORDINATE = 3 * 64
NEWUIDMAP = "newuidmap"
NEWGIDMAP = "newgidmap"
_SYSCTL = Path("/proc/sys")


@dataclass(frozen=True)
class OuterIds:
    """The ids of the emulator's user namespace: 0 is the invoking user, 1..count its subordinates."""

    uid: int
    gid: int
    user: str
    subuid: tuple[int, int]  # (first, count) on the host
    subgid: tuple[int, int]
    #: The RLIMIT_NPROC the namespace was created with: the cap on the user's processes,
    #: every sandbox's included (the kernel counts them all against the user).
    nproc: int | None = None

    @property
    def count(self) -> int:
        """Subordinate ids usable for sandboxes (uids and gids alike)."""
        return min(self.subuid[1], self.subgid[1])

    def uid_map(self) -> list[str]:
        """``newuidmap`` arguments: 0 -> the user, 1..count -> the subordinate uids."""
        return ["0", str(self.uid), "1", "1", str(self.subuid[0]), str(self.count)]

    def gid_map(self) -> list[str]:
        """``newgidmap`` arguments: 0 -> the user's group, 1..count -> the subordinate gids."""
        return ["0", str(self.gid), "1", "1", str(self.subgid[0]), str(self.count)]

    def describe(self) -> str:
        """For the level's reason: who the emulator is and how many ids it has."""
        return (
            f"rootless: uid {self.uid} ({self.user}) is root of the emulator's own user namespace, "
            f"with {self.count} subordinate ids from uid {self.subuid[0]}"
        )


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def subordinate(table: Path, user: str, uid: int) -> tuple[int, int] | None:
    """The first range of ``table`` (``/etc/subuid`` format) owned by ``user`` or ``uid``."""
    try:
        lines = table.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        owner, _, rest = line.strip().partition(":")
        first, _, count = rest.partition(":")
        if owner in (user, str(uid)) and first.isdigit() and count.isdigit() and int(count) > 0:
            return int(first), int(count)
    return None


def disabled(sysctl: Path = _SYSCTL) -> str | None:
    """A host setting that forbids unprivileged user namespaces, with the fix (None: none found)."""
    limit = _read_int(sysctl / "user" / "max_user_namespaces")
    if limit is not None and limit < 1:
        return (
            f"user namespaces are disabled (user.max_user_namespaces = {limit}): "
            "sudo sysctl -w user.max_user_namespaces=15000, or run as root"
        )
    if _read_int(sysctl / "kernel" / "unprivileged_userns_clone") == 0:
        return (
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0): "
            "sudo sysctl -w kernel.unprivileged_userns_clone=1, or run as root"
        )
    return None


def _apparmor_fix() -> str:
    import sys

    return (
        "AppArmor restricts unprivileged user namespaces "
        "(kernel.apparmor_restrict_unprivileged_userns = 1): "
        "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile "
        f"allowing 'userns' for {os.path.realpath(sys.executable)}, or run as root"
    )


def ids(
    subuid: Path = Path("/etc/subuid"), subgid: Path = Path("/etc/subgid")
) -> tuple[OuterIds | None, str]:
    """The invoking user's subordinate ids and helpers, or None and why (with the fix)."""
    uid, gid = os.getuid(), os.getgid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    missing = [tool for tool in (NEWUIDMAP, NEWGIDMAP) if shutil.which(tool) is None]
    if missing:
        return (
            None,
            f"{' and '.join(missing)} missing: sudo apt-get install uidmap (or your system's shadow-utils)",
        )
    sub_u, sub_g = subordinate(subuid, user, uid), subordinate(subgid, user, uid)
    if sub_u is None or sub_g is None or min(sub_u[1], sub_g[1]) < MIN_SUBORDINATE:
        return None, (
            f"no subordinate ids for {user} (uid {uid}) in {subuid} and {subgid} (at least "
            f"{MIN_SUBORDINATE} needed): sudo usermod --add-subuids 100000-165535 "
            f"--add-subgids 100000-165535 {user}"
        )
    return OuterIds(uid, gid, user, sub_u, sub_g), ""


def _map_from_child(outer: OuterIds, go: int, done: int) -> None:
    """In a child still outside: wait for the parent's unshare, write its maps, report (never returns)."""
    status = b"0"
    try:
        if os.read(go, 1) == b"1":
            parent = str(os.getppid())
            for tool, args in ((NEWUIDMAP, outer.uid_map()), (NEWGIDMAP, outer.gid_map())):
                proc = subprocess.run([tool, parent, *args], capture_output=True, timeout=30)
                if proc.returncode != 0:
                    text = proc.stderr.decode(errors="replace").strip().splitlines()
                    raise OSError(errno.EPERM, f"{tool} failed: {text[-1] if text else proc.returncode}")
            status = b"1"
    except BaseException as exc:
        status = f"0{type(exc).__name__}: {exc}".encode()[:500]
    finally:
        with contextlib.suppress(OSError):
            os.write(done, status)
        os._exit(0)


def _enter(outer: OuterIds, nproc: int | None = None) -> None:
    """Move this (single-threaded) process into a new user namespace with ``outer``'s maps, as root.

    ``nproc``: the RLIMIT_NPROC the namespace is created with. The kernel counts every process of
    the namespace and its descendants (every sandbox) against the invoking user's count, up to
    this limit: an aggregate cap (it includes the user's other processes).
    """
    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(go_w)
        os.close(done_r)
        _map_from_child(outer, go_r, done_w)
    os.close(go_r)
    os.close(done_w)
    try:
        saved = resource.getrlimit(resource.RLIMIT_NPROC)
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (min(nproc, saved[1]), saved[1]))
        try:
            L.unshare(L.CLONE_NEWUSER)
        except OSError:
            os.write(go_w, b"0")
            raise
        finally:
            if nproc is not None:
                resource.setrlimit(resource.RLIMIT_NPROC, saved)
        os.write(go_w, b"1")
        answer = os.read(done_r, 600)
    finally:
        os.close(go_w)
        os.close(done_r)
        os.waitpid(pid, 0)
    if answer != b"1":
        raise OSError(errno.EPERM, answer[1:].decode(errors="replace") or "the id maps were not written")
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)


def check(outer: OuterIds) -> str | None:
    """Prove, in a throwaway child, that the namespace can be entered and used; None or why not."""
    why = disabled()
    if why:
        return why
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        message = b""
        try:
            _enter(outer)
            L.unshare(L.CLONE_NEWNS | L.CLONE_NEWPID)  # capabilities in the new namespace: not restricted
        except BaseException as exc:
            message = f"{type(exc).__name__}: {exc}".encode()[:500]
            if isinstance(exc, OSError) and exc.errno == errno.EPERM and _apparmor_restricts():
                message = b"apparmor"
        with contextlib.suppress(OSError):
            os.write(write, message or b"ok")
        os._exit(0)
    os.close(write)
    try:
        answer = os.read(read, 600)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    if answer == b"ok":
        return None
    if answer == b"apparmor":
        return _apparmor_fix()
    if b"ENOSPC" in answer or b"No space left" in answer:
        limit = _read_int(_SYSCTL / "user" / "max_user_namespaces")
        return (
            f"no user namespace can be created here (user.max_user_namespaces = {limit}, or the limit "
            "of an enclosing namespace is reached): sudo sysctl -w user.max_user_namespaces=15000, "
            "or run as root"
        )
    return f"an unprivileged user namespace did not work: {answer.decode(errors='replace') or 'no answer'}"


def _apparmor_restricts() -> bool:
    return _read_int(_SYSCTL / "kernel" / "apparmor_restrict_unprivileged_userns") == 1


_ENTERED: list[OuterIds] = []


def entered() -> OuterIds | None:
    """The ids of the user namespace this process entered (None: it did not, or it is host root)."""
    return _ENTERED[0] if _ENTERED else None


def user_processes(uid: int, proc: Path = Path("/proc")) -> int:
    """How many processes (threads included, as RLIMIT_NPROC counts them) ``uid`` has now."""
    count = 0
    for entry in os.listdir(proc):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError):
                status = (proc / entry / "status").read_text()
                uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
                if int(uid_line.split()[1]) == uid:
                    threads = next(line for line in status.splitlines() if line.startswith("Threads:"))
                    count += int(threads.split()[1])
    return count


def static_problem() -> str | None:
    """Why a user namespace cannot be used here, from the host's settings and files alone (no probe)."""
    why = disabled()
    if why:
        return why
    outer, why = ids()
    return why if outer is None else None


def enter(nproc: int | None = None) -> tuple[OuterIds | None, str]:
    """Enter the emulator's user namespace when not root: (the ids, "") or (None, why not, with the fix).

    Call before any thread starts. As root ((None, "")), or when anything is missing, nothing changes.
    ``nproc`` caps the user's processes, sandboxes included (default: what runs now plus
    ``quota.aggregate_procs()``, room for every sandbox of this emulator together).
    """
    if os.geteuid() == 0:
        return None, ""
    outer, why = ids()
    if outer is None:
        return None, why
    threads = len(os.listdir("/proc/self/task"))
    if threads > 1:
        return None, f"this process already runs {threads} threads; a user namespace is entered before any"
    problem = check(outer)
    if problem:
        return None, problem
    if nproc is None:
        from .quota import aggregate_procs

        nproc = user_processes(outer.uid) + aggregate_procs()
    try:
        _enter(outer, nproc)
    except OSError as exc:
        return None, f"entering the user namespace failed: {exc}"
    outer = replace(outer, nproc=nproc)
    _ENTERED[:] = [outer]
    return outer, ""
