"""run_code and the code contexts through the fault proxy, with the emulator upstream."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from e2b import TimeoutException

from pytest_e2b_env.proxy import FaultProxy

RUN = {"pytest_e2b_env_run": "proxy-ci-tests", "role": "test"}
T = 30
KILLED = "The sandbox was killed while the request was in progress"


@pytest.fixture
def ci_sdk(proxy: FaultProxy) -> Any:
    """An e2b_code_interpreter client bound to the proxy (no os.environ changes)."""
    import e2b_code_interpreter

    return e2b_code_interpreter.E2B(**proxy.sdk_opts())


def test_run_code_and_contexts_are_forwarded_and_ledgered(proxy: FaultProxy, ci_sdk: Any) -> None:
    """run_code streams through the proxy; every interpreter call has its op in the proxy's ledger."""
    sandbox = ci_sdk.Sandbox.create(timeout=120, metadata=RUN)
    try:
        mark = proxy.ledger_mark()
        seen: list[str] = []
        code = "print('hi')\n2 ** 10"
        execution = sandbox.run_code(code, on_stdout=lambda m: seen.append(m.line), timeout=T)
        assert (execution.text, seen) == ("1024", ["hi\n"])
        context = sandbox.create_code_context(cwd="/tmp")
        assert sandbox.run_code("import os; os.getcwd()", context=context, timeout=T).text == "/tmp"
        sandbox.restart_code_context(context)
        assert context.id in {c.id for c in sandbox.list_code_contexts()}
        sandbox.remove_code_context(context)
        ops = [e["op"] for e in proxy.ledger(since=mark) if e["sandbox_id"] == sandbox.sandbox_id]
        assert ops == [
            "run_code",
            "create_code_context",
            "run_code",
            "restart_code_context",
            "list_code_contexts",
            "remove_code_context",
        ]
    finally:
        sandbox.kill()


def test_lose_sandbox_mid_cell_through_the_proxy(proxy: FaultProxy, ci_sdk: Any, upstream: Any) -> None:
    """lose_sandbox on POST /execute kills the sandbox upstream mid-cell; the SDK says it was killed."""
    sandbox = ci_sdk.Sandbox.create(timeout=120, metadata=RUN)
    mark = proxy.ledger_mark()
    proxy.faults.add(route="POST /execute", sandbox=sandbox.sandbox_id, answer={"lose_sandbox": True})
    with pytest.raises(TimeoutException, match=KILLED):
        sandbox.run_code("import time\nprint('started', flush=True)\ntime.sleep(60)", timeout=T)
    assert sandbox.sandbox_id not in {s["sandbox_id"] for s in upstream.sandboxes()}
    details = [e["detail"] for e in proxy.ledger(since=mark) if e["op"] == "kill"]
    assert any(d.startswith("lost (fault)") for d in details)


def test_drop_and_502_through_the_proxy(proxy: FaultProxy, ci_sdk: Any) -> None:
    """drop_stream and a 502 on run_code reach the SDK as they would from E2B's edge."""
    sandbox = ci_sdk.Sandbox.create(timeout=120, metadata=RUN)
    try:
        proxy.faults.add(route="POST /execute", sandbox=sandbox.sandbox_id, answer={"drop_stream": True})
        with pytest.raises(httpx.RemoteProtocolError):
            sandbox.run_code("print('x')\n1", timeout=T)
        proxy.faults.add(route="POST /execute", sandbox=sandbox.sandbox_id, answer={"status": 502})
        with pytest.raises(TimeoutException, match="sandbox timeout"):
            sandbox.run_code("1", timeout=T)
        assert sandbox.run_code("3", timeout=T).text == "3"
    finally:
        sandbox.kill()


async def test_async_run_code_timeout_and_kill_through_the_proxy(proxy: FaultProxy, ci_sdk: Any) -> None:
    """Async run_code through the proxy: execution timeout, then a kill mid-cell, as upstream."""
    sandbox = await ci_sdk.AsyncSandbox.create(timeout=120, metadata=RUN)
    with pytest.raises(TimeoutException, match="Execution timed out"):
        await sandbox.run_code("import time; time.sleep(2)", timeout=0.5)
    cell = asyncio.ensure_future(sandbox.run_code("import time; time.sleep(60)", timeout=T))
    await asyncio.sleep(1)
    await sandbox.kill()
    with pytest.raises(TimeoutException, match="sandbox was killed"):
        await cell
