"""Every door of a sandbox needs its credential: envd its access token, other ports the traffic token.

Whoever reaches the emulator's port can read sandbox ids (``/proc/<pid>/mountinfo`` is world
readable), so the ids are no secret: each request is refused before its body is read, before the
fault layer, and before anything runs, unless it carries the key of the door it knocks on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from e2b_code_interpreter import Sandbox

from pytest_e2b_env.emulator import Emulator

T = 30
MARKER = "/tmp/door-marker"


@pytest.fixture
def ci(opts: dict[str, str], run_id: str) -> Iterator[Sandbox]:
    """A code-interpreter sandbox, killed after the test."""
    sandbox = Sandbox.create(timeout=120, metadata={"test_run": run_id}, **opts)
    yield sandbox
    sandbox.kill()


def _interp(
    emu: Emulator, ci: Sandbox, method: str, path: str, extra: dict[str, str], **kw: Any
) -> httpx.Response:
    headers = {"E2b-Sandbox-Id": ci.sandbox_id, "E2b-Sandbox-Port": "49999", **extra}
    return httpx.request(method, f"{emu.url}{path}", headers=headers, timeout=T, **kw)


def _refused_by_the_edge(response: httpx.Response, sandbox_id: str, why: str) -> None:
    __tracebackhide__ = True
    assert response.status_code == 403, response.text
    assert response.json() == {
        "sandboxId": sandbox_id,
        "message": f"Sandbox is secured with traffic access token. {why}",
        "code": 403,
    }


MISSING = "Token header 'e2b-traffic-access-token' is missing"
INVALID = "Provided token in header 'e2b-traffic-access-token' is invalid"


def test_the_sdk_gets_a_traffic_token_and_its_calls_pass(ci: Sandbox) -> None:
    """Create answers a traffic access token; run_code and every context call carry it and work."""
    assert isinstance(ci.traffic_access_token, str)
    assert len(ci.traffic_access_token) >= 32
    assert ci.traffic_access_token != ci._envd_access_token
    context = ci.create_code_context()
    assert ci.run_code("6 * 7", context=context, timeout=T).text == "42"
    assert context.id in [c.id for c in ci.list_code_contexts()]
    ci.restart_code_context(context)
    ci.remove_code_context(context)


@pytest.mark.parametrize(
    ("credential", "why"),
    [
        ({}, MISSING),
        ({"E2B-Traffic-Access-Token": "e2b-wrong"}, INVALID),
        ({"E2B-Traffic-Access-Token": ""}, INVALID),
        ("envd", MISSING),  # the envd access token is another door's key
    ],
    ids=["none", "wrong", "empty", "envd-token-only"],
)
def test_every_interpreter_route_refuses_without_the_traffic_token(
    emu: Emulator, ci: Sandbox, credential: Any, why: str
) -> None:
    """/health, /execute and the context routes answer E2B's edge 403 and run nothing."""
    context = ci.create_code_context()
    ci.run_code("kept = 41", context=context, timeout=T)
    before = sorted(c.id for c in ci.list_code_contexts())
    extra = {"X-Access-Token": str(ci._envd_access_token)} if credential == "envd" else credential
    routes: list[tuple[str, str, Any]] = [
        ("GET", "/health", None),
        ("POST", "/execute", {"code": f"open({MARKER!r}, 'w').write('x')"}),
        ("POST", "/execute", {"code": f"open({MARKER!r}, 'w').write('x')", "context_id": context.id}),
        ("GET", "/contexts", None),
        ("POST", "/contexts", {"cwd": "/tmp"}),
        ("POST", f"/contexts/{context.id}/restart", None),
        ("DELETE", f"/contexts/{context.id}", None),
        ("GET", "/no-such-route", None),
    ]
    for method, path, body in routes:
        response = _interp(emu, ci, method, path, extra, json=body)
        _refused_by_the_edge(response, ci.sandbox_id, why)
    # nothing ran: no cell wrote the marker, no context was created, restarted or removed
    assert ci.files.exists(MARKER) is False
    assert sorted(c.id for c in ci.list_code_contexts()) == before
    assert ci.run_code("kept + 1", context=context, timeout=T).text == "42"


