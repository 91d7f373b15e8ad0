"""``pytest-e2b-env reap``: kill the sandboxes this tool tagged and confirm each gone.

Exit status: 0 when every matched sandbox is confirmed gone, 1 if not, 2 on misuse.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_e2b_env.settings import TargetSettings
from pytest_e2b_env.targets.reap import describe_stale_runs, find_stale_runs, reap


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pytest-e2b-env reap",
        description="Kill sandboxes tagged by pytest-e2b-env (metadata pytest_e2b_env_run) and confirm "
        "them gone. Without --run-id or --older-than, every tagged sandbox is reaped.",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--run-id", help="only sandboxes of this run id")
    which.add_argument(
        "--older-than", type=float, metavar="SECONDS", help="only sandboxes started this long ago"
    )
    parser.add_argument(
        "--live", action="store_true", help="real E2B (needs E2B_API_KEY; E2B_DOMAIN is honoured)"
    )
    parser.add_argument("--api-url", help="emulator or API URL (default: $E2B_API_URL); offline mode only")
    parser.add_argument("--list", action="store_true", help="only list stale runs, kill nothing")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser


def _sdk_opts_from(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, Any] | str:
    """SDK options for the chosen target, or a one-line error message."""
    # Live reads the explicit upstream, so an emulator's E2B_API_URL left in the shell cannot
    # redirect a live reap.
    settings = TargetSettings.from_env(environ, live=args.live)
    key = settings.api_key or ""
    if args.live:
        if args.api_url:
            return "--api-url is for an emulator; drop it with --live (set E2B_DOMAIN for another E2B domain)"
        if not key:
            return "--live needs E2B_API_KEY in the environment; export your E2B API key and retry"
        return {"api_key": key, "api_url": settings.api_url}
    api_url = args.api_url or settings.api_url or ""
    if not api_url:
        return (
            "no emulator URL: pass --api-url URL or set E2B_API_URL (both printed by "
            "'pytest-e2b-env emulator'), or use --live for real E2B"
        )
    if not key:
        return f"E2B_API_KEY is not set; export the key of the emulator at {api_url} and retry"
    return {"api_key": key, "api_url": api_url}


def main(argv: Sequence[str]) -> int:
    """``pytest-e2b-env reap``: 0 when all matched sandboxes are confirmed gone, 1 if not, 2 on misuse."""
    args = _parser().parse_args(list(argv))
    if args.older_than is not None and args.older_than < 0:
        print(f"pytest-e2b-env reap: --older-than {args.older_than:g} must be >= 0 seconds", file=sys.stderr)
        return 2
    opts = _sdk_opts_from(args, os.environ)
    if isinstance(opts, str):
        print(f"pytest-e2b-env reap: {opts}", file=sys.stderr)
        return 2
    target = "live E2B" if args.live else opts["api_url"]
    try:
        if args.list:
            runs = find_stale_runs(opts)
            print(
                json.dumps(runs, indent=2) if args.json else "\n".join(describe_stale_runs(runs, args.live))
            )
            return 0
        result = reap(args.run_id, args.older_than, sdk_opts=opts)
    except Exception as exc:  # the SDK's own exception names the cause (auth, unreachable...)
        print(
            f"pytest-e2b-env reap: listing sandboxes on {target} failed: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for sandbox_id in result["confirmed"]:
            print(f"reaped {sandbox_id}")
        for sandbox_id in result["failed"]:
            print(f"FAILED {sandbox_id}: {result['errors'][sandbox_id]}")
        print(
            f"{len(result['matched'])} matched, {len(result['confirmed'])} confirmed gone, "
            f"{len(result['failed'])} failed ({target})"
        )
    return 1 if result["failed"] else 0
