"""Serve an ASGI app with uvicorn on a free loopback port, in a background thread."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import uvicorn

from pytest_e2b_env.errors import InfrastructureError

T = TypeVar("T")


class _DropsDeliberateCuts(logging.Filter):
    """Drops uvicorn's error line for an answer ended without completing it.

    The fault proxy ends answers that way on purpose (a lost answer, a body the upstream cut), and
    the client sees the cut itself; a line per fault on stderr only buries the real errors.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "ASGI callable returned without completing response."


_CUT_FILTER = _DropsDeliberateCuts()


class _Server(uvicorn.Server):
    """uvicorn's server, announcing the end of startup on a thread-safe event."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        finally:
            self.ready.set()


class ThreadedServer:
    """uvicorn in a daemon thread; ``start()`` returns once the socket accepts connections.

    ``start()`` binds the socket itself before uvicorn runs, so the port is known at once
    and no other process can take it between choosing and binding. Nothing is bound before
    ``start()``, so an object that is never started holds no resources.
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, name: str = "server") -> None:
        self.app = app
        self.host = host
        self.name = name
        self.port = port
        self._sock: socket.socket | None = None
        config = uvicorn.Config(
            app,
            lifespan="off",
            log_config=None,
            log_level="warning",
            access_log=False,
            # Long-lived command streams must not be cut by uvicorn's own keep-alive timer.
            timeout_keep_alive=75,
            timeout_graceful_shutdown=3,
        )
        self._server = _Server(config)
        logging.getLogger("uvicorn.error").addFilter(_CUT_FILTER)  # idempotent: one filter object
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server."""
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 15.0) -> None:
        """Start serving; raise InfrastructureError if uvicorn is not up within ``timeout`` seconds."""
        # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on accepted sockets whose proto is
        # IPPROTO_TCP, and a proto-0 socket costs ~40 ms per request (Nagle + delayed ACK).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise InfrastructureError(
                f"{self.name} cannot listen on {self.host}:{self.port}: {exc}"
            ) from None
        self._sock = sock
        self.port = sock.getsockname()[1]

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._server.serve(sockets=[sock]))
            finally:
                self._server.ready.set()  # a failed start must not leave start() waiting
                loop.close()

        self._thread = threading.Thread(target=run, name=f"pytest-e2b-env-{self.name}", daemon=True)
        self._thread.start()
        if not self._server.ready.wait(timeout) or not self._server.started:
            self.stop()
            raise InfrastructureError(f"{self.name} did not start on {self.url} within {timeout} s")

    def call(self, factory: Callable[[], Coroutine[Any, Any, T]], timeout: float = 30.0) -> T:
        """Run a coroutine on the server's loop from another thread and return its result."""
        if self._loop is None:
            raise InfrastructureError(f"{self.name} is not running")
        return asyncio.run_coroutine_threadsafe(factory(), self._loop).result(timeout)

    def stop(self) -> None:
        """Stop serving and join the thread (idempotent)."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
