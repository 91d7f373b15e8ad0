"""Sandbox lifecycle through the real sync SDK: create, connect, kill, timeouts, info, list, auth."""

from __future__ import annotations

import inspect
import json
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Any

import pytest
from e2b import (
    AuthenticationException,
    Sandbox,
    SandboxNotFoundException,
    SandboxNotRunningException,
    SandboxQuery,
    SandboxState,
)
from emu_helpers import eventually, needs_sdk

from pytest_e2b_env.emulator import Emulator


def _wait_gone(emu: Emulator, sandbox_id: str, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while any(s["sandbox_id"] == sandbox_id for s in emu.sandboxes()):
        assert time.monotonic() < deadline, f"sandbox {sandbox_id} still alive after {within}s"
        time.sleep(0.1)


def test_create_reports_template_metadata_envs_and_network(
    opts: dict[str, str], emu: Emulator, run_id: str
) -> None:
    """create() passes template, metadata, envs and allow_internet_access through to get_info and commands."""
    sbx = Sandbox.create(
        template="base",
        timeout=60,
        metadata={"test_run": run_id, "k": "v"},
        envs={"GREETING": "hi"},
        allow_internet_access=False,
        **opts,
    )
    try:
        info = sbx.get_info()
        assert info.sandbox_id == sbx.sandbox_id
        assert info.template_id == "base"
        assert info.metadata == {"test_run": run_id, "k": "v"}
        assert info.state == SandboxState.RUNNING
        assert info.allow_internet_access is False
        assert 55 <= (info.end_at - info.started_at).total_seconds() <= 61
        assert sbx.commands.run("echo $GREETING").stdout == "hi\n"
        listed = {s["sandbox_id"]: s for s in emu.sandboxes()}
        assert listed[sbx.sandbox_id]["allow_internet_access"] is False
    finally:
        sbx.kill()


def test_kill_returns_true_then_false(sbx: Any, opts: dict[str, str]) -> None:
    """kill() is True for a running sandbox and False once it is gone, as on E2B."""
    assert sbx.kill() is True
    assert sbx.kill() is False
    assert Sandbox.kill(sbx.sandbox_id, **opts) is False


def test_killed_sandbox_raises_the_sdk_exceptions(sbx: Any, opts: dict[str, str]) -> None:
    """After kill: envd calls raise SandboxNotRunningException, REST calls SandboxNotFoundException."""
    sbx.kill()
    assert sbx.is_running() is False
    with pytest.raises(SandboxNotRunningException):
        sbx.commands.run("true")
    with pytest.raises(SandboxNotRunningException):
        sbx.files.read("/etc/hostname")
    with pytest.raises(SandboxNotFoundException):
        sbx.get_info()
    with pytest.raises(SandboxNotFoundException):
        sbx.set_timeout(30)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sbx.sandbox_id, **opts)


def test_is_running_and_connect(sbx: Any, opts: dict[str, str]) -> None:
    """is_running() is True while alive and connect() returns a working handle to the same sandbox."""
    assert sbx.is_running() is True
    again = Sandbox.connect(sbx.sandbox_id, **opts)
    assert again.sandbox_id == sbx.sandbox_id
    assert again.commands.run("echo same").stdout == "same\n"


def test_set_timeout_moves_end_at(sbx: Any) -> None:
    """set_timeout(N) makes the sandbox end N seconds from now, shortening or extending it."""
    sbx.set_timeout(30)
    left = (sbx.get_info().end_at - datetime.now(UTC)).total_seconds()
    assert 0 < left <= 30
    sbx.set_timeout(600)
    left = (sbx.get_info().end_at - datetime.now(UTC)).total_seconds()
    assert 500 < left <= 600


def test_lifetime_expiry_kills_the_sandbox(opts: dict[str, str], emu: Emulator) -> None:
    """A sandbox past its lifetime is killed: envd says not running, REST not found, ledger expire."""
    mark = emu.ledger_mark()
    sbx = Sandbox.create(timeout=1, **opts)
    handle = sbx.commands.run("sleep 60", background=True, timeout=0)
    _wait_gone(emu, sbx.sandbox_id)
    with pytest.raises(SandboxNotRunningException):
        handle.wait()
    with pytest.raises(SandboxNotRunningException):
        sbx.commands.run("true")
    with pytest.raises(SandboxNotFoundException):
        sbx.get_info()
    assert sbx.kill() is False
    # the expire entry is written once the box's kill has finished, which can trail its disappearance
    eventually(
        lambda: ("expire", sbx.sandbox_id) in [(e["op"], e["sandbox_id"]) for e in emu.ledger(since=mark)],
        what="an expire entry in the ledger",
    )


