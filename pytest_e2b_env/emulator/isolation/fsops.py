"""File operations confined to a sandbox root, in envd's shapes.

Every path is resolved with ``openat2(RESOLVE_IN_ROOT)`` against a directory fd that stands
for the sandbox's "/", so a symlink planted by the sandbox (to ``/etc/shadow`` or ``../../``)
resolves inside the sandbox, never onto host files. The final component of ``stat``,
``remove`` and ``move`` is handled with ``*at`` calls on its parent and never followed.

Standalone on purpose: the namespace level runs this module inside the sandbox's init helper
(a ``python -S`` interpreter that imports it as a top-level module), with the permission
checks of the requesting user; the process level runs it in the emulator.
"""

from __future__ import annotations

import ctypes
import errno
import grp
import os
import posixpath
import pwd
import shutil
import stat as st
from typing import Any

_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
_NR_OPENAT2 = 437  # the same on every architecture

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


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
            fd = self.open(f"/etc/{table}", os.O_RDONLY)
        except OSError:
            return str(ident)
        try:
            info = os.fstat(fd)
            key = (info.st_mtime_ns, info.st_size)
            cached = self._names.get(table)
            if cached is None or cached[0] != key:
                text = os.read(fd, 1 << 22).decode(errors="replace")
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
        rel = path.lstrip("/") or "."
        fd = _libc.syscall(
            _NR_OPENAT2,
            ctypes.c_int(self.root_fd),
            rel.encode(),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
        return int(fd)

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

    def read(self, path: str) -> bytes:
        """Whole content of a file (symlinks followed inside the sandbox)."""
        fd = self.open(path, os.O_RDONLY)
        try:
            if st.S_ISDIR(os.fstat(fd).st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory", path)
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
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

    def write(self, path: str, data: bytes) -> dict[str, Any]:
        """Create or truncate a file, making missing parents; returns its entry."""
        if path == "/":
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        self.makedirs(posixpath.dirname(path))
        fd = self.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
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

    def listdir(self, path: str, depth: int) -> list[dict[str, Any]]:
        """Entries below a directory, ``depth`` levels deep (1 = direct children), sorted by path."""
        if depth < 1:
            raise ValueError(f"depth={depth} must be >= 1")
        out: list[dict[str, Any]] = []
        self._walk(path, depth, out)
        return out

    def _walk(self, path: str, depth: int, out: list[dict[str, Any]]) -> None:
        fd = self.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            names = sorted(os.listdir(fd))
        finally:
            os.close(fd)
        for name in names:
            child = posixpath.join(path, name)
            try:
                item = self.entry(child)
            except FileNotFoundError:
                continue  # removed while listing
            out.append(item)
            if depth > 1 and item["type"] == "dir":
                try:
                    self._walk(child, depth - 1, out)
                except PermissionError:
                    continue

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
                # rmtree with dir_fd never follows symlinks inside the tree.
                shutil.rmtree(name, dir_fd=pfd)
            else:
                os.unlink(name, dir_fd=pfd)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None
        finally:
            os.close(pfd)
