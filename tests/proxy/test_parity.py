"""The proxy's ledger and faults mirror the emulator's, so the plugin treats both as targets."""

from __future__ import annotations

import re
from typing import Any

import e2b
from e2b.exceptions import SandboxNotRunningException

from pytest_e2b_env.proxy import FaultProxy


def _label(detail: str) -> str:
    """A detail without rule ids or the proxy's note on its upstream kill."""
    return re.sub(r"^f\d+: ", "", detail).split(": ")[0]


def _scenario(target: Any, opts: dict[str, Any]) -> list[tuple[Any, ...]]:
    """One fixed SDK session under two faults; returns the target's ledger, ids normalised."""
    client = e2b.E2B(**opts)
    mark = target.ledger_mark()
    target.faults.add(route="POST /v2/sandboxes", answer={"status": 429, "retry_after": 0}, times=1)
    target.faults.add(route="POST /process.Process/Start", answer={"lose_sandbox": True}, contains="sleep 9")
    first = client.Sandbox.create(timeout=120, metadata={"pytest_e2b_env_run": "parity"})
    first.commands.run("echo hi")
    first.files.write("note.txt", "hello")
    assert first.files.read("note.txt") == "hello"
    first.kill()
    second = client.Sandbox.create(timeout=120, metadata={"pytest_e2b_env_run": "parity"})
    try:
        second.commands.run("sleep 9")
    except SandboxNotRunningException:
        pass
    else:  # pragma: no cover - the fault must fire
        raise AssertionError("lose_sandbox did not fire")
    target.faults.clear()
    names = {first.sandbox_id: "A", second.sandbox_id: "B"}
    return [
        (e["op"], e["route"], e["status"], names.get(e["sandbox_id"], e["sandbox_id"]), _label(e["detail"]))
        for e in target.ledger(since=mark)
    ]


def test_same_session_same_ledger(upstream: Any, proxy: FaultProxy) -> None:
    """The same session under the same faults gives the same ledger on the emulator and the proxy."""
    direct = _scenario(
        upstream, {"api_key": upstream.api_key, "api_url": upstream.url, "sandbox_url": upstream.url}
    )
    proxied = _scenario(proxy, proxy.sdk_opts())
    assert proxied == direct
    assert ("fault", "POST /v2/sandboxes", 429, None, "status 429") in proxied
    assert ("kill", "", None, "B", "lost (fault)") in proxied
