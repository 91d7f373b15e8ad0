"""The code-interpreter server on port 49999 of every sandbox, as ``e2b_code_interpreter`` calls it.

Routes (E2B's ``template/server/main.py``): ``GET /health``, ``POST /execute`` (a stream of
JSON lines ending with ``end_of_execution``), ``GET``/``POST /contexts``,
``POST /contexts/{id}/restart``, ``DELETE /contexts/{id}``. Errors are plain text with the
server's statuses (404 unknown context, 400 context and language together, 500 a language
that has no kernel), so the SDK raises its own exceptions for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_e2b_env.emulator.interpreter.budget import OutputBudget
from pytest_e2b_env.emulator.interpreter.kernel import (
    KERNEL_HOME,
    Execution,
    Kernel,
    KernelLost,
    KernelStartError,
)
from pytest_e2b_env.emulator.interpreter.outputs import END_OF_EXECUTION, error_line
from pytest_e2b_env.emulator.limits import Limits
from pytest_e2b_env.wire.faults import BodyTooLarge, Receive, Scope, Send, read_body, send_answer

if TYPE_CHECKING:
    from pytest_e2b_env.emulator.sandboxes import Sandbox

Reply = tuple[int, list[tuple[bytes, bytes]], bytes]

MAX_BODY = 16 * 1024 * 1024  # one request (the code of a cell)
MAX_CONTEXTS = 64  # per sandbox: each is a python3 process once used
LANGUAGE = "python"


@dataclass
class Context:
    """A code context: its id, language, cwd and kernel."""

    context_id: str
    cwd: str
    kernel: Kernel
    language: str = LANGUAGE

    def json(self) -> dict[str, str]:
        return {"id": self.context_id, "language": self.language, "cwd": self.cwd}


def normalize_language(language: Any) -> str:
    """E2B's normalisation: lower case, stripped, ``js`` -> ``javascript``, missing -> python."""
    if not language or not isinstance(language, str):
        return LANGUAGE
    language = language.lower().strip()
    return "javascript" if language == "js" else language


def no_kernel(language: str) -> str:
    """The error for a language the emulator cannot run, naming it and the way out."""
    return (
        f"Failed to create context: no kernel for language {language!r} in the local emulator, "
        "which runs Python only. Use language='python' (or leave it unset), or run this case live."
    )


class SandboxInterpreter:
    """The contexts of one sandbox (a default Python context always exists) and their output budget."""

    def __init__(self, sbx: Sandbox, limits: Limits) -> None:
        self.sbx = sbx
        self.limits = limits
        self.budget = OutputBudget(limits.interpreter_output_bytes, limits.interpreter_sandbox_bytes)
        self.contexts: dict[str, Context] = {}
        self.default = self._new(KERNEL_HOME)

    def _new(self, cwd: str) -> Context:
        kernel = Kernel(self.sbx, cwd, self.budget, self.limits.interpreter_message_bytes)
        context = Context(str(uuid.uuid4()), cwd, kernel)
        self.contexts[context.context_id] = context
        return context

    def lose(self) -> None:
        for context in self.contexts.values():
            context.kernel.lose()


def _text(status: int, text: str) -> Reply:
    return status, [(b"content-type", b"text/plain; charset=utf-8")], text.encode()


def _json(status: int, payload: Any) -> Reply:
    return status, [(b"content-type", b"application/json")], json.dumps(payload).encode()


