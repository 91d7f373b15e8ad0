"""envd's filesystem: the ``filesystem.Filesystem`` connect-rpc service and the ``/files`` HTTP API.

Every operation goes through the box's ``SandboxFS``, which resolves paths inside the sandbox,
so the files API sees exactly what commands see. Relative paths resolve against the user's home.
"""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import errno
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
from pytest_e2b_env.emulator.limits import Limits
from pytest_e2b_env.emulator.sandboxes import Registry, Sandbox
from pytest_e2b_env.errors import InfrastructureError
from pytest_e2b_env.wire.faults import BodyTooLarge

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


def _too_long(exc: OSError) -> bool:
    return exc.errno == errno.ENAMETOOLONG


def _long_path(path: str) -> str:
    return f"path of {len(path)} characters is too long (a name is at most 255 bytes, a path 4095)"


def _value_message(exc: ValueError, path: str) -> str:
    text = str(exc)
    return text if path in text else f"bad path '{path[:200]}': {text}"


def _rpc_error(exc: OSError, path: str) -> ConnectError:
    if _too_long(exc):
        return ConnectError(Code.INVALID_ARGUMENT, _long_path(path))
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

    def __init__(self, registry: Registry, limits: Limits | None = None) -> None:
        self.registry = registry
        self.limits = limits or Limits()

    def _target(self, ctx: Any) -> tuple[Sandbox, str]:
        sbx = self.registry.get(ctx.request_headers.get("e2b-sandbox-id"))
        if sbx is None:
            raise ConnectError(Code.UNAVAILABLE, "The sandbox was not found")
        return sbx, check_user(user_of(ctx.request_headers))

    async def _call(self, sbx: Sandbox, fn: Callable[[], T], path: str) -> T:
        try:
            return await asyncio.to_thread(fn)
        except (ProcessLookupError, InfrastructureError) as exc:
            if not sbx.box.alive():  # its init died or was torn down: the sandbox is gone, as on E2B
                await self.registry.kill(sbx.sandbox_id, op="kill", detail="sandbox died")
                raise ConnectError(Code.UNAVAILABLE, "The sandbox was not found") from exc
            if isinstance(exc, ProcessLookupError):
                raise ConnectError(Code.UNAVAILABLE, "The sandbox was not found") from exc
            raise ConnectError(Code.UNAVAILABLE, f"the sandbox failed: {type(exc).__name__}") from exc
        except OSError as exc:
            raise _rpc_error(exc, path) from exc
        except ValueError as exc:
            raise ConnectError(Code.INVALID_ARGUMENT, _value_message(exc, path)) from exc

    async def stat(self, request: F.StatRequest, ctx: Any) -> F.StatResponse:
        sbx, user = self._target(ctx)
        path = sandbox_path(request.path, user)
        info = await self._call(sbx, lambda: sbx.box.fs.stat(path, user), path)
        if info is None:
            raise ConnectError(Code.NOT_FOUND, f"no such file or directory: {path}")
        return F.StatResponse(entry=entry_info(info))

    async def list_dir(self, request: F.ListDirRequest, ctx: Any) -> F.ListDirResponse:
        sbx, user = self._target(ctx)
        path = sandbox_path(request.path, user)
        depth = request.depth or 1
        caps = {"max_entries": self.limits.list_entries, "max_depth": self.limits.list_depth}
        entries = await self._call(sbx, lambda: sbx.box.fs.listdir(path, depth, user, **caps), path)
        return F.ListDirResponse(entries=[entry_info(e) for e in entries])

    async def make_dir(self, request: F.MakeDirRequest, ctx: Any) -> F.MakeDirResponse:
        sbx, user = self._target(ctx)
        path = sandbox_path(request.path, user)
        made = await self._call(sbx, lambda: sbx.box.fs.mkdir(path, user), path)
        if not made:
            raise ConnectError(Code.ALREADY_EXISTS, f"directory {path} already exists")
        info = await self._call(sbx, lambda: sbx.box.fs.stat(path, user), path)
        return F.MakeDirResponse(entry=entry_info(info or {"name": posixpath.basename(path), "path": path}))

    async def move(self, request: F.MoveRequest, ctx: Any) -> F.MoveResponse:
        sbx, user = self._target(ctx)
        src, dst = sandbox_path(request.source, user), sandbox_path(request.destination, user)
        await self._call(sbx, lambda: sbx.box.fs.move(src, dst, user), src)
        info = await self._call(sbx, lambda: sbx.box.fs.stat(dst, user), dst)
        return F.MoveResponse(entry=entry_info(info or {"name": posixpath.basename(dst), "path": dst}))

    async def remove(self, request: F.RemoveRequest, ctx: Any) -> F.RemoveResponse:
        sbx, user = self._target(ctx)
        path = sandbox_path(request.path, user)
        await self._call(sbx, lambda: sbx.box.fs.remove(path, user), path)
        return F.RemoveResponse()


