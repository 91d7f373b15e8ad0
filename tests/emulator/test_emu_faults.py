"""Every fault kind on the wire, seen through the real SDK, and recorded in the ledger."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from typing import Any

import httpx
import pytest
from e2b import (
    AuthenticationException,
    RateLimitException,
    Sandbox,
    SandboxException,
    SandboxNotFoundException,
    SandboxNotRunningException,
    ServiceBusyException,
)

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.errors import FaultRuleError


def test_429_with_retry_after_is_retried_by_the_sdk(emu: Emulator, faults: Any, opts: dict[str, str]) -> None:
    """Two 429s with Retry-After are retried by the SDK itself; the create then succeeds."""
    mark = emu.ledger_mark()
    faults.add(route="POST /v2/sandboxes", answer={"status": 429, "retry_after": 0}, times=2)
    sbx = Sandbox.create(**opts)
    sbx.kill()
    creates = [(e["op"], e["status"]) for e in emu.ledger(since=mark) if e["route"] == "POST /v2/sandboxes"]
    assert creates == [("fault", 429), ("fault", 429), ("create", 201)]


def test_429_beyond_retries_raises_rate_limit(faults: Any, opts: dict[str, str]) -> None:
    """More 429s than the SDK retries surface as RateLimitException."""
    faults.add(route="POST /v2/sandboxes", answer={"status": 429, "retry_after": 0}, times=4)
    with pytest.raises(RateLimitException):
        Sandbox.create(**opts)


def test_503_raises_service_busy(faults: Any, opts: dict[str, str]) -> None:
    """Persistent 503 on create surfaces as ServiceBusyException after the SDK's retries."""
    faults.add(route="POST /v2/sandboxes", answer={"status": 503}, times=None)
    with pytest.raises(ServiceBusyException):
        Sandbox.create(**opts)


def test_401_on_any_route(sbx: Any, faults: Any) -> None:
    """A 401 fault on get_info raises AuthenticationException; only the matching sandbox is hit."""
    faults.add(route="GET /sandboxes/*", sandbox=sbx.sandbox_id, answer={"status": 401})
    with pytest.raises(AuthenticationException):
        sbx.get_info()
    assert sbx.get_info().sandbox_id == sbx.sandbox_id  # times=1: the next call passes


def test_500_on_an_envd_stream(sbx: Any, faults: Any) -> None:
    """A 500 on process Start surfaces as a SandboxException from the SDK's own mapping."""
    faults.add(route="POST /process.Process/Start", sandbox=sbx.sandbox_id, answer={"status": 500})
    with pytest.raises(SandboxException):
        sbx.commands.run("echo never")
    assert sbx.commands.run("echo after").stdout == "after\n"


def test_lose_sandbox_mid_command(emu: Emulator, sbx: Any, faults: Any) -> None:
    """lose_sandbox kills the sandbox mid-command: SandboxNotRunningException, then gone for REST too."""
    marker = uuid.uuid4().hex
    faults.add(route="POST /process.Process/Start", contains=marker, answer={"lose_sandbox": True})
    assert sbx.commands.run("echo fine").stdout == "fine\n"  # contains= filters: this one passes
    with pytest.raises(SandboxNotRunningException):
        sbx.commands.run(f"echo {marker}; sleep 30")
    assert sbx.sandbox_id not in [s["sandbox_id"] for s in emu.sandboxes()]
    with pytest.raises(SandboxNotFoundException):
        sbx.get_info()


def test_lose_sandbox_on_a_command_that_ends_at_once(emu: Emulator, sbx: Any, faults: Any) -> None:
    """A command done before the kill lands is lost all the same: its end event never arrives."""
    marker = uuid.uuid4().hex
    faults.add(route="POST /process.Process/Start", contains=marker, answer={"lose_sandbox": True})
    with pytest.raises(SandboxNotRunningException):
        sbx.commands.run(f"echo {marker}")
    assert sbx.sandbox_id not in [s["sandbox_id"] for s in emu.sandboxes()]


def test_kill_fails_keeps_the_sandbox_running(emu: Emulator, sbx: Any, faults: Any) -> None:
    """kill_fails answers DELETE with 500 while the sandbox keeps running; a later kill works."""
    mark = emu.ledger_mark()
    faults.add(route="DELETE /sandboxes/*", answer={"kill_fails": True})
    with pytest.raises(SandboxException):
        sbx.kill()
    assert sbx.is_running() is True
    assert sbx.sandbox_id in [s["sandbox_id"] for s in emu.sandboxes()]
    assert sbx.kill() is True
    deletes = [
        (e["op"], e["status"]) for e in emu.ledger(since=mark) if e["route"] == "DELETE /sandboxes/{id}"
    ]
    assert deletes == [("fault", 500), ("kill", 204)]


