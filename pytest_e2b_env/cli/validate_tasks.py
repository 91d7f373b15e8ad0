"""``pytest-e2b-env validate --tasks PATH``: only the task checks (oracle, floor, repeat) of a dataset.

The same pytest run as ``validate`` (its options, its evidence bundle), with the tasks set and
only the ``e2b_task`` items selected. Which subject the tasks go through follows their rows:
``test_cases`` makes them reward tasks, ``verification`` repair tasks (``--task-kind`` decides
otherwise); the subject is ``--reward-subject`` / ``--episode-subject`` (default: the reference).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def wants_tasks(argv: list[str]) -> bool:
    """Whether a ``validate`` command line asks for the task checks."""
    return any(a == "--tasks" or a.startswith("--tasks=") for a in argv)


def build_parser() -> argparse.ArgumentParser:
    """``validate``'s parser plus the task options."""
    from pytest_e2b_env.cli.validate import build_parser as validate_parser

    parser = validate_parser()
    parser.prog = "pytest-e2b-env validate --tasks"
    parser.add_argument(
        "--tasks", required=True, metavar="PATH", help="task rows: a .json/.jsonl file or 'module:attr'"
    )
    parser.add_argument(
        "--task-kind", choices=("reward", "episode"), default=None, help="default: from the rows"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of each oracle for the repeat check")
    return parser


def task_kind(source: str) -> str:
    """``reward`` when the first row has ``test_cases``, ``episode`` when it has ``verification``."""
    from pytest_e2b_env.catalog.tasks.load import is_spec
    from pytest_e2b_env.errors import ConfigError

    if is_spec(source):
        raise ConfigError(
            f"--tasks {source!r}: say which subject checks them with --task-kind reward|episode"
        )
    text = Path(source).read_text(encoding="utf-8")
    first = (
        next((line for line in text.splitlines() if line.strip()), "") if source.endswith(".jsonl") else None
    )
    data = json.loads(first if first is not None else text)
    if isinstance(data, dict) and not ({"test_cases", "verification"} & set(data)):
        data = next((v for k, v in data.items() if not k.startswith("_") and isinstance(v, list)), [])
    row = data[0] if isinstance(data, list) and data else data
    if isinstance(row, dict) and "test_cases" in row:
        return "reward"
    if isinstance(row, dict) and "verification" in row:
        return "episode"
    raise ConfigError(
        f"--tasks {source!r}: the first row has neither 'test_cases' (reward) nor 'verification' (repair "
        "task); pass --task-kind"
    )


def pytest_args(options: argparse.Namespace) -> list[str]:
    """``validate``'s pytest command line, narrowed to the task checks of ``options.tasks``."""
    from pytest_e2b_env.catalog.tasks.load import is_spec
    from pytest_e2b_env.cli.validate import pytest_args as validate_args

    source = options.tasks if is_spec(options.tasks) else str(Path(options.tasks).resolve())
    kind = options.task_kind or task_kind(source)
    options.subject = kind
    return [
        *validate_args(options),
        "-o",
        f"e2b_{kind}_tasks={source}",
        "-o",
        f"e2b_task_repeats={options.repeats}",
        "-m",
        "e2b_task",
    ]


def main(argv: list[str], extra: list[str]) -> int:
    """Run the task checks; validate's exit status (2 for a bad task source or a usage error)."""
    import sys

    from pytest_e2b_env.cli.validate import USAGE, run_pytest
    from pytest_e2b_env.errors import ConfigError

    parser = build_parser()
    try:
        options = parser.parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code in (0, None) else USAGE
    try:
        args = pytest_args(options)
    except (ConfigError, OSError, ValueError) as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return USAGE
    subjects = {"reward": options.reward_subject, "episode": options.episode_subject}
    return run_pytest([*args, *extra], subjects, options.subject, parser.prog)
