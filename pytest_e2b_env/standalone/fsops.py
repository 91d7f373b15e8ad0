"""File operations confined to a sandbox root, in envd's shapes.

Every path is resolved with ``openat2(RESOLVE_IN_ROOT)`` against a directory fd that stands
for the sandbox's "/", so a symlink planted by the sandbox (to ``/etc/shadow`` or ``../../``)
resolves inside the sandbox, never onto host files. The final component of ``stat``,
``remove`` and ``move`` is handled with ``*at`` calls on its parent and never followed.

The namespace level runs this module inside the sandbox's init (``sandbox_init``), with the
permission checks of the requesting user; the process level runs it in the emulator.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import grp
import os
import posixpath
import pwd
import stat as st
from collections.abc import Iterator
from typing import Any

from . import linux as L

_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
#: openat2 tries before an EAGAIN (a rename or mount racing a ".." walk) is reported
_OPENAT2_TRIES = 32

#: Defaults when the caller passes no limit (the emulator always passes its own).
MAX_READ = 64 << 20
MAX_ENTRIES = 100_000
MAX_DEPTH = 256
#: Directories held open at once while deleting a tree; deeper levels are moved up (see remove_tree_at).
_MAX_OPEN_DIRS = 32
#: Non-blocking opens: a FIFO or device planted by the sandbox must never block the server.
_SAFE_OPEN = os.O_NONBLOCK | os.O_NOCTTY


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


def normalize(path: str, home: str) -> str:
    """Absolute, lexically clean sandbox path; relative paths are taken from ``home`` (as envd does)."""
    if not path:
        path = home
    if not path.startswith("/"):
        path = posixpath.join(home, path)
    path = posixpath.normpath(path)
    return "/" + path.lstrip("/")


def go_mode_string(mode: int) -> str:
    """The permission string envd sends: Go's ``FileMode.String()`` ("-rw-r--r--", "drwxr-xr-x")."""
    kinds = ""
    if st.S_ISDIR(mode):
        kinds += "d"
    if st.S_ISLNK(mode):
        kinds += "L"
    if st.S_ISBLK(mode) or st.S_ISCHR(mode):
        kinds += "D"
    if st.S_ISFIFO(mode):
        kinds += "p"
    if st.S_ISSOCK(mode):
        kinds += "S"
    if mode & st.S_ISUID:
        kinds += "u"
    if mode & st.S_ISGID:
        kinds += "g"
    if st.S_ISCHR(mode):
        kinds += "c"
    if mode & st.S_ISVTX:
        kinds += "t"
    rwx = "".join(ch if mode & (1 << (8 - i)) else "-" for i, ch in enumerate("rwxrwxrwx"))
    return (kinds or "-") + rwx


def kind_of(mode: int) -> str:
    """A human name of a file type, for errors ("FIFO", "character device", ...)."""
    for test, name in (
        (st.S_ISDIR, "directory"),
        (st.S_ISFIFO, "FIFO"),
        (st.S_ISCHR, "character device"),
        (st.S_ISBLK, "block device"),
        (st.S_ISSOCK, "socket"),
        (st.S_ISLNK, "symlink"),
    ):
        if test(mode):
            return name
    return "special file"