def test_list_filters_by_metadata_and_state(opts: dict[str, str], run_id: str) -> None:
    """list() filters on metadata and state; paused finds nothing since nothing here pauses."""
    mine = [Sandbox.create(timeout=60, metadata={"test_run": run_id, "n": str(i)}, **opts) for i in range(2)]
    try:
        found = Sandbox.list(query=SandboxQuery(metadata={"test_run": run_id}), **opts).next_items()
        assert sorted(s.sandbox_id for s in found) == sorted(s.sandbox_id for s in mine)
        one = Sandbox.list(query=SandboxQuery(metadata={"test_run": run_id, "n": "1"}), **opts).next_items()
        assert [s.sandbox_id for s in one] == [mine[1].sandbox_id]
        assert one[0].metadata == {"test_run": run_id, "n": "1"}
        running = SandboxQuery(metadata={"test_run": run_id}, state=[SandboxState.RUNNING])
        assert len(Sandbox.list(query=running, **opts).next_items()) == 2
        paused = SandboxQuery(metadata={"test_run": run_id}, state=[SandboxState.PAUSED])
        assert Sandbox.list(query=paused, **opts).next_items() == []
        later = SandboxQuery(metadata={"test_run": run_id}, started_after=mine[0].get_info().started_at)
        assert [s.sandbox_id for s in Sandbox.list(query=later, **opts).next_items()] == [mine[1].sandbox_id]
    finally:
        for s in mine:
            s.kill()


def test_list_paginates_with_limit_and_next_token(opts: dict[str, str], run_id: str) -> None:
    """list(limit=2) pages through 5 sandboxes as 2+2+1 via x-next-token, each exactly once."""
    mine = [Sandbox.create(timeout=60, metadata={"test_run": run_id}, **opts) for _ in range(5)]
    try:
        paginator = Sandbox.list(query=SandboxQuery(metadata={"test_run": run_id}), limit=2, **opts)
        pages = []
        while paginator.has_next:
            pages.append([s.sandbox_id for s in paginator.next_items()])
        assert [len(p) for p in pages] == [2, 2, 1]
        assert sorted(i for p in pages for i in p) == sorted(s.sandbox_id for s in mine)
        with pytest.raises(Exception, match="No more items to fetch"):
            paginator.next_items()
    finally:
        for s in mine:
            s.kill()


def test_wrong_api_key_raises_authentication_exception(emu: Emulator) -> None:
    """A wrong key gets 401 from the control plane, which the SDK turns into AuthenticationException."""
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="e2b_" + "0" * 40, api_url=emu.url, sandbox_url=emu.url)
    with pytest.raises(AuthenticationException):
        Sandbox.list(api_key="e2b_" + "0" * 40, api_url=emu.url, sandbox_url=emu.url).next_items()


def _raw(
    emu: Emulator, method: str, path: str, headers: dict[str, str], body: bytes | None = None
) -> tuple[int, Any]:
    request = urllib.request.Request(emu.url + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_missing_api_key_gets_e2b_json_401(emu: Emulator) -> None:
    """A request without X-API-KEY gets 401 with E2B's JSON error body, not a traceback."""
    status, body = _raw(emu, "GET", "/v2/sandboxes", {})
    assert status == 401
    assert body["code"] == 401
    assert "API key" in body["message"]


def test_bad_input_gets_json_400(emu: Emulator) -> None:
    """Malformed create bodies and bad list parameters get E2B-style 400 answers."""
    key = {"X-API-KEY": emu.api_key, "Content-Type": "application/json"}
    assert _raw(emu, "POST", "/v2/sandboxes", key, b"not json")[0] == 400
    status, body = _raw(
        emu, "POST", "/v2/sandboxes", key, json.dumps({"templateID": "base", "timeout": -5}).encode()
    )
    assert (status, body["code"]) == (400, 400)
    assert "timeout" in body["message"]
    assert _raw(emu, "GET", "/v2/sandboxes?limit=0", key)[0] == 400
    assert _raw(emu, "GET", "/v2/sandboxes?nextToken=garbage", key)[0] == 400
    status, body = _raw(emu, "GET", "/sandboxes/inope", key)
    assert (status, body["code"]) == (404, 404)


def test_unknown_sandbox_on_envd_gets_edge_502(emu: Emulator) -> None:
    """Any envd path for an unknown sandbox gets E2B's edge answer: 502 'The sandbox was not found'."""
    status, body = _raw(emu, "GET", "/health", {"E2b-Sandbox-Id": "inope", "E2b-Sandbox-Port": "49983"})
    assert status == 502
    assert body == {"sandboxId": "inope", "message": "The sandbox was not found", "code": 502}


def test_idempotency_key_returns_the_same_sandbox(opts: dict[str, str]) -> None:
    """A create repeated with the same idempotency_key returns the sandbox the first one made."""
    accepted = "idempotency_key" in inspect.signature(Sandbox.create).parameters
    needs_sdk(accepted, "Sandbox.create(idempotency_key=)", "2.61")
    first = Sandbox.create(idempotency_key="test-idem-1", **opts)
    try:
        again = Sandbox.create(idempotency_key="test-idem-1", **opts)
        assert again.sandbox_id == first.sandbox_id
    finally:
        first.kill()
    fresh = Sandbox.create(idempotency_key="test-idem-1", **opts)
    assert fresh.sandbox_id != first.sandbox_id
    fresh.kill()


@pytest.mark.namespaces
def test_allow_internet_access_false_reaches_the_sandbox(
    opts: dict[str, str], emu: Emulator, needs_namespaces: None
) -> None:
    """allow_internet_access=False gives a sandbox with loopback only; get_info reports the flag."""
    interfaces = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '"
    offline = Sandbox.create(allow_internet_access=False, **opts)
    online = Sandbox.create(**opts)
    try:
        assert offline.commands.run(interfaces).stdout.split() == ["lo"]
        assert online.get_info().allow_internet_access is True
        assert offline.get_info().allow_internet_access is False
    finally:
        offline.kill()
        online.kill()
