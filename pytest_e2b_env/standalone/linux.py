"""Thin ctypes wrappers for the Linux syscalls the namespace level needs (Python 3.11 has none of them).

Used by the emulator and by the sandboxes' builder and init (``sandbox_init``).
"""

from __future__ import annotations

import ctypes
import os
import select

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 0x2

AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_IDMAP = 0x100000

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36

# The new mount API has the same numbers on every architecture; pivot_root does not.
_NR = {
    "x86_64": {"pivot_root": 155, "open_tree": 428, "move_mount": 429, "mount_setattr": 442},
    "aarch64": {"pivot_root": 41, "open_tree": 428, "move_mount": 429, "mount_setattr": 442},
}

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


def supported_arch() -> bool:
    """True when the syscall numbers of this machine's architecture are known."""
    return os.uname().machine in _NR


def _nr(name: str) -> int:
    return _NR[os.uname().machine][name]


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def unshare(flags: int) -> None:
    """unshare(2)."""
    _check(_libc.unshare(ctypes.c_int(flags)), f"unshare({flags:#x})")


def setns(fd: int, nstype: int) -> None:
    """setns(2) with a namespace file descriptor."""
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), f"setns({nstype:#x})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2)."""

    def enc(value: str | None) -> bytes | None:
        return None if value is None else value.encode()

    _check(
        _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
        f"mount {fstype or 'bind'} on {target}",
    )


def umount2(target: str, flags: int) -> None:
    """umount2(2)."""
    _check(_libc.umount2(target.encode(), ctypes.c_int(flags)), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    """pivot_root(2)."""
    _check(_syscall(_nr("pivot_root"), new_root.encode(), put_old.encode()), "pivot_root")


def open_tree(dirfd: int, path: str, flags: int) -> int:
    """open_tree(2): returns a file descriptor for a (detached, when cloned) mount."""
    return _check(
        _syscall(_nr("open_tree"), ctypes.c_int(dirfd), path.encode(), ctypes.c_uint(flags)), "open_tree"
    )


def move_mount(from_fd: int, to_path: str, flags: int) -> None:
    """move_mount(2) of a detached mount fd onto a path."""
    _check(
        _syscall(
            _nr("move_mount"),
            ctypes.c_int(from_fd),
            b"",
            ctypes.c_int(AT_FDCWD),
            to_path.encode(),
            ctypes.c_uint(flags),
        ),
        f"move_mount to {to_path}",
    )


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def mount_setattr_idmap(tree_fd: int, userns_fd: int, extra: int = 0) -> None:
    """mount_setattr(2) setting MOUNT_ATTR_IDMAP (plus ``extra`` attributes) from a user namespace."""
    attr = _MountAttr(MOUNT_ATTR_IDMAP | extra, 0, 0, userns_fd)
    _check(
        _syscall(
            _nr("mount_setattr"),
            ctypes.c_int(tree_fd),
            b"",
            ctypes.c_uint(AT_EMPTY_PATH),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        ),
        "mount_setattr(idmap)",
    )


def prctl(option: int, arg: int) -> None:
    """prctl(2) with one integer argument."""
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), 0, 0, 0), f"prctl({option})")


def setfsuid(uid: int) -> None:
    """setfsuid(2): the uid used for file permission checks and ownership, this thread only."""
    _libc.setfsuid(ctypes.c_uint(uid))


def setfsgid(gid: int) -> None:
    """setfsgid(2)."""
    _libc.setfsgid(ctypes.c_uint(gid))


def readable(fd: int, timeout_s: float = 0.0) -> bool:
    """Whether ``fd`` polls readable within ``timeout_s`` (a pidfd: the process exited).

    poll(2), never select(2): select cannot watch descriptors above 1023, and an emulator with
    hundreds of sandboxes and connections has many.
    """
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(timeout_s, 0.0) * 1000.0))
