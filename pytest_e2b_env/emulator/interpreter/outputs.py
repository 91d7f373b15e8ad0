"""Turn the in-sandbox kernel's messages into the JSON lines E2B's code-interpreter streams.

The kernel runs the candidate's code, so its messages are untrusted: every field is checked
and anything malformed is dropped rather than forwarded. The shapes follow E2B's server
(``template/server`` of e2b-dev/code-interpreter): ``Result`` maps a MIME bundle to named
fields and strips one pair of quotes from ``text``; errors join their traceback blocks.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

#: MIME type -> the field of E2B's ``Result``; whatever is left goes to ``extra``.
MIME_FIELDS = (
    ("text/html", "html"),
    ("text/markdown", "markdown"),
    ("image/svg+xml", "svg"),
    ("image/png", "png"),
    ("image/jpeg", "jpeg"),
    ("application/pdf", "pdf"),
    ("text/latex", "latex"),
    ("application/json", "json"),
    ("application/javascript", "javascript"),
    ("e2b/data", "data"),
    ("e2b/chart", "chart"),
)

END_OF_EXECUTION: dict[str, Any] = {"type": "end_of_execution"}


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def error_line(name: str, value: str, traceback: str = "") -> dict[str, Any]:
    """An ``error`` line (E2B's own ``ContextRestarting``, ``UnexpectedEndOfExecution``, ...)."""
    return {"type": "error", "name": name, "value": value, "traceback": traceback}


def stream_line(name: str, text: str) -> dict[str, Any]:
    """A ``stdout`` / ``stderr`` line."""
    return {"type": name, "text": text, "timestamp": _now()}


def result_line(data: dict[str, Any], is_main_result: bool) -> dict[str, Any]:
    """E2B's ``Result`` for a MIME bundle (``None`` fields left out, as ``exclude_none`` does)."""
    bundle = dict(data)
    text = bundle.pop("text/plain", None)
    if isinstance(text, str) and len(text) >= 1:
        for quote in ("'", '"'):
            if text.startswith(quote) and text.endswith(quote):
                text = text[1:-1]
                break
    line: dict[str, Any] = {"type": "result"}
    if text is not None:
        line["text"] = text
    for mime, name in MIME_FIELDS:
        value = bundle.pop(mime, None)
        if value is not None:
            line[name] = value
    line["extra"] = bundle
    line["is_main_result"] = is_main_result
    return line


def convert(message: Any) -> dict[str, Any] | None:
    """The E2B line for one kernel message, or None when it is malformed or internal."""
    if not isinstance(message, dict):
        return None
    kind = message.get("type")
    if kind == "count":
        n = message.get("n")
        if isinstance(n, int) and not isinstance(n, bool):
            return {"type": "number_of_executions", "execution_count": n}
    elif kind == "stream":
        name, text = message.get("name"), message.get("text")
        if name in ("stdout", "stderr") and isinstance(text, str):
            return stream_line(name, text)
    elif kind == "display":
        data = message.get("data")
        if isinstance(data, dict) and all(isinstance(k, str) for k in data):
            return result_line(data, bool(message.get("main")))
    elif kind == "error":
        ename, evalue, tb = message.get("ename"), message.get("evalue"), message.get("traceback")
        if isinstance(ename, str) and isinstance(evalue, str) and isinstance(tb, list):
            return error_line(ename, evalue, "".join(t for t in tb if isinstance(t, str)))
    return None
