"""A hard cap on the sandboxes a fault proxy lets be created upstream.

Live, every sandbox costs money and counts against the team's concurrency, and a search runs
hundreds of schedules: past the cap the proxy answers a create itself (403, E2B's JSON error body
naming the cap) and the upstream never sees it. Creates are counted as they are forwarded, after
the fault layer (a create a fault answered made nothing upstream), so the cap bounds what was
asked of the upstream whatever it answered.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from pytest_e2b_env.wire.routes import route_of

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
App = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]
#: the status a refused create answers: not one the e2b SDK retries by itself (429, 502-504)
STATUS = 403


def is_create(method: str, path: str, headers: dict[str, str]) -> bool:
    """A control-plane create (``POST /sandboxes``, ``POST /v2/sandboxes``), never an envd request."""
    template, _ = route_of(method, path, headers)
    return template in ("POST /sandboxes", "POST /v2/sandboxes")


class CreateCap:
    """ASGI middleware: forward at most ``limit`` creates, answer the rest with 403 naming the cap."""

    def __init__(self, app: App, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a sandbox cap of {limit} allows nothing; give 1 or more")
        self.app = app
        self.limit = limit
        self.forwarded = 0
        self.refused = 0
        self._lock = threading.Lock()

    def message(self) -> str:
        """What a refused create answers (and what a run stopped by the cap says)."""
        return (
            f"the sandbox cap of this run ({self.limit} created) is reached: the fault proxy refused a create"
        )

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            if is_create(scope["method"], scope["path"], headers):
                with self._lock:
                    allowed = self.forwarded < self.limit
                    if allowed:
                        self.forwarded += 1
                    else:
                        self.refused += 1
                if not allowed:
                    await _refuse(send, self.message())
                    return
        await self.app(scope, receive, send)


async def _refuse(send: Any, message: str) -> None:
    body = json.dumps({"code": STATUS, "message": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": STATUS, "headers": headers})
    await send({"type": "http.response.body", "body": body})
