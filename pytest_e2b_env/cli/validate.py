"""``pytest-e2b-env validate``: run the case catalog against the bundled reference code.

A thin wrapper over pytest with this plugin, so the CLI, CI and ``pytest`` runs share one
code path and one evidence bundle format. Exit status: 0 when every case passed (or was
skipped with a reason) and the bundle is complete, non-zero otherwise.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

REFERENCE = {
    "reward": "pytest_e2b_env.reward:reward_subject",
    "episode": "pytest_e2b_env.episode:ReportEpisode",
}


def build_parser() -> argparse.ArgumentParser:
    """The ``validate`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="pytest-e2b-env validate",
        description="Run the case catalog against the bundled reference code and write an evidence bundle.",
    )
    parser.add_argument("--live", action="store_true", help="run against real E2B (needs E2B_API_KEY)")
    parser.add_argument("--subject", choices=("reward", "episode", "all"), default="all")
    parser.add_argument(
        "--output", default="e2b-evidence", metavar="DIR", help="evidence root (default: %(default)s)"
    )
    parser.add_argument(
        "--cases", default=None, metavar="PATH", help="case file or directory (default: bundled)"
    )
    parser.add_argument(
        "--reward-subject", default=REFERENCE["reward"], metavar="MODULE:FACTORY", help="default: %(default)s"
    )
    parser.add_argument(
        "--episode-subject", default=REFERENCE["episode"], metavar="MODULE:CLASS", help="default: %(default)s"
    )
    parser.add_argument(
        "--relax",
        default="",
        metavar="NAMES",
        help="house-policy criteria to relax, comma separated (as the e2b_relax ini key)",
    )
    parser.add_argument("--run-id", default=None, help="run id (default: a fresh one)")
    parser.add_argument(
        "-k", dest="keyword", default=None, help="only cases matching this pytest -k expression"
    )
    parser.add_argument("-n", dest="workers", default=None, help="run cases on N xdist workers")
    parser.add_argument("-q", dest="quiet", action="store_true", help="less output")
    return parser


def pytest_args(options: argparse.Namespace, empty_dir: Path) -> list[str]:
    """The pytest command line that runs the catalog and nothing else."""
    from pytest_e2b_env.catalog.loader import default_cases_dir

    kinds = ("reward", "episode") if options.subject == "all" else (options.subject,)
    args = [
        str(empty_dir),
        "--rootdir",
        str(empty_dir),
        "-c",
        str(empty_dir / "pytest.ini"),
        "-p",
        "no:cacheprovider",
        "--e2b-evidence",
        str(Path(options.output).resolve()),
        "--e2b-cases",
        str(Path(options.cases).resolve() if options.cases else default_cases_dir()),
        "-o",
        "asyncio_default_fixture_loop_scope=function",
    ]
    subjects = {"reward": options.reward_subject, "episode": options.episode_subject}
    for kind in ("reward", "episode"):
        args += ["-o", f"e2b_{kind}_subject={subjects[kind] if kind in kinds else ''}"]
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


def main(argv: list[str]) -> int:
    """Run the catalog; return pytest's exit status."""
    import pytest

    from pytest_e2b_env.cli import validate_tasks

    if validate_tasks.wants_tasks(argv):  # validate --tasks PATH: only the task checks of a dataset
        return validate_tasks.main(argv)
    options = build_parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pytest-e2b-env-validate-") as tmp:
        empty = Path(tmp)
        (empty / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        return int(pytest.main(pytest_args(options, empty)))
