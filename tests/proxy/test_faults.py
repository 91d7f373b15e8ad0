"""Every wire fault kind, injected by the proxy, reaches the real SDK as E2B would send it."""

from __future__ import annotations

from typing import Any

import pytest
from e2b.exceptions import (
    AuthenticationException,
    RateLimitException,
    SandboxException,
    SandboxNotRunningException,
    ServiceBusyException,
)

from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.proxy import FaultProxy

RUN = {"pytest_e2b_env_run": "proxy-fault-tests", "role": "test"}


def _alive(upstream: Any) -> set[str]:
    return {s["sandbox_id"] for s in upstream.sandboxes()}


async def test_429_on_create_is_retried_by_the_sdk(proxy: FaultProxy, sdk: Any) -> None:
    """One 429 with Retry-After on create: the SDK waits, retries and gets a sandbox."""
    mark = proxy.ledger_mark()
    proxy.faults.add(route="POST /v2/sandboxes", answer={"status": 429, "retry_after": 0}, times=1)
    sandbox = await sdk.AsyncSandbox.create(timeout=60, metadata=RUN)
    await sandbox.kill()
    creates = [
        (e["status"], e["detail"]) for e in proxy.ledger(since=mark) if e["route"] == "POST /v2/sandboxes"
    ]
    assert creates[0][0] == 429
    assert "status 429" in creates[0][1]
    assert creates[1] == (201, "")


async def test_429_exhausted_raises_rate_limit(proxy: FaultProxy, sdk: Any, upstream: Any) -> None:
    """429 on every attempt: RateLimitException, and no sandbox was created upstream."""
    before = _alive(upstream)
    proxy.faults.add(route="POST /v2/sandboxes", answer={"status": 429, "retry_after": 0}, times=None)
    with pytest.raises(RateLimitException):
        await sdk.AsyncSandbox.create(timeout=60, metadata=RUN)
    assert _alive(upstream) == before


@pytest.mark.parametrize(
    ("status", "exception"),
    [(401, AuthenticationException), (503, ServiceBusyException), (500, SandboxException)],
)
async def test_error_status_on_create(
    proxy: FaultProxy, sdk: Any, status: int, exception: type[Exception]
) -> None:
    """An injected error status maps to the SDK's own exception for it."""
    proxy.faults.add(route="POST /v2/sandboxes", answer={"status": status}, times=None)
    with pytest.raises(exception):
        await sdk.AsyncSandbox.create(timeout=60, metadata=RUN, retries=0)


async def test_lose_sandbox_mid_command(proxy: FaultProxy, sdk: Any, upstream: Any) -> None:
    """lose_sandbox on Start kills the sandbox upstream mid-command; the SDK sees it not running."""
    sandbox = await sdk.AsyncSandbox.create(timeout=120, metadata=RUN)
    mark = proxy.ledger_mark()
    proxy.faults.add(route="POST /process.Process/Start", answer={"lose_sandbox": True}, contains="sleep 20")
    with pytest.raises(SandboxNotRunningException):
        await sandbox.commands.run("echo started; sleep 20; echo never")
    assert sandbox.sandbox_id not in _alive(upstream)
    entries = proxy.ledger(since=mark)
    # Same shape as the emulator's ledger: the faulted request, then the loss as a kill.
    faulted = [(e["op"], e["route"], e["detail"]) for e in entries if e["detail"]]
    assert faulted[0] == ("fault", "POST /process.Process/Start", "f1: lose_sandbox")
    lost = [e for e in entries if e["op"] == "kill"]
    assert [e["sandbox_id"] for e in lost] == [sandbox.sandbox_id]
    assert lost[0]["detail"] == "lost (fault): upstream kill answered 204"


async def test_lose_sandbox_on_file_read(proxy: FaultProxy, sdk: Any, upstream: Any) -> None:
    """lose_sandbox on a unary envd call answers 502 'not found' as the E2B edge does."""
    sandbox = await sdk.AsyncSandbox.create(timeout=120, metadata=RUN)
    await sandbox.files.write("x.txt", "x")
    proxy.faults.add(route="GET /files", answer={"lose_sandbox": True}, sandbox=sandbox.sandbox_id)
    with pytest.raises(SandboxNotRunningException):
        await sandbox.files.read("x.txt")
    assert sandbox.sandbox_id not in _alive(upstream)


async def test_kill_fails_leaves_the_sandbox_running(proxy: FaultProxy, sdk: Any, upstream: Any) -> None:
    """kill_fails answers 500 on DELETE; the sandbox keeps running until a later kill."""
    sandbox = await sdk.AsyncSandbox.create(timeout=120, metadata=RUN)
    proxy.faults.add(route="DELETE /sandboxes/*", answer={"kill_fails": True}, times=1)
    with pytest.raises(SandboxException) as info:
        await sandbox.kill()
    assert info.value.status_code == 500
    assert sandbox.sandbox_id in _alive(upstream)
    assert await sandbox.kill() is True
    assert sandbox.sandbox_id not in _alive(upstream)


