"""Faults as data, injected on the wire by an ASGI middleware.

The middleware knows nothing about sandboxes beyond the small :class:`FaultTarget` callback
interface (name a request's route and sandbox, say whether a route streams, lose a sandbox),
so a forwarding proxy in front of real E2B can reuse it unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import functools
import json
import threading
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: scope key where the middleware leaves a description of the fault it applied (read by the ledger)
SCOPE_FAULT = "pytest_e2b_env.fault"
#: scope key holding (bounded) the response body a drop_stream fault withheld from the client, so a
#: ledger outside the fault layer still learns which sandbox a create made before its answer was lost
SCOPE_DROPPED = "pytest_e2b_env.dropped_body"
DROPPED_LIMIT = 64 * 1024


class FaultAnswer(BaseModel):
    """What a fault answers instead of (or on top of) the real response. Exactly one kind is set."""

    model_config = ConfigDict(extra="forbid")

    status: int | None = Field(default=None, ge=400, le=599)
    retry_after: int | None = Field(default=None, ge=0)
    lose_sandbox: bool = False
    kill_fails: bool = False
    delay: float | None = Field(default=None, ge=0, le=600)
    drop_stream: bool = False

    @model_validator(mode="after")
    def _one_kind(self) -> FaultAnswer:
        kinds = [
            self.status is not None,
            self.lose_sandbox,
            self.kill_fails,
            self.delay is not None,
            self.drop_stream,
        ]
        if sum(kinds) != 1:
            raise ValueError(
                "a fault answer needs exactly one of status, lose_sandbox, kill_fails, delay, drop_stream; "
                'e.g. {"status": 429, "retry_after": 1} or {"lose_sandbox": true}'
            )
        if self.retry_after is not None and self.status is None:
            raise ValueError(
                "retry_after only goes with a status answer, e.g. {'status': 429, 'retry_after': 1}"
            )
        return self

    def describe(self) -> str:
        """A short human label such as ``status 429`` or ``lose_sandbox``."""
        if self.status is not None:
            return f"status {self.status}"
        if self.delay is not None:
            return f"delay {self.delay:g}s"
        for kind in ("lose_sandbox", "kill_fails", "drop_stream"):
            if getattr(self, kind):
                return kind
        return "none"  # unreachable: the validator demands one kind


class FaultRule(BaseModel):
    """One fault: which requests it matches and what it answers.

    ``route`` is ``"METHOD /path"`` with ``*`` globs (or ``"*"``), matched against both the
    concrete request path and its template (``"DELETE /sandboxes/{id}"``). ``contains`` is a
    substring of the request body (command text or uploaded file). The first ``after`` matches
    pass untouched; then the rule fires ``times`` times (``None``: every time).
    """

    model_config = ConfigDict(extra="forbid")

    route: str = "*"
    sandbox: str | None = None
    contains: str | None = None
    after: int = Field(default=0, ge=0)
    times: int | None = Field(default=1, ge=1)
    answer: FaultAnswer

    def matches(self, request: str, template: str, sandbox_id: str | None, body: str | None) -> bool:
        """Whether this rule's filters (not its counters) accept the request."""
        if not (fnmatch.fnmatchcase(request, self.route) or fnmatch.fnmatchcase(template, self.route)):
            return False
        if self.sandbox is not None and sandbox_id != self.sandbox:
            return False
        return self.contains is None or (body is not None and self.contains in body)


class FaultPlan:
    """The live rule list, shared by the middleware and whoever adds rules (thread-safe)."""

    def __init__(self) -> None:
        self._rules: list[tuple[str, FaultRule, list[int]]] = []  # (id, rule, [seen, fired])
        self._lock = threading.Lock()
        self._next = 1

    def add(self, rule: FaultRule | Mapping[str, Any]) -> str:
        """Validate and append a rule; return its id (``"f1"``, ``"f2"``...)."""
        checked = rule if isinstance(rule, FaultRule) else FaultRule.model_validate(dict(rule))
        with self._lock:
            rule_id = f"f{self._next}"
            self._next += 1
            self._rules.append((rule_id, checked, [0, 0]))
            return rule_id

    def clear(self) -> None:
        """Drop every rule."""
        with self._lock:
            self._rules.clear()

    def __bool__(self) -> bool:
        return bool(self._rules)

    def rules(self) -> list[dict[str, Any]]:
        """Every rule with its id and counters, for the control endpoint."""
        with self._lock:
            return [
                {"id": rid, **rule.model_dump(exclude_none=True), "seen": c[0], "fired": c[1]}
                for rid, rule, c in self._rules
            ]

    def needs_body(self, request: str, template: str, sandbox_id: str | None) -> bool:
        """Whether some rule can only decide once it has seen the request body."""
        with self._lock:
            return any(
                r.contains is not None and r.matches(request, template, sandbox_id, r.contains)
                for _, r, _ in self._rules
            )

    def pick(
        self, request: str, template: str, sandbox_id: str | None, body: str | None
    ) -> tuple[str, FaultRule] | None:
        """Count the request against matching rules; return the first rule that fires."""
        with self._lock:
            for rid, rule, counters in self._rules:
                if not rule.matches(request, template, sandbox_id, body):
                    continue
                counters[0] += 1
                if counters[0] <= rule.after or (rule.times is not None and counters[1] >= rule.times):
                    continue
                counters[1] += 1
                return rid, rule
        return None


