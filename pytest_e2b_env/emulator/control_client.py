"""The HTTP client of the control API: keep-alive connections, reused from call to call.

A catalog run makes about 2,500 control calls (a ledger mark around every subject call, each
case's fault rules and watchers, the ledger and sandbox reads). Over a fresh TCP connection a
call costs the controller and the emulator 0.83 ms of CPU together, over a kept one 0.57 ms
(``scripts/bench_control.py``).

A connection is used by one call at a time: a call takes an idle one (or opens one) and gives
it back once the answer is read whole, so threads never share one. The server may close an idle
connection at any time (its idle timeout, or to make room under a connection flood:
``emulator/connections.py``), and it never closes one with a request in flight. So a reused
connection that fails before any answer arrives was closed while idle, and the call is made once
more on a fresh one: the server never saw the first attempt. Everything else fails the call.
"""

from __future__ import annotations

import http.client
import threading
import weakref
from urllib.parse import urlsplit

#: Idle connections kept per client; calls beyond that open (and then close) their own.
MAX_IDLE = 4

# What a kept connection the server already closed raises before any answer arrives.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, ConnectionAbortedError, BrokenPipeError)


def _close_all(idle: list[http.client.HTTPConnection]) -> None:
    while idle:
        idle.pop().close()


class ControlClient:
    """``request(method, path, body, headers) -> (status, body)`` against one server's base URL."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            raise ValueError(f"control URL {url!r} is not http://host:port")
        self._host, self._port, self._timeout = parts.hostname, parts.port, timeout
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        # a client dropped without close() still closes its sockets (no ResourceWarning)
        self._finalizer = weakref.finalize(self, _close_all, self._idle)

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        """Send one request; the status and the whole body. ``OSError`` when no answer came."""
        conn, reused = self._take()
        try:
            try:
                response = self._ask(conn, method, path, body, headers or {})
            except _STALE:
                if not reused:
                    raise
                conn.close()
                conn = self._fresh()
                response = self._ask(conn, method, path, body, headers or {})
            data = response.read()
        except BaseException:
            conn.close()
            raise
        self._give_back(conn, keep=not response.will_close)
        return response.status, data

    def close(self) -> None:
        """Close the idle connections (a later call opens a new one)."""
        with self._lock:
            _close_all(self._idle)

    @staticmethod
    def _ask(
        conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> http.client.HTTPResponse:
        """Send the request and read the answer's status line and headers (not its body)."""
        conn.request(method, path, body=body, headers=headers)
        return conn.getresponse()

    def _fresh(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._fresh(), False

    def _give_back(self, conn: http.client.HTTPConnection, keep: bool) -> None:
        if keep:
            with self._lock:
                if len(self._idle) < MAX_IDLE:
                    self._idle.append(conn)
                    return
        conn.close()
