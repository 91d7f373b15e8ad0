"""The real e2b SDK works through the fault proxy exactly as against its upstream."""

from __future__ import annotations

import asyncio
import hashlib
import os
from typing import Any

import pytest
from e2b.exceptions import SandboxNotFoundException, TimeoutException

from pytest_e2b_env.proxy import FaultProxy

RUN = {"pytest_e2b_env_run": "proxy-tests", "role": "test"}


async def test_create_run_kill_round_trip(proxy: FaultProxy, sdk: Any, upstream: Any) -> None:
    """Create, run and kill through the proxy reach the upstream and land in the ledger."""
    mark = proxy.ledger_mark()
    sandbox = await sdk.AsyncSandbox.create(timeout=120, metadata=RUN)
    alive = {s["sandbox_id"] for s in upstream.sandboxes()}
    assert sandbox.sandbox_id in alive
    result = await sandbox.commands.run("echo hello; echo oops >&2; exit 0")
    assert (result.stdout, result.stderr, result.exit_code) == ("hello\n", "oops\n", 0)
    seen = {s["sandbox_id"]: s for s in proxy.sandboxes(metadata=RUN)}
    assert seen[sandbox.sandbox_id]["metadata"] == RUN
    assert await sandbox.kill() is True
    assert sandbox.sandbox_id not in {s["sandbox_id"] for s in upstream.sandboxes()}
    assert sandbox.sandbox_id not in {s["sandbox_id"] for s in proxy.sandboxes()}
    ops = [(e["op"], e["sandbox_id"], e["status"]) for e in proxy.ledger(since=mark)]
    sid = sandbox.sandbox_id
    assert ops == [("create", sid, 201), ("run", sid, 200), ("kill", sid, 204)]
    assert all(e["detail"] == "" for e in proxy.ledger(since=mark))


async def test_output_streams_through_without_buffering(proxy: FaultProxy, sdk: Any) -> None:
    """A command's first line reaches the SDK while the command is still running."""
    sandbox = await sdk.AsyncSandbox.create(timeout=120, metadata=RUN)
    try:
        ready = asyncio.Event()
        lines: list[str] = []

        def on_stdout(chunk: str) -> None:
            lines.append(chunk)
            if "ready" in chunk:
                ready.set()

        # The command only finishes after the test has *seen* "ready": a buffering proxy
        # would hold "ready" back until the end, and the wait below would time out.
        handle = await sandbox.commands.run(
            "echo ready; while [ ! -f go-signal ]; do sleep 0.05; done; echo done",
            background=True,
            on_stdout=on_stdout,
            timeout=60,
        )
        await asyncio.wait_for(ready.wait(), 30)
        await sandbox.files.write("go-signal", "1")
        result = await handle.wait()
        assert result.exit_code == 0
        assert "".join(lines) == "ready\ndone\n"
    finally:
        await sandbox.kill()


async def test_big_file_round_trip(proxy: FaultProxy, sdk: Any) -> None:
    """An 8 MiB binary file uploads and downloads through the proxy byte for byte."""
    data = os.urandom(8 * 1024 * 1024)
    sandbox = await sdk.AsyncSandbox.create(timeout=120, metadata=RUN)
    try:
        await sandbox.files.write("big.bin", data)
        listing = await sandbox.commands.run("sha256sum big.bin")
        assert listing.stdout.split()[0] == hashlib.sha256(data).hexdigest()
        back = await sandbox.files.read("big.bin", format="bytes")
        assert bytes(back) == data
    finally:
        await sandbox.kill()


async def test_upstream_errors_pass_through(proxy: FaultProxy, sdk: Any) -> None:
    """The upstream's own error answers reach the SDK unchanged (404 -> SandboxNotFound)."""
    with pytest.raises(SandboxNotFoundException):
        await sdk.AsyncSandbox.get_info("no-such-sandbox")
    assert await sdk.AsyncSandbox.kill("no-such-sandbox") is False


async def test_command_timeout_cancels_upstream_stream(proxy: FaultProxy, sdk: Any) -> None:
    """A command timeout in the SDK ends the command upstream; the sandbox stays usable."""
    sandbox = await sdk.AsyncSandbox.create(timeout=120, metadata=RUN)
    try:
        with pytest.raises(TimeoutException):
            await sandbox.commands.run("sleep 30", timeout=1)
        for _ in range(50):  # the upstream notices the dropped stream asynchronously
            if not [p for p in await sandbox.commands.list() if "sleep 30" in " ".join(p.args)]:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("'sleep 30' still runs upstream after the SDK timed out")
        assert (await sandbox.commands.run("echo still-here")).stdout == "still-here\n"
    finally:
        await sandbox.kill()


def test_sync_sdk_and_stdin(proxy: FaultProxy, sdk: Any) -> None:
    """The sync SDK works through the proxy too, including stdin to a background command."""
    sandbox = sdk.Sandbox.create(timeout=120, metadata=RUN)
    try:
        handle = sandbox.commands.run("head -n1", background=True, stdin=True)
        sandbox.commands.send_stdin(handle.pid, "ping\n")
        assert handle.wait().stdout == "ping\n"
        assert sandbox.files.exists("/tmp") is True
    finally:
        sandbox.kill()


def test_sandboxes_report_internet_access(proxy: FaultProxy, sdk: Any, upstream: Any) -> None:
    """proxy.sandboxes() tells which sandboxes have internet off, whoever created them."""
    import e2b

    offline = sdk.Sandbox.create(timeout=120, metadata=RUN, allow_internet_access=False)
    online = sdk.Sandbox.create(timeout=120, metadata=RUN)
    direct = e2b.Sandbox.create(
        timeout=120,
        metadata=RUN,
        allow_internet_access=False,
        api_key=upstream.api_key,
        api_url=upstream.url,
        sandbox_url=upstream.url,
    )
    try:
        rows = {s["sandbox_id"]: s["allow_internet_access"] for s in proxy.sandboxes(metadata=RUN)}
        assert rows[offline.sandbox_id] is False
        assert rows[online.sandbox_id] is True
        assert rows[direct.sandbox_id] is False  # not seen by the proxy: asked of get_info
    finally:
        for sandbox in (offline, online, direct):
            sandbox.kill()


async def test_concurrent_streams_stay_apart(proxy: FaultProxy, sdk: Any) -> None:
    """Twenty commands streaming at once through the proxy each get exactly their own output."""
    sandboxes = [await sdk.AsyncSandbox.create(timeout=120, metadata=RUN) for _ in range(2)]
    try:
        runs = [
            sandboxes[i % 2].commands.run(f"for j in 1 2 3; do echo cmd{i}-$j; sleep 0.05; done", timeout=60)
            for i in range(20)
        ]
        results = await asyncio.gather(*runs)
        for i, result in enumerate(results):
            assert result.stdout == "".join(f"cmd{i}-{j}\n" for j in (1, 2, 3))
    finally:
        for sandbox in sandboxes:
            await sandbox.kill()


async def test_reconnect_to_a_running_command(proxy: FaultProxy, sdk: Any) -> None:
    """commands.connect (a second server stream on a live process) works through the proxy."""
    sandbox = await sdk.AsyncSandbox.create(timeout=120, metadata=RUN)
    try:
        handle = await sandbox.commands.run(
            "while [ ! -f go-signal ]; do sleep 0.05; done; echo finished", background=True, timeout=60
        )
        await handle.disconnect()
        again = await sandbox.commands.connect(handle.pid, timeout=60)
        await sandbox.files.write("go-signal", "1")
        result = await again.wait()
        assert (result.exit_code, result.stdout) == (0, "finished\n")
    finally:
        await sandbox.kill()
