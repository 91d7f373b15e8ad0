"""The emulator under load: many descriptors, idle and half-sent connections, hundreds of sandboxes."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from pytest_e2b_env.emulator import Emulator


def _address(emu: Emulator) -> tuple[str, int]:
    parts = urlsplit(emu.url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


@contextlib.contextmanager
def _descriptors(count: int) -> Iterator[None]:
    """Let this process hold ``count`` more descriptors for the block (skip when the host forbids it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = count + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextlib.contextmanager
def _idle_connections(emu: Emulator, count: int) -> Iterator[list[socket.socket]]:
    """``count`` open TCP connections to the emulator that never send a byte."""
    conns: list[socket.socket] = []
    try:
        for _ in range(count):
            conns.append(socket.create_connection(_address(emu), timeout=10))
        yield conns
    finally:
        for conn in conns:
            conn.close()


def _closed_by_server(conn: socket.socket) -> bool:
    conn.setblocking(False)
    try:
        return conn.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


def _dedicated(limits: dict[str, float]) -> Iterator[Emulator]:
    with Emulator(limits=limits) as emu:
        yield emu


@pytest.fixture(scope="module")
def capped_emu() -> Iterator[Emulator]:
    """An emulator that keeps at most 32 connections open (idle timeout left at its default)."""
    yield from _dedicated({"max_connections": 32})


@pytest.fixture(scope="module")
def impatient_emu() -> Iterator[Emulator]:
    """An emulator that closes connections idle for one second."""
    yield from _dedicated({"idle_seconds": 1.0})


def test_sandboxes_and_commands_work_with_1100_connections_open(emu: Emulator, opts: dict[str, str]) -> None:
    """1,100 idle connections push the emulator's descriptors past 1024; create and run still work."""
    from e2b import Sandbox

    with _descriptors(1100), _idle_connections(emu, 1100):
        sandbox = Sandbox.create(timeout=60, **opts)
        try:
            assert sandbox.commands.run("echo past-1024").stdout == "past-1024\n"
        finally:
            sandbox.kill()


def test_idle_connections_give_way_to_new_clients(capped_emu: Emulator) -> None:
    """Past the connection cap the longest-idle connections are closed; real clients keep working."""
    from e2b import Sandbox

    with _idle_connections(capped_emu, 100) as conns:
        sandbox = Sandbox.create(timeout=60, **capped_emu.sdk_opts())
        try:
            for i in range(3):
                assert sandbox.commands.run(f"echo {i}").stdout == f"{i}\n"
        finally:
            sandbox.kill()
        closed = sum(_closed_by_server(c) for c in conns)
    assert closed >= 100 - 32


def test_half_sent_request_does_not_hold_a_connection(impatient_emu: Emulator) -> None:
    """A client trickling header bytes without ever finishing the request is disconnected when idle."""
    with socket.create_connection(_address(impatient_emu), timeout=10) as conn:
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        deadline = time.monotonic() + 20  # a bound, far above the 1 s idle limit
        closed = False
        while not closed and time.monotonic() < deadline:
            try:
                conn.sendall(b"X-Slow: 1\r\n")
            except OSError:
                closed = True
                break
            time.sleep(0.2)
            closed = _closed_by_server(conn)
            conn.setblocking(True)
        assert closed


@pytest.mark.full
def test_connection_with_a_request_in_flight_is_kept(impatient_emu: Emulator) -> None:
    """A command streaming longer than the idle limit is not cut: only idle connections are closed."""
    from e2b import Sandbox

    sandbox = Sandbox.create(timeout=60, **impatient_emu.sdk_opts())
    try:
        result = sandbox.commands.run("sleep 2.5; echo done", timeout=30)
        assert result.stdout == "done\n"
    finally:
        sandbox.kill()


@pytest.mark.slow
def test_200_sandboxes_alive_at_once_each_running_a_command(
    emu: Emulator, opts: dict[str, str], run_id: str
) -> None:
    """200 sandboxes alive together (default internet setting), each runs a command: 0 errors."""
    from e2b import AsyncSandbox

    count = 200

    async def scenario() -> list[str]:
        errors: list[str] = []
        sandboxes: list[AsyncSandbox] = []
        gate = asyncio.Semaphore(32)  # the SDK client's pool, not the emulator, is the bottleneck

        async def create(index: int) -> None:
            async with gate:
                try:
                    sandboxes.append(
                        await AsyncSandbox.create(timeout=300, metadata={"test_run": run_id}, **opts)
                    )
                except Exception as exc:
                    errors.append(f"create {index}: {type(exc).__name__}: {exc}")

        async def run(sandbox: AsyncSandbox, index: int) -> None:
            async with gate:
                try:
                    out = (await sandbox.commands.run(f"echo {index}", timeout=120)).stdout
                    if out != f"{index}\n":
                        errors.append(f"run {index}: stdout {out!r}")
                except Exception as exc:
                    errors.append(f"run {index}: {type(exc).__name__}: {exc}")

        try:
            await asyncio.wait_for(asyncio.gather(*(create(i) for i in range(count))), 600)
            alive = len(mine())
            if alive < count:
                errors.append(f"only {alive} sandboxes alive at once")
            await asyncio.wait_for(asyncio.gather(*(run(s, i) for i, s in enumerate(sandboxes))), 600)
        finally:
            await asyncio.gather(*(s.kill() for s in sandboxes), return_exceptions=True)
        return errors

    def mine() -> list[dict[str, object]]:
        return [s for s in emu.sandboxes() if s["metadata"].get("test_run") == run_id]

    errors = asyncio.run(scenario())
    assert errors == []
    assert mine() == []


def test_concurrent_creates_with_one_idempotency_key_make_one_sandbox(
    opts: dict[str, str], run_id: str
) -> None:
    """Creates start off the event loop; concurrent retries with one idempotency key still get one sandbox."""
    from e2b import AsyncSandbox

    key = f"idem-{run_id}"

    async def scenario() -> list[str]:
        made = await asyncio.gather(
            *(
                AsyncSandbox.create(idempotency_key=key, metadata={"test_run": run_id}, **opts)
                for _ in range(4)
            )
        )
        try:
            return [s.sandbox_id for s in made]
        finally:
            await asyncio.gather(*(s.kill() for s in made), return_exceptions=True)

    ids = asyncio.run(scenario())
    assert len(set(ids)) == 1
