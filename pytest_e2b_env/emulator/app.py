"""The emulator's one ASGI app: control endpoint, ledger, fault layer, REST control plane, envd.

Request flow: ``/_emulator/*`` (guarded by the emulator's key) is answered directly; every
other request is recorded in the ledger, must carry the key of its door (``doors.py``), passes
the fault layer, then goes to the REST control plane or, when it carries ``E2b-Sandbox-Id``,
to that sandbox's envd or code interpreter.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from connectrpc.code import Code
from connectrpc.codec import proto_binary_codec, proto_json_codec
from connectrpc.errors import ConnectError
from e2b.envd.filesystem import filesystem_connect
from e2b.envd.process import process_connect

from pytest_e2b_env.emulator import doors
from pytest_e2b_env.emulator.control_plane import ControlPlane
from pytest_e2b_env.emulator.envd_files import FilesystemService, files_api
from pytest_e2b_env.emulator.envd_process import ProcessService
from pytest_e2b_env.emulator.interpreter import JUPYTER_PORT, InterpreterService
from pytest_e2b_env.emulator.limits import Limits
from pytest_e2b_env.emulator.sandboxes import Registry
from pytest_e2b_env.targets.backend import fault_rule_message
from pytest_e2b_env.wire import routes
from pytest_e2b_env.wire.answers import answer, error
from pytest_e2b_env.wire.control import ControlEndpoint
from pytest_e2b_env.wire.faults import (
    BodyTooLarge,
    FaultMiddleware,
    FaultPlan,
    Receive,
    Scope,
    Send,
    drain,
    read_body,
    send_answer,
)
from pytest_e2b_env.wire.ledger import Ledger
from pytest_e2b_env.wire.recording import (
    SCOPE_HARNESS,
    SCOPE_INTERNET,
    SCOPE_METADATA,
    SCOPE_SANDBOX,
    RecordingMiddleware,
)

if TYPE_CHECKING:
    from pytest_e2b_env.emulator.isolation.api import Backend

log = logging.getLogger("pytest_e2b_env.emulator")


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


class _InvalidArgumentCodec:
    """A connect codec whose decode errors are INVALID_ARGUMENT (connect-go's answer), not INTERNAL."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def name(self) -> str:
        return str(self._inner.name())

    def encode(self, message: Any) -> bytes:
        return bytes(self._inner.encode(message))

    def decode(self, data: bytes | bytearray, message_class: type[Any]) -> Any:
        try:
            return self._inner.decode(data, message_class)
        except Exception as exc:
            raise ConnectError(
                Code.INVALID_ARGUMENT, f"unmarshal {message_class.__name__}: malformed body"
            ) from exc


_CODECS = [_InvalidArgumentCodec(proto_json_codec()), _InvalidArgumentCodec(proto_binary_codec())]


class _Target:
    """The fault layer's view of the emulator (see ``faults.FaultTarget``)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def route_of(self, method: str, path: str, headers: Mapping[str, str]) -> tuple[str, str | None]:
        return routes.route_of(method, path, headers)

    def is_stream(self, template: str) -> bool:
        return routes.is_stream(template)

    async def lose(self, sandbox_id: str) -> None:
        await self.registry.lose(sandbox_id)


class EmulatorApp:
    """The ASGI application of one emulator."""

    def __init__(
        self, backend: Backend, api_key: str, limits: Limits | None = None, control_key: str | None = None
    ) -> None:
        self.api_key = api_key
        self.backend = backend
        self.limits = limits if limits is not None else Limits()
        self.ledger = Ledger()
        self.registry = Registry(backend, self.ledger)
        self.faults = FaultPlan()
        self.control_plane = ControlPlane(self.registry, self.limits)
        self.process_app = process_connect.ProcessASGIApplication(
            ProcessService(self.registry, self.limits), codecs=_CODECS
        )
        self.fs_app = filesystem_connect.FilesystemASGIApplication(
            FilesystemService(self.registry, self.limits), codecs=_CODECS
        )
        self._faulted = FaultMiddleware(
            self._core, self.faults, _Target(self.registry), body_limit=self.limits.upload_bytes
        )
        self.interpreter = InterpreterService(self.limits)
        ledgered = RecordingMiddleware(self._guarded, self.ledger, derive=False)
        # /_emulator/* is answered before the ledger and the faults (the shared control API)
        self._served = ControlEndpoint(
            ledgered,
            key=control_key or api_key,
            ledger=self.ledger,
            faults=self.faults,
            info={"isolation": backend.level, "reason": backend.reason},
            sandboxes=self._sandbox_rows,
            kill_all=self._kill_everything,
            rule_error=fault_rule_message,
            body_limit=self.limits.body_bytes,
            json_depth=self.limits.json_depth,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        await self._served(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # files requests and command starts wait for sandbox inits in worker threads; the
                # default pool (cores + 4) would let a few slow sandboxes hold up every other one
                asyncio.get_running_loop().set_default_executor(
                    ThreadPoolExecutor(max_workers=64, thread_name_prefix="emulator-io")
                )
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.registry.kill_all()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # ------------------------------------------------------------------ ledger
    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The fault layer and the core; a bug or a broken sandbox still gives E2B's JSON 500."""
        started = False

        async def tracked(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self._door(scope, receive, tracked)
        except Exception as exc:  # never a hang: the client gets an answer it can parse
            log.exception("emulator error on %s %s", scope["method"], scope["path"])
            if not started:
                said = f"internal emulator error: {type(exc).__name__}"
                scope[SCOPE_HARNESS] = said  # the emulator's failure, not the request's: the ledger says so
                await send_answer(tracked, error(500, said))

    # ------------------------------------------------------------------ keys
    def _keys_of(self, sandbox_id: str) -> tuple[str, str] | None:
        sbx = self.registry.get(sandbox_id)
        return None if sbx is None else (sbx.envd_access_token, sbx.traffic_access_token)

    async def _door(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The request's key, before the fault layer and before any body is read."""
        refused = doors.refusal(scope["method"], scope["path"], _headers(scope), self.api_key, self._keys_of)
        if refused is None:
            await self._faulted(scope, receive, send)
            return
        await drain(receive, self.limits.body_bytes)  # dropped, never kept
        await send_answer(send, refused)

    # ------------------------------------------------------------------ REST + envd
    async def _core(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _headers(scope)
        sandbox_id = headers.get("e2b-sandbox-id")
        if sandbox_id is not None:
            await self._envd(scope, receive, send, headers, sandbox_id)
            return
        try:
            body = await read_body(receive, self.limits.body_bytes)
        except BodyTooLarge as exc:
            await send_answer(send, error(413, str(exc)))
            return
        query = scope.get("query_string", b"").decode("latin-1")
        reply, concerned = await self.control_plane.handle(
            scope["method"], scope["path"], query, body, headers
        )
        if reply[0] == 500:  # the control plane's only 500: a sandbox the isolation layer could not start
            scope[SCOPE_HARNESS] = "the emulator could not start a sandbox"
        if concerned is not None:
            scope[SCOPE_SANDBOX] = concerned
            created = self.registry.get(concerned) if reply[0] == 201 else None
            if created is not None:  # only create answers 201 with a sandbox
                scope[SCOPE_INTERNET] = created.allow_internet_access
                scope[SCOPE_METADATA] = sorted(created.metadata)
        await send_answer(send, reply)

    async def _envd(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str], sandbox_id: str
    ) -> None:
        sbx = self.registry.get(sandbox_id)
        path = scope["path"]
        unwanted = self.limits.body_bytes  # bodies of refused requests: dropped, never kept
        if sbx is None:  # what E2B's edge answers for a dead or unknown sandbox, on every envd path
            await drain(receive, unwanted)
            body = {"sandboxId": sandbox_id, "message": "The sandbox was not found", "code": 502}
            await send_answer(send, answer(502, body))
            return
        port = headers.get("e2b-sandbox-port", doors.ENVD_PORT)
        if port == JUPYTER_PORT:
            await self.interpreter(scope, receive, send, sbx)
            return
        if port != doors.ENVD_PORT:
            await drain(receive, unwanted)
            body = {
                "sandboxId": sandbox_id,
                "message": "The sandbox is running but port is not open",
                "port": port,
            }
            await send_answer(send, answer(502, {**body, "code": 502}))
            return
        if path.startswith("/process.Process/"):
            await self.process_app(scope, receive, send)
        elif path.startswith("/filesystem.Filesystem/"):
            await self.fs_app(scope, receive, send)
        elif path == "/health":
            await drain(receive, unwanted)
            await send_answer(send, answer(204))
        elif path == "/files":
            try:
                payload = await read_body(receive, self.limits.upload_bytes)
            except BodyTooLarge as exc:
                await send_answer(send, error(413, str(exc)))
                return
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
            reply = await files_api(sbx, scope["method"], query, headers, payload, self.limits)
            if reply[0] == 502 and not sbx.box.alive():  # its init died: the sandbox is gone, as on E2B
                await self.registry.kill(sandbox_id, op="kill", detail="sandbox died")
            await send_answer(send, reply)
        else:
            await drain(receive, unwanted)
            await send_answer(send, error(404, f"no such envd route: {scope['method']} {path}"))

    # ------------------------------------------------------------------ control endpoint
    async def _sandbox_rows(self) -> list[dict[str, Any]]:
        return [s.summary() for s in self.registry.running()]

    async def _kill_everything(self) -> list[str]:
        killed = [s.sandbox_id for s in self.registry.running()]
        await self.registry.kill_all()
        return killed
