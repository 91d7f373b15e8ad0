"""``(status, headers, body)`` answer triples in E2B's JSON shape, shared by the emulator and the proxy."""

from __future__ import annotations

import json
from typing import Any

Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


def answer(status: int, obj: Any = None, headers: list[tuple[bytes, bytes]] | None = None) -> Answer:
    """A JSON (or empty, for ``obj=None``) answer triple."""
    extra = list(headers or [])
    if obj is None:
        return status, extra, b""
    return status, [(b"content-type", b"application/json"), *extra], json.dumps(obj).encode()


def error(status: int, message: str) -> Answer:
    """E2B's error body."""
    return answer(status, {"code": status, "message": message})
