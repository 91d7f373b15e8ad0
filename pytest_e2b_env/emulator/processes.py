"""One command running in a sandbox, as envd tracks it: output events, exit, subscribers.

envd semantics copied here: output in chunks of at most 32 KiB; when the leader exits the
pipes are closed and ``end`` is sent at once, even if a daemon still holds stdout; a killed
sandbox never sends ``end``; the command deadline kills the leader and ends the stream with
DEADLINE_EXCEEDED instead of ``end``.

Output is bounded: once a subscriber (or the backlog kept for the Start stream) holds
``output_limit`` bytes it has not consumed, the pipes stop being read until it is down to
half, so a command whose output nobody reads blocks on write as it would on a real pipe,
instead of growing the emulator's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.process import process_pb as P
from protobuf import Oneof

from pytest_e2b_env.standalone.linux import readable


def _oneof(name: str, value: Any) -> Any:
    # protobuf-py types each oneof with Literal field names; the names here are right by construction
    return Oneof(name, value)


CHUNK = 32 * 1024
KEEPALIVE_S = 50.0  # envd's keepalive period on streams
OUTPUT_LIMIT = 4 << 20  # default unconsumed output per subscriber (see the module doc)

# markers pushed to subscribers besides real events
LOST = "lost"  # the sandbox died: the stream is cut (UNAVAILABLE), no end event
END = "end"


def _data_event(name: str, chunk: bytes) -> P.ProcessEvent:
    return P.ProcessEvent(event=_oneof("data", P.ProcessEvent.DataEvent(output=_oneof(name, chunk))))


def end_event(returncode: int) -> P.ProcessEvent:
    """envd's end event for a Go ``cmd.Wait()`` result (exit code, or -1 and ``signal: killed``)."""
    if returncode < 0:
        status = f"signal: {signal.strsignal(-returncode) or -returncode}".lower()
        end = P.ProcessEvent.EndEvent(exit_code=-1, exited=False, status=status, error=status)
    elif returncode:
        status = f"exit status {returncode}"
        end = P.ProcessEvent.EndEvent(exit_code=returncode, exited=True, status=status, error=status)
    else:
        end = P.ProcessEvent.EndEvent(exit_code=0, exited=True, status="exit status 0")
    return P.ProcessEvent(event=_oneof("end", end))


def _pidfd_signalled(pidfd: int) -> bool:
    """Whether the process behind ``pidfd`` has exited (the pidfd polls readable)."""
    return readable(pidfd)


