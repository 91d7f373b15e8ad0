"""The emulator's listening socket and key: cheap, so misuse is reported before heavy imports."""

from __future__ import annotations

import errno
import secrets
import socket

from pytest_e2b_env.errors import EmulatorError


def new_api_key() -> str:
    """A fresh key shaped like E2B's (``e2b_`` + 40 hex digits)."""
    return "e2b_" + secrets.token_hex(20)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket, or :class:`EmulatorError` naming the bad value and the fix."""
    if not 0 <= port <= 65535:
        raise EmulatorError(f"--port {port} is out of range; use 1-65535, or 0 for a free port")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise EmulatorError(f"--host {host!r} does not resolve ({exc.strerror}); use e.g. 127.0.0.1") from exc
    family, _, _, _, address = infos[0]
    # proto must be IPPROTO_TCP: asyncio only sets TCP_NODELAY on such sockets, and without it
    # every response sent as headers + body waits out the client's 40 ms delayed ACK (Nagle)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by accepted sockets
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise EmulatorError(
                f"port {port} on {host} is in use; pick another --port, or 0 for a free one"
            ) from exc
        raise EmulatorError(
            f"cannot listen on {host}:{port}: {exc.strerror}; try --host 127.0.0.1 --port 0"
        ) from exc
    sock.listen(1024)
    sock.setblocking(False)
    return sock
