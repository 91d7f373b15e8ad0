"""The code-interpreter port through the real SDK's AsyncSandbox: the same wire, async callers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from e2b import NotFoundException, SandboxException, TimeoutException
from e2b_code_interpreter import AsyncSandbox

T = 30


@pytest.fixture
async def aci(opts: dict[str, str], run_id: str) -> AsyncIterator[AsyncSandbox]:
    """An async code-interpreter sandbox, killed after the test."""
    sandbox = await AsyncSandbox.create(timeout=120, metadata={"test_run": run_id}, **opts)
    yield sandbox
    await sandbox.kill()


async def test_async_run_code_result_state_and_logs(aci: AsyncSandbox) -> None:
    """AsyncSandbox.run_code returns the main result, keeps state and collects logs."""
    await aci.run_code("x = 20", timeout=T)
    execution = await aci.run_code("print('hi')\nx + 1", timeout=T)
    assert (execution.text, execution.logs.stdout, execution.execution_count) == ("21", ["hi\n"], 2)


async def test_async_callbacks_may_be_coroutines(aci: AsyncSandbox) -> None:
    """Async on_stdout / on_result / on_error callbacks are awaited in message order."""
    seen: list[Any] = []

    async def record(item: Any) -> None:
        seen.append(getattr(item, "line", None) or getattr(item, "text", None) or item.name)

    await aci.run_code("print('a')\n9", on_stdout=record, on_result=record, timeout=T)
    await aci.run_code("undefined_name", on_error=record, timeout=T)
    assert seen == ["a\n", "9", "NameError"]


async def test_async_error_and_crash(aci: AsyncSandbox) -> None:
    """Errors carry name and value; a crashed kernel is E2B's ContextRestarting."""
    execution = await aci.run_code("int('x')", timeout=T)
    assert execution.error is not None
    assert execution.error.name == "ValueError"
    crashed = await aci.run_code("import os; os.kill(os.getpid(), 9)", timeout=T)
    assert crashed.error is not None
    assert crashed.error.name == "ContextRestarting"


async def test_async_contexts(aci: AsyncSandbox) -> None:
    """Async create/list/restart/remove of contexts, each with its own globals."""
    context = await aci.create_code_context(cwd="/tmp", language="python")
    await aci.run_code("mine = 1", context=context, timeout=T)
    assert (await aci.run_code("'mine' in dir()", timeout=T)).text == "False"
    assert context.id in {c.id for c in await aci.list_code_contexts()}
    await aci.restart_code_context(context.id)
    assert (await aci.run_code("'mine' in dir()", context=context, timeout=T)).text == "False"
    await aci.remove_code_context(context)
    with pytest.raises(NotFoundException):
        await aci.run_code("1", context=context, timeout=T)


async def test_async_two_contexts_run_at_once(aci: AsyncSandbox) -> None:
    """Cells in two contexts at once both finish; cells queued in one context each get their own count."""
    other = await aci.create_code_context()
    slow = "import time\ntime.sleep(1)\n'done'"
    results = await asyncio.gather(
        aci.run_code(slow, timeout=T), aci.run_code(slow, context=other, timeout=T)
    )
    assert [r.text for r in results] == ["done", "done"]
    counts = await asyncio.gather(*(aci.run_code("1", timeout=T) for _ in range(3)))
    assert sorted(c.execution_count or 0 for c in counts) == [2, 3, 4]


async def test_async_timeouts_and_language(aci: AsyncSandbox) -> None:
    """Execution timeout and an unsupported language raise the SDK's own exceptions."""
    with pytest.raises(TimeoutException, match="Execution timed out"):
        await aci.run_code("import time; time.sleep(3)", timeout=0.5)
    with pytest.raises(SandboxException, match="language 'java'"):
        await aci.run_code("1", language="java", timeout=T)


async def test_async_kill_mid_cell(aci: AsyncSandbox) -> None:
    """Killing the sandbox while an async run_code waits ends it with the SDK's killed error."""
    cell = asyncio.ensure_future(aci.run_code("import time; print(1, flush=True); time.sleep(60)", timeout=T))
    await asyncio.sleep(1)
    await aci.kill()
    with pytest.raises(TimeoutException, match="sandbox was killed"):
        await cell


async def test_async_restart_ends_a_running_cell(aci: AsyncSandbox) -> None:
    """Restarting a context mid-cell ends the cell with UnexpectedEndOfExecution; the context stays usable."""
    context = await aci.create_code_context()
    started = asyncio.Event()
    cell = asyncio.ensure_future(
        aci.run_code(
            "import time\nprint('go', flush=True)\ntime.sleep(60)",
            context=context,
            on_stdout=lambda _m: started.set(),
            timeout=T,
        )
    )
    await asyncio.wait_for(started.wait(), T)
    await aci.restart_code_context(context)
    execution = await cell
    assert execution.error is not None
    assert execution.error.name == "UnexpectedEndOfExecution"
    assert (await aci.run_code("1 + 1", context=context, timeout=T)).text == "2"
