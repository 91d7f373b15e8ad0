"""The Python kernel that runs INSIDE a sandbox: persistent globals, IPython-shaped messages.

Started by the emulator through the sandbox's own process machinery (``python3 -c
<bootstrap>``, its assembled source arriving on stdin), so it sees exactly the files,
namespaces and limits a command sees. It imports the standard library only (the sandbox's
``python3`` has none of the emulator's packages) and the standalone modules that do the same,
embedded when the source is assembled: ``ipython_input`` (a cell's source as IPython rewrites it),
``ipython_shell`` and ``ipython_magics`` (``get_ipython()``, ``!cmd`` and the magics),
``interpreter_display`` (a value's MIME bundle as E2B's kernel formats it) and
``interpreter_errors`` (IPython's traceback text).

Protocol. Requests on the original stdin, one JSON object per line::

    {"op": "limits", "message_bytes": 16777216}
    {"op": "execute", "id": "<cell id>", "code": "..."}
    {"op": "execute", "id": "<cell id>", "code": "...", "silent": true}   (no count, no messages)
    {"op": "chdir", "path": "/home/user"}

Replies on the original stdout, each framed as 8 lower-case hex digits giving the length of the
JSON object that follows (so the emulator knows a message's size before it reads it, and reads
it only when it has room), never longer than ``message_bytes`` (``id`` names the cell)::

    {"type": "ready", "pid": 123}
    {"id": ..., "type": "count", "n": 1}
    {"id": ..., "type": "stream", "name": "stdout"|"stderr", "text": "..."}
    {"id": ..., "type": "display", "main": true|false, "data": {"text/plain": "..."}}
    {"id": ..., "type": "error", "ename": "...", "evalue": "...", "traceback": ["...", ...]}
    {"id": ..., "type": "exiting"}   (exit() was called: the kernel stops after this cell)
    {"id": ..., "type": "done"}

The cell's fds 1 and 2 are pipes read by this process, so output of subprocesses shows up
as stream messages too (as ipykernel's fd capture does); stdin of the cell is /dev/null.
SIGINT (the emulator's interrupt when a client leaves mid-cell, as E2B's server interrupts its
kernel) raises KeyboardInterrupt in a running cell and is ignored between cells, as in ipykernel.
"""

from __future__ import annotations

import ast
import codecs
import contextlib
import json
import linecache
import os
import pathlib
import select
import signal
import sys
import threading
import time
import types
import zlib
from collections.abc import Iterator
from io import StringIO
from typing import Any

from . import interpreter_display as D
from . import interpreter_errors as E
from . import ipython_input as I
from . import ipython_magics as M
from . import ipython_shell as S
from . import ipython_timing as T

STREAM_CHUNK = 32 * 1024  # largest stream message, like envd's output events
FLUSH_S = 0.2  # ipykernel's OutStream flush interval: quick prints arrive as one message
CUT_NOTE = "\n[... cut: over the kernel's message limit]"
CO_COROUTINE = 0x80  # a compiled cell with top-level await


class Channel:
    """The private protocol pipe (never inherited by the cell's children)."""

    def __init__(self, fd_out: int) -> None:
        self.fd = fd_out
        self.lock = threading.Lock()
        self.cell: str | None = None  # the cell whose output is being captured

    def send(self, message: dict[str, Any]) -> None:
        body = fit(message, D.MESSAGE_LIMIT)
        data = b"%08x" % len(body) + body
        with self.lock:
            # an interrupt lands after the frame, never inside it (a cut frame ends the kernel)
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self.fd, view) :]
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=True).encode()


