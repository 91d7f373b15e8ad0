"""One code context's kernel: the runner process inside the sandbox, seen from the emulator.

The runner is started with the sandbox's own ``box.spawn`` (``bash -l -c``, as a command),
as ``root`` in ``/home/user`` like the template's Jupyter kernels, and fed its source on
stdin. Pipes are watched by the event loop (never a blocking read); one cell runs at a
time, and a cell whose client went away keeps the kernel busy until it ends, as a Jupyter
kernel does. A runner that dies mid-cell is reported as E2B reports a restarted kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import shlex
import signal
import subprocess
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any

from pytest_e2b_env.emulator.interpreter.outputs import convert, error_line
from pytest_e2b_env.standalone import assemble

if TYPE_CHECKING:
    from pytest_e2b_env.emulator.sandboxes import Sandbox

KERNEL_USER = "root"  # E2B's Jupyter server and its kernels run as root (jupyter.service has no User=)
KERNEL_HOME = "/home/user"
LINE_LIMIT = 16 * 1024 * 1024  # one kernel message (the runner drops larger representations)
START_TIMEOUT_S = 30.0
BACKLOG = 64  # queued lines per cell before the runner's pipe is left unread (backpressure)

_BOOT = (
    "import os\nn={n};b=b''\nwhile len(b)<n:\n c=os.read(0,n-len(b))\n if not c:raise SystemExit(3)\n b+=c\n"
    "exec(compile(b,'<e2b-kernel>','exec'),{{'__name__':'__e2b_kernel__'}})"
)


class KernelLost(Exception):
    """The sandbox is gone: the cell's stream must be cut, not ended."""


class KernelStartError(Exception):
    """The runner did not come up inside the sandbox."""


@functools.cache
def runner_source() -> bytes:
    """The runner's source: ``standalone/interpreter_kernel.py``, assembled."""
    return assemble.script("interpreter_kernel").encode()


class _Done:
    """Queue marker: the cell ended (after its lines)."""


class _Lost:
    """Queue marker: the sandbox died under the cell."""


DONE, LOST = _Done(), _Lost()


class Execution:
    """One cell's lines, in order, with backpressure towards the runner."""

    def __init__(self, cell_id: str) -> None:
        self.cell_id = cell_id
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.room = asyncio.Event()
        self.room.set()
        self.finished = False
        self.detached = False
        self.on_finish: list[Any] = []

    def put(self, item: Any) -> None:
        if self.detached:
            return
        self.queue.put_nowait(item)
        if self.queue.qsize() >= BACKLOG:
            self.room.clear()

    def finish(self, *final: Any) -> None:
        if self.finished:
            return
        for item in final:
            self.put(item)
        self.finished = True
        self.room.set()
        for callback in self.on_finish:
            callback()
        self.on_finish.clear()

    async def next(self) -> dict[str, Any] | None:
        """The next E2B line; None after the last one. Raises KernelLost when the sandbox died."""
        item = await self.queue.get()
        if self.queue.qsize() < BACKLOG // 2:
            self.room.set()
        if item is DONE:
            return None
        if item is LOST:
            raise KernelLost
        return item

    def detach(self) -> None:
        """The client is gone: drop further lines (the cell itself runs on)."""
        self.detached = True
        while not self.queue.empty():
            self.queue.get_nowait()
        self.room.set()


