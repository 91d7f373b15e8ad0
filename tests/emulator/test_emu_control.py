"""The emulator's own surfaces: control endpoint auth, attaching, access tokens, stream input, connect."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from e2b import Sandbox, TimeoutException
from emu_helpers import needs_sdk

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.errors import EmulatorError


def _status(url: str, headers: dict[str, str], method: str = "GET") -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_control_endpoint_needs_the_emulator_key(emu: Emulator) -> None:
    """/_emulator/* refuses requests without the emulator's key, with a JSON 401."""
    status, body = _status(f"{emu.url}/_emulator/sandboxes", {})
    assert (status, body["code"]) == (401, 401)
    status, _ = _status(f"{emu.url}/_emulator/sandboxes", {"X-Emulator-Key": "e2b_wrong"})
    assert status == 401
    with pytest.raises(EmulatorError, match="answered 401"):
        Emulator.connect(emu.url, "e2b_wrong")


def test_a_started_emulators_control_api_refuses_its_api_key() -> None:
    """Code holding the SDK's key (code under test) cannot reach the control API of Emulator()."""
    with Emulator() as emulator:
        status, _ = _status(f"{emulator.url}/_emulator/faults", {"X-Emulator-Key": emulator.api_key})
        assert status == 401
        assert emulator.control_key != emulator.api_key
        status, _ = _status(f"{emulator.url}/_emulator/faults", {"X-Emulator-Key": emulator.control_key})
        assert status == 200


def test_attach_sees_the_same_sandboxes(emu: Emulator, sbx: Any) -> None:
    """Emulator.connect(url, key, control_key) drives the same emulator; its stop() leaves it running."""
    attached = Emulator.connect(emu.url, emu.api_key, emu.control_key)
    assert attached.isolation == emu.isolation
    assert sbx.sandbox_id in [s["sandbox_id"] for s in attached.sandboxes()]
    attached.stop()
    assert sbx.is_running() is True


def test_envd_needs_the_sandbox_access_token(emu: Emulator, sbx: Any) -> None:
    """envd calls without the sandbox's X-Access-Token get envd's 401; GET /health is open, as on envd."""
    headers = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983", "X-Access-Token": "nope"}
    status, body = _status(f"{emu.url}/files?path=/etc/hostname", headers)
    assert (status, body["code"]) == (401, 401)
    assert body["message"].startswith("unauthorized access, please provide a valid access token")
    assert _status(f"{emu.url}/health", headers)[0] == 204


def test_stream_input_feeds_stdin(sbx: Any) -> None:
    """commands.stream_input sends an iterable of chunks to a command's stdin in order."""
    needs_sdk(hasattr(sbx.commands, "stream_input"), "commands.stream_input", "2.58")
    handle = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.stream_input(handle.pid, ["a", b"b", "c\n"])
    sbx.commands.close_stdin(handle.pid)
    assert handle.wait().stdout == "abc\n"


def test_connect_timeout_does_not_kill_the_command(sbx: Any) -> None:
    """A Connect stream's deadline raises TimeoutException but leaves the command running (envd)."""
    handle = sbx.commands.run("sleep 30", background=True, timeout=0)
    with pytest.raises(TimeoutException):
        sbx.commands.connect(handle.pid, timeout=1).wait()
    assert handle.pid in [p.pid for p in sbx.commands.list()]
    handle.kill()


def test_connect_only_extends_the_lifetime(sbx: Any, opts: dict[str, str]) -> None:
    """connect(timeout=) extends a running sandbox's lifetime but never shortens it."""
    before = sbx.get_info().end_at
    Sandbox.connect(sbx.sandbox_id, timeout=5, **opts)
    assert sbx.get_info().end_at == before
    Sandbox.connect(sbx.sandbox_id, timeout=3600, **opts)
    assert (sbx.get_info().end_at - before).total_seconds() > 3000


def test_faults_list_shows_counters(faults: Any, sbx: Any) -> None:
    """faults.list() reports each rule with how often it matched and fired."""
    rule = faults.add(route="GET /health", sandbox=sbx.sandbox_id, answer={"delay": 0}, times=None)
    sbx.is_running()
    sbx.is_running()
    (row,) = [r for r in faults.list() if r["id"] == rule]
    assert (row["seen"], row["fired"]) == (2, 2)


def _post(emu: Emulator, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(emu.url + path, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_garbage_on_envd_gets_a_json_error(emu: Emulator, sbx: Any) -> None:
    """Malformed envd requests get a JSON error with a 4xx status, never a traceback or a hang."""
    envd = {"E2b-Sandbox-Id": sbx.sandbox_id, "X-Access-Token": sbx._envd_access_token}
    status, raw = _post(
        emu, "/filesystem.Filesystem/Stat", b"{not json", {**envd, "Content-Type": "application/json"}
    )
    assert 400 <= status < 500
    assert "code" in json.loads(raw)
    status, raw = _post(emu, "/files", b"data", {**envd, "Content-Type": "application/octet-stream"})
    assert status == 400
    assert json.loads(raw)["code"] == 400
    status, raw = _post(emu, "/nope", b"", envd)
    assert (status, json.loads(raw)["code"]) == (404, 404)
