"""Length-prefixed frames on the emulator <-> sandbox init control socket.

Both ends use this module: the emulator (``namespaces``) and the sandbox's init (``sandbox_init``).
A message is one JSON frame, optionally followed by one raw data frame (``has_data``).
Requests carry an ``id`` that the reply repeats, so a reply can never be taken for the
answer to another request; a reader caps the frame sizes it accepts.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

_FRAME = struct.Struct(">I")
#: Largest frame either side accepts (a file read or written in one piece).
MAX_FRAME = (1 << 31) - 1


def send(sock: socket.socket, header: dict[str, Any], data: bytes | None = None) -> None:
    """One JSON frame, then ``data`` as a raw frame when given (``has_data`` is set accordingly)."""
    header = {**header, "has_data": data is not None}
    payload = json.dumps(header).encode()
    parts = [_FRAME.pack(len(payload)), payload]
    if data is not None:
        if len(data) > MAX_FRAME:
            raise ValueError(f"{len(data)} bytes do not fit in one frame (max {MAX_FRAME})")
        parts += [_FRAME.pack(len(data)), data]
    sock.sendall(b"".join(parts))


def _exact(sock: socket.socket, size: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(min(size - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket, max_size: int = MAX_FRAME) -> bytes | None:
    """One frame's payload, or None at EOF; ValueError above ``max_size`` bytes."""
    head = _exact(sock, _FRAME.size)
    if head is None:
        return None
    (size,) = _FRAME.unpack(head)
    if size > max_size:
        raise ValueError(f"frame of {size} bytes is too large (max {max_size})")
    return _exact(sock, size)


def recv(
    sock: socket.socket, max_header: int = MAX_FRAME, max_data: int = MAX_FRAME
) -> tuple[dict[str, Any], bytes | None] | None:
    """One message (header, data or None), or None at EOF."""
    raw = recv_frame(sock, max_header)
    if raw is None:
        return None
    header = json.loads(raw)
    if not isinstance(header, dict):
        raise ValueError("control message is not a JSON object")
    data = recv_frame(sock, max_data) if header.get("has_data") else None
    if header.get("has_data") and data is None:
        return None  # EOF between the header and its data
    return header, data