def test_delay_passes_through(emu: Emulator, sbx: Any, faults: Any) -> None:
    """A delay fault holds the request, then the real answer arrives."""
    rule = faults.add(route="POST /process.Process/Start", answer={"delay": 0.2})
    assert sbx.commands.run("echo late").stdout == "late\n"
    assert [r["fired"] for r in faults.list() if r["id"] == rule] == [1]


def test_a_delayed_create_the_client_gave_up_on_still_makes_its_sandbox(
    emu: Emulator, faults: Any, opts: dict[str, str]
) -> None:
    """A delay holds a request it has received whole: a create whose client left meanwhile is
    carried out (as E2B carries out a create it received), and is counted in flight until then."""
    mark = emu.ledger_mark()
    faults.add(route="POST /v2/sandboxes", answer={"delay": 1.0}, times=1)
    with pytest.raises(httpx.TimeoutException):
        Sandbox.create(**opts, request_timeout=0.3)  # the client gives up during the delay
    assert emu.creates_in_flight() == 1
    deadline = time.monotonic() + 30
    while emu.creates_in_flight() and time.monotonic() < deadline:
        time.sleep(0.05)
    made = [e["sandbox_id"] for e in emu.ledger(since=mark) if e["op"] == "create"]
    assert len(made) == 1
    assert emu.creates_in_flight() == 0
    assert made[0] in {s["sandbox_id"] for s in emu.sandboxes()}
    Sandbox.kill(made[0], **opts)


def _held(emu: Emulator, mark: int, sandbox_id: str) -> list[dict[str, Any]]:
    entries = emu.ledger(since=mark)
    return [e for e in entries if e["sandbox_id"] == sandbox_id and "delay" in str(e["detail"])]


def _held_commands(faults: Any, *sandboxes: Any) -> list[tuple[threading.Thread, list[Exception]]]:
    """A command on each sandbox, in a thread of its own, held 600 s by a delay fault (no client
    deadline: only the hold ends it); each thread with what its command raised. Returns once every
    hold has started."""
    faults.add(route="POST /process.Process/Start", answer={"delay": 600}, times=len(sandboxes))
    started = []
    for sandbox in sandboxes:
        raised: list[Exception] = []

        def run(sandbox: Any = sandbox, raised: list[Exception] = raised) -> None:
            try:
                sandbox.commands.run("echo late", timeout=0)
            except Exception as exc:  # the answer of a sandbox that is gone
                raised.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        started.append((thread, raised))
    deadline = time.monotonic() + 30
    while sum(r["fired"] for r in faults.list()) < len(sandboxes) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [r["fired"] for r in faults.list()] == [len(sandboxes)]
    return started


def test_a_request_held_on_a_sandbox_ends_when_that_sandbox_is_killed(
    emu: Emulator, faults: Any, opts: dict[str, str], run_id: str
) -> None:
    """A delay holds a request until its sandbox is killed, not to the end of the delay: E2B answers
    a request it could not carry out when the sandbox goes. Another sandbox's hold goes on."""
    first = Sandbox.create(**opts, metadata={"run": run_id})
    second = Sandbox.create(**opts, metadata={"run": run_id})
    mark = emu.ledger_mark()
    (one, raised), (other, _) = _held_commands(faults, first, second)
    assert _held(emu, mark, first.sandbox_id) == []
    first.kill()
    one.join(timeout=30)  # 600 s had the kill not ended the hold
    assert not one.is_alive()
    assert len(raised) == 1
    assert isinstance(raised[0], SandboxException)
    assert len(_held(emu, mark, first.sandbox_id)) == 1
    assert other.is_alive()  # still held
    assert _held(emu, mark, second.sandbox_id) == []
    second.kill()
    other.join(timeout=30)
    assert not other.is_alive()
    assert len(_held(emu, mark, second.sandbox_id)) == 1


def test_a_request_held_on_a_sandbox_ends_when_a_fault_loses_that_sandbox(
    emu: Emulator, faults: Any, opts: dict[str, str], run_id: str
) -> None:
    """A sandbox a ``lose_sandbox`` fault makes vanish ends the holds on it, as a kill does."""
    sandbox = Sandbox.create(**opts, metadata={"run": run_id})
    mark = emu.ledger_mark()
    [(thread, _)] = _held_commands(faults, sandbox)
    faults.add(route="GET /sandboxes/*", sandbox=sandbox.sandbox_id, answer={"lose_sandbox": True})
    with contextlib.suppress(Exception):  # the answer of a sandbox that is gone
        sandbox.get_info()
    thread.join(timeout=30)  # 600 s had the loss not ended the hold
    assert not thread.is_alive()
    assert len(_held(emu, mark, sandbox.sandbox_id)) == 1