def test_a_refused_interpreter_body_is_never_read(emu: Emulator, ci: Sandbox) -> None:
    """A 32 MiB /execute body without the token is refused (403), not read up to its 16 MiB cap (413)."""

    def chunks() -> Iterator[bytes]:
        block = b" " * (1 << 20)
        for _ in range(32):
            yield block

    try:
        response = _interp(emu, ci, "POST", "/execute", {}, content=chunks())
        assert response.status_code == 403
    except httpx.TransportError:
        pass  # answered 403 and closed before the client finished sending: also never read
    assert ci.files.exists(MARKER) is False


@pytest.mark.parametrize("token", [None, "wrong"], ids=["none", "wrong"])
def test_every_envd_route_needs_the_access_token(emu: Emulator, sbx: Any, token: str | None) -> None:
    """Process and filesystem RPCs, /files, unknown paths and non-GET /health answer envd's 401."""
    headers = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983"}
    if token is not None:
        headers["X-Access-Token"] = token
    start = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", f"touch {MARKER}"]}, "stdin": False}
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/process.Process/Start", {"json": start}),
        ("POST", "/process.Process/List", {"json": {}}),
        ("POST", "/filesystem.Filesystem/Stat", {"json": {"path": "/etc/hostname"}}),
        ("POST", "/filesystem.Filesystem/ListDir", {"json": {"path": "/"}}),
        ("GET", "/files", {"params": {"path": "/etc/hostname"}}),
        ("POST", "/files", {"params": {"path": MARKER}, "content": b"x"}),
        ("POST", "/health", {}),
        ("GET", "/no-such-route", {}),
    ]
    # the traffic token of the sandbox opens other ports, never envd
    for method, path, kw in calls:
        response = httpx.request(method, f"{emu.url}{path}", headers=headers, timeout=T, **kw)
        assert response.status_code == 401, (path, response.text)
        assert response.json()["code"] == 401
    assert sbx.files.exists(MARKER) is False


def test_envd_health_is_open_as_on_envd(emu: Emulator, sbx: Any) -> None:
    """GET /health answers 204 without a token: envd leaves it open (authExcludedPaths)."""
    headers = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983"}
    assert httpx.get(f"{emu.url}/health", headers=headers, timeout=T).status_code == 204
    assert sbx.is_running() is True


def test_other_ports_need_the_traffic_token_before_saying_closed(emu: Emulator, ci: Sandbox) -> None:
    """A port nobody serves answers 403 without the traffic token and E2B's 502 "port is not open" with it."""
    headers = {"E2b-Sandbox-Id": ci.sandbox_id, "E2b-Sandbox-Port": "8080"}
    _refused_by_the_edge(httpx.get(f"{emu.url}/", headers=headers, timeout=T), ci.sandbox_id, MISSING)
    token = {"E2B-Traffic-Access-Token": str(ci.traffic_access_token)}
    closed = httpx.get(f"{emu.url}/", headers={**headers, **token}, timeout=T)
    assert closed.status_code == 502
    assert closed.json()["message"] == "The sandbox is running but port is not open"


def test_the_control_plane_needs_the_api_key(emu: Emulator, ci: Sandbox) -> None:
    """REST calls without X-API-KEY answer 401 and change nothing (the sandbox stays alive)."""
    for method, path in (("GET", f"/sandboxes/{ci.sandbox_id}"), ("DELETE", f"/sandboxes/{ci.sandbox_id}")):
        response = httpx.request(method, f"{emu.url}{path}", headers={"X-API-KEY": "e2b_wrong"}, timeout=T)
        assert (response.status_code, response.json()["code"]) == (401, 401)
    assert ci.is_running() is True


def test_faults_never_fire_for_unauthenticated_requests(emu: Emulator, ci: Sandbox, faults: Any) -> None:
    """A lose_sandbox rule is neither consumed nor fired by requests refused at the door."""
    faults.add(route="POST /execute", sandbox=ci.sandbox_id, answer={"lose_sandbox": True})
    faults.add(route="DELETE /sandboxes/{id}", sandbox=ci.sandbox_id, answer={"lose_sandbox": True})
    _refused_by_the_edge(_interp(emu, ci, "POST", "/execute", {}, json={"code": "1"}), ci.sandbox_id, MISSING)
    refused = httpx.delete(f"{emu.url}/sandboxes/{ci.sandbox_id}", headers={"X-API-KEY": "x"}, timeout=T)
    assert refused.status_code == 401
    assert [(r["seen"], r["fired"]) for r in faults.list()] == [(0, 0), (0, 0)]
    assert ci.is_running() is True
