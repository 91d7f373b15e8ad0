"""envd's filesystem: the ``filesystem.Filesystem`` connect-rpc service and the ``/files`` HTTP API.

Every operation goes through the box's ``SandboxFS``, which resolves paths inside the sandbox,
so the files API sees exactly what commands see. Relative paths resolve against the user's home.
"""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import errno
import gzip
import json
import posixpath
import zlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.filesystem import filesystem_connect
from e2b.envd.filesystem import filesystem_pb as F
from protobuf.wkt import Timestamp

from pytest_e2b_env.emulator.envd_process import check_user, home_of, user_of
from pytest_e2b_env.emulator.sandboxes import Registry, Sandbox
from pytest_e2b_env.errors import InfrastructureError

T = TypeVar("T")

_TYPES = {"file": F.FileType.FILE, "dir": F.FileType.DIRECTORY, "symlink": F.FileType.SYMLINK}


def sandbox_path(path: str, user: str) -> str:
    """An absolute, normalised sandbox path (relative ones start at the user's home)."""
    if not path:
        return home_of(user)
    return posixpath.normpath(path if path.startswith("/") else posixpath.join(home_of(user), path))


def entry_info(info: Mapping[str, Any]) -> F.EntryInfo:
    """A ``SandboxFS.stat`` dict as envd's ``EntryInfo`` message."""
    target = info.get("symlink_target")
    return F.EntryInfo(
        name=str(info.get("name", "")),
        type=_TYPES.get(str(info.get("type")), F.FileType.UNSPECIFIED),
        path=str(info.get("path", "")),
        size=int(info.get("size", 0)),
        mode=int(info.get("mode", 0)),
        permissions=str(info.get("permissions", "")),
        owner=str(info.get("owner", "")),
        group=str(info.get("group", "")),
        modified_time=Timestamp.from_nanos(int(float(info.get("modified_time", 0.0)) * 1_000_000_000)),
        symlink_target=str(target) if target else None,
        is_symlink=info.get("type") == "symlink",
    )


def _rpc_error(exc: OSError, path: str) -> ConnectError:
    if isinstance(exc, FileNotFoundError):
        return ConnectError(Code.NOT_FOUND, f"no such file or directory: {path}")
    if isinstance(exc, FileExistsError):
        return ConnectError(Code.ALREADY_EXISTS, f"path already exists: {path}")
    if isinstance(exc, PermissionError):
        return ConnectError(Code.PERMISSION_DENIED, f"permission denied: {path}")
    if isinstance(exc, NotADirectoryError):
        return ConnectError(Code.INVALID_ARGUMENT, f"path is not a directory: {path}")
    if isinstance(exc, IsADirectoryError):
        return ConnectError(Code.INVALID_ARGUMENT, f"path is a directory: {path}")
    return ConnectError(Code.INTERNAL, f"filesystem error on {path}: {type(exc).__name__}")