class Kernel:
    """A runner process for one context; started on first use and after a crash or restart."""

    def __init__(self, sbx: Sandbox, cwd: str) -> None:
        self.sbx = sbx
        self.cwd = cwd
        self.lock = asyncio.Lock()
        self.popen: subprocess.Popen[bytes] | None = None
        self._stdin: asyncio.WriteTransport | None = None
        self._transports: list[asyncio.BaseTransport] = []
        self._reader_task: asyncio.Task[None] | None = None
        self._current: Execution | None = None
        self._ending: str | None = None  # why we are stopping the runner ourselves
        self._lost = False
        self._stderr: deque[bytes] = deque(maxlen=16)
        self._retiring = False  # the runner said it stops after its cell (exit())

    @property
    def running(self) -> bool:
        return (
            self.popen is not None
            and not self._retiring
            and self._reader_task is not None
            and not self._reader_task.done()
        )

    # ------------------------------------------------------------------ start
    async def _start(self) -> None:
        if self._lost:
            raise KernelLost
        old = self._reader_task
        if old is not None and not old.done():  # a retiring runner: let it end first
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(old), 5)
            if not old.done():
                await self._stop_process()
        self._retiring = False
        cmd = "exec python3 -c " + shlex.quote(_BOOT.format(n=len(runner_source())))
        try:
            popen = self.sbx.box.spawn(cmd, dict(self.sbx.envs), KERNEL_HOME, KERNEL_USER, True)
        except (ProcessLookupError, OSError) as exc:
            if not self.sbx.running or not self.sbx.box.alive():
                raise KernelLost from exc
            raise KernelStartError(f"cannot start python3 in the sandbox: {type(exc).__name__}") from exc
        except Exception as exc:  # the isolation layer's own errors
            if not self.sbx.running or not self.sbx.box.alive():
                raise KernelLost from exc
            raise KernelStartError(f"cannot start python3 in the sandbox: {exc}") from exc
        self.popen = popen
        self._ending = None
        try:
            await self._connect(popen)
        except BaseException:  # cancelled (the client left) or failed: no half-started runner stays
            if self.popen is popen:
                self._reap(self._detach_process())
            raise

    async def _connect(self, popen: subprocess.Popen[bytes]) -> None:
        """Hand the runner its source and wait until it says it is ready."""
        assert popen.stdin is not None
        assert popen.stdout is not None
        assert popen.stderr is not None
        loop = asyncio.get_running_loop()
        source = runner_source()
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        out, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), popen.stdout)
        err, _ = await loop.connect_read_pipe(lambda: _Tail(self._stderr), popen.stderr)
        stdin, _ = await loop.connect_write_pipe(asyncio.Protocol, popen.stdin)
        self._transports = [out, err, stdin]
        self._stdin = stdin
        stdin.write(source)
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                ready = await reader.readline()
        except (TimeoutError, ValueError, ConnectionError):
            ready = b""
        if not ready.startswith(b'{"type": "ready"'):
            tail = b"".join(self._stderr).decode("utf-8", "replace").strip()[-500:]
            await self._stop_process()
            if not self.sbx.running:
                raise KernelLost
            raise KernelStartError(f"python3 did not start a kernel in the sandbox: {tail or 'no output'}")
        self._reader_task = asyncio.ensure_future(self._read(reader))
        if self.cwd != KERNEL_HOME:
            self._send({"op": "chdir", "path": self.cwd})

    def _send(self, request: dict[str, Any]) -> None:
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.write((json.dumps(request) + "\n").encode())

    # ------------------------------------------------------------------ cells
    async def submit(self, code: str, envs: dict[str, str]) -> Execution:
        """Queue a cell behind the running one, (re)start the runner if needed, and send it."""
        await self.lock.acquire()
        try:
            if not self.running:
                await self._start()
            execution = Execution(uuid.uuid4().hex)
            execution.on_finish.append(self.lock.release)
            self._current = execution
            self._send({"op": "execute", "id": execution.cell_id, "code": code, "envs": envs})
            return execution
        except BaseException:
            self.lock.release()
            raise

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                try:
                    line = await reader.readline()
                except (ValueError, ConnectionError):  # a line over LINE_LIMIT: the runner is broken
                    break
                if not line:
                    break
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                current = self._current
                if not isinstance(message, dict) or current is None or message.get("id") != current.cell_id:
                    continue  # output between cells, or of a cell nobody waits for
                if message.get("type") == "exiting":
                    self._retiring = True
                    continue
                if message.get("type") == "done":
                    self._current = None
                    current.finish(DONE)
                    continue
                converted = convert(message)
                if converted is not None:
                    await current.room.wait()
                    current.put(converted)
        finally:
            self._died()

    def _died(self) -> None:
        """The runner's protocol pipe closed: tell the waiting cell why."""
        current, self._current = self._current, None
        gone = self._lost or not self.sbx.running or not self.sbx.box.alive()
        if current is not None:
            if gone:
                current.finish(LOST)
            elif self._ending == "restart":
                current.finish(
                    error_line(
                        "UnexpectedEndOfExecution",
                        "Connection to the execution was closed before the execution was finished",
                    ),
                    DONE,
                )
            else:  # Jupyter restarts a dead kernel and E2B reports it as a restart
                current.finish(error_line("ContextRestarting", "Context was restarted"), DONE)
        if not gone:
            self._reap(self._detach_process())

    # ------------------------------------------------------------------ stop
    def _close_transports(self) -> None:
        for transport in self._transports:
            transport.close()
        self._transports = []
        self._stdin = None

    def _detach_process(self) -> subprocess.Popen[bytes] | None:
        """Forget the runner at once (a new one may start before the old one is reaped)."""
        popen, self.popen = self.popen, None
        self._close_transports()
        if popen is not None:
            with contextlib.suppress(ProcessLookupError, OSError):
                self.sbx.box.signal(popen, signal.SIGKILL)
        return popen

    def _reap(self, popen: subprocess.Popen[bytes] | None) -> None:
        if popen is not None and popen.poll() is None:
            task = asyncio.ensure_future(_reap(popen))
            _reaping.add(task)
            task.add_done_callback(_reaping.discard)

    async def _stop_process(self) -> None:
        popen = self._detach_process()
        if popen is not None:
            await _reap(popen)

    async def restart(self, why: str = "restart") -> None:
        """Kill the runner (state lost); the next cell starts a fresh one."""
        self._ending = why
        task = self._reader_task
        await self._stop_process()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(task), 5)

    def lose(self) -> None:
        """The sandbox is being killed: cut the waiting cell, stop watching the pipes now."""
        self._lost = True
        if self._reader_task is not None:
            self._reader_task.cancel()
        current, self._current = self._current, None
        if current is not None:
            current.finish(LOST)
        self._close_transports()
        self.popen = None  # the box's kill ends and reaps it


_reaping: set[asyncio.Task[None]] = set()


async def _reap(popen: subprocess.Popen[bytes]) -> None:
    """Wait for a killed runner without blocking the loop (a few ms normally)."""
    for _ in range(500):
        if popen.poll() is not None:
            return
        await asyncio.sleep(0.01)


class _Tail(asyncio.Protocol):
    """Keeps the last chunks of the runner's own stderr, for start-up failures."""

    def __init__(self, keep: deque[bytes]) -> None:
        self.keep = keep

    def data_received(self, data: bytes) -> None:
        self.keep.append(data[-1024:])
