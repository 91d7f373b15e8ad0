"""The fault middleware on its own: what reaches the client when a fault cuts a stream."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from pytest_e2b_env.wire.faults import FaultMiddleware, FaultPlan, Message

START = "POST /process.Process/Start"


class _Target:
    """The emulator's classification (the real route functions) and a lose that takes a while."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def route_of(self, method: str, path: str, headers: Mapping[str, str]) -> tuple[str, str | None]:
        from pytest_e2b_env.wire import routes

        return routes.route_of(method, path, headers)

    def is_stream(self, template: str) -> bool:
        from pytest_e2b_env.wire import routes

        return routes.is_stream(template)

    async def lose(self, sandbox_id: str) -> None:
        self.events.append(f"lose {sandbox_id}")
        await asyncio.sleep(0.05)  # a kill is a round trip: the app keeps running meanwhile
        self.events.append("lost")


async def _fast_command(scope: Any, receive: Any, send: Any) -> None:
    """A stream whose command ended before the kill could land: start, output and end, back to back."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"start pid=7", "more_body": True})
    await send({"type": "http.response.body", "body": b"stdout hello", "more_body": True})
    await send({"type": "http.response.body", "body": b"end exit=0", "more_body": False})


def _run(answer: dict[str, Any]) -> tuple[list[Message], list[str]]:
    events: list[str] = []
    plan = FaultPlan()
    plan.add({"route": START, "answer": answer})
    middleware = FaultMiddleware(_fast_command, plan, _Target(events))
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(dict(message))
        events.append(f"send {message.get('body', b'')!r}")

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/process.Process/Start",
        "headers": [(b"e2b-sandbox-id", b"sbx1")],
    }
    asyncio.run(middleware(scope, receive, send))
    return sent, events


def test_a_lost_sandbox_never_delivers_what_its_command_said_after_the_first_event() -> None:
    """lose_sandbox: the first event, then the kill, then a cut: a fast command's end never arrives."""
    sent, events = _run({"lose_sandbox": True})
    bodies = [m.get("body") for m in sent if m["type"] == "http.response.body"]
    assert bodies == [b"start pid=7"]
    assert all(m.get("more_body") for m in sent if m["type"] == "http.response.body")  # unfinished: cut
    assert events[-2:] == ["lose sbx1", "lost"]  # the kill is done before the connection ends


def test_a_dropped_stream_delivers_only_its_first_event() -> None:
    """drop_stream on the same stream: the first event and nothing after, and no sandbox is lost."""
    sent, events = _run({"drop_stream": True})
    assert [m.get("body") for m in sent if m["type"] == "http.response.body"] == [b"start pid=7"]
    assert not [e for e in events if e.startswith("lose")]