class FaultTarget(Protocol):
    """What the middleware needs to know about the service behind it."""

    def route_of(self, method: str, path: str, headers: Mapping[str, str]) -> tuple[str, str | None]:
        """The route template (``"DELETE /sandboxes/{id}"``) and the sandbox id, if any."""
        ...

    def is_stream(self, template: str) -> bool:
        """Whether responses on this route are long-lived streams (``process.Process/Start``)."""
        ...

    async def lose(self, sandbox_id: str) -> None:
        """Make the sandbox die as if its VM vanished (no clean end of its streams)."""
        ...


def _body_text(body: bytes) -> str:
    """The body as text plus the strings inside any JSON in it (so escaped commands still match)."""
    text = body.decode("utf-8", "replace")
    raw = body[5:] if body[:1] in (b"\x00", b"\x01") and len(body) > 5 else body  # connect envelope
    try:
        strings: list[str] = []

        def walk(value: Any) -> None:
            if isinstance(value, str):
                strings.append(value)
            elif isinstance(value, dict):
                for v in value.values():
                    walk(v)
            elif isinstance(value, list):
                for v in value:
                    walk(v)

        walk(json.loads(raw))
        return text + "\n" + "\n".join(strings)
    except ValueError:
        return text


class BodyTooLarge(ValueError):
    """A request body went past the size cap of its route (answered 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body is larger than {limit} bytes, the emulator's limit for this route")
        self.limit = limit


async def read_body(receive: Receive, limit: int | None = None) -> bytes:
    """The whole request body, or :class:`BodyTooLarge` as soon as it passes ``limit`` bytes.

    Bodies are always read to the end when they fit (an unread chunked upload upsets the SDK's
    client); past the cap reading stops, and the server closes the connection after the answer.
    """
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    return b"".join(chunks)


async def drain(receive: Receive, limit: int) -> None:
    """Read and drop up to ``limit`` bytes of an unwanted body (memory stays one chunk)."""
    size = 0
    while size <= limit:
        message = await receive()
        if message["type"] != "http.request":
            return
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            return


#: The largest body a ``delay`` answer reads before it waits (a declared larger one waits unread).
DELAY_BODY_LIMIT = 1 << 20


def content_length(headers: Any) -> int | None:
    """The Content-Length of ASGI ``headers`` (None when absent or not a number)."""
    for name, value in headers:
        if name.lower() == b"content-length" and value.strip().isdigit():
            return int(value)
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: disconnect notifications come from the server

    return replay


async def send_answer(send: Send, reply: tuple[int, Sequence[tuple[bytes, bytes]], bytes]) -> None:
    """Send an ``(status, headers, body)`` triple."""
    status, headers, body = reply
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_json_error(
    send: Send, status: int, message: str, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """Answer ``{"code": status, "message": message}`` as E2B's API and edge do."""
    body = json.dumps({"code": status, "message": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


#: The route whose answer ends a sandbox, and with it every request a delay holds on that sandbox.
KILL_ROUTE = "DELETE /sandboxes/{id}"


class _Holds:
    """The requests a ``delay`` answer is holding, by sandbox, so that a kill ends their wait.

    A held request is one that E2B received and has not carried out yet: once its sandbox is
    gone it can no longer be carried out, and E2B answers it then (the sandbox's connections end
    with the VM), not when the hold would have run out. So a hold on a sandbox ends early when a
    kill of that sandbox passes this layer (answered 2xx, or 404: already gone) or a
    ``lose_sandbox`` fault loses it; the request then meets a dead sandbox, as it would have at the
    end of its delay. A sandbox that ends unseen here (its lifetime runs out) holds to the end.
    Memory: one entry per sandbox with a request held now.
    """

    def __init__(self) -> None:
        self._held: dict[str, tuple[asyncio.Event, int]] = {}

    def __bool__(self) -> bool:
        return bool(self._held)

    async def wait(self, seconds: float, sandbox_id: str | None) -> None:
        """Wait ``seconds``, less if a request on ``sandbox_id`` and that sandbox is killed meanwhile."""
        if sandbox_id is None:  # a create, a list: nothing can end it early
            await asyncio.sleep(seconds)
            return
        event, count = self._held.get(sandbox_id, (asyncio.Event(), 0))
        self._held[sandbox_id] = (event, count + 1)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), seconds)
        finally:
            event, count = self._held[sandbox_id]
            if count > 1:
                self._held[sandbox_id] = (event, count - 1)
            else:
                del self._held[sandbox_id]

    def end(self, sandbox_id: str) -> None:
        """``sandbox_id`` is gone: every request held on it goes on now."""
        held = self._held.get(sandbox_id)
        if held is not None:
            held[0].set()

    def ending_on_kill(self, send: Send, sandbox_id: str) -> Send:
        """``send`` for a kill of ``sandbox_id``: its answer, a success or a 404, ends the holds on
        it (those held then: one that starts after the kill's answer holds to its end)."""

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start" and (
                200 <= int(message["status"]) < 300 or int(message["status"]) == 404
            ):
                self.end(sandbox_id)
            await send(message)

        return watched


