"""``pytest-e2b-env emulator``: serve the local E2B emulator until SIGINT/SIGTERM.

The first stdout lines are shell-sourceable (``E2B_API_URL=...``, ``E2B_SANDBOX_URL=...``,
``E2B_API_KEY=...``), then a ``# isolation=...`` comment; nothing else goes to stdout.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
from typing import NoReturn

from pytest_e2b_env.errors import EmulatorError
from pytest_e2b_env.target.settings import emulator_key, emulator_owner

PR_SET_PDEATHSIG = 1


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a port number; use 1-65535, or 0 for a free one"
        ) from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is out of range; use 1-65535, or 0 for a free one")
    return port


class _OneLineParser(argparse.ArgumentParser):
    """Misuse is one line on stderr (no usage dump) and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="pytest-e2b-env emulator",
        description="Serve a local E2B-compatible API + envd for the real e2b SDK (see the printed lines).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=0, help="port to listen on (default 0: a free port)")
    parser.add_argument(
        "--isolation",
        choices=("auto", "namespaces", "process"),
        default="auto",
        help="sandbox isolation level (default auto: namespaces when possible)",
    )
    parser.add_argument(
        "--die-with-parent",
        action="store_true",
        help="exit (killing every sandbox) when the parent process dies; used by Emulator()",
    )
    return parser


def _die_with_parent() -> None:
    """Ask the kernel for SIGTERM when our parent dies, and handle the race where it already has."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    owner = emulator_owner()  # pid of the process that started us (set by Emulator)
    if os.getppid() == 1 or (owner and os.getppid() != owner):  # the owner died before prctl
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str]) -> int:
    """Parse ``argv``, bind, announce, serve; 0 after a signal, 2 on misuse."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed the one-line reason
        return int(exc.code or 0)
    from pytest_e2b_env.emulator.listen import bind, new_api_key

    try:
        sock = bind(args.host, args.port)
    except EmulatorError as exc:
        print(f"pytest-e2b-env emulator: {exc}", file=sys.stderr)
        return 2
    if args.die_with_parent:
        _die_with_parent()
    from pytest_e2b_env.emulator import envd_stubs

    envd_stubs.load()  # before the server imports them: skips ~2 s of SDK import
    from pytest_e2b_env.emulator.server import load_backend, serve

    backend = load_backend(None if args.isolation == "auto" else args.isolation)
    serve(sock, backend, emulator_key() or new_api_key())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
