"""A cell's error as IPython reports it: name, value and the traceback's text blocks (no colour codes)."""

from __future__ import annotations

import linecache
import traceback
from typing import Any

LINE_LIMIT = 2000  # one source line quoted in a traceback
TEXT_LIMIT = 1024 * 1024  # an error's value, and its traceback, are cut here
DASHES = "-" * 75

cells: dict[str, int] = {}  # compiled cell file name -> execution count, for tracebacks


def safe_str(obj: Any) -> str:
    try:
        return str(obj)[:TEXT_LIMIT]
    except Exception:
        return f"<unprintable {type(obj).__name__} object>"


def format_traceback(exc: BaseException, syntax: bool, own: str) -> list[str]:
    """IPython's traceback blocks; cells are ``Cell In[N]``; frames of file ``own`` above them are dropped."""
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
    value = safe_str(exc)
    blocks.append(f"{name}: {value}" if value else name)
    if sum(len(b) for b in blocks) > TEXT_LIMIT:  # deep recursion: keep the head and the tail
        blocks = [*blocks[:4], "...\n\n", *blocks[-4:]]
    return blocks
