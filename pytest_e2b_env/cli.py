"""The ``pytest-e2b-env`` console script: a thin dispatcher.

Each subcommand lives beside the code it drives and is imported only when chosen, so
``pytest-e2b-env --help`` stays instant and one broken subsystem cannot break the others.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

# subcommand -> (module with ``main(argv) -> int``, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "emulator": ("pytest_e2b_env.emulator.cli", "serve the local E2B emulator"),
    "validate": ("pytest_e2b_env.catalog.validate", "run the case catalog and write an evidence bundle"),
    "verify-evidence": ("pytest_e2b_env.evidence.verify", "recheck an evidence bundle"),
    "reap": ("pytest_e2b_env.reap", "kill sandboxes tagged by this tool"),
    "smoke": ("pytest_e2b_env.smoke", "run the reward or episode smoke and print a JSON receipt"),
    "train": ("pytest_e2b_env.training.cli", "TRL GRPO on the reward pool or the episode (same as train.py)"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: pytest-e2b-env COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {text}" for name, (_, text) in COMMANDS.items()]
    lines += ["", "Run 'pytest-e2b-env COMMAND --help' for a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
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
