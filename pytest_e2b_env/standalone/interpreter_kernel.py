"""The Python kernel that runs INSIDE a sandbox: persistent globals, IPython-shaped messages.

Started by the emulator through the sandbox's own process machinery (``python3 -c
<bootstrap>``, its assembled source arriving on stdin), so it sees exactly the files,
namespaces and limits a command sees. It imports the standard library only: the sandbox's
``python3`` has none of the emulator's packages. It imports no other standalone module either,
so the sandbox receives this file as it is.

Protocol. Requests on the original stdin, one JSON object per line::

    {"op": "limits", "message_bytes": 16777216}
    {"op": "execute", "id": "<cell id>", "code": "...", "envs": {"K": "V"}}
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
"""

from __future__ import annotations

import ast
import base64
import codecs
import contextlib
import json
import linecache
import os
import pprint
import select
import sys
import threading
import time
import tokenize
import traceback
import types
import zlib
from io import StringIO
from typing import Any

STREAM_CHUNK = 32 * 1024  # largest stream message, like envd's output events
FLUSH_S = 0.2  # ipykernel's OutStream flush interval: quick prints arrive as one message
MESSAGE_LIMIT = 16 * 1024 * 1024  # one message, framing excluded (the emulator's limits op sets it)
MIME_LIMIT = 4 * 1024 * 1024  # one representation larger than this is dropped (noted on stderr)
BUNDLE_LIMIT = 8 * 1024 * 1024  # all representations of one value
REPR_LIMIT = 1024 * 1024  # text/plain is cut here
TEXT_LIMIT = 1024 * 1024  # an error's value, and its traceback, are cut here
LINE_LIMIT = 2000  # one source line quoted in a traceback
DASHES = "-" * 75
CUT_NOTE = "\n[... cut: over the kernel's message limit]"

_REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("application/pdf", "_repr_pdf_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
)


class Channel:
    """The private protocol pipe (never inherited by the cell's children)."""

    def __init__(self, fd_out: int) -> None:
        self.fd = fd_out
        self.lock = threading.Lock()
        self.cell: str | None = None  # the cell whose output is being captured

    def send(self, message: dict[str, Any]) -> None:
        body = fit(message, MESSAGE_LIMIT)
        data = b"%08x" % len(body) + body
        with self.lock:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view) :]


