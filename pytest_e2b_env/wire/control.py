"""``/_emulator/*``: the control API of a target, served the same by the emulator and the fault proxy.

A case host (the child process that runs subject code so a crash cannot take the controller down)
reaches its target through this API only: ``Emulator.connect(url, key)`` reads the ledger, adds and
clears fault rules and lists sandboxes, whether ``url`` is the emulator or the proxy before real E2B.
Requests here are never recorded in the ledger, never faulted and never forwarded upstream. The key
is checked before any body is read; bodies and JSON nesting are bounded.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

from pytest_e2b_env.wire import CONTROL_HEADER, CONTROL_PREFIX
from pytest_e2b_env.wire.answers import Answer, answer, error
from pytest_e2b_env.wire.faults import (
    ASGIApp,
    BodyTooLarge,
    FaultPlan,
    Receive,
    Scope,
    Send,
    drain,
    read_body,
    send_answer,
)
from pytest_e2b_env.wire.jsonin import JSONTooDeep, loads_bounded
from pytest_e2b_env.wire.ledger import Ledger

PREFIX = CONTROL_PREFIX


class ControlEndpoint:
    """ASGI middleware answering ``/_emulator/*`` itself and passing every other request to ``app``.

    ``sandboxes`` lists the sandboxes alive now (awaited: a proxy asks upstream off its loop);
    ``kill_all`` (optional) kills every sandbox and returns their ids; ``rule_error`` turns a
    rejected fault rule's exception into the one-line 400 message.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        key: str,
        ledger: Ledger,
        faults: FaultPlan,
        info: Mapping[str, str],
        sandboxes: Callable[[], Awaitable[list[dict[str, Any]]]],
        rule_error: Callable[[Exception], str],
        kill_all: Callable[[], Awaitable[list[str]]] | None = None,
        body_limit: int = 1 << 20,
        json_depth: int = 32,
    ) -> None:
        self.app = app
        self._key = key.encode()
        self.ledger = ledger
        self.faults = faults
        self.info = dict(info)
        self._sandboxes = sandboxes
        self._kill_all = kill_all
        self._rule_error = rule_error
        self.body_limit = body_limit
        self.json_depth = json_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PREFIX + "/"):
            await self.app(scope, receive, send)
            return
        given = b""
        for name, value in scope["headers"]:
            if name.lower() == CONTROL_HEADER.encode():
                given = value
        # the key first: an unauthenticated body is never buffered
        if not hmac.compare_digest(given, self._key):
            await drain(receive, self.body_limit)
            await send_answer(send, error(401, f"the control endpoint needs its key in {CONTROL_HEADER}"))
            return
        try:
            body = await read_body(receive, self.body_limit)
        except BodyTooLarge as exc:
            await send_answer(send, error(413, str(exc)))
            return
        method, path = scope["method"], scope["path"][len(PREFIX) :]
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        await send_answer(send, await self._route(method, path, query, body))

    async def _route(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> Answer:
        if (method, path) == ("GET", "/info"):
            return answer(200, self.info)
        if (method, path) == ("GET", "/sandboxes"):
            return answer(200, await self._sandboxes())
        if (method, path) == ("POST", "/sandboxes/kill") and self._kill_all is not None:
            return answer(200, {"killed": await self._kill_all()})
        if (method, path) == ("GET", "/faults"):
            return answer(200, self.faults.rules())
        if (method, path) == ("POST", "/faults"):
            return self._add_rule(body)
        if (method, path) == ("DELETE", "/faults"):
            self.faults.clear()
            return answer(204)
        if (method, path) == ("GET", "/ledger/mark"):
            return answer(200, {"mark": self.ledger.mark(), "creating": self.ledger.creating()})
        if (method, path) == ("GET", "/ledger"):
            try:
                since = int(query.get("since", ["0"])[0])
            except ValueError:
                return error(400, f"since must be an integer mark from {PREFIX}/ledger/mark")
            return answer(200, self.ledger.since(since))
        return error(404, f"no such control route: {method} {PREFIX}{path}")

    def _add_rule(self, body: bytes) -> Answer:
        try:
            rule = loads_bounded(body or b"{}", self.json_depth)
        except JSONTooDeep as exc:
            return error(400, f"bad fault rule: {exc}")
        except ValueError:
            return error(400, "bad fault rule: the body is not JSON")
        if not isinstance(rule, dict):
            return error(400, "bad fault rule: the body must be a JSON object")
        try:
            return answer(201, {"id": self.faults.add(rule)})
        except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
            return error(400, self._rule_error(exc))
