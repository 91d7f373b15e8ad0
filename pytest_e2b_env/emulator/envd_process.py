"""envd's ``process.Process`` connect-rpc service, on top of the sandbox's box.

The SDK always sends ``/bin/bash -l -c CMD``; the box spawns exactly that (envd's wrapper),
so the command text is handed over as is. Processes stay listed until their leader exits.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import errno
import os
import shlex
import weakref
from collections.abc import AsyncIterator, Mapping
from typing import Any, NoReturn

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.process import process_connect
from e2b.envd.process import process_pb as P

from pytest_e2b_env.emulator.limits import Limits
from pytest_e2b_env.emulator.processes import KEEPALIVE_S, Proc
from pytest_e2b_env.emulator.sandboxes import Registry, Sandbox, kill_signal
from pytest_e2b_env.errors import InfrastructureError

USERS = ("user", "root")


def user_of(headers: Mapping[str, str]) -> str:
    """envd's user: ``Authorization: Basic base64("<user>:")``, else the default ``user``."""
    auth = headers.get("authorization", "")
    if not auth.lower().startswith("basic "):
        return "user"
    try:
        name = base64.b64decode(auth[6:].strip()).decode().split(":", 1)[0]
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ConnectError(Code.UNAUTHENTICATED, "malformed Authorization header") from exc
    return name or "user"


def check_user(user: str) -> str:
    """Only the base template's two accounts exist."""
    if user not in USERS:
        raise ConnectError(Code.INVALID_ARGUMENT, f"invalid username: '{user}': user: unknown user {user}")
    return user


def home_of(user: str) -> str:
    """The account's home directory (the default cwd)."""
    return "/root" if user == "root" else "/home/user"


def shell_command(config: P.ProcessConfig) -> str:
    """The command text for ``bash -l -c`` (the SDK's own shape, or any argv quoted)."""
    args = list(config.args)
    if config.cmd in ("/bin/bash", "bash") and len(args) == 3 and args[:2] == ["-l", "-c"]:
        return args[2]
    return shlex.join([config.cmd, *args])


def _keepalive_s(ctx: Any) -> float:
    """The client's ``Keepalive-Ping-Interval`` (seconds), else envd's 50 s."""
    try:
        return max(1.0, float(ctx.request_headers.get("keepalive-ping-interval") or KEEPALIVE_S))
    except ValueError:
        return KEEPALIVE_S


def _deadline_s(ctx: Any) -> float | None:
    raw = ctx.request_headers.get("connect-timeout-ms")
    try:
        ms = int(raw) if raw else 0
    except ValueError:
        return None
    return ms / 1000 if ms > 0 else None


async def _writable(loop: asyncio.AbstractEventLoop, fd: int, tick: float) -> None:
    """Until ``fd`` can take a write, or ``tick`` seconds."""
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(fd, wake)
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(tick):
                await ready
    finally:
        loop.remove_writer(fd)


