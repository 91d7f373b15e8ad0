"""Thin ctypes wrappers for the Linux syscalls Python 3.11 lacks, and the kernel's numbers for them.

The one place for this code: the namespace sandboxes' builder and init (``sandbox_init``), their
files operations (``fsops``), the emulator, the reward runner (each case's namespaces, mounts and
seccomp filter) and its probe (which tries the refused calls) all take it from here. Every wrapper
raises ``OSError`` with the errno and what was attempted.
"""

from __future__ import annotations

import ctypes
import os
import select

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
#: Every flag that makes ``clone``/``unshare`` create a namespace.
CLONE_NAMESPACES = (
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
)

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
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_IDMAP = 0x100000

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2

#: The overflow uid: the account "nobody", and what an id without a mapping reads as inside a
#: user namespace. Reward cases run as it.
NOBODY = 65534

#: System calls added since Linux 5.1 have one number on every architecture.
UNIFIED = {
    "open_tree": 428,
    "move_mount": 429,
    "clone3": 435,
    "openat2": 437,
    "mount_setattr": 442,
    "memfd_secret": 447,
}
#: The older ones, per architecture (``os.uname().machine``), the unified ones included.
SYSCALLS = {
    "x86_64": {
        "shmget": 29, "clone": 56, "semget": 64, "msgget": 68, "pivot_root": 155, "add_key": 248,
        "request_key": 249, "keyctl": 250, "unshare": 272, "setns": 308, "memfd_create": 319,
        "bpf": 321, **UNIFIED,
    },
    "aarch64": {
        "pivot_root": 41, "unshare": 97, "msgget": 186, "semget": 190, "shmget": 194, "add_key": 217,
        "request_key": 218, "keyctl": 219, "clone": 220, "setns": 268, "memfd_create": 279,
        "bpf": 280, **UNIFIED,
    },
}  # fmt: skip
#: ``AUDIT_ARCH_*``: the architecture a seccomp filter sees in ``seccomp_data.arch``.
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def supported_arch() -> bool:
    """True when the syscall numbers of this machine's architecture are known."""
    return os.uname().machine in SYSCALLS


def nr(name: str) -> int:
    """The number of system call ``name`` on this machine (KeyError on an unknown architecture)."""
    return UNIFIED[name] if name in UNIFIED else SYSCALLS[os.uname().machine][name]


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def unshare(flags: int) -> None:
    """unshare(2)."""
    _check(libc.unshare(ctypes.c_int(flags)), f"unshare({flags:#x})")


def setns(fd: int, nstype: int) -> None:
    """setns(2) with a namespace file descriptor."""
    _check(libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), f"setns({nstype:#x})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """mount(2)."""

    def enc(value: str | None) -> bytes | None:
        return None if value is None else value.encode()

    _check(
        libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
        f"mount {fstype or 'bind'} on {target}",
    )


def umount2(target: str, flags: int) -> None:
    """umount2(2)."""
    _check(libc.umount2(target.encode(), ctypes.c_int(flags)), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    """pivot_root(2)."""
    _check(libc.syscall(nr("pivot_root"), new_root.encode(), put_old.encode()), "pivot_root")


def open_tree(dirfd: int, path: str, flags: int) -> int:
    """open_tree(2): returns a file descriptor for a (detached, when cloned) mount."""
    return _check(
        libc.syscall(nr("open_tree"), ctypes.c_int(dirfd), path.encode(), ctypes.c_uint(flags)), "open_tree"
    )


def move_mount(from_fd: int, to_path: str, flags: int) -> None:
    """move_mount(2) of a detached mount fd onto a path."""
    _check(
        libc.syscall(
            nr("move_mount"),
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


def mount_setattr(dirfd: int, path: str, flags: int, attr_set: int, userns_fd: int = 0) -> None:
    """mount_setattr(2) setting ``attr_set`` (``MOUNT_ATTR_IDMAP`` takes ``userns_fd``'s mapping).

    ``flags``: ``AT_RECURSIVE`` for the whole tree below ``path``, ``AT_EMPTY_PATH`` with ``""``
    for the mount ``dirfd`` stands for. ENOSYS before Linux 5.12.
    """
    attr = _MountAttr(attr_set, 0, 0, userns_fd)
    _check(
        libc.syscall(
            nr("mount_setattr"),
            ctypes.c_int(dirfd),
            path.encode(),
            ctypes.c_uint(flags),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        ),
        f"mount_setattr {path or dirfd}",
    )


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> None:
    """prctl(2) with up to two integer arguments (a pointer passed as its address)."""
    _check(
        libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), ctypes.c_ulong(arg3), 0, 0), f"prctl({option})"
    )


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def clear_capabilities() -> None:
    """capset(2) emptying this thread's effective, permitted and inheritable sets.

    What an exec by a user who is not root does to them; a process that drops its uid without an
    exec keeps them wherever root was unmapped (the uid change clears them only when it leaves the
    namespace's root).
    """
    data = (_CapData * 2)()
    _check(libc.capset(ctypes.byref(_CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)), data), "capset")


def setfsuid(uid: int) -> None:
    """setfsuid(2): the uid used for file permission checks and ownership, this thread only."""
    libc.setfsuid(ctypes.c_uint(uid))


def setfsgid(gid: int) -> None:
    """setfsgid(2)."""
    libc.setfsgid(ctypes.c_uint(gid))


def readable(fd: int, timeout_s: float = 0.0) -> bool:
    """Whether ``fd`` polls readable within ``timeout_s`` (a pidfd: the process exited).

    poll(2), never select(2): select cannot watch descriptors above 1023, and an emulator with
    hundreds of sandboxes and connections has many.
    """
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(timeout_s, 0.0) * 1000.0))
