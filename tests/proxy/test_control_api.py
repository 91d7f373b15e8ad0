"""The fault proxy serves the emulator's control API, so a case host in another process drives it."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.errors import EmulatorError, FaultRuleError
from pytest_e2b_env.proxy import FaultProxy


def _status(url: str, method: str = "GET", key: str | None = None, body: bytes | None = None) -> int:
    request = urllib.request.Request(url, data=body, method=method)
    if key is not None:
        request.add_header("X-Emulator-Key", key)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_a_connected_client_reads_the_proxy_ledger_and_sets_its_faults(proxy: FaultProxy, sdk: Any) -> None:
    """Ledger, marks, faults and sandboxes through the API equal the proxy's own view."""
    remote = Emulator.connect(proxy.url, proxy.api_key, proxy.control_key)
    assert remote.isolation == "e2b"
    mark = remote.ledger_mark()
    rule = remote.faults.add(route="GET /sandboxes/*", answer={"status": 503}, times=1)
    assert [r["id"] for r in proxy.faults.rules()] == [rule]
    box = sdk.Sandbox.create(timeout=60)
    try:
        assert box.sandbox_id in {s["sandbox_id"] for s in remote.sandboxes()}
        entries = remote.ledger(since=mark)
        assert entries == proxy.ledger(since=mark)
        assert [e["op"] for e in entries] == ["create"]  # control requests are never ledgered
    finally:
        box.kill()
    remote.faults.clear()
    assert proxy.faults.rules() == []


def test_the_control_api_needs_its_own_key_never_the_e2b_key(proxy: FaultProxy) -> None:
    """No key, a wrong key or the upstream E2B key: 401, and nothing is forwarded upstream."""
    url = f"{proxy.url}/_emulator/ledger/mark"
    assert _status(url) == 401
    assert _status(url, key="wrong") == 401
    assert _status(url, key=proxy.api_key) == 401
    assert _status(url, key=proxy.control_key) == 200
    body = b"x" * (2 << 20)  # refused before the body is read
    assert _status(f"{proxy.url}/_emulator/faults", "POST", key="wrong", body=body) == 401
    assert proxy.ledger() == []


def test_the_proxy_control_api_refuses_kill_all_and_bad_rules(proxy: FaultProxy) -> None:
    """Killing every sandbox live would be the whole team's: no such route; bad rules name the field."""
    assert _status(f"{proxy.url}/_emulator/sandboxes/kill", "POST", key=proxy.control_key) == 404
    remote = Emulator.connect(proxy.url, proxy.api_key, proxy.control_key)
    with pytest.raises(FaultRuleError, match="times"):
        remote.faults.add(route="*", answer={"status": 503}, times=-1)
    with pytest.raises(EmulatorError, match="404"):
        remote.kill_all()
