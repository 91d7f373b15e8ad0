"""Connection limits of the emulator's HTTP server: open files, idle connections, a connection cap.

Anyone who reaches the port can open connections without a key. So the server:

* raises its own RLIMIT_NOFILE soft limit to the hard limit (nothing in the emulator uses
  ``select()``, so descriptors above 1024 are fine);
* closes a connection that has no request in flight after ``idle_s`` seconds (``Limits``), counted from
  its opening or from its last answer (partial headers do not keep it open: only a complete
  request line and headers make it busy);
* at ``max_connections`` open connections, closes the connection idle for the longest to make
  room for each new one. A connection with a request in flight is never closed for room, so
  idle or half-sent connections cannot starve clients that send requests.
"""

from __future__ import annotations

import asyncio
import resource
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.h11_impl import H11Protocol

if TYPE_CHECKING:
    from pytest_e2b_env.emulator.limits import Limits


def raise_open_files_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to the hard limit; return the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:  # the kernel refuses a soft limit above fs.nr_open
        try:
            with open("/proc/sys/fs/nr_open") as fh:
                hard = int(fh.read())
        except OSError:
            return int(soft)
    if soft != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return int(soft)


def connection_limits(open_files: int, limits: Limits) -> tuple[int, float]:
    """``(max_connections, idle_s)`` from the limits, within what ``open_files`` descriptors allow."""
    return min(limits.max_connections, max(16, open_files // 4)), limits.idle_seconds


def bounded_protocol(max_connections: int, idle_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the idle timeout and the connection cap described above."""

    class BoundedH11Protocol(H11Protocol):
        """One HTTP connection that gives way when idle."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._idle_timer: asyncio.TimerHandle | None = None
            self.idle_since = 0.0

        def busy(self) -> bool:
            """A request is in flight (its headers arrived and its answer is not complete)."""
            return self.cycle is not None and not self.cycle.response_complete

        def _idle(self) -> None:
            self.idle_since = self.loop.time()
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            self._idle_timer = self.loop.call_later(idle_s, self._idle_expired)

        def _idle_expired(self) -> None:
            self._idle_timer = None
            if not self.busy():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._idle()
            if len(self.connections) > max_connections:
                self._make_room()

        def _make_room(self) -> None:
            idle = [
                c
                for c in self.connections
                if c is not self
                and isinstance(c, BoundedH11Protocol)
                and not c.busy()
                and not c.transport.is_closing()
            ]
            victim = min(idle, key=lambda c: c.idle_since) if idle else self
            victim.transport.close()

        def handle_events(self) -> None:
            super().handle_events()
            if self.busy() and self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None

        def on_response_complete(self) -> None:
            super().on_response_complete()  # may start a pipelined request at once
            if not self.transport.is_closing() and not self.busy():
                self._idle()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None
            super().connection_lost(exc)

    return BoundedH11Protocol
