"""``pytest-e2b-env validate``: run the case catalog against your code (or the bundled reference).

A thin wrapper over pytest with this plugin, run in the current directory with the project's
own pytest config (``pythonpath``, ``e2b_*`` keys, conftest hooks), so the CLI, CI and
``pytest`` share one code path and one evidence bundle format. Only the catalog runs: the
project's own test files are not collected. Subjects: those named on the command line, else
those the project's config sets, else (nothing set anywhere) the bundled reference code.
``--tasks PATH`` runs only the task checks (oracle, floor, repeat) of a dataset instead: the same
run with the tasks set and only the ``e2b_task`` items selected; the rows decide which subject
checks them (``test_cases``: reward, ``verification``: repair tasks) unless ``--task-kind`` says.

Exit status (:data:`EXIT_CODES`, docs/ci.md): 0 every case passed (or was skipped with a reason)
and the bundle is complete, 1 a case failed or the bundle is incomplete, 2 usage error, 3
internal error or a run that could not finish.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

OK, FAILED, USAGE, INTERNAL = 0, 1, 2, 3
#: pytest's exit status (``pytest.ExitCode``) -> validate's (OpenEnv RFC 008's four codes)
EXIT_CODES: dict[int, int] = {
    0: OK,  # OK
    1: FAILED,  # TESTS_FAILED (a case failed, or the bundle is incomplete)
    2: INTERNAL,  # INTERRUPTED: Ctrl-C or a collection error, the run did not finish
    3: INTERNAL,  # INTERNAL_ERROR
    4: USAGE,  # USAGE_ERROR
    5: USAGE,  # NO_TESTS_COLLECTED: e.g. -k matched no case
    6: FAILED,  # MAX_WARNINGS_ERROR (pytest 9's --max-warnings): the project's own bar was not met
}


def add_subject_options(parser: argparse.ArgumentParser) -> None:
    """``--reward-subject`` and ``--episode-subject``, for every command reading the ini's subjects."""
    parser.add_argument(
        "--reward-subject", default=None, metavar="MODULE:FACTORY", help="reward code (overrides the ini key)"
    )
    parser.add_argument(
        "--episode-subject",
        default=None,
        metavar="MODULE:CLASS",
        help="episode class (overrides the ini key)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``validate`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="pytest-e2b-env validate",
        description=(
            "Run the case catalog in this directory's pytest project and write an evidence bundle. "
            "Subjects: those named here, else the project's e2b_*_subject ini keys, else the bundled "
            "reference code. Exit status: 0 all passed, 1 a case failed, 2 usage, 3 internal error or "
            "interrupted (Ctrl-C: the bundle is still written, marked interrupted)."
        ),
        epilog="Arguments after a lone -- are passed to pytest unchanged.",
    )
    parser.add_argument("--live", action="store_true", help="run against real E2B (needs E2B_API_KEY)")
    parser.add_argument(
        "--subject",
        choices=("reward", "episode", "all"),
        default="all",
        help="run only this kind's cases (default: every configured subject)",
    )
    parser.add_argument(
        "--output", default=None, metavar="DIR", help="evidence root (default: the project's, e2b-evidence)"
    )
    parser.add_argument(
        "--cases",
        default=None,
        metavar="PATH",
        help="case file or directory (default: the project's, bundled)",
    )
    add_subject_options(parser)
    parser.add_argument(
        "--relax",
        default="",
        metavar="NAMES",
        help="house-policy criteria to relax, comma separated (as the e2b_relax ini key)",
    )
    parser.add_argument("--run-id", default=None, help="run id (default: a fresh one)")
    parser.add_argument(
        "--summary",
        default=None,
        metavar="PATH",
        help="append a Markdown summary to PATH (default: $GITHUB_STEP_SUMMARY when set)",
    )
    parser.add_argument(
        "-k", dest="keyword", default=None, help="only cases matching this pytest -k expression"
    )
    parser.add_argument(
        "-n", dest="workers", default=None, help="run cases on N xdist workers (needs pytest-xdist)"
    )
    parser.add_argument("-q", dest="quiet", action="store_true", help="less output")
    tasks = parser.add_argument_group("task checks (pytest-e2b-env docs tasks)")
    tasks.add_argument(
        "--tasks",
        default=None,
        metavar="PATH",
        help="run only the oracle, floor and repeat checks of these task rows (.json/.jsonl or module:attr)",
    )
    tasks.add_argument(
        "--task-kind",
        choices=("reward", "episode"),
        default=None,
        help="with --tasks; default: from the rows",
    )
    tasks.add_argument(
        "--repeats", type=int, default=None, help="with --tasks: runs of each oracle for the repeat check (3)"
    )
    return parser


