"""The files API of a namespace sandbox: requests served by the sandbox's init, from inside."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_e2b_env.standalone.fsops import MAX_DEPTH, MAX_ENTRIES, MAX_READ, normalize

from .api import SandboxFS, check_user, home_of

#: One round trip with a sandbox's init: (header, data, largest reply data) -> (header, data).
#: ``NamespaceBox.request`` is the one the emulator passes.
InitRequest = Callable[[dict[str, Any], bytes | None, int], tuple[dict[str, Any], bytes | None]]


class NamespaceFS(SandboxFS):
    """Files of a namespace sandbox, served by its init with the asking user's permissions."""

    def __init__(self, request: InitRequest) -> None:
        self._request = request

    def _call(
        self, op: str, path: str, user: str, data: bytes | None = None, max_data: int = 1 << 20, **extra: Any
    ) -> Any:
        path = normalize(path, home_of(check_user(user)))
        header, payload = self._request({"op": op, "path": path, "user": user, **extra}, data, max_data)
        if "errno" in header:
            raise OSError(int(header["errno"]), str(header.get("message", "")), path)
        if "value_error" in header:
            raise ValueError(str(header["value_error"]))
        return payload if op == "read" else header.get("ok")

    def read(self, path: str, user: str = "user", limit: int = MAX_READ) -> bytes:
        """Whole content of a regular file of at most ``limit`` bytes."""
        return bytes(self._call("read", path, user, max_data=limit, limit=limit) or b"")

    def write(self, path: str, data: bytes, user: str = "user", limit: int = MAX_READ) -> dict[str, Any]:
        """Create or overwrite a regular file as ``user``; returns its entry."""
        return dict(self._call("write", path, user, bytes(data), limit=limit))

    def stat(self, path: str, user: str = "user") -> dict[str, Any] | None:
        """Entry of ``path`` or None."""
        info = self._call("stat", path, user)
        return None if info is None else dict(info)

    def listdir(
        self,
        path: str,
        depth: int = 1,
        user: str = "user",
        max_entries: int = MAX_ENTRIES,
        max_depth: int = MAX_DEPTH,
    ) -> list[dict[str, Any]]:
        """Entries below a directory (bounded in depth and count)."""
        if depth < 1:
            raise ValueError(f"depth={depth} must be >= 1")
        return list(
            self._call("listdir", path, user, depth=depth, max_entries=max_entries, max_depth=max_depth)
        )

    def mkdir(self, path: str, user: str = "user") -> bool:
        """Create a directory with parents; False when it exists."""
        return bool(self._call("mkdir", path, user))

    def move(self, src: str, dst: str, user: str = "user") -> dict[str, Any]:
        """Rename; returns the new entry."""
        return dict(self._call("move", src, user, dst=normalize(dst, home_of(user))))

    def remove(self, path: str, user: str = "user") -> None:
        """Remove a file, symlink or tree."""
        self._call("remove", path, user)

    def check_dir(self, path: str, user: str) -> str:
        """The normalized path when it is a directory ``user`` can reach; raises otherwise."""
        self._call("isdir", path, user)
        return normalize(path, home_of(user))
