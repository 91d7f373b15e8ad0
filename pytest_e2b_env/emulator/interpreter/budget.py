"""How much code-interpreter output the emulator holds for clients that have not taken it yet.

A kernel message is counted from the moment room is reserved for it, before its bytes are read
from the kernel's pipe, until the client's connection has taken it (or the client has left). A
cell has its own cap and all cells of a sandbox share another; when either is full, the kernels
it covers are not read until it is down to half, so they block on their pipes as processes do
on a full pipe. A message larger than a cap still passes when nothing else is held, so a cap
smaller than a message slows a cell down but never stops it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Abandoned(Exception):
    """The reader gave up waiting for room (its kernel's pipe was closed)."""


class Gauge:
    """Bytes held against a cap; once full, nothing more fits until half of it is free."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.held = 0
        self.draining = False
        self.closed = False  # its cell's client left: what it held was given back

    def fits(self, size: int) -> bool:
        """Whether ``size`` more bytes may be held now (a refusal starts the drain to half)."""
        if self.held == 0:
            return True
        if not self.draining and self.held + size <= self.cap:
            return True
        self.draining = True
        return False

    def take(self, size: int) -> None:
        self.held += size

    def give(self, size: int) -> None:
        self.held -= size
        if self.draining and self.held <= self.cap // 2:
            self.draining = False


class OutputBudget:
    """The output one sandbox's cells hold: a gauge for them all, one per cell, and the waiting."""

    def __init__(self, cell_cap: int, sandbox_cap: int) -> None:
        self.cell_cap = cell_cap
        self.total = Gauge(sandbox_cap)
        self._changed = asyncio.Event()

    def cell(self) -> Gauge:
        """A fresh gauge for one cell."""
        return Gauge(self.cell_cap)

    async def reserve(
        self, size: int, cell_of: Callable[[], Gauge | None], abandoned: Callable[[], bool]
    ) -> Gauge | None:
        """Wait until ``size`` bytes fit the sandbox and the cell (asked anew after each wait), and
        take them; return the cell's gauge they were taken from (None: the sandbox's only).

        Raises :class:`Abandoned` once ``abandoned()`` holds (checked after each :meth:`wake`).
        """
        while True:
            if abandoned():
                raise Abandoned
            cell = cell_of()
            gauges = [self.total] if cell is None else [self.total, cell]
            if all([gauge.fits(size) for gauge in gauges]):  # a list: every gauge is asked
                for gauge in gauges:
                    gauge.take(size)
                return cell
            changed = self._changed
            await changed.wait()

    def release(self, size: int, cell: Gauge | None) -> None:
        """Give back what :meth:`reserve` took (nothing if its cell was closed meanwhile)."""
        if cell is not None:
            if cell.closed:
                return
            cell.give(size)
        self.total.give(size)
        self.wake()

    def close(self, cell: Gauge) -> None:
        """The cell's client is gone: everything it held is given back at once."""
        if cell.closed:
            return
        cell.closed = True
        self.total.give(cell.held)
        cell.held = 0
        self.wake()

    def wake(self) -> None:
        """Let every waiting reader look again (after a release, or when one should give up)."""
        self._changed.set()
        self._changed = asyncio.Event()
