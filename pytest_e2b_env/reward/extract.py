"""Code extraction and the host-side syntax check: every malformed completion becomes a reason.

Which fence counts (the catalog's fixed interpretation): the **first** fenced block whose info
string is empty, ``python``, ``py`` or ``python3`` (exact, lowercase). A fence is a line that
starts with three or more backticks (up to three spaces of indentation allowed); the block ends
at the next line made only of at least as many backticks. Blocks with any other info string
(``json``, ``Python``, ``bash``...) are skipped; an unclosed block is no code.

The source is parsed, never executed, on the host. Any parser failure (``SyntaxError``,
``MemoryError``, ``RecursionError``, ``ValueError``, ...) is a ``syntax`` reason, never an
exception, so a hostile completion cannot stop a training run here.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

CODE_LIMIT_BYTES = 65536
FENCE_INFO = frozenset({"", "python", "py", "python3"})
_OPEN = re.compile(r"^ {0,3}(?P<ticks>`{3,})(?P<info>[^`\n]*)$")


@dataclass(frozen=True)
class Extracted:
    """The program of one completion, or why there is none (``code`` is then None)."""

    code: str | None
    reason: str | None = None
    detail: str = ""


def completion_text(completion: Any) -> str | None:
    """The text TRL hands us: a plain string, or the last assistant message's string content."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list | tuple):
        for message in reversed(completion):
            if isinstance(message, dict) and message.get("role") == "assistant":
                content = message.get("content")
                return content if isinstance(content, str) else None
    return None


def find_code_block(text: str) -> str | None:
    """The body of the first qualifying fenced block, or None."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opened = _OPEN.match(lines[index])
        index += 1
        if not opened:
            continue
        ticks = len(opened["ticks"])
        close = re.compile(r"^ {0,3}`{" + str(ticks) + r",}\s*$")
        body: list[str] = []
        while index < len(lines) and not close.match(lines[index]):
            body.append(lines[index])
            index += 1
        if index >= len(lines):
            return None  # unclosed: the rest of the text is not a program
        index += 1
        if opened["info"].strip() in FENCE_INFO:
            return "\n".join(body) + "\n"
    return None


#: How many times a parse that raised SystemError is tried again (see :func:`syntax_problem`).
SYSTEM_ERROR_RETRIES = 2


def syntax_problem(code: str) -> str | None:
    """None when ``code`` parses as Python 3; otherwise the parser failure, named.

    ``SystemError`` is the interpreter's, not the candidate's: CPython 3.11 keeps one AST depth
    counter per interpreter, so a parse nested in ours (a finalizer logging a traceback while the
    collector runs mid-parse) or one in another thread makes ours raise "AST constructor
    recursion depth mismatch". Such a parse is tried again before it counts.
    """
    for _ in range(1 + SYSTEM_ERROR_RETRIES):
        try:
            code.encode("utf-8")
            ast.parse(code, filename="<candidate>", mode="exec")
        except SystemError:
            continue  # the interpreter's, see above: parse again
        except Exception as exc:  # MemoryError/RecursionError/ValueError/SyntaxError: candidate faults
            return type(exc).__name__
        return None
    return "SystemError"


def extract_code(completion: Any) -> Extracted:
    """Extract and syntax-check the program of one completion; never raises for any input."""
    text = completion_text(completion)
    if text is None:
        return Extracted(None, "bad_content", f"completion content is {type(completion).__name__}")
    code = find_code_block(text)
    if code is None:
        return Extracted(None, "no_code", "no fenced block with info '', python, py or python3")
    try:
        size = len(code.encode("utf-8"))
    except UnicodeEncodeError:
        return Extracted(None, "syntax", "not encodable as UTF-8")
    if size > CODE_LIMIT_BYTES:
        return Extracted(None, "code_too_large", f"{size} bytes > {CODE_LIMIT_BYTES}")
    problem = syntax_problem(code)
    if problem is not None:
        return Extracted(None, "syntax", problem)
    return Extracted(code)