def set_limits(message_bytes: Any) -> None:
    """Take the emulator's message cap: a value's representations keep to 7/8 of it (text/plain
    and the message's own fields need the rest), one representation to 4 MiB at most."""
    global MESSAGE_LIMIT, MIME_LIMIT, BUNDLE_LIMIT
    if isinstance(message_bytes, int) and not isinstance(message_bytes, bool) and message_bytes >= 1 << 16:
        MESSAGE_LIMIT = message_bytes
        BUNDLE_LIMIT = min(8 * 1024 * 1024, message_bytes - message_bytes // 8)
        MIME_LIMIT = min(4 * 1024 * 1024, BUNDLE_LIMIT)


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
        # the namespace is __main__'s own dict, as in IPython, so pickle (multiprocessing) finds
        # functions and classes defined in cells
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        self.ns: dict[str, Any] = main.__dict__
        self.ns.update(
            {
                "__builtins__": __import__("builtins"),
                "In": self.inputs,
                "Out": self.out,
                "display": self.display,
                "exit": self._ask_exit,
                "quit": self._ask_exit,
                "input": _no_input,
            }
        )
        self.loop: Any = None
        self.stdout = _text_stream(1)
        self.stderr = _text_stream(2)

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
        self._flush_streams()
        for obj in objs:
            self._send({"type": "display", "main": False, "data": mime_bundle(obj)})

    def _ask_exit(self, *_a: Any, **_kw: Any) -> None:
        # ipykernel stops its loop shortly after the cell: the cell ends normally, the kernel
        # process then exits and is started afresh (state lost)
        self.exit_requested = True

    # ------------------------------------------------------------------ cells
    def execute(self, cell_id: str, code: str, envs: dict[str, str]) -> None:
        self.channel.cell = cell_id
        self.count += 1
        n = self.count
        self.inputs.append(code)
        self.ns["_i"] = code
        self._send({"type": "count", "n": n})
        saved = {k: os.environ.get(k) for k in envs}
        os.environ.update(envs)
        sys.stdout, sys.stderr = self.stdout, self.stderr
        try:
            self._run(n, code)
        finally:
            for key, old in saved.items():
                if old is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = old
            self._flush_streams()
            if self.exit_requested:  # so the next cell waits for a fresh kernel, not this one
                self._send({"type": "exiting"})
            self._send({"type": "done"})
            self.channel.cell = None

    def _run(self, n: int, code: str) -> None:
        filename = f"/tmp/ipykernel_{os.getpid()}/{zlib.crc32(code.encode('utf-8', 'replace'))}.py"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        cells[filename] = n
        try:
            tree = ast.parse(code, filename)
        except (SyntaxError, ValueError) as exc:  # ValueError: source with NUL bytes
            self._error(exc, syntax=True)
            return
        last: ast.Expression | None = None
        tail = tree.body[-1] if tree.body else None
        if isinstance(tail, ast.Expr) and not _ends_with_semicolon(code):
            tree.body.pop()
            last = ast.Expression(tail.value)
        flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
        try:
            body = compile(tree, filename, "exec", flags=flags, dont_inherit=True)
            self._eval(body)
            if last is not None:
                value = self._eval(compile(last, filename, "eval", flags=flags, dont_inherit=True))
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

    def _eval(self, code_obj: types.CodeType) -> Any:
        result = eval(code_obj, self.ns)
        if code_obj.co_flags & 0x80 and result is not None:  # CO_COROUTINE: top-level await
            import asyncio

            if self.loop is None:
                self.loop = asyncio.new_event_loop()
            result = self.loop.run_until_complete(result)
        return result

    def _displayhook(self, n: int, value: Any) -> None:
        if value is None:
            return
        self.ns["___"], self.ns["__"], self.ns["_"] = self.ns.get("__"), self.ns.get("_"), value
        self.ns[f"_{n}"] = value
        self.out[n] = value
        self._flush_streams()
        self._send({"type": "display", "main": True, "data": mime_bundle(value)})

    def _error(self, exc: BaseException, syntax: bool) -> None:
        self._flush_streams()
        self._send(
            {
                "type": "error",
                "ename": type(exc).__name__,
                "evalue": _safe_str(exc),
                "traceback": format_traceback(exc, syntax),
            }
        )


cells: dict[str, int] = {}  # compiled cell file name -> execution count, for tracebacks


class StdinNotImplementedError(NotImplementedError):
    """ipykernel's error for input() when the frontend takes no input (E2B never does)."""


def _no_input(prompt: object = "") -> str:
    raise StdinNotImplementedError("raw_input was called, but this frontend does not support input requests.")


def _text_stream(fd: int) -> Any:
    import io

    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)


def _ends_with_semicolon(code: str) -> bool:
    """IPython's rule: a trailing ``;`` (comments aside) hides the last expression's value."""
    try:
        tokens = [
            t
            for t in tokenize.generate_tokens(StringIO(code).readline)
            if t.type
            not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT)
            and t.type != tokenize.DEDENT
        ]
    except (tokenize.TokenError, SyntaxError):
        return False
    return bool(tokens) and tokens[-1].string == ";"


def _safe_str(obj: Any) -> str:
    try:
        return str(obj)[:TEXT_LIMIT]
    except Exception:
        return f"<unprintable {type(obj).__name__} object>"


def _plain(value: Any) -> str:
    """text/plain as IPython's pretty printer gives it for builtin values (wrapped at 79 columns)."""
    try:
        if isinstance(value, (dict, list, tuple, set, frozenset)):
            text = pprint.pformat(value, width=79, sort_dicts=False)
        else:
            text = repr(value)
    except Exception as exc:
        text = f"<repr of {type(value).__name__} failed: {type(exc).__name__}>"
    return text[:REPR_LIMIT]


