"""The kernel's protocol pipe as the emulator reads it: length-framed messages, never read ahead.

A frame is 8 lower-case hex digits giving the body's length, then the body (one JSON object).
Bytes are read only when asked for, so a message the emulator has no room for yet stays in the
kernel's pipe, and a kernel whose output nobody takes blocks on its write, as on a real pipe.
The kernel runs the cell's code, which may write anything to this pipe: a header that is not
8 hex digits ends the reading (the kernel is treated as broken).
"""

from __future__ import annotations

import asyncio
import os
import string
from typing import IO

HEADER_BYTES = 8
CHUNK = 256 * 1024  # one read from the pipe
_HEX = frozenset(string.hexdigits.lower().encode())


class FrameReader:
    """Reads frames from one kernel's stdout pipe on the event loop (non-blocking reads only)."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self._pipe = pipe
        self._fd = pipe.fileno()
        os.set_blocking(self._fd, False)
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None

    async def header(self) -> int | None:
        """The next frame's body length; None at the end of the pipe or for a malformed header."""
        raw = await self._read(HEADER_BYTES, keep=True)
        if raw is None or not set(raw) <= _HEX:
            return None
        return int(raw, 16)

    async def body(self, size: int) -> bytearray | None:
        """Exactly ``size`` bytes; None when the pipe ends first."""
        return await self._read(size, keep=True)

    async def skip(self, size: int) -> bool:
        """Read and drop ``size`` bytes (never held); False when the pipe ends first."""
        return await self._read(size, keep=False) is not None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (or the pipe was closed)."""
        return self._pipe.closed

    def close(self) -> None:
        """Stop watching and close the pipe; a waiting read ends as at the end of the pipe."""
        self._unwatch()
        if not self._pipe.closed:
            self._pipe.close()

    async def _read(self, size: int, *, keep: bool) -> bytearray | None:
        kept = bytearray()
        left = size
        while left:
            try:
                chunk = os.read(self._fd, min(left, CHUNK))
            except BlockingIOError:
                if not await self._readable():
                    return None
                continue
            except (OSError, ValueError):  # closed under us
                return None
            if not chunk:
                return None
            left -= len(chunk)
            if keep:
                kept += chunk
        return kept

    async def _readable(self) -> bool:
        if self._pipe.closed:
            return False
        waiter = self._waiter = self._loop.create_future()
        self._loop.add_reader(self._fd, self._wake)
        try:
            await waiter
        finally:
            if self._waiter is waiter:  # close() did not already stop watching the (reused?) fd
                self._unwatch()
        return not self._pipe.closed

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _unwatch(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._loop.remove_reader(self._fd)
            if not waiter.done():
                waiter.set_result(None)