def test_a_kill_held_by_a_delay_still_ends_the_holds_on_its_sandbox(
    emu: Emulator, faults: Any, opts: dict[str, str], run_id: str
) -> None:
    """A kill that a delay held goes on, kills, and so ends the other holds on that sandbox; a
    kill a fault refuses (``kill_fails``) ends none."""
    sandbox = Sandbox.create(**opts, metadata={"run": run_id})
    mark = emu.ledger_mark()
    [(thread, _)] = _held_commands(faults, sandbox)
    faults.add(route="DELETE /sandboxes/*", answer={"kill_fails": True})
    with pytest.raises(SandboxException):
        sandbox.kill()
    assert thread.is_alive()  # a refused kill ends no hold
    assert _held(emu, mark, sandbox.sandbox_id) == []
    faults.add(route="DELETE /sandboxes/*", answer={"delay": 0.2})
    assert sandbox.kill() is True
    thread.join(timeout=30)  # 600 s had the delayed kill not ended the hold
    assert not thread.is_alive()
    assert len(_held(emu, mark, sandbox.sandbox_id)) == 2  # the command's, then the kill's own


def test_drop_stream_cuts_the_command_stream(emu: Emulator, sbx: Any, faults: Any) -> None:
    """drop_stream cuts the Start stream after its first event; the SDK raises, the sandbox lives on."""
    faults.add(route="POST /process.Process/Start", answer={"drop_stream": True})
    with pytest.raises(SandboxException):
        sbx.commands.run("sleep 0.5; echo never")
    assert sbx.is_running() is True
    assert sbx.commands.run("echo next").stdout == "next\n"


def test_after_skips_the_first_matches(sbx: Any, faults: Any) -> None:
    """after=N lets the first N matching requests through before the rule fires."""
    faults.add(route="POST /process.Process/Start", answer={"status": 500}, after=2)
    sbx.commands.run("true")
    sbx.commands.run("true")
    with pytest.raises(SandboxException):
        sbx.commands.run("true")


def test_bad_rule_is_rejected_with_the_reason(faults: Any) -> None:
    """An answer with no or two kinds is refused with a message naming the fix."""
    with pytest.raises(FaultRuleError, match="exactly one of"):
        faults.add(route="*", answer={"status": 500, "delay": 1})
    with pytest.raises(FaultRuleError, match="exactly one of"):
        faults.add(route="*", answer={})


def test_ledger_records_requests_with_route_sandbox_and_status(emu: Emulator, opts: dict[str, str]) -> None:
    """Each request lands in the ledger with route template, sandbox id, status and op."""
    mark = emu.ledger_mark()
    sbx = Sandbox.create(**opts)
    sbx.commands.run("true")
    sbx.files.write("f", "1")
    sbx.kill()
    rows = [(e["op"], e["route"], e["sandbox_id"], e["status"]) for e in emu.ledger(since=mark)]
    sid = sbx.sandbox_id
    assert rows == [
        ("create", "POST /v2/sandboxes", sid, 201),
        ("run", "POST /process.Process/Start", sid, 200),
        ("file_write", "POST /files", sid, 200),
        ("kill", "DELETE /sandboxes/{id}", sid, 204),
    ]
    assert all(isinstance(e["t"], float) for e in emu.ledger(since=mark))


def test_lose_sandbox_on_a_unary_route(emu: Emulator, sbx: Any, faults: Any) -> None:
    """lose_sandbox on a file read: the sandbox dies first, so the read sees the edge's 502."""
    sbx.files.write("kept.txt", "x")
    faults.add(route="GET /files", sandbox=sbx.sandbox_id, answer={"lose_sandbox": True})
    with pytest.raises(SandboxNotRunningException):
        sbx.files.read("kept.txt")
    assert sbx.sandbox_id not in [s["sandbox_id"] for s in emu.sandboxes()]


def test_drop_stream_on_a_plain_response(sbx: Any, faults: Any) -> None:
    """drop_stream on a plain download cuts it after the status line; the SDK lets httpx's error escape."""
    sbx.files.write("cut.txt", "x" * 1000)
    faults.add(route="GET /files", sandbox=sbx.sandbox_id, answer={"drop_stream": True})
    # like the raw httpx.ReadTimeout of section 5 of the e2b reference: not an e2b exception
    with pytest.raises(httpx.TransportError):
        sbx.files.read("cut.txt")
    assert sbx.files.read("cut.txt") == "x" * 1000
