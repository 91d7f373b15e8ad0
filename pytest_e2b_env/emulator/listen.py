"""The emulator's listening socket and key: cheap, so misuse is reported before heavy imports."""

from __future__ import annotations

import errno
import secrets
import socket
from typing import TYPE_CHECKING

from pytest_e2b_env.errors import EmulatorError

if TYPE_CHECKING:
    from pytest_e2b_env.emulator.limits import Limits


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


def _die_with_parent() -> None:
    """Ask the kernel for SIGTERM when our parent dies, and handle the race where it already has."""
    import os
    import signal

    from pytest_e2b_env.settings import emulator_owner
    from pytest_e2b_env.standalone import linux

    linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGTERM)
    owner = emulator_owner()  # pid of the process that started us (set by Emulator)
    if os.getppid() == 1 or (owner and os.getppid() != owner):  # the owner died before prctl
        os.kill(os.getpid(), signal.SIGTERM)


def serve_forever(
    host: str,
    port: int,
    *,
    isolation: str | None = None,
    die_with_parent: bool = False,
    limits: Limits | None = None,
    control_key: str | None = None,
) -> None:
    """Bind, announce (stdout), serve until SIGINT/SIGTERM, killing every sandbox on the way out.

    The bind comes first and raises :class:`EmulatorError` naming the bad value, before the heavy
    imports. ``die_with_parent`` ties this process to its starter (``Emulator()``);
    ``control_key`` guards the control API (default: the API key).
    """
    sock = bind(host, port)
    unprivileged = None
    if isolation != "process":
        # Not root: the namespaces level runs in a user namespace of this process's own, entered
        # before any thread exists (the server's threads start below).
        from pytest_e2b_env.emulator.isolation.rootless import enter

        _, why = enter()
        unprivileged = why or None
    if die_with_parent:  # after entering: a change of credentials clears the parent-death signal
        _die_with_parent()
    from pytest_e2b_env.emulator import envd_stubs

    envd_stubs.load()  # before the server imports them: skips ~2 s of SDK import
    from pytest_e2b_env.emulator.server import load_backend, serve
    from pytest_e2b_env.settings import emulator_key

    backend = load_backend(isolation, limits, unprivileged)
    serve(sock, backend, emulator_key() or new_api_key(), limits=limits, control_key=control_key)