def fit(message: dict[str, Any], limit: int) -> bytes:
    """The message encoded in at most ``limit`` bytes: its longest texts are halved (and say so)
    until it fits; one that cannot shrink is replaced by a note on the cell's stderr."""
    body = _encode(message)
    if len(body) > limit:
        message = json.loads(body)  # a copy: the texts may be a displayed object's own data
    while len(body) > limit:
        place = _longest_text(message)
        if place is None:
            break
        holder, key, text = place
        if len(text) <= 2 * len(CUT_NOTE):
            break
        holder[key] = text[: len(text) // 2] + CUT_NOTE
        body = _encode(message)
    if len(body) <= limit:
        return body
    note = f"[a kernel message of {len(body)} bytes was dropped: over the {limit}-byte limit]\n"
    return _encode({"id": message.get("id"), "type": "stream", "name": "stderr", "text": note})


def _longest_text(value: Any) -> tuple[Any, Any, str] | None:
    """``(container, key, text)`` of the string that takes the most bytes encoded."""
    best: tuple[Any, Any, str] | None = None
    best_size = -1
    stack = [value]
    while stack:
        holder = stack.pop()
        items = holder.items() if isinstance(holder, dict) else enumerate(holder)
        for key, item in items:
            if isinstance(item, str):
                size = len(json.dumps(item))
                if size > best_size:
                    best, best_size = (holder, key, item), size
            elif isinstance(item, (dict, list)):
                stack.append(item)
    return best


class Capture:
    """One of the cell's output fds: a pipe read by a thread, sent coalesced as stream messages."""

    def __init__(self, name: str, target_fd: int, channel: Channel, lock: threading.Lock) -> None:
        self.name = name
        self.channel = channel
        self.lock = lock  # shared by both captures and the end-of-cell flush
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, target_fd)  # the cell (and its children) write here
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        self.fd = read_fd
        self.pending = ""
        self.since: float | None = None
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        threading.Thread(target=self._loop, name=f"capture-{name}", daemon=True).start()

    def _read_available(self) -> bool:
        """Move what the pipe holds into ``pending`` (lock held); False at EOF."""
        while True:
            try:
                chunk = os.read(self.fd, STREAM_CHUNK)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            if self.since is None:
                self.since = time.monotonic()
            self.pending += self.decoder.decode(chunk)
            if len(self.pending) >= STREAM_CHUNK:
                self.flush()

    def flush(self) -> None:
        """Send what is pending (lock held)."""
        while self.pending:
            text, self.pending = self.pending[:STREAM_CHUNK], self.pending[STREAM_CHUNK:]
            cell = self.channel.cell
            if cell is not None:  # output between cells has no cell to go to
                self.channel.send({"id": cell, "type": "stream", "name": self.name, "text": text})
        self.since = None

    def _loop(self) -> None:
        while True:
            wait = None if self.since is None else max(0.0, self.since + FLUSH_S - time.monotonic())
            select.select([self.fd], [], [], wait)
            with self.lock:
                alive = self._read_available()
                if self.since is not None and (time.monotonic() - self.since >= FLUSH_S or not alive):
                    self.flush()
            if not alive:
                return