# ---------------------------------------------------------------------------- /files (HTTP)
def json_response(status: int, obj: Any) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """A JSON answer triple."""
    return status, [(b"content-type", b"application/json")], json.dumps(obj).encode()


def _http_error(exc: Exception, path: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    if isinstance(exc, ProcessLookupError | InfrastructureError):
        return json_response(502, {"code": 502, "message": "The sandbox was not found"})
    if isinstance(exc, ValueError):
        return json_response(400, {"code": 400, "message": _value_message(exc, path)})
    if isinstance(exc, OSError) and _too_long(exc):
        return json_response(400, {"code": 400, "message": _long_path(path)})
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


def decompress_bounded(body: bytes, encoding: str, limit: int) -> bytes:
    """A gzip or deflate body inflated to at most ``limit`` bytes (BodyTooLarge beyond, never more)."""
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    out = bytearray()
    rest = body
    while rest:
        inflater = zlib.decompressobj(wbits)
        out += inflater.decompress(rest, limit + 1 - len(out))
        if len(out) > limit or inflater.unconsumed_tail:
            raise BodyTooLarge(limit)
        if not inflater.eof:
            raise ValueError("truncated compressed body")
        rest = inflater.unused_data if encoding == "gzip" else b""  # gzip may hold several members
    return bytes(out)


def _uploads(
    query: Mapping[str, list[str]], headers: Mapping[str, str], body: bytes, limit: int
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
    if encoding in ("gzip", "deflate"):
        body = decompress_bounded(body, encoding, limit)
    return [(query.get("path", [""])[0], body)]


async def files_api(
    sbx: Sandbox,
    method: str,
    query: Mapping[str, list[str]],
    headers: Mapping[str, str],
    body: bytes,
    limits: Limits | None = None,
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Answer ``GET /files`` (download) or ``POST /files`` (upload) as envd does."""
    limits = limits or Limits()
    try:
        raw_user = query.get("username", [""])[0] or user_of(headers)
    except ConnectError:
        message = "malformed Authorization header: expected 'Basic ' + base64('<user>:')"
        return json_response(401, {"code": 401, "message": message})
    if raw_user not in ("user", "root"):
        return json_response(400, {"code": 400, "message": f"invalid username: '{raw_user[:100]}'"})
    user = raw_user
    if method == "GET":
        path = sandbox_path(query.get("path", [""])[0], user)
        try:
            data = await asyncio.to_thread(sbx.box.fs.read, path, user, limits.file_bytes)
        except (OSError, ValueError, InfrastructureError) as exc:
            return _http_error(exc, path)
        return 200, [(b"content-type", b"application/octet-stream")], data
    if method != "POST":
        return json_response(405, {"code": 405, "message": f"method {method} not allowed on /files"})
    try:
        # multipart parsing and inflation of up to file_bytes take CPU time: off the event loop
        uploads = await asyncio.to_thread(_uploads, query, headers, body, limits.file_bytes)
    except BodyTooLarge:
        message = f"upload inflates to more than {limits.file_bytes} bytes, the emulator's file limit"
        return json_response(413, {"code": 413, "message": message})
    except (ValueError, OSError, EOFError, zlib.error):
        return json_response(400, {"code": 400, "message": "malformed upload body"})
    written = []
    for raw_path, data in uploads:
        if not raw_path:
            return json_response(400, {"code": 400, "message": "upload without a path"})
        path = sandbox_path(raw_path, user)
        try:
            if len(data) > limits.file_bytes:
                message = f"file '{path[:200]}' has {len(data)} bytes, above the emulator's limit of "
                message += f"{limits.file_bytes}"
                return json_response(413, {"code": 413, "message": message})
            await asyncio.to_thread(sbx.box.fs.write, path, data, user, limits.file_bytes)
        except (OSError, ValueError, InfrastructureError) as exc:
            return _http_error(exc, path)
        written.append({"name": posixpath.basename(path), "type": "file", "path": path})
    return json_response(200, written)