class Proc:
    """A running command: its Popen, config, tag, and the event fan-out to stream subscribers."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        config: P.ProcessConfig,
        tag: str | None,
        is_alive: Callable[[], bool],
        on_exit: Callable[[Proc], None],
        output_limit: int = OUTPUT_LIMIT,
    ) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.config = config
        self.tag = tag
        self.start = P.ProcessEvent(event=_oneof("start", P.ProcessEvent.StartEvent(pid=popen.pid)))
        self.done = False
        self.timed_out = False
        self.final: Any = None  # the end event or LOST, once known
        # each subscriber's queue -> output bytes queued there and not yet consumed
        self._subscribers: dict[asyncio.Queue[Any], int] = {}
        # events before the Start stream subscribes are kept for it; Connect gets live events only
        self._backlog: list[Any] | None = []
        self._backlog_bytes = 0
        self._output_limit = output_limit
        self._paused = False  # the pipes are not being read (back-pressure)
        self._is_alive = is_alive  # is the sandbox still running (decides end vs cut stream)
        self._on_exit = on_exit
        self._loop = asyncio.get_running_loop()
        self._open_fds: dict[int, str] = {}
        self._pidfd: int | None = None
        self._poll_handle: asyncio.TimerHandle | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._watch()

    # ------------------------------------------------------------------ output and exit
    def _watch(self) -> None:
        for name, pipe in (("stdout", self.popen.stdout), ("stderr", self.popen.stderr)):
            if pipe is None:
                continue
            fd = pipe.fileno()
            os.set_blocking(fd, False)
            self._open_fds[fd] = name
            self._loop.add_reader(fd, self._readable, fd)
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except OSError:  # already gone, or no pidfd support: fall back to polling
            self._pidfd = None
        if self._pidfd is not None:
            self._loop.add_reader(self._pidfd, self._check_exit)
        self._check_exit()

    def _readable(self, fd: int) -> None:
        try:
            chunk = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self._publish(_data_event(self._open_fds[fd], chunk), len(chunk))
        else:
            self._close_fd(fd)

    def _close_fd(self, fd: int) -> None:
        if self._open_fds.pop(fd, None) is not None:
            if not self._paused:
                self._loop.remove_reader(fd)
            # the Popen's file object owns the fd; closing through it avoids a double close
            for pipe in (self.popen.stdout, self.popen.stderr):
                if pipe is not None and not pipe.closed and pipe.fileno() == fd:
                    pipe.close()

    def _check_exit(self) -> None:
        self._poll_handle = None
        if self.done:
            return
        returncode = self.popen.poll()
        if returncode is None:
            if self._pidfd is not None and _pidfd_signalled(self._pidfd):
                # exited, but another thread holds the Popen's wait lock: poll briefly instead of
                # letting the level-triggered pidfd spin the event loop
                self._loop.remove_reader(self._pidfd)
                os.close(self._pidfd)
                self._pidfd = None
            if self._pidfd is None:
                self._poll_handle = self._loop.call_later(0.005, self._check_exit)
            return
        self._finish(returncode)

    def _finish(self, returncode: int) -> None:
        self.done = True
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        if self._deadline is not None:
            self._deadline.cancel()
        # like Go's cmd.Wait(): take what the pipes already hold, then close them even if a
        # daemon inherited them, so the command ends when its leader does
        for fd in list(self._open_fds):
            for _ in range(64):
                try:
                    chunk = os.read(fd, CHUNK)
                except OSError:
                    break
                if not chunk:
                    break
                self._publish(_data_event(self._open_fds[fd], chunk), len(chunk))
            self._close_fd(fd)
        if self.popen.stdin is not None:
            with contextlib.suppress(OSError):
                self.popen.stdin.close()
        self.final = end_event(returncode) if self._is_alive() else LOST
        self._publish(self.final)
        self._on_exit(self)

    def detach(self) -> None:
        """The sandbox is going away: stop watching (before the box closes our pipes) and cut streams."""
        if self.done:
            return
        self.done = True
        if self._poll_handle is not None:
            self._poll_handle.cancel()
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        if self._deadline is not None:
            self._deadline.cancel()
        for fd in list(self._open_fds):
            self._close_fd(fd)
        self.final = LOST
        self._publish(LOST)
        self._on_exit(self)

    def _publish(self, item: Any, size: int = 0) -> None:
        if self._backlog is not None:
            self._backlog.append((item, size))
            self._backlog_bytes += size
        for queue in self._subscribers:
            queue.put_nowait((item, size))
            self._subscribers[queue] += size
        if size:
            self._flow()

    def _flow(self) -> None:
        """Stop reading the pipes while some reader is ``output_limit`` behind; resume at half."""
        behind = max([self._backlog_bytes, *self._subscribers.values()])
        if not self._paused and behind >= self._output_limit and not self.done:
            self._paused = True
            for fd in self._open_fds:
                self._loop.remove_reader(fd)
        elif self._paused and (behind <= self._output_limit // 2 or self.done):
            self._paused = False
            if not self.done:
                for fd in self._open_fds:
                    self._loop.add_reader(fd, self._readable, fd)

    def _consumed(self, queue: asyncio.Queue[Any], size: int) -> None:
        if size and queue in self._subscribers:
            self._subscribers[queue] -= size
            if self._paused:
                self._flow()

    # ------------------------------------------------------------------ deadline and signals
    def set_deadline(self, seconds: float, kill: Callable[[Proc], None]) -> None:
        """At the command deadline envd kills the process (exec.CommandContext)."""

        def expire() -> None:
            if not self.done:
                self.timed_out = True
                kill(self)

        self._deadline = self._loop.call_later(seconds, expire)

    # ------------------------------------------------------------------ subscribers
    async def follow(
        self, deadline_s: float | None, *, is_start: bool, keepalive_s: float = KEEPALIVE_S
    ) -> AsyncIterator[P.ProcessEvent]:
        """Yield the start event, then live events until the end (or cut / deadline error)."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        queued = 0
        if is_start and self._backlog is not None:
            for entry in self._backlog:
                queue.put_nowait(entry)
            queued, self._backlog, self._backlog_bytes = self._backlog_bytes, None, 0
        elif self.final is not None:
            queue.put_nowait((self.final, 0))
        self._subscribers[queue] = queued
        loop_deadline = None if deadline_s is None else self._loop.time() + deadline_s
        try:
            yield self.start
            while True:
                wait = keepalive_s
                if loop_deadline is not None:
                    wait = min(wait, loop_deadline - self._loop.time())
                    if wait <= 0:
                        raise ConnectError(Code.DEADLINE_EXCEEDED, "the command timed out")
                try:
                    if queue.empty():
                        async with asyncio.timeout(wait):  # no task per wait, unlike wait_for
                            item, size = await queue.get()
                    else:
                        item, size = queue.get_nowait()
                    self._consumed(queue, size)
                except TimeoutError:
                    if loop_deadline is None or loop_deadline > self._loop.time():
                        yield P.ProcessEvent(event=_oneof("keepalive", P.ProcessEvent.KeepAlive()))
                    continue
                if item is LOST:
                    raise ConnectError(
                        Code.UNAVAILABLE, "the connection to the sandbox ended before the stream completed"
                    )
                if item.event.field == "end":
                    if is_start and self.timed_out:
                        # the client's own deadline is due now: never beat it with an end event
                        raise ConnectError(Code.DEADLINE_EXCEEDED, "the command timed out and was killed")
                    yield item
                    return
                yield item
        finally:
            self._subscribers.pop(queue, None)
            if self._paused:
                self._flow()  # a reader that left no longer holds the others back
