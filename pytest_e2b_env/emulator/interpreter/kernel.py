"""One code context's kernel: the runner process inside the sandbox, seen from the emulator.

The runner is started with the sandbox's own ``box.spawn`` (``bash -l -c``, as a command),
as ``root`` in ``/home/user`` like the template's Jupyter kernels, and fed its source on
stdin. Pipes are watched by the event loop (never a blocking read); one cell runs at a
time, and a cell whose client went away keeps the kernel busy until it ends, as a Jupyter
kernel does. A runner that dies mid-cell is reported as E2B reports a restarted kernel.

Output is bounded (``budget.py``): a message is read from the runner's pipe only once its
cell and its sandbox have room for it, and counted until the client has taken it; a message
over the message cap is dropped unread with a note on the cell's stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shlex
import signal
import subprocess
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any

from pytest_e2b_env.emulator.interpreter import envs as cell_envs
from pytest_e2b_env.emulator.interpreter.budget import Abandoned, Gauge, OutputBudget
from pytest_e2b_env.emulator.interpreter.frames import FrameReader
from pytest_e2b_env.emulator.interpreter.outputs import convert, error_line, stream_line
from pytest_e2b_env.standalone import assemble

if TYPE_CHECKING:
    from pytest_e2b_env.emulator.sandboxes import Sandbox

KERNEL_USER = "root"  # E2B's Jupyter server and its kernels run as root (jupyter.service has no User=)
KERNEL_HOME = "/home/user"
START_TIMEOUT_S = 30.0
READY_BYTES = 4096  # the runner's first message
CONTROL_BYTES = 4096  # a message for no cell, or for one whose client left, larger than this is skipped

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
    """One cell's lines, in order, each with the bytes it holds in the sandbox's budget."""

    def __init__(self, cell_id: str, budget: OutputBudget) -> None:
        self.cell_id = cell_id
        self.budget = budget
        self.gauge: Gauge = budget.cell()
        self.queue: asyncio.Queue[tuple[Any, int]] = asyncio.Queue()
        self.finished = False
        self.detached = False
        self.errored = False
        self.on_finish: list[Any] = []
        #: called when the client leaves before the cell ended (E2B's server interrupts the kernel)
        self.on_abandon: list[Any] = []

    @property
    def attached(self) -> bool:
        """Whether a client still waits for this cell's lines."""
        return not self.detached

    def put(self, item: Any, size: int = 0) -> None:
        """Queue a line holding ``size`` reserved bytes (dropped once the client has left)."""
        if self.detached:
            self.budget.release(size, self.gauge)
            return
        self.queue.put_nowait((item, size))

    def finish(self, *final: Any) -> None:
        if self.finished:
            return
        for item in final:
            self.put(item)
        self.finished = True
        for callback in self.on_finish:
            callback()
        self.on_finish.clear()

    async def next(self) -> tuple[dict[str, Any] | None, int]:
        """The next E2B line and the bytes it holds; ``(None, 0)`` after the last one.

        Raises KernelLost when the sandbox died. The caller gives the bytes back with
        :meth:`sent` once the client has taken the line.
        """
        item, size = await self.queue.get()
        if item is DONE:
            return None, 0
        if item is LOST:
            raise KernelLost
        return item, size

    def sent(self, size: int) -> None:
        """A line has left the server: its bytes are free."""
        self.budget.release(size, self.gauge)

    def detach(self) -> None:
        """The client is gone: drop further lines and free what the cell holds; a running cell is
        interrupted (E2B's server interrupts its kernel when the client of a cell leaves)."""
        if not self.finished and not self.detached:
            for callback in self.on_abandon:
                callback()
        self.detached = True
        while not self.queue.empty():
            self.queue.get_nowait()
        self.budget.close(self.gauge)