class ProcessService(process_connect.Process):
    """Start/Connect/List/SendInput/StreamInput/SendSignal/CloseStdin for the request's sandbox."""

    def __init__(self, registry: Registry, limits: Limits | None = None) -> None:
        self.registry = registry
        self.limits = limits or Limits()
        # one stdin writer at a time per command, so concurrent SendInput calls never interleave
        self._stdin_locks: weakref.WeakKeyDictionary[Proc, asyncio.Lock] = weakref.WeakKeyDictionary()

    def _sandbox(self, ctx: Any) -> Sandbox:
        sbx = self.registry.get(ctx.request_headers.get("e2b-sandbox-id"))
        if sbx is None:  # killed between routing and handling
            raise ConnectError(Code.UNAVAILABLE, "The sandbox was not found")
        return sbx

    def _find(self, sbx: Sandbox, selector: P.ProcessSelector | None) -> Proc:
        chosen = selector.selector if selector is not None else None
        if chosen is None:
            raise ConnectError(Code.INVALID_ARGUMENT, "a process selector (pid or tag) is required")
        if chosen.field == "tag":
            for candidate in sbx.procs.values():
                if candidate.tag == chosen.value:
                    return candidate
            raise ConnectError(Code.NOT_FOUND, f"process with tag {chosen.value} not found")
        proc = sbx.procs.get(int(chosen.value))
        if proc is None:
            raise ConnectError(Code.NOT_FOUND, f"process with pid {chosen.value} not found")
        return proc

    async def start(self, request: P.StartRequest, ctx: Any) -> AsyncIterator[P.StartResponse]:
        sbx = self._sandbox(ctx)
        user = check_user(user_of(ctx.request_headers))
        config = request.process
        if config is None:
            raise ConnectError(Code.INVALID_ARGUMENT, "process config is required")
        if request.pty is not None:
            raise ConnectError(Code.UNIMPLEMENTED, "PTY processes are not supported by the local emulator")
        cwd = config.cwd if config.has_field("cwd") and config.cwd else home_of(user)
        envs = {**sbx.envs, **dict(config.envs)}
        stdin = request.stdin if request.has_field("stdin") else True  # envd's backwards-compatible default
        try:
            # in a worker thread: checking the cwd is a round trip with the sandbox's init, which
            # may be busy with another request; the event loop never waits for it
            popen = await asyncio.to_thread(sbx.box.spawn, shell_command(config), envs, cwd, user, stdin)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise ConnectError(Code.INVALID_ARGUMENT, f"cwd '{cwd}' does not exist") from exc
        except PermissionError as exc:
            raise ConnectError(Code.PERMISSION_DENIED, f"cannot start the process in '{cwd}'") from exc
        except ValueError as exc:
            raise ConnectError(Code.INVALID_ARGUMENT, str(exc)) from exc
        except (ProcessLookupError, InfrastructureError) as exc:
            await self._start_failed(sbx, exc)
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                message = f"cwd of {len(cwd)} characters is too long"
                raise ConnectError(Code.INVALID_ARGUMENT, message) from exc
            if exc.errno == errno.E2BIG:
                message = "the command and its envs are too large for one process"
                raise ConnectError(Code.INVALID_ARGUMENT, message) from exc
            await self._start_failed(sbx, exc)
        tag = request.tag if request.has_field("tag") else None

        def forget(p: Proc) -> None:
            sbx.procs.pop(p.pid, None)

        proc = Proc(
            popen,
            config,
            tag,
            is_alive=lambda: sbx.running,
            on_exit=forget,
            output_limit=self.limits.output_bytes,
        )
        if not proc.done:
            sbx.procs[proc.pid] = proc
        deadline = _deadline_s(ctx)
        if deadline is not None:
            proc.set_deadline(deadline, lambda p: self._kill_leader(sbx, p))
        async for event in proc.follow(deadline, is_start=True, keepalive_s=_keepalive_s(ctx)):
            yield P.StartResponse(event=event)

    async def _start_failed(self, sbx: Sandbox, exc: BaseException) -> NoReturn:
        if not sbx.box.alive():  # the sandbox died under us: it is gone, as on E2B
            await self.registry.kill(sbx.sandbox_id, op="kill", detail="sandbox died")
            raise ConnectError(Code.UNAVAILABLE, "The sandbox was not found") from exc
        raise ConnectError(Code.INTERNAL, f"cannot start the process: {type(exc).__name__}") from exc

    @staticmethod
    def _kill_leader(sbx: Sandbox, proc: Proc) -> None:
        with contextlib.suppress(ProcessLookupError, OSError):
            sbx.box.signal(proc.popen, kill_signal("SIGKILL"))

    async def connect(self, request: P.ConnectRequest, ctx: Any) -> AsyncIterator[P.ConnectResponse]:
        proc = self._find(self._sandbox(ctx), request.process)
        async for event in proc.follow(_deadline_s(ctx), is_start=False, keepalive_s=_keepalive_s(ctx)):
            yield P.ConnectResponse(event=event)

    async def list(self, request: P.ListRequest, ctx: Any) -> P.ListResponse:
        sbx = self._sandbox(ctx)
        return P.ListResponse(
            processes=[P.ProcessInfo(config=p.config, pid=pid, tag=p.tag) for pid, p in sbx.procs.items()]
        )

    async def send_signal(self, request: P.SendSignalRequest, ctx: Any) -> P.SendSignalResponse:
        sbx = self._sandbox(ctx)
        proc = self._find(sbx, request.process)
        name = request.signal.name if hasattr(request.signal, "name") else str(request.signal)
        try:
            sbx.box.signal(proc.popen, kill_signal(name))
        except ProcessLookupError as exc:
            raise ConnectError(Code.NOT_FOUND, f"process with pid {proc.pid} not found") from exc
        return P.SendSignalResponse()

    async def _write_stdin(self, proc: Proc, data: bytes) -> None:
        """Write without ever blocking the event loop: wait (bounded) while the command's pipe is full.

        envd's handler blocks until the command has taken the input; here the wait is an await,
        capped at ``stdin_wait_s`` (then DEADLINE_EXCEEDED), so other sandboxes never stall.
        """
        pipe = proc.popen.stdin
        if pipe is None or pipe.closed:
            raise ConnectError(Code.FAILED_PRECONDITION, f"stdin of process {proc.pid} is not open")
        loop = asyncio.get_running_loop()
        lock = self._stdin_locks.setdefault(proc, asyncio.Lock())
        wait_s = self.limits.stdin_wait_s
        async with lock:
            deadline = loop.time() + wait_s
            view = memoryview(data)
            while view:
                if pipe.closed or proc.done:
                    raise ConnectError(Code.FAILED_PRECONDITION, f"process {proc.pid} closed its stdin")
                fd = pipe.fileno()
                try:
                    os.set_blocking(fd, False)
                    view = view[os.write(fd, view) :]
                    continue
                except BlockingIOError:
                    pass
                except (BrokenPipeError, ValueError) as exc:
                    raise ConnectError(
                        Code.FAILED_PRECONDITION, f"process {proc.pid} closed its stdin"
                    ) from exc
                left = deadline - loop.time()
                if left <= 0:
                    raise ConnectError(
                        Code.DEADLINE_EXCEEDED,
                        f"process {proc.pid} took only {len(data) - len(view)} of {len(data)} stdin bytes "
                        f"within {wait_s:g}s",
                    )
                await _writable(loop, fd, min(left, 0.5))  # short ticks: also notice exit or close

    async def send_input(self, request: P.SendInputRequest, ctx: Any) -> P.SendInputResponse:
        proc = self._find(self._sandbox(ctx), request.process)
        data = request.input.input.value if request.input is not None and request.input.input else b""
        await self._write_stdin(proc, bytes(data))
        return P.SendInputResponse()

    async def stream_input(
        self, request: AsyncIterator[P.StreamInputRequest], ctx: Any
    ) -> P.StreamInputResponse:
        sbx = self._sandbox(ctx)
        proc: Proc | None = None
        async for message in request:
            event = message.event
            if event is None or event.field == "keepalive":
                continue
            if event.field == "start":
                proc = self._find(sbx, event.value.process)
            elif proc is None:
                raise ConnectError(Code.INVALID_ARGUMENT, "stream input must start with a start event")
            else:
                chunk = (
                    event.value.input.input.value if event.value.input and event.value.input.input else b""
                )
                await self._write_stdin(proc, bytes(chunk))
        return P.StreamInputResponse()

    async def close_stdin(self, request: P.CloseStdinRequest, ctx: Any) -> P.CloseStdinResponse:
        proc = self._find(self._sandbox(ctx), request.process)
        if proc.popen.stdin is not None:
            proc.popen.stdin.close()
        return P.CloseStdinResponse()