def mime_bundle(value: Any) -> dict[str, Any]:
    """The representations of ``value`` by IPython's ``_repr_*_`` protocol, text/plain always."""
    data: dict[str, Any] = {}
    bundle = _call_repr(value, "_repr_mimebundle_", include=None, exclude=None)
    if isinstance(bundle, tuple):
        bundle = bundle[0]
    if isinstance(bundle, dict):
        data.update({str(k): v for k, v in bundle.items()})
    for mime, method in _REPR_METHODS:
        if mime in data:
            continue
        rendered = _call_repr(value, method)
        if isinstance(rendered, tuple):  # (data, metadata)
            rendered = rendered[0]
        if rendered is not None:
            data[mime] = rendered
    total = 0
    for mime, rendered in list(data.items()):
        if isinstance(rendered, (bytes, bytearray)):
            rendered = base64.b64encode(bytes(rendered)).decode("ascii")
        try:
            size = len(json.dumps(rendered))
        except (TypeError, ValueError, RecursionError):
            rendered = _safe_str(rendered)[:REPR_LIMIT]
            size = len(json.dumps(rendered))
        if size > MIME_LIMIT or total + size > BUNDLE_LIMIT:
            del data[mime]
            os.write(2, f"display: {mime} representation dropped ({size} bytes, over the limit)\n".encode())
            continue
        total += size
        data[mime] = rendered
    if "text/plain" not in data:
        data["text/plain"] = _plain(value)
    return data


def _call_repr(value: Any, method: str, **kwargs: Any) -> Any:
    if isinstance(value, type):  # classes have the methods unbound; IPython skips them too
        return None
    try:
        func = getattr(value, method, None)
        if not callable(func):
            return None
        return func(**kwargs)
    except Exception:  # a broken _repr_*_ only loses that representation, as in IPython
        return None


def format_traceback(exc: BaseException, syntax: bool) -> list[str]:
    """IPython's traceback blocks, without colour codes; cells are named ``Cell In[N]``."""
    name = type(exc).__name__
    if syntax and isinstance(exc, SyntaxError):
        where = cells.get(exc.filename or "")
        place = f"Cell In[{where}]" if where else f'File "{exc.filename}"'
        head = f"  {place}, line {exc.lineno}\n"
        line = (exc.text or "").rstrip("\n")[:LINE_LIMIT]
        caret = ""
        if line and exc.offset:
            caret = " " * (4 + max(exc.offset - 1, 0)) + "^\n"
        body = f"    {line}\n{caret}" if line else ""
        return [head + body + "\n", f"{name}: {exc.msg}\n"]
    # blocks end in their own newlines: E2B's server joins them with "" into one text
    blocks = [f"{DASHES}\n{name:<42}Traceback (most recent call last)\n"]
    frames = traceback.extract_tb(exc.__traceback__)
    own = Kernel._run.__code__.co_filename
    while frames and frames[0].filename == own:  # the kernel's own frames above the cell
        frames.pop(0)
    for frame in frames:
        n = cells.get(frame.filename)
        lineno = frame.lineno or 0
        if n is not None:
            head = f"Cell In[{n}], line {lineno}"
            if frame.name != "<module>":
                head += f", in {frame.name}()"
        else:
            head = f"File {frame.filename}:{lineno}, in {frame.name}()"
        lines = []
        for i in range(max(1, lineno - 2), lineno + 3):
            text = linecache.getline(frame.filename, i)
            if not text:
                continue
            arrow = f"----> {i}" if i == lineno else f"      {i}"
            lines.append(f"{arrow} {text.rstrip()[:LINE_LIMIT]}")
        blocks.append(head + "\n" + "\n".join(lines) + "\n\n")
    value = _safe_str(exc)
    blocks.append(f"{name}: {value}" if value else name)
    if sum(len(b) for b in blocks) > TEXT_LIMIT:  # deep recursion: keep the head and the tail
        blocks = [*blocks[:4], "...\n\n", *blocks[-4:]]
    return blocks


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
            set_limits(request.get("message_bytes"))
        elif request.get("op") == "chdir":
            # like IPython's %cd: an unusable directory leaves the kernel where it was
            with contextlib.suppress(OSError):
                os.chdir(str(request.get("path")))
        elif request.get("op") == "execute":
            envs = request.get("envs") or {}
            envs = {str(k): str(v) for k, v in envs.items()} if isinstance(envs, dict) else {}
            kernel.execute(str(request.get("id")), str(request.get("code", "")), envs)
            if kernel.exit_requested:
                break
    os._exit(0)  # daemon threads and a cell's leftovers must not keep the kernel alive


if __name__ in ("__main__", "__e2b_kernel__"):
    main()