class Kernel:
    """A runner process for one context; started on first use and after a crash or restart."""

    def __init__(self, sbx: Sandbox, cwd: str, budget: OutputBudget, message_limit: int) -> None:
        self.sbx = sbx
        self.cwd = cwd
        self.budget = budget
        self.message_limit = message_limit
        self.lock = asyncio.Lock()
        self.popen: subprocess.Popen[bytes] | None = None
        self._stdin: asyncio.WriteTransport | None = None
        self._transports: list[asyncio.BaseTransport] = []
        self._frames: FrameReader | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._current: Execution | None = None
        self._ending: str | None = None  # why we are stopping the runner ourselves
        self._lost = False
        self._stderr: deque[bytes] = deque(maxlen=16)
        self._retiring = False  # the runner said it stops after its cell (exit())
        #: envd's variables once the context's first cell has carried them (E2B's _global_env_vars)
        self.sandbox_envs: dict[str, str] | None = None

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
        """Hand the runner its source and limits and wait until it says it is ready."""
        assert popen.stdin is not None
        assert popen.stdout is not None
        assert popen.stderr is not None
        loop = asyncio.get_running_loop()
        source = runner_source()
        frames = self._frames = FrameReader(popen.stdout)
        err, _ = await loop.connect_read_pipe(lambda: _Tail(self._stderr), popen.stderr)
        stdin, _ = await loop.connect_write_pipe(asyncio.Protocol, popen.stdin)
        self._transports = [err, stdin]
        self._stdin = stdin
        stdin.write(source)
        ready: Any = None
        with contextlib.suppress(TimeoutError, ValueError):
            async with asyncio.timeout(START_TIMEOUT_S):
                size = await frames.header()
                body = await frames.body(size) if size is not None and size <= READY_BYTES else None
                ready = json.loads(body) if body is not None else None
        if not isinstance(ready, dict) or ready.get("type") != "ready":
            tail = b"".join(self._stderr).decode("utf-8", "replace").strip()[-500:]
            await self._stop_process()
            if not self.sbx.running:
                raise KernelLost
            raise KernelStartError(f"python3 did not start a kernel in the sandbox: {tail or 'no output'}")
        self._send({"op": "limits", "message_bytes": self.message_limit})
        self._reader_task = asyncio.ensure_future(self._read(frames))
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
            execution = Execution(uuid.uuid4().hex, self.budget)
            execution.on_finish.append(self.lock.release)
            execution.on_abandon.append(functools.partial(self._interrupt, execution))
            self._current = execution
            sandbox_snippet = ""
            if self.sandbox_envs is None:  # the context's first cell, as E2B's server counts it
                self.sandbox_envs = cell_envs.sandbox_envs(
                    self.sbx.sandbox_id, self.sbx.template_id, dict(self.sbx.envs)
                )
                sandbox_snippet = cell_envs.set_code(self.sandbox_envs)
            full = cell_envs.with_envs(code, sandbox_snippet, envs)
            self._send({"op": "execute", "id": execution.cell_id, "code": full})
            if envs:  # E2B's clean-up runs as a silent cell before the next one
                reset = cell_envs.reset_code(envs, self.sandbox_envs)
                self._send({"op": "execute", "id": uuid.uuid4().hex, "code": reset, "silent": True})
            return execution
        except BaseException:
            self.lock.release()
            raise

    async def _read(self, frames: FrameReader) -> None:
        try:
            while True:
                size = await frames.header()
                if size is None:  # the pipe ended, or the runner broke the framing
                    break
                current = self._current
                attached = current is not None and current.attached
                if size > self.message_limit:
                    if not await frames.skip(size):
                        break
                    note = dropped_note(size, self.message_limit)
                    if current is not None and attached and not await self._note(frames, current, note):
                        break
                    continue
                if not attached and size > CONTROL_BYTES:  # output nobody waits for
                    if not await frames.skip(size):
                        break
                    continue
                if not await self._take(frames, size, current):
                    break
        finally:
            self._died()

    async def _reserve(self, frames: FrameReader, size: int, current: Execution | None) -> Gauge | None:
        """Room for ``size`` bytes (see ``OutputBudget.reserve``); Abandoned once the pipe is closed."""

        def cell_of() -> Gauge | None:
            return current.gauge if current is not None and current.attached else None

        return await self.budget.reserve(size, cell_of, lambda: frames.closed)

    async def _take(self, frames: FrameReader, size: int, current: Execution | None) -> bool:
        """Reserve room for one message, read it and route it; False when the pipe ended."""
        try:
            account = await self._reserve(frames, size, current)
        except Abandoned:
            return False
        queued = False
        try:
            body = await frames.body(size)
            if body is None:
                return False
            try:
                message = json.loads(body)
            except ValueError:
                return True
            del body
            if not isinstance(message, dict) or current is None or message.get("id") != current.cell_id:
                return True  # output between cells, or of a cell nobody waits for
            if message.get("type") == "exiting":
                self._retiring = True
            elif message.get("type") == "done":
                self._current = None
                current.finish(DONE)
            elif (converted := convert(message)) is not None and account is not None:
                if converted["type"] == "error":
                    if current.errored:  # E2B's server passes a cell's first error only
                        return True
                    current.errored = True
                current.put(converted, size)
                queued = True
            return True
        finally:
            if not queued:
                self.budget.release(size, account)

    async def _note(self, frames: FrameReader, current: Execution, text: str) -> bool:
        """A line of the emulator's own on the cell's stderr, counted like the cell's output."""
        line = stream_line("stderr", text)
        size = len(json.dumps(line))
        try:
            account = await self._reserve(frames, size, current)
        except Abandoned:
            return False
        if account is None:  # the client left meanwhile
            self.budget.release(size, account)
            return True
        current.put(line, size)
        return True

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

    def _interrupt(self, execution: Execution) -> None:
        """SIGINT to the kernel's process group, as Jupyter interrupts a kernel (its cell's children too)."""
        popen = self.popen
        if popen is None or self._current is not execution or popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, signal.SIGINT)

    # ------------------------------------------------------------------ stop
    def _close_transports(self) -> None:
        for transport in self._transports:
            transport.close()
        self._transports = []
        self._stdin = None
        if self._frames is not None:
            self._frames.close()
            self._frames = None
            self.budget.wake()  # a reader waiting for room gives up

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


def dropped_note(size: int, limit: int) -> str:
    """The stderr note for a kernel message over the cap, naming both and the way out."""
    return (
        f"[emulator: a kernel message of {size} bytes was dropped: over interpreter_message_bytes="
        f"{limit}; raise it with Emulator(limits=...)]\n"
    )


class _Tail(asyncio.Protocol):
    """Keeps the last chunks of the runner's own stderr, for start-up failures."""

    def __init__(self, keep: deque[bytes]) -> None:
        self.keep = keep

    def data_received(self, data: bytes) -> None:
        self.keep.append(data[-1024:])
