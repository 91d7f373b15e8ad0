"""The ``pytest-e2b-env`` console script: a thin dispatcher over this package's commands.

Every command's argument parsing and ``main(argv) -> int`` lives here, in ``cli/<command>.py``,
above every library layer: the emulator, proxy, reward, episode, catalog, evidence, target and
training never import this package. Each command module is imported only when chosen, so
``pytest-e2b-env --help`` stays instant and one broken subsystem cannot break the others.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

# subcommand -> (module with ``main(argv) -> int``, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "emulator": ("pytest_e2b_env.cli.emulator", "serve the local E2B emulator"),
    "validate": ("pytest_e2b_env.cli.validate", "run the case catalog and write an evidence bundle"),
    "verify-evidence": ("pytest_e2b_env.cli.verify", "recheck an evidence bundle"),
    "explore": ("pytest_e2b_env.cli.explore", "search fault schedules against reward code, shrink, replay"),
    "reap": ("pytest_e2b_env.cli.reap", "kill sandboxes tagged by this tool"),
    "smoke": ("pytest_e2b_env.cli.smoke", "run the reward or episode smoke and print a JSON receipt"),
    "train": ("pytest_e2b_env.cli.train", "TRL GRPO on your validated subject and tasks (same as train.py)"),
    "docs": ("pytest_e2b_env.cli.docs", "print the documentation shipped with the package (docs TOPIC)"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: pytest-e2b-env [--version] COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {text}" for name, (_, text) in COMMANDS.items()]
    lines += ["", "Run 'pytest-e2b-env COMMAND --help' for a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch ``argv`` (default ``sys.argv[1:]``) to one command; its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:  # no command is a usage error (exit 2), not a successful run
        print(_usage(), file=sys.stderr)
        return 2
    if args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    if args[0] in {"-V", "--version"}:
        from pytest_e2b_env import __version__

        print(f"pytest-e2b-env {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(
            f"pytest-e2b-env: unknown command {name!r}; choose one of: {', '.join(COMMANDS)}", file=sys.stderr
        )
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