def _invalid(field: str, message: str) -> Reply:
    # FastAPI's request-validation answer
    return _json(422, {"detail": [{"type": "invalid", "loc": ["body", field], "msg": message}]})


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class InterpreterService:
    """Port 49999 of every sandbox of one emulator (the app has checked the request's key)."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits if limits is not None else Limits()
        self._boxes: dict[str, SandboxInterpreter] = {}

    def _of(self, sbx: Sandbox) -> SandboxInterpreter:
        found = self._boxes.get(sbx.sandbox_id)
        if found is None:
            found = self._boxes[sbx.sandbox_id] = SandboxInterpreter(sbx, self.limits)

            def forget(sandbox_id: str = sbx.sandbox_id) -> None:
                gone = self._boxes.pop(sandbox_id, None)
                if gone is not None:
                    gone.lose()

            sbx.on_kill.append(forget)
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send, sbx: Sandbox) -> None:
        method, path = scope["method"], scope["path"].rstrip("/") or "/"
        try:
            body = await read_body(receive, MAX_BODY)
        except BodyTooLarge:
            await send_answer(send, _text(413, f"request body over {MAX_BODY} bytes"))
            return
        interp = self._of(sbx)
        parts = path.split("/")
        if path == "/health":
            reply = _json(200, "OK") if method == "GET" else _json(405, {"detail": "Method Not Allowed"})
        elif path == "/execute" and method == "POST":
            await self._execute(interp, body, receive, send)
            return
        elif path == "/contexts" and method == "GET":
            reply = _json(200, [c.json() for c in interp.contexts.values()])
        elif path == "/contexts" and method == "POST":
            reply = self._create(interp, body)
        elif len(parts) == 4 and parts[1] == "contexts" and parts[3] == "restart" and method == "POST":
            reply = await self._restart(interp, parts[2])
        elif len(parts) == 3 and parts[1] == "contexts" and method == "DELETE":
            reply = await self._remove(interp, parts[2])
        else:
            reply = _json(404, {"detail": "Not Found"})
        await send_answer(send, reply)

    # ------------------------------------------------------------------ contexts
    def _create(self, interp: SandboxInterpreter, body: bytes) -> Reply:
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return _invalid("body", "JSON decode error")
        if not isinstance(request, dict):
            return _invalid("body", "Input should be a valid dictionary")
        cwd = request.get("cwd") or KERNEL_HOME
        if not isinstance(cwd, str):
            return _invalid("cwd", "Input should be a valid string")
        language = normalize_language(request.get("language"))
        if language != LANGUAGE:
            return _text(500, no_kernel(language))
        if len(interp.contexts) >= MAX_CONTEXTS:
            return _text(500, f"Failed to create context: this sandbox already has {MAX_CONTEXTS} contexts")
        return _json(200, interp._new(cwd).json())

    async def _restart(self, interp: SandboxInterpreter, context_id: str) -> Reply:
        context = interp.contexts.get(context_id)
        if context is None:
            return _text(404, f"Context {context_id} not found")
        await context.kernel.restart()
        return _json(200, None)

    async def _remove(self, interp: SandboxInterpreter, context_id: str) -> Reply:
        context = interp.contexts.pop(context_id, None)
        if context is None:
            return _text(404, f"Context {context_id} not found")
        await context.kernel.restart()
        if context is interp.default:  # the next default cell gets a new default context
            interp.default = interp._new(KERNEL_HOME)
        return _json(200, None)

    # ------------------------------------------------------------------ execute
    def _resolve(self, interp: SandboxInterpreter, request: dict[str, Any]) -> Context | Reply:
        context_id, language = request.get("context_id"), request.get("language")
        if context_id and language:
            return _text(400, "Only one of context_id or language can be provided")
        if language:
            normalized = normalize_language(language)
            return interp.default if normalized == LANGUAGE else _text(500, no_kernel(normalized))
        if context_id:
            found = interp.contexts.get(str(context_id))
            return found if found is not None else _text(404, f"Context {context_id} not found")
        return interp.default

    async def _execute(self, interp: SandboxInterpreter, body: bytes, receive: Receive, send: Send) -> None:
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            await send_answer(send, _invalid("body", "JSON decode error"))
            return
        if not isinstance(request, dict):
            await send_answer(send, _invalid("body", "Input should be a valid dictionary"))
            return
        code, envs = request.get("code"), request.get("env_vars") or {}
        if not isinstance(code, str):
            await send_answer(send, _invalid("code", "Input should be a valid string"))
            return
        if not isinstance(envs, dict) or not all(isinstance(v, str) for v in envs.values()):
            await send_answer(send, _invalid("env_vars", "Input should be a dictionary of strings"))
            return
        context = self._resolve(interp, request)
        if not isinstance(context, Context):
            await send_answer(send, context)
            return
        # E2B's streaming response starts at once; the cell may still wait for its kernel
        await send({"type": "http.response.start", "status": 200, "headers": []})
        gone = asyncio.ensure_future(_until_disconnect(receive))
        try:
            await self._stream(context, code, {str(k): v for k, v in envs.items()}, send, gone)
        finally:
            gone.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await gone

    async def _stream(
        self, context: Context, code: str, envs: dict[str, str], send: Send, gone: asyncio.Future[Any]
    ) -> None:
        async def line(payload: dict[str, Any]) -> None:
            data = (json.dumps(payload) + "\n").encode()
            await send({"type": "http.response.body", "body": data, "more_body": True})

        async def taken() -> None:
            # an empty chunk writes nothing but waits, as every send does, until the server's
            # buffer for this connection has drained: the line before it has left the emulator
            await send({"type": "http.response.body", "body": b"", "more_body": True})

        execution: Execution | None = None
        try:
            submitted = asyncio.ensure_future(context.kernel.submit(code, envs))
            await asyncio.wait([submitted, gone], return_when=asyncio.FIRST_COMPLETED)
            if not submitted.done():  # the client gave up while the cell was queued
                submitted.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    (await submitted).detach()
                return
            try:
                execution = submitted.result()
            except KernelStartError as exc:
                await line(error_line("KernelStartError", str(exc)))
                await line(END_OF_EXECUTION)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            while True:
                item = asyncio.ensure_future(execution.next())
                await asyncio.wait([item, gone], return_when=asyncio.FIRST_COMPLETED)
                if not item.done():  # client gone (its timeout): the cell runs on in the kernel
                    item.cancel()
                    return
                payload, size = item.result()
                del item  # the line is held by the server's buffer alone while it drains
                if payload is None:
                    break
                await line(payload)
                del payload
                await taken()
                execution.sent(size)
            await line(END_OF_EXECUTION)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except KernelLost:
            return  # the sandbox died: leave the response unfinished, the connection is cut
        finally:
            if execution is not None:
                execution.detach()