def pytest_args(options: argparse.Namespace) -> list[str]:
    """The pytest command line; the project's config supplies everything not named here.

    With ``--tasks`` the run is narrowed to the task checks, and ``options.subject`` becomes the
    kind the rows (or ``--task-kind``) name; a task source that cannot be read raises
    :class:`~pytest_e2b_env.errors.ConfigError` or ``OSError``.
    """
    args = ["--e2b-catalog-only"]
    if options.tasks:
        args += _task_args(options)
    if options.output:
        args += ["--e2b-evidence", str(Path(options.output).resolve())]
    if options.cases:
        args += ["--e2b-cases", str(Path(options.cases).resolve())]
    if options.summary:
        args += ["--e2b-summary", str(Path(options.summary).resolve())]
    if options.relax:
        args += ["-o", f"e2b_relax={options.relax}"]
    if options.live:
        args.append("--e2b-live")
    if options.keyword:
        args += ["-k", options.keyword]
    if options.run_id:
        args += ["--e2b-run-id", options.run_id]
    if options.workers:
        args += ["-p", "xdist", "-n", str(options.workers)]
    args.append("-q" if options.quiet else "-v")
    return args


def _task_args(options: argparse.Namespace) -> list[str]:
    from pytest_e2b_env.catalog.tasks.load import is_spec, kind_of

    source = options.tasks if is_spec(options.tasks) else str(Path(options.tasks).resolve())
    options.subject = options.task_kind or kind_of(source)
    repeats = 3 if options.repeats is None else options.repeats
    return [
        "-o",
        f"e2b_{options.subject}_tasks={source}",
        "-o",
        f"e2b_task_repeats={repeats}",
        "-m",
        "e2b_task",
    ]


def _usage_problem(options: argparse.Namespace) -> str | None:
    """A problem pytest would report less clearly, checked before it starts."""
    if not options.tasks and (options.task_kind or options.repeats is not None):
        given = "--task-kind" if options.task_kind else "--repeats"
        return f"{given} applies to the task checks only; add --tasks PATH"
    if options.workers and importlib.util.find_spec("xdist") is None:
        return f"-n {options.workers} needs pytest-xdist, which is not installed: pip install pytest-xdist"
    return None


def main(argv: list[str]) -> int:
    """Run the catalog; return 0, 1, 2 or 3 (:data:`EXIT_CODES`)."""
    parser = build_parser()
    # Everything after a lone "--" goes to pytest unchanged (e.g. -- -rs --junitxml=out.xml).
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    try:
        options = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed the usage and the bad value; --help exits 0
        return OK if exc.code in (0, None) else USAGE
    problem = _usage_problem(options)
    if problem:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {problem}", file=sys.stderr)
        return USAGE

    from pytest_e2b_env.errors import ConfigError
    from pytest_e2b_env.evidence.redaction import redact

    try:
        args = pytest_args(options)
    except (ConfigError, OSError, ValueError) as exc:  # a task source that cannot be read
        print(f"{parser.prog}: {redact(str(exc))}", file=sys.stderr)
        return USAGE
    subjects = {"reward": options.reward_subject, "episode": options.episode_subject}
    return run_pytest([*args, *extra], subjects, options.subject, parser.prog)


def run_pytest(args: list[str], subjects: dict[str, str | None], only: str, prog: str) -> int:
    """pytest with the subjects of this run decided; validate's exit status (:data:`EXIT_CODES`)."""
    import pytest

    from pytest_e2b_env.adapter.validate_subjects import ValidateSubjects
    from pytest_e2b_env.evidence.redaction import redact

    try:
        status = pytest.main(args, plugins=[ValidateSubjects(subjects, only)])
    except Exception as exc:  # pytest reports its own errors; anything escaping it is ours
        print(f"{prog}: internal error: {type(exc).__name__}: {redact(str(exc))}", file=sys.stderr)
        return INTERNAL
    return EXIT_CODES.get(int(status), INTERNAL)