def read_fd(fd: int, path: str, limit: int) -> bytes:
    """At most ``limit`` bytes of the regular file behind ``fd``; ValueError for anything else or more."""
    info = os.fstat(fd)
    if st.S_ISDIR(info.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", path)
    if not st.S_ISREG(info.st_mode):
        raise ValueError(
            f"path '{path}' is a {kind_of(info.st_mode)}, not a regular file; "
            "the emulator reads and writes regular files only"
        )
    if info.st_size > limit:
        raise ValueError(_too_large(path, info.st_size, limit))
    chunks = []
    total = 0
    while chunk := os.read(fd, min(1 << 20, limit + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:  # grew while being read
            raise ValueError(_too_large(path, total, limit))
    return b"".join(chunks)


def _too_large(path: str, size: int, limit: int) -> str:
    return (
        f"file '{path}' has {size} bytes or more, above the emulator's limit of {limit} bytes; "
        "raise it with Emulator(limits={'file_bytes': N})"
    )


def _scan(fd: int) -> Iterator[tuple[str, bool]]:
    """(name, is a real directory) for each entry of the directory ``fd`` (streamed, no stat)."""
    with os.scandir(fd) as it:
        for entry in it:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            yield entry.name, is_dir


def remove_tree_at(parent_fd: int, name: str) -> None:
    """Delete the directory ``name`` below ``parent_fd`` and everything in it, without recursion.

    Symlinks are never followed (every open is ``O_NOFOLLOW`` relative to its parent's fd) and
    no full path is ever built, so trees deeper than PATH_MAX or Python's recursion limit go
    too. At most ``_MAX_OPEN_DIRS`` directories are open at once: a deeper directory is renamed
    into the top of the tree being deleted and taken up from there.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    top = os.open(name, flags, dir_fd=parent_fd)
    # One level: [fd, entry iterator, own name, changed since its scan]. A drained directory
    # that is still not empty (entries moved in from below, or added meanwhile) is scanned
    # again as long as the last scan changed something.
    stack: list[list[Any]] = [[top, _scan(top), name, False]]
    try:
        while stack:
            level = stack[-1]
            fd = level[0]
            child = next(level[1], None)
            if child is None:
                parent = stack[-2][0] if len(stack) > 1 else parent_fd
                try:
                    os.rmdir(level[2], dir_fd=parent)
                except FileNotFoundError:
                    pass  # removed meanwhile by someone else (another sweeper)
                except OSError as exc:
                    if exc.errno != errno.ENOTEMPTY or not level[3]:
                        raise
                    level[1], level[3] = _scan(fd), False
                    continue
                stack.pop()
                os.close(fd)
                if stack:
                    stack[-1][3] = True
                continue
            child_name, is_dir = child
            if not is_dir:
                try:
                    os.unlink(child_name, dir_fd=fd)
                    level[3] = True
                    continue
                except FileNotFoundError:
                    continue
                except IsADirectoryError:
                    pass  # became a directory since the scan
            if len(stack) >= _MAX_OPEN_DIRS:
                try:
                    os.rename(child_name, f".rm-{os.urandom(8).hex()}", src_dir_fd=fd, dst_dir_fd=stack[0][0])
                except FileNotFoundError:
                    continue
                stack[0][3] = level[3] = True  # the top directory's next scan takes it up
                continue
            try:
                child_fd = os.open(child_name, flags, dir_fd=fd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(child_name, dir_fd=fd)  # replaced by a file or a symlink meanwhile
                level[3] = True
                continue
            stack.append([child_fd, _scan(child_fd), child_name, False])
    finally:
        for level in stack:
            os.close(level[0])


def remove_tree_quietly(path: str | os.PathLike[str]) -> str | None:
    """:func:`remove_tree` that never raises (for background deleters): the error text, or None."""
    try:
        remove_tree(os.fspath(path))
    except Exception as exc:  # a cleanup path: report, never crash the caller's thread
        return f"{type(exc).__name__}: {exc}"
    return None


def remove_tree(path: str) -> None:
    """Delete a host path (file, symlink or any-depth tree) without recursion; a missing path is fine."""
    parent, name = os.path.split(os.path.abspath(path))
    pfd = os.open(parent or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            info = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        with contextlib.suppress(FileNotFoundError):  # gone meanwhile (another sweeper)
            if st.S_ISDIR(info.st_mode):
                remove_tree_at(pfd, name)
            else:
                os.unlink(name, dir_fd=pfd)
    finally:
        os.close(pfd)


class RootedFS:
    """envd-style file operations on the tree below ``root_fd``, which acts as the sandbox's "/"."""

    def __init__(self, root_fd: int, accounts_in_root: bool = False) -> None:
        self.root_fd = root_fd
        self.accounts_in_root = accounts_in_root
        self._names: dict[str, tuple[tuple[int, int], dict[int, str]]] = {}

    def _name(self, table: str, ident: int) -> str:
        """Account or group name of an id, from the root's own file (parsed, cached by mtime)."""
        if not self.accounts_in_root:
            try:
                return pwd.getpwuid(ident).pw_name if table == "passwd" else grp.getgrgid(ident).gr_name
            except KeyError:
                return str(ident)
        try:
            fd = self.open(f"/etc/{table}", os.O_RDONLY | _SAFE_OPEN)
        except OSError:
            return str(ident)
        try:
            info = os.fstat(fd)
            key = (info.st_mtime_ns, info.st_size)
            cached = self._names.get(table)
            if cached is None or cached[0] != key:
                try:  # the sandbox owns this file: a FIFO or a huge file there must not hurt
                    text = read_fd(fd, f"/etc/{table}", 1 << 22).decode(errors="replace")
                except (OSError, ValueError):
                    return str(ident)
                names: dict[int, str] = {}
                for line in text.splitlines():
                    fields = line.split(":")
                    if len(fields) > 2 and fields[2].isdigit():
                        names.setdefault(int(fields[2]), fields[0])
                cached = (key, names)
                self._names[table] = cached
        finally:
            os.close(fd)
        return cached[1].get(ident, str(ident))

    # -- resolution ---------------------------------------------------------------------------

    def open(self, path: str, flags: int, mode: int = 0) -> int:
        """openat2 below the root; ``path`` is an absolute sandbox path; symlinks stay inside."""
        how = _OpenHow(flags | os.O_CLOEXEC, mode, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
        rel = path.lstrip("/").encode() or b"."
        # EAGAIN: a ".." was resolved while a rename or mount happened anywhere on the machine, and
        # the kernel could not prove the walk stayed inside; openat2(2) says to try again. Bounded:
        # a busy host renames all the time, but not at every one of a few dozen tries.
        for _ in range(_OPENAT2_TRIES):
            fd = L.libc.syscall(
                L.nr("openat2"),
                ctypes.c_int(self.root_fd),
                rel,
                ctypes.byref(how),
                ctypes.c_size_t(ctypes.sizeof(how)),
            )
            if fd >= 0:
                return int(fd)
            err = ctypes.get_errno()
            if err != errno.EAGAIN:
                break
        raise OSError(err, os.strerror(err), path)

    def _parent(self, path: str) -> tuple[int, str]:
        """An O_PATH fd of the parent directory and the final component (never followed)."""
        parent, name = posixpath.split(path)
        return self.open(parent, os.O_PATH | os.O_DIRECTORY), name

    def entry(self, path: str) -> dict[str, Any]:
        """The envd EntryInfo of ``path`` (the link itself for a symlink)."""
        if path == "/":
            return self._entry_from(os.fstat(self.root_fd), path, None)
        pfd, name = self._parent(path)
        try:
            info = os.stat(name, dir_fd=pfd, follow_symlinks=False)
            target = None
            if st.S_ISLNK(info.st_mode):
                link = os.readlink(name, dir_fd=pfd)
                target = normalize(link, posixpath.dirname(path))
            return self._entry_from(info, path, target)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None
        finally:
            os.close(pfd)

    def _entry_from(self, info: os.stat_result, path: str, target: str | None) -> dict[str, Any]:
        if st.S_ISLNK(info.st_mode):
            kind = "symlink"
        elif st.S_ISDIR(info.st_mode):
            kind = "dir"
        else:
            kind = "file"
        return {
            "name": posixpath.basename(path) or "/",
            "type": kind,
            "path": path,
            "size": info.st_size,
            "mode": info.st_mode & 0o777,
            "permissions": go_mode_string(info.st_mode),
            "owner": self._name("passwd", info.st_uid),
            "group": self._name("group", info.st_gid),
            "modified_time": info.st_mtime,
            "symlink_target": target,
        }

    # -- operations ---------------------------------------------------------------------------

    def read(self, path: str, limit: int = MAX_READ) -> bytes:
        """Whole content of a regular file of at most ``limit`` bytes (symlinks followed inside).

        A FIFO, device or socket is refused (ValueError) without ever blocking: the open is
        non-blocking and nothing is read from anything but a regular file.
        """
        fd = self.open(path, os.O_RDONLY | _SAFE_OPEN)
        try:
            return read_fd(fd, path, limit)
        finally:
            os.close(fd)

    def makedirs(self, path: str) -> bool:
        """Create ``path`` and missing parents (0755); False when it already was a directory."""
        created = False
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            sub = "/" + "/".join(parts[:i])
            try:
                os.close(self.open(sub, os.O_PATH | os.O_DIRECTORY))
                continue
            except FileNotFoundError:
                pass
            pfd, name = self._parent(sub)
            try:
                os.mkdir(name, 0o755, dir_fd=pfd)
                created = True
            except FileExistsError:
                # A dangling symlink or a racing creator: the next open tells which.
                os.close(self.open(sub, os.O_PATH | os.O_DIRECTORY))
            finally:
                os.close(pfd)
        return created

    def write(self, path: str, data: bytes, limit: int = MAX_READ) -> dict[str, Any]:
        """Create or truncate a regular file, making missing parents; returns its entry."""
        if path == "/":
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        if len(data) > limit:
            raise ValueError(_too_large(path, len(data), limit))
        self.makedirs(posixpath.dirname(path))
        try:
            # no O_TRUNC before the type check; non-blocking so a FIFO never waits for a reader
            fd = self.open(path, os.O_WRONLY | os.O_CREAT | _SAFE_OPEN, 0o666)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a FIFO without a reader, or a device without a driver
                raise ValueError(
                    f"path '{path}' is not a regular file; the emulator reads and writes regular files only"
                ) from None
            raise
        try:
            mode = os.fstat(fd).st_mode
            if not st.S_ISREG(mode):
                raise ValueError(
                    f"path '{path}' is a {kind_of(mode)}, not a regular file; "
                    "the emulator reads and writes regular files only"
                )
            os.ftruncate(fd, 0)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        return self.entry(path)

    def stat(self, path: str) -> dict[str, Any] | None:
        """The entry of ``path`` or None when it does not exist."""
        try:
            return self.entry(path)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def listdir(
        self, path: str, depth: int, max_entries: int = MAX_ENTRIES, max_depth: int = MAX_DEPTH
    ) -> list[dict[str, Any]]:
        """Entries below a directory, ``depth`` levels deep (1 = direct children), depth-first by name.

        Iterative, and bounded: ``depth`` above ``max_depth`` or more than ``max_entries``
        entries (counting those still to visit) is a ValueError naming the limit.
        """
        if depth < 1:
            raise ValueError(f"depth={depth} must be >= 1")
        if depth > max_depth:
            raise ValueError(
                f"listing '{path}': depth={depth} is above the emulator's limit of {max_depth} levels; "
                "pass a smaller depth"
            )
        out: list[dict[str, Any]] = []
        pending = [0]  # names read but not yet listed, across every open level
        stack = [(path, depth, iter(self._names_below(path, len(out), pending, max_entries)))]
        while stack:
            parent, left, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                continue
            pending[0] -= 1
            child = posixpath.join(parent, name)
            try:
                item = self.entry(child)
            except (FileNotFoundError, NotADirectoryError):
                continue  # removed while listing
            out.append(item)
            if left > 1 and item["type"] == "dir":
                try:
                    below = self._names_below(child, len(out), pending, max_entries)
                except (PermissionError, FileNotFoundError, NotADirectoryError):
                    continue
                except OSError as exc:
                    if exc.errno != errno.ENAMETOOLONG:
                        raise
                    continue
                stack.append((child, left - 1, iter(below)))
        return out

    def _names_below(self, path: str, listed: int, pending: list[int], max_entries: int) -> list[str]:
        fd = self.open(path, os.O_RDONLY | os.O_DIRECTORY)
        names = []
        try:
            for name, _ in _scan(fd):
                names.append(name)
                if listed + pending[0] + len(names) > max_entries:
                    raise ValueError(
                        f"listing '{path}' gives more than {max_entries} entries, the emulator's limit; "
                        "list a subdirectory or pass a smaller depth"
                    )
        finally:
            os.close(fd)
        pending[0] += len(names)
        return sorted(names)

    def mkdir(self, path: str) -> bool:
        """make_dir: create with parents; False if a directory is already there."""
        info = self.stat(path)
        if info is not None:
            if info["type"] == "dir":
                return False
            raise FileExistsError(errno.EEXIST, "exists and is not a directory", path)
        self.makedirs(path)
        return True

    def move(self, src: str, dst: str) -> dict[str, Any]:
        """Rename ``src`` to ``dst`` (parents of ``dst`` are created); returns the new entry."""
        if self.stat(src) is None:
            raise FileNotFoundError(errno.ENOENT, "no such file or directory", src)
        self.makedirs(posixpath.dirname(dst))
        sfd, sname = self._parent(src)
        try:
            dfd, dname = self._parent(dst)
            try:
                os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, src) from None
            finally:
                os.close(dfd)
        finally:
            os.close(sfd)
        return self.entry(dst)

    def remove(self, path: str) -> None:
        """Remove a file, a symlink (not its target) or a whole directory tree."""
        if path == "/":
            raise PermissionError(errno.EPERM, "refusing to remove the root", path)
        pfd, name = self._parent(path)
        try:
            info = os.stat(name, dir_fd=pfd, follow_symlinks=False)
            if st.S_ISDIR(info.st_mode):
                remove_tree_at(pfd, name)  # never follows symlinks, any depth
            else:
                os.unlink(name, dir_fd=pfd)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None
        finally:
            os.close(pfd)