class Kernel:
    """Executes cells in one persistent namespace, as IPython's ``last_expr`` interactivity does."""

    def __init__(self, channel: Channel, captures: list[Capture], lock: threading.Lock) -> None:
        self.channel = channel
        self.captures = captures
        self.lock = lock
        self.count = 0
        self.exit_requested = False
        self.out: dict[int, Any] = {}
        self.inputs: list[str] = [""]
        self.sink: list[dict[str, Any]] | None = None  # %%capture's display outputs
        self.shell = S.Shell(self, dict(M.LINE_MAGICS), dict(M.CELL_MAGICS))
        # the namespace is __main__'s own dict, as in IPython, so pickle (multiprocessing) finds
        # functions and classes defined in cells
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        self.ns: dict[str, Any] = main.__dict__
        self.ns.update(
            {
                "__builtins__": __import__("builtins"),
                "In": self.inputs,
                "_ih": self.inputs,
                "Out": self.out,
                "_oh": self.out,
                "_dh": [pathlib.Path(os.getcwd())],
                "get_ipython": self.get_ipython,
                "display": self.display,
                "exit": self._ask_exit,
                "quit": self._ask_exit,
                "input": _no_input,
                "open": _modified_open,
            }
        )
        self.loop: Any = None
        self.stdout = _text_stream(1)
        self.stderr = _text_stream(2)
        self.flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
        self.interruptible = False  # user code is running: SIGINT raises KeyboardInterrupt
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, _signum: int, _frame: Any) -> None:
        # ipykernel raises KeyboardInterrupt in a running cell and ignores an interrupt between
        # cells; here only the cell's own code is interrupted, never the kernel's bookkeeping
        if self.interruptible:
            raise KeyboardInterrupt

    def get_ipython(self) -> S.Shell:
        """IPython's ``get_ipython()``: the shell the transformed cells call."""
        return self.shell

    # ------------------------------------------------------------------ output
    def _flush_streams(self) -> None:
        for stream in (sys.stdout, sys.stderr, self.stdout, self.stderr):
            with contextlib.suppress(Exception):  # a cell may have replaced or closed sys.stdout
                stream.flush()
        with self.lock:
            for capture in self.captures:
                capture._read_available()
                capture.flush()

    def _send(self, message: dict[str, Any]) -> None:
        message["id"] = self.channel.cell
        self.channel.send(message)

    def display(self, *objs: Any, **_kw: Any) -> None:
        """IPython's ``display()``: one display_data message per object."""
        for obj in objs:
            self.display_data(D.mime_bundle(obj))

    def display_data(self, data: dict[str, Any]) -> None:
        """A non-main result with these representations (kept by ``%%capture`` while it captures)."""
        if self.sink is not None:
            self.sink.append(data)
            return
        self._flush_streams()
        self._send({"type": "display", "main": False, "data": D.bounded(dict(data))})

    def _ask_exit(self, *_a: Any, **_kw: Any) -> None:
        # ipykernel stops its loop shortly after the cell: the cell ends normally, the kernel
        # process then exits and is started afresh (state lost)
        self.exit_requested = True

    _ask_exit.__ipython_autocall__ = True  # type: ignore[attr-defined]  # `exit` alone calls it

    # ------------------------------------------------------------------ cells
    def execute(self, cell_id: str, code: str, silent: bool = False) -> None:
        """Run one cell; a silent one (E2B's env clean-up) counts nothing and says nothing."""
        sys.stdout, sys.stderr = self.stdout, self.stderr
        if silent:
            with contextlib.suppress(BaseException):
                self._exec(self.compile(self.transform(code), "<silent>", "exec"))
            self._flush_streams()
            return
        self.channel.cell = cell_id
        self.count += 1
        self._send({"type": "count", "n": self.count})
        try:
            self._run(self.count, code)
        finally:
            self._flush_streams()
            if self.exit_requested:  # so the next cell waits for a fresh kernel, not this one
                self._send({"type": "exiting"})
            self._send({"type": "done"})
            self.channel.cell = None

    def transform(self, code: str) -> str:
        """The cell's source as IPython runs it: static transformations, then the one-line prefilter."""
        builtins = self.ns.get("__builtins__")
        return I.prefilter_line(
            I.transform_cell(code),
            is_magic=lambda name: name in self.shell.line_magics or name in S.IPYTHON_LINE_MAGICS,
            is_shadowed=lambda name: name in self.ns or hasattr(builtins, name),
            is_autocall=lambda name: bool(getattr(self.ns.get(name), "__ipython_autocall__", False)),
        )

    def compile(self, tree: Any, filename: str, mode: str) -> types.CodeType:
        """Compile as cells are compiled (top-level await allowed)."""
        return compile(tree, filename, mode, flags=self.flags, dont_inherit=True)

    def _cache(self, n: int, source: str) -> str:
        filename = f"/tmp/ipykernel_{os.getpid()}/{zlib.crc32(source.encode('utf-8', 'replace'))}.py"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        E.cells[filename] = n
        return filename

    def _run(self, n: int, code: str, nested: bool = False) -> None:
        try:
            source = self.transform(code)
        except BaseException as exc:  # IPython reports a failed transformation as the cell's error
            source = None
            failure = exc
        if not nested:  # IPython's input history keeps the transformed cell (the raw one if that failed)
            self.inputs.append(code if source is None else source)
            self.ns["_i"] = self.inputs[-1]
        if source is None:
            self._error(failure, syntax=False)
            return
        filename = self._cache(n, source)
        try:
            tree = ast.parse(source, filename)
        except (SyntaxError, ValueError) as exc:  # ValueError: source with NUL bytes
            self._error(exc, syntax=True)
            return
        last: ast.Expression | None = None
        tail = tree.body[-1] if tree.body else None
        if isinstance(tail, ast.Expr) and not _ends_with_semicolon(source):
            tree.body.pop()
            last = ast.Expression(tail.value)
        try:
            self._exec(self.compile(tree, filename, "exec"))
            if last is not None:
                value = self._exec(self.compile(last, filename, "eval"))
                self._displayhook(n, value)
        except SystemExit as exc:
            code_ = exc.code
            self._send(
                {
                    "type": "error",
                    "ename": "SystemExit",
                    "evalue": "" if code_ is None else str(code_),
                    "traceback": [
                        "An exception has occurred, use %tb to see the full traceback.\n",
                        f"SystemExit: {'' if code_ is None else code_}\n",
                    ],
                }
            )
        except BaseException as exc:  # the cell's own failure, KeyboardInterrupt included
            self._error(exc, syntax=False)

    def run_nested(self, cell: str) -> None:
        """A cell inside a cell (``%%capture``, ``get_ipython().run_cell``): no new count, errors shown."""
        self._run(self.count, cell, nested=True)

    @contextlib.contextmanager
    def capture(self, stdout: bool, stderr: bool, display: bool) -> Iterator[S.CapturedIO]:
        """``%%capture``: sys.stdout / sys.stderr and display() outputs kept instead of sent."""
        out, err = StringIO() if stdout else None, StringIO() if stderr else None
        outputs: list[dict[str, Any]] = []
        saved = (sys.stdout, sys.stderr, self.sink)
        captured = S.CapturedIO(out, err, outputs)
        captured._display = self.display_data
        if out is not None:
            sys.stdout = out
        if err is not None:
            sys.stderr = err
        if display:
            self.sink = outputs
        try:
            yield captured
        finally:
            sys.stdout, sys.stderr, self.sink = saved

    def _exec(self, code_obj: types.CodeType) -> Any:
        outer, self.interruptible = self.interruptible, True
        try:
            result = eval(code_obj, self.ns)
            if code_obj.co_flags & CO_COROUTINE and result is not None:
                import asyncio

                if self.loop is None:
                    self.loop = asyncio.new_event_loop()
                result = self.loop.run_until_complete(result)
            return result
        finally:
            self.interruptible = outer

    def _displayhook(self, n: int, value: Any) -> None:
        if value is None:
            return
        self.ns["___"], self.ns["__"], self.ns["_"] = self.ns.get("__"), self.ns.get("_"), value
        self.ns[f"_{n}"] = value
        self.out[n] = value
        data = D.mime_bundle(value)
        if self.sink is not None:
            self.sink.append(data)
            return
        self._flush_streams()
        self._send({"type": "display", "main": True, "data": data})

    def _error(self, exc: BaseException, syntax: bool) -> None:
        self._flush_streams()
        if isinstance(exc, S.UsageError):  # IPython prints it; ipykernel's reply carries it
            with contextlib.suppress(Exception):
                print(f"UsageError: {exc}", file=sys.stderr)
            self._flush_streams()
            self._send({"type": "error", "ename": "UsageError", "evalue": E.safe_str(exc), "traceback": []})
            return
        self._send(
            {
                "type": "error",
                "ename": type(exc).__name__,
                "evalue": E.safe_str(exc),
                "traceback": E.format_traceback(exc, syntax, Kernel._run.__code__.co_filename),
            }
        )


