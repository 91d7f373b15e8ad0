"""The forwarding ASGI app behind the fault proxy: streams both ways, never buffers.

Control-plane requests go to the upstream API; envd requests (``E2b-Sandbox-Id`` header)
go to the upstream sandbox endpoint. Request bodies are relayed chunk by chunk (the SDK
sends connect-rpc stream requests chunked) and response bodies are relayed as they
arrive (server-streaming ``Start`` output, file downloads), so a command's output reaches
the SDK when envd sends it and a dropped client cancels the upstream request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import httpx

from pytest_e2b_env.proxy.routing import envd_target, forward_headers, is_loopback, join_url, sandbox_base_url
from pytest_e2b_env.wire.recording import SCOPE_HARNESS

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def _decode_headers(scope: Scope) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])]


class Forwarder:
    """ASGI app relaying each request to the upstream API or sandbox endpoint.

    ``domain_for(sandbox_id)`` gives the sandbox's domain for live E2B (learnt from create
    and connect answers); it is unused when ``sandbox_url`` (an emulator) is set.
    """

    def __init__(
        self,
        api_url: str,
        *,
        sandbox_url: str | None,
        domain_for: Callable[[str], str | None],
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.sandbox_url = sandbox_url
        self.domain_for = domain_for
        self._client = client

    @property
    def client(self) -> httpx.AsyncClient:
        """The upstream HTTP client, made on first use so it belongs to the serving loop."""
        if self._client is None:
            # No read/write/pool deadline: a command stream may legitimately stay open for
            # minutes; the SDK owns the deadlines and its disconnect cancels ours.
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(connect=15.0, read=None, write=None, pool=None),
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
                follow_redirects=False,
                # HTTPS_PROXY and friends apply to a remote E2B (CI behind a proxy), never to a
                # local emulator, which a corporate proxy could not reach anyway.
                trust_env=not is_loopback(self.api_url),
            )
        return self._client

    async def aclose(self) -> None:
        """Close the upstream client (idempotent)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def upstream_url(self, scope: Scope) -> str:
        """The absolute upstream URL for this request scope."""
        target = envd_target(_decode_headers(scope))
        if target is None:
            base = self.api_url
        else:
            sandbox_id, port = target
            base = sandbox_base_url(
                sandbox_id, port, sandbox_url=self.sandbox_url, domain=self.domain_for(sandbox_id)
            )
        raw_path = scope.get("raw_path") or scope["path"].encode()
        return join_url(base, raw_path.decode("latin-1"), scope.get("query_string", b"").decode("latin-1"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":  # websockets: the SDK never uses them for envd
            return
        await self._forward(scope, receive, send)

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _decode_headers(scope)
        body_done = asyncio.Event()

        async def body(first: bytes) -> AsyncIterator[bytes]:
            try:
                if first:
                    yield first
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    chunk = message.get("body", b"")
                    if chunk:
                        yield chunk
                    if not message.get("more_body", False):
                        return
            finally:
                body_done.set()

        lowered = {name.lower() for name, _ in headers}
        content: bytes | AsyncIterator[bytes] | None = None
        if "content-length" in lowered or "transfer-encoding" in lowered:
            first = await receive()
            if first["type"] == "http.disconnect":
                return
            if first.get("more_body", False):
                content = body(first.get("body", b""))  # big or streamed: relay chunk by chunk
            else:
                # The whole body came in one piece (unary RPCs, create, a command's Start):
                # sending it with a length saves a write per request on both hops.
                content = first.get("body", b"")
                body_done.set()
        else:
            body_done.set()
        try:
            url = self.upstream_url(scope)
        except ValueError as exc:
            await _answer_json(send, 502, {"code": 502, "message": str(exc)})
            return
        request = self.client.build_request(
            scope["method"],
            url,
            headers=forward_headers(headers),
            content=content,
        )

        async def pump() -> None:
            try:
                response = await self.client.send(request, stream=True)
            except httpx.HTTPError as exc:
                # The upstream could not be reached at all: answer like an edge would, naming
                # the upstream so the SDK's error says where to look; the ledger marks it ours.
                scope[SCOPE_HARNESS] = f"the fault proxy could not reach the upstream: {type(exc).__name__}"
                await _answer_json(
                    send,
                    502,
                    {"code": 502, "message": f"fault proxy: upstream {url!r} failed: {type(exc).__name__}"},
                )
                return
            try:
                await send(
                    {
                        "type": "http.response.start",
                        "status": response.status_code,
                        "headers": [
                            (k.encode("latin-1"), v.encode("latin-1"))
                            for k, v in forward_headers(response.headers.multi_items())
                        ],
                    }
                )
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except httpx.HTTPError:
                # The upstream cut the body (a killed sandbox ends its streams this way). Ending
                # here without completing the response cuts the client's body the same way.
                return
            finally:
                await response.aclose()

        async def watch_disconnect() -> None:
            await body_done.wait()
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return

        pump_task = asyncio.ensure_future(pump())
        watch_task = asyncio.ensure_future(watch_disconnect())
        try:
            await asyncio.wait({pump_task, watch_task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pump_task, watch_task):
                if not task.done():
                    task.cancel()
            await asyncio.gather(pump_task, watch_task, return_exceptions=True)
        if pump_task.done() and not pump_task.cancelled() and pump_task.exception() is not None:
            raise pump_task.exception()  # type: ignore[misc]


async def _answer_json(send: Send, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