class FilesystemService(filesystem_connect.Filesystem):
    """Stat/ListDir/MakeDir/Move/Remove for the request's sandbox (watchers are not emulated)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def _target(self, ctx: Any) -> tuple[Sandbox, str]:
        sbx = self.registry.get(ctx.request_headers.get("e2b-sandbox-id"))
        if sbx is None:
            raise ConnectError(Code.UNAVAILABLE, "The sandbox was not found")
        return sbx, check_user(user_of(ctx.request_headers))

    async def _call(self, fn: Callable[[], T], path: str) -> T:
        try:
            return await asyncio.to_thread(fn)
        except ProcessLookupError as exc:
            raise ConnectError(Code.UNAVAILABLE, "The sandbox was not found") from exc
        except OSError as exc:
            raise _rpc_error(exc, path) from exc
        except ValueError as exc:
            raise ConnectError(Code.INVALID_ARGUMENT, f"{path}: {exc}") from exc
        except InfrastructureError as exc:
            raise ConnectError(Code.UNAVAILABLE, f"the sandbox failed: {type(exc).__name__}") from exc

    async def stat(self, request: F.StatRequest, ctx: Any) -> F.StatResponse:
        sbx, user = self._target(ctx)
        path = sandbox_path(request.path, user)
        info = await self._call(lambda: sbx.box.fs.stat(path, user), path)
        if info is None:
            raise ConnectError(Code.NOT_FOUND, f"no such file or directory: {path}")
        return F.StatResponse(entry=entry_info(info))

    async def list_dir(self, request: F.ListDirRequest, ctx: Any) -> F.ListDirResponse:
        sbx, user = self._target(ctx)
        path = sandbox_path(request.path, user)
        depth = request.depth or 1
        entries = await self._call(lambda: sbx.box.fs.listdir(path, depth, user), path)
        return F.ListDirResponse(entries=[entry_info(e) for e in entries])

    async def make_dir(self, request: F.MakeDirRequest, ctx: Any) -> F.MakeDirResponse:
        sbx, user = self._target(ctx)
        path = sandbox_path(request.path, user)
        made = await self._call(lambda: sbx.box.fs.mkdir(path, user), path)
        if not made:
            raise ConnectError(Code.ALREADY_EXISTS, f"directory {path} already exists")
        info = await self._call(lambda: sbx.box.fs.stat(path, user), path)
        return F.MakeDirResponse(entry=entry_info(info or {"name": posixpath.basename(path), "path": path}))

    async def move(self, request: F.MoveRequest, ctx: Any) -> F.MoveResponse:
        sbx, user = self._target(ctx)
        src, dst = sandbox_path(request.source, user), sandbox_path(request.destination, user)
        await self._call(lambda: sbx.box.fs.move(src, dst, user), src)
        info = await self._call(lambda: sbx.box.fs.stat(dst, user), dst)
        return F.MoveResponse(entry=entry_info(info or {"name": posixpath.basename(dst), "path": dst}))

    async def remove(self, request: F.RemoveRequest, ctx: Any) -> F.RemoveResponse:
        sbx, user = self._target(ctx)
        path = sandbox_path(request.path, user)
        await self._call(lambda: sbx.box.fs.remove(path, user), path)
        return F.RemoveResponse()


# ---------------------------------------------------------------------------- /files (HTTP)
def json_response(status: int, obj: Any) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """A JSON answer triple."""
    return status, [(b"content-type", b"application/json")], json.dumps(obj).encode()


def _http_error(exc: Exception, path: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    if isinstance(exc, ProcessLookupError | InfrastructureError):
        return json_response(502, {"code": 502, "message": "The sandbox was not found"})
    if isinstance(exc, ValueError):
        return json_response(400, {"code": 400, "message": f"bad path '{path}': {exc}"})
    if isinstance(exc, FileNotFoundError):
        return json_response(404, {"code": 404, "message": f"path '{path}' does not exist"})
    if isinstance(exc, IsADirectoryError):
        return json_response(400, {"code": 400, "message": f"path '{path}' is a directory"})
    if isinstance(exc, NotADirectoryError):
        return json_response(400, {"code": 400, "message": f"a parent of '{path}' is not a directory"})
    if isinstance(exc, PermissionError):
        return json_response(403, {"code": 403, "message": f"permission denied: '{path}'"})
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:  # the sandbox's disk quota (SDK: 507)
        return json_response(507, {"code": 507, "message": f"not enough disk space available for '{path}'"})
    return json_response(500, {"code": 500, "message": f"filesystem error on '{path}': {type(exc).__name__}"})


def _uploads(
    query: Mapping[str, list[str]], headers: Mapping[str, str], body: bytes
) -> list[tuple[str, bytes]]:
    ctype = headers.get("content-type", "")
    if ctype.startswith("multipart/form-data"):
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + ctype.encode("latin-1") + b"\r\n\r\n" + body
        )
        parts = list(message.iter_parts())
        paths = query.get("path", [])
        items = []
        for part in parts:
            name = paths[0] if len(paths) == 1 and len(parts) == 1 else part.get_filename()
            data = part.get_payload(decode=True)
            items.append((name or "", data if isinstance(data, bytes) else b""))
        return items
    encoding = headers.get("content-encoding", "")
    if encoding == "gzip":
        body = gzip.decompress(body)
    elif encoding == "deflate":
        body = zlib.decompress(body)
    return [(query.get("path", [""])[0], body)]


async def files_api(
    sbx: Sandbox, method: str, query: Mapping[str, list[str]], headers: Mapping[str, str], body: bytes
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Answer ``GET /files`` (download) or ``POST /files`` (upload) as envd does."""
    raw_user = query.get("username", [""])[0] or user_of(headers)
    if raw_user not in ("user", "root"):
        return json_response(400, {"code": 400, "message": f"invalid username: '{raw_user}'"})
    user = raw_user
    if method == "GET":
        path = sandbox_path(query.get("path", [""])[0], user)
        try:
            data = await asyncio.to_thread(sbx.box.fs.read, path, user)
        except (OSError, ValueError, InfrastructureError) as exc:
            return _http_error(exc, path)
        return 200, [(b"content-type", b"application/octet-stream")], data
    if method != "POST":
        return json_response(405, {"code": 405, "message": f"method {method} not allowed on /files"})
    try:
        uploads = _uploads(query, headers, body)
    except (ValueError, OSError, EOFError, zlib.error):
        return json_response(400, {"code": 400, "message": "malformed upload body"})
    written = []
    for raw_path, data in uploads:
        if not raw_path:
            return json_response(400, {"code": 400, "message": "upload without a path"})
        path = sandbox_path(raw_path, user)
        try:
            await asyncio.to_thread(sbx.box.fs.write, path, data, user)
        except (OSError, ValueError, InfrastructureError) as exc:
            return _http_error(exc, path)
        written.append({"name": posixpath.basename(path), "type": "file", "path": path})
    return json_response(200, written)