class StdinNotImplementedError(NotImplementedError):
    """ipykernel's error for input() when the frontend takes no input (E2B never does)."""


def _no_input(prompt: object = "") -> str:
    raise StdinNotImplementedError("raw_input was called, but this frontend does not support input requests.")


def _modified_open(file: Any, *args: Any, **kwargs: Any) -> Any:
    """IPython's ``open``: the kernel's own standard streams are refused."""
    if file in {0, 1, 2}:
        raise ValueError(
            f"IPython won't let you open fd={file} by default "
            "as it is likely to crash IPython. If you know what you are doing, "
            "you can use builtins' open."
        )
    return open(file, *args, **kwargs)


def _text_stream(fd: int) -> Any:
    import io

    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)


def _ends_with_semicolon(code: str) -> bool:
    """IPython's rule: a trailing ``;`` (comments aside) hides the last expression's value."""
    return T.semicolon_at_end(code)


def main() -> None:
    """Take over fds 0-2, report ready, then serve requests until stdin closes."""
    ctrl_in = os.dup(0)
    ctrl_out = os.dup(1)  # dup'ed fds are not inherited by the cell's children
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    channel = Channel(ctrl_out)
    lock = threading.Lock()
    captures = [Capture("stdout", 1, channel, lock), Capture("stderr", 2, channel, lock)]
    kernel = Kernel(channel, captures, lock)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as the kernel
    channel.send({"type": "ready", "pid": os.getpid()})
    reader = os.fdopen(ctrl_in, "rb")
    for raw in reader:
        try:
            request = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(request, dict):
            continue
        if request.get("op") == "limits":
            D.set_limits(request.get("message_bytes"))
        elif request.get("op") == "chdir":
            # E2B's server runs `%cd <cwd>` for a context: an unusable directory leaves it where it was
            with contextlib.suppress(OSError):
                os.chdir(str(request.get("path")))
                kernel.ns["_dh"].append(pathlib.Path(os.getcwd()))
        elif request.get("op") == "execute":
            kernel.execute(str(request.get("id")), str(request.get("code", "")), bool(request.get("silent")))
            if kernel.exit_requested:
                break
    os._exit(0)  # daemon threads and a cell's leftovers must not keep the kernel alive


if __name__ in ("__main__", "__e2b_kernel__"):
    main()
