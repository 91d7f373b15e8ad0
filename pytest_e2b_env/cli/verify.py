"""``pytest-e2b-env verify-evidence DIR``: recheck an evidence bundle; exit 1 on any problem.

The command joins the two layers it needs (the bundle checks of ``evidence`` and the case ids of
the ``catalog``) so that evidence never imports the catalog.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_e2b_env.evidence.verify import verify_bundle


def _catalog_ids(paths: Sequence[str], subject: str) -> list[str]:
    from pytest_e2b_env.catalog.loader import default_cases_dir, load_cases

    cases = load_cases([Path(p) for p in paths] or [default_cases_dir()])
    return [c.id for c in cases if subject == "all" or c.subject == subject]


def main(argv: list[str]) -> int:
    """``pytest-e2b-env verify-evidence DIR``: print each problem; exit 1 if any, 0 if none."""
    parser = argparse.ArgumentParser(
        prog="pytest-e2b-env verify-evidence",
        description="Recheck an evidence bundle: checksums, inventory, expected cases, secrets.",
    )
    parser.add_argument("bundle", metavar="DIR", help="the bundle directory, <output>/<run-id>")
    parser.add_argument(
        "--catalog",
        action="append",
        default=None,
        metavar="PATH",
        help="also require every case of this catalog file or directory (repeatable; "
        "'default' for the bundled catalog)",
    )
    parser.add_argument("--subject", choices=("reward", "episode", "all"), default="all")
    parser.add_argument("--json", action="store_true", help="print {bundle, ok, problems} as JSON instead")
    args = parser.parse_args(argv)
    expected = None
    if args.catalog is not None:
        paths = [p for p in args.catalog if p != "default"]
        try:
            expected = _catalog_ids(paths, args.subject)
        except Exception as exc:  # a broken catalog is a usage error here, not a traceback
            print(f"verify-evidence: cannot load the catalog: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
    problems = verify_bundle(Path(args.bundle), expected)
    if args.json:
        print(json.dumps({"bundle": str(args.bundle), "ok": not problems, "problems": problems}, indent=2))
        return 1 if problems else 0
    for problem in problems:
        print(f"PROBLEM: {problem}")
    if problems:
        print(f"verify-evidence: {len(problems)} problem(s) in {args.bundle}", file=sys.stderr)
        return 1
    print(f"verify-evidence: {args.bundle} is intact (checksums, inventory, no secrets)")
    return 0