class FaultMiddleware:
    """ASGI middleware applying a :class:`FaultPlan` to the requests of ``app``."""

    def __init__(
        self, app: ASGIApp, plan: FaultPlan, target: FaultTarget, body_limit: int | None = None
    ) -> None:
        self.app = app
        self.plan = plan
        self.target = target
        self.body_limit = body_limit  # largest body read to match ``contains`` (413 beyond)
        self._holds = _Holds()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not (self.plan or self._holds):  # fast path: no rules, no holds
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        template, sandbox_id = self.target.route_of(method, path, headers)
        request = f"{method} {path}"
        body_text: str | None = None
        if self.plan.needs_body(request, template, sandbox_id):
            try:
                body = await read_body(receive, self.body_limit)
            except BodyTooLarge as exc:
                await send_json_error(send, 413, str(exc))
                return
            receive = _replay(body, receive)
            body_text = _body_text(body)
        picked = self.plan.pick(request, template, sandbox_id, body_text)
        # A kill the app carries out (not one a fault answers instead) ends the holds on its sandbox.
        kill = template == KILL_ROUTE and sandbox_id is not None
        to_app = self._holds.ending_on_kill(send, str(sandbox_id)) if kill else send
        if picked is None:
            await self.app(scope, receive, to_app)
            return
        rule_id, rule = picked
        answer = rule.answer
        scope[SCOPE_FAULT] = f"{rule_id}: {answer.describe()}"
        if answer.status is not None or answer.kill_fails:
            # always drain: an unread chunked body upsets the SDK's client
            await drain(receive, self.body_limit if self.body_limit is not None else 1 << 30)
            status = answer.status if answer.status is not None else 500
            extra = (
                [(b"retry-after", str(answer.retry_after).encode())] if answer.retry_after is not None else []
            )
            text = "kill failed (injected)" if answer.kill_fails else f"injected fault {rule_id}"
            await send_json_error(send, status, text, extra)
            return
        if answer.delay is not None:
            declared = content_length(scope.get("headers", []))
            if body_text is None and (declared or 0) <= DELAY_BODY_LIMIT:
                # Received, then slow, as a busy server is: the request is whole before the wait,
                # so a client that gives up meanwhile (a cancelled create) still gets it carried
                # out, as E2B carries out a create it received. Larger uploads wait unread.
                try:
                    receive = _replay(await read_body(receive, DELAY_BODY_LIMIT), receive)
                except BodyTooLarge as exc:
                    await send_json_error(send, 413, str(exc))
                    return
            await self._holds.wait(answer.delay, sandbox_id)
            await self.app(scope, receive, to_app)
            return
        if answer.lose_sandbox:
            await self._lose(scope, receive, send, template, sandbox_id)
            return
        await self._drop(scope, receive, send, template)

    async def _lose(
        self, scope: Scope, receive: Receive, send: Send, template: str, sandbox_id: str | None
    ) -> None:
        if sandbox_id is None:  # nothing to lose (e.g. create): behave normally
            await self.app(scope, receive, send)
            return
        if not self.target.is_stream(template):
            await self.target.lose(sandbox_id)
            self._holds.end(sandbox_id)
            await self.app(scope, receive, send)
            return
        # mid-command: the stream delivers its first event (the pid), then the VM vanishes. Nothing
        # the app says after that may reach the client: a command that ended before the kill landed
        # would otherwise still deliver its end event, and a "lost" sandbox would answer correctly.
        lost = functools.partial(self._lost, sandbox_id)
        await self._cut(scope, receive, send, stream=True, before_cut=lost)

    async def _lost(self, sandbox_id: str) -> None:
        await self.target.lose(sandbox_id)
        self._holds.end(sandbox_id)

    async def _drop(self, scope: Scope, receive: Receive, send: Send, template: str) -> None:
        await self._cut(scope, receive, send, stream=self.target.is_stream(template))

    async def _cut(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        stream: bool,
        before_cut: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Run the app until its first body (a stream's first event goes through, a plain body is
        withheld), run ``before_cut``, then end the connection mid-body whatever the app sends next."""
        cut = asyncio.Event()

        async def send_until_cut(message: Message) -> None:
            if cut.is_set():
                return
            if message["type"] == "http.response.body":
                if not stream:
                    scope[SCOPE_DROPPED] = bytes(message.get("body", b""))[:DROPPED_LIMIT]
                if stream and message.get("body"):
                    await send({**message, "more_body": True})  # let the first event through, then cut
                cut.set()
                return
            await send(message)

        inner = asyncio.ensure_future(self.app(scope, receive, send_until_cut))
        waiter = asyncio.ensure_future(cut.wait())
        try:
            await asyncio.wait({inner, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if before_cut is not None:
                await before_cut()  # the app's later messages are swallowed meanwhile
        finally:
            if not inner.done():
                inner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await inner
        # returning without finishing the response makes the server close the connection mid-body
