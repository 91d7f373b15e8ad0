"""``pytest-e2b-env emulator``: serve the local E2B emulator until SIGINT/SIGTERM.

The first stdout lines are shell-sourceable (``E2B_API_URL=...``, ``E2B_SANDBOX_URL=...``,
``E2B_API_KEY=...``), then a ``# isolation=...`` comment; nothing else goes to stdout.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from pytest_e2b_env.errors import EmulatorError


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
    parser.add_argument(
        "--control-key-stdin",
        action="store_true",
        help="read the control API's key from the first line of stdin (default: the API key guards "
        "it); used by Emulator(), so code holding the API key cannot reach the control API",
    )
    parser.add_argument(
        "--limits",
        default="",
        metavar="JSON",
        help="caps on untrusted input as a JSON object, e.g. '{\"file_bytes\": 1048576}' "
        "(pytest-e2b-env docs emulator)",
    )
    return parser


def main(argv: list[str]) -> int:
    """Parse ``argv``, bind, announce, serve; 0 after a signal, 2 on misuse."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed the one-line reason
        return int(exc.code or 0)
    from pytest_e2b_env.emulator.limits import Limits
    from pytest_e2b_env.emulator.listen import serve_forever

    try:
        limits = Limits.parse(args.limits)
    except ValueError as exc:  # a bad --limits is misuse: one line, exit 2
        print(f"pytest-e2b-env emulator: {exc}", file=sys.stderr)
        return 2
    control_key = None
    if args.control_key_stdin:
        control_key = sys.stdin.readline().strip()
        if not control_key:
            print("pytest-e2b-env emulator: --control-key-stdin: no key on stdin", file=sys.stderr)
            return 2
    try:
        serve_forever(
            args.host,
            args.port,
            isolation=None if args.isolation == "auto" else args.isolation,
            die_with_parent=args.die_with_parent,
            limits=limits,
            control_key=control_key,
        )
    except EmulatorError as exc:
        print(f"pytest-e2b-env emulator: {exc}", file=sys.stderr)
        return 2
    return 0
