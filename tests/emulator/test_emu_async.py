"""The same contract through AsyncSandbox: lifecycle, commands, timeouts, files, loss mid-command."""

from __future__ import annotations

from typing import Any

import pytest
from e2b import (
    AsyncSandbox,
    CommandExitException,
    FileNotFoundException,
    SandboxNotFoundException,
    SandboxNotRunningException,
    TimeoutException,
)


async def test_async_run_with_callbacks(asbx: Any) -> None:
    """Async run() streams to sync and async callbacks and returns the result."""
    seen: list[str] = []

    async def on_err(line: str) -> None:
        seen.append("err:" + line)

    result = await asbx.commands.run(
        "echo a; echo b >&2", on_stdout=lambda s: seen.append("out:" + s), on_stderr=on_err
    )
    assert (result.stdout, result.stderr) == ("a\n", "b\n")
    assert sorted(seen) == ["err:b\n", "out:a\n"]


async def test_async_exit_code_raises(asbx: Any) -> None:
    """A non-zero exit raises CommandExitException in the async SDK too."""
    with pytest.raises(CommandExitException) as caught:
        await asbx.commands.run("exit 3")
    assert caught.value.exit_code == 3


async def test_async_timeout_is_timeout_exception(asbx: Any) -> None:
    """Async commands.run(timeout=1) raises TimeoutException (no end event beats the deadline)."""
    with pytest.raises(TimeoutException):
        await asbx.commands.run("sleep 30", timeout=1)


async def test_async_background_kill_and_stdin(asbx: Any) -> None:
    """Async background handles: send_stdin/close_stdin then wait; kill gives exit -1."""
    handle = await asbx.commands.run("cat", background=True, stdin=True)
    await asbx.commands.send_stdin(handle.pid, "hey\n")
    await asbx.commands.close_stdin(handle.pid)
    assert (await handle.wait()).stdout == "hey\n"
    sleeper = await asbx.commands.run("sleep 30", background=True)
    assert await sleeper.kill() is True
    with pytest.raises(CommandExitException) as caught:
        await sleeper.wait()
    assert caught.value.exit_code == -1


async def test_async_files_round_trip(asbx: Any) -> None:
    """Async files write/read/exists/remove behave as the sync ones."""
    await asbx.files.write("a.txt", "1")
    assert await asbx.files.read("a.txt") == "1"
    assert await asbx.files.exists("a.txt") is True
    await asbx.files.remove("a.txt")
    with pytest.raises(FileNotFoundException):
        await asbx.files.read("a.txt")


async def test_async_lifecycle_and_kill_mid_command(opts: dict[str, str]) -> None:
    """Killing a sandbox ends a waiting handle with SandboxNotRunningException; REST then says not found."""
    sbx = await AsyncSandbox.create(timeout=60, **opts)
    assert await sbx.is_running() is True
    info = await sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id
    again = await AsyncSandbox.connect(sbx.sandbox_id, **opts)
    handle = await again.commands.run("sleep 30", background=True)
    assert await sbx.kill() is True
    with pytest.raises(SandboxNotRunningException):
        await handle.wait()
    assert await sbx.kill() is False
    assert await sbx.is_running() is False
    with pytest.raises(SandboxNotFoundException):
        await sbx.get_info()
