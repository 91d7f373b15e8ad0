"""Run one emulator in this process: bind, announce, serve, and kill every sandbox on the way out."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

import uvicorn

from pytest_e2b_env.emulator.app import EmulatorApp
from pytest_e2b_env.emulator.connections import bounded_protocol, connection_limits, raise_open_files_limit
from pytest_e2b_env.emulator.limits import Limits
from pytest_e2b_env.errors import EmulatorError
from pytest_e2b_env.settings import sdk_env

if TYPE_CHECKING:
    from pytest_e2b_env.emulator.isolation.api import Backend


def load_backend(
    isolation: str | None, limits: Limits | None = None, unprivileged: str | None = None
) -> Backend:
    """The isolation backend: the best available, or the level asked for, with the limits' quotas.

    ``unprivileged``: why this process, not root, could not enter a user namespace of its own.
    """
    from pytest_e2b_env.emulator.isolation import select_backend

    if isolation not in (None, "namespaces", "process"):
        raise EmulatorError(f"isolation={isolation!r} is not a level; use 'namespaces', 'process' or None")
    limits = limits if limits is not None else Limits()
    quotas = (limits.sandbox_memory_mb, limits.sandbox_disk_mb)
    return select_backend(
        force=isolation,  # type: ignore[arg-type]  # checked just above
        quotas=quotas,
        unprivileged=unprivileged,
    )


class _DropNoise(logging.Filter):
    """Hide uvicorn's complaint about responses the fault layer cuts on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "returned without completing response" not in record.getMessage()


class _Server(uvicorn.Server):
    """uvicorn without its own signal capture: :func:`serve` owns SIGINT/SIGTERM (exit 0)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def announce_lines(url: str, api_key: str) -> list[str]:
    """The shell-sourceable lines printed first."""
    return [f"{name}={value}" for name, value in sdk_env(url, api_key).items()]


def serve(
    sock: socket.socket,
    backend: Backend,
    api_key: str,
    out: TextIO = sys.stdout,
    on_ready: Callable[[], None] | None = None,
    limits: Limits | None = None,
    control_key: str | None = None,
) -> None:
    """Announce on ``out``, then serve until SIGINT/SIGTERM; every sandbox is killed before returning.

    ``control_key`` guards ``/_emulator/*`` (default: ``api_key``); it is never announced.
    """
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}"
    limits = limits if limits is not None else Limits()
    max_connections, idle_s = connection_limits(raise_open_files_limit(), limits)
    app = EmulatorApp(backend, api_key, limits, control_key=control_key)
    for line in announce_lines(url, api_key):
        print(line, file=out)
    print(f"# isolation={backend.level}: {backend.reason}", file=out)
    out.flush()
    logging.getLogger("uvicorn.error").addFilter(_DropNoise())
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        http=bounded_protocol(max_connections, idle_s),
        timeout_graceful_shutdown=2,
        timeout_keep_alive=30,
    )
    server = _Server(config)
    asyncio.run(_run(server, sock, app, on_ready))


async def _run(
    server: _Server, sock: socket.socket, app: EmulatorApp, on_ready: Callable[[], None] | None
) -> None:
    loop = asyncio.get_running_loop()
    stopping: list[asyncio.Task[Any]] = []

    def stop() -> None:
        if stopping:  # a second signal: give up on grace
            server.force_exit = True
            return
        stopping.append(asyncio.ensure_future(_stop(server, app)))

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop)
    if on_ready is not None:
        loop.call_soon(on_ready)
    try:
        await server.serve(sockets=[sock])
    finally:
        await app.registry.kill_all()
        app.registry.kill_all_blocking()
        close = getattr(app.backend, "close", None)
        if close is not None:
            close()


async def _stop(server: _Server, app: EmulatorApp) -> None:
    # sandboxes first, so open command streams end and the graceful shutdown is quick
    await app.registry.kill_all()
    server.should_exit = True