async def test_delay_passes_through(proxy: FaultProxy, sdk: Any) -> None:
    """A delay fault holds the request, then the real answer arrives."""
    sandbox = await sdk.AsyncSandbox.create(timeout=120, metadata=RUN)
    try:
        mark = proxy.ledger_mark()
        proxy.faults.add(route="POST /process.Process/Start", answer={"delay": 0.2})
        assert (await sandbox.commands.run("echo late")).stdout == "late\n"
        assert [e["detail"] for e in proxy.ledger(since=mark)] == ["f1: delay 0.2s"]
    finally:
        await sandbox.kill()


async def test_a_held_request_ends_when_its_sandbox_is_killed_through_the_proxy(
    proxy: FaultProxy, sdk: Any
) -> None:
    """A kill passing the proxy ends the hold of a request on that sandbox (E2B answers it then)."""
    import asyncio

    sandbox = await sdk.AsyncSandbox.create(timeout=120, metadata=RUN)
    mark = proxy.ledger_mark()
    proxy.faults.add(route="POST /process.Process/Start", answer={"delay": 600})
    command = asyncio.ensure_future(sandbox.commands.run("echo late", timeout=0))
    try:
        for _ in range(1500):  # 30 s at most for the hold to start
            if any(r["fired"] for r in proxy.faults.list()):
                break
            await asyncio.sleep(0.02)
        assert await sandbox.kill() is True
        async with asyncio.timeout(30):  # 600 s had the kill not ended the hold
            with pytest.raises(SandboxException):
                await command
        held = [e for e in proxy.ledger(since=mark) if "delay" in str(e["detail"])]
        assert [e["route"] for e in held] == ["POST /process.Process/Start"]
    finally:
        command.cancel()


async def test_drop_stream_cuts_the_command(proxy: FaultProxy, sdk: Any) -> None:
    """drop_stream cuts a command stream after its first event; the sandbox itself survives."""
    sandbox = await sdk.AsyncSandbox.create(timeout=120, metadata=RUN)
    try:
        proxy.faults.add(route="POST /process.Process/Start", answer={"drop_stream": True})
        with pytest.raises(SandboxException):
            await sandbox.commands.run("echo a; sleep 1; echo b")
        assert await sandbox.is_running()
        assert (await sandbox.commands.run("echo ok")).stdout == "ok\n"
    finally:
        await sandbox.kill()


async def test_rules_filter_by_sandbox_and_skip_after(proxy: FaultProxy, sdk: Any) -> None:
    """'sandbox' limits a rule to one sandbox and 'after' lets the first N matches pass."""
    first = await sdk.AsyncSandbox.create(timeout=120, metadata=RUN)
    second = await sdk.AsyncSandbox.create(timeout=120, metadata=RUN)
    try:
        proxy.faults.add(
            route="POST /process.Process/Start", answer={"status": 500}, sandbox=first.sandbox_id, after=1
        )
        assert (await second.commands.run("echo 2")).stdout == "2\n"
        assert (await first.commands.run("echo 1")).stdout == "1\n"  # skipped by after=1
        with pytest.raises(SandboxException):
            await first.commands.run("echo 1")
        assert (await first.commands.run("echo again")).stdout == "again\n"  # times=1 used up
        assert [r["fired"] for r in proxy.faults.rules()] == [1]
    finally:
        await first.kill()
        await second.kill()


def test_bad_rule_is_rejected_with_the_fix(proxy: FaultProxy) -> None:
    """A malformed fault answer is a FaultRuleError (a ConfigError) that shows a valid example."""
    with pytest.raises(ConfigError, match=r"exactly one of status.*e\.g\."):
        proxy.faults.add(route="*", answer={"status": 429, "lose_sandbox": True})
    proxy.faults.add(route="*", answer={"status": 503})
    proxy.faults.clear()
    assert proxy.faults.rules() == []


async def test_contains_matches_uploaded_file_content(proxy: FaultProxy, sdk: Any) -> None:
    """A rule with 'contains' fires on the upload carrying that text; other uploads pass intact."""
    from e2b.exceptions import NotEnoughSpaceException

    sandbox = await sdk.AsyncSandbox.create(timeout=120, metadata=RUN)
    try:
        proxy.faults.add(route="POST /files", answer={"status": 507}, contains="MAGIC-MARKER", times=None)
        with pytest.raises(NotEnoughSpaceException):
            await sandbox.files.write("a.txt", "payload with MAGIC-MARKER inside")
        await sandbox.files.write("b.txt", "plain payload")
        assert await sandbox.files.read("b.txt") == "plain payload"
    finally:
        await sandbox.kill()
