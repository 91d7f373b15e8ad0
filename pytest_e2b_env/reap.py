"""Find and kill sandboxes this tool created, after the run that owned them is gone.

Every sandbox our code creates carries metadata ``{"pytest_e2b_env_run": <run id>}`` and a
server-side lifetime. When a host dies mid-run (SIGKILL, CI timeout, OOM) nothing tears its
sandboxes down, and on real E2B they bill until their lifetime ends. ``reap`` lists them by
that metadata through the real e2b SDK, kills them, and confirms each one gone.

Library use (the plugin): :func:`find_stale_runs` at session start, :func:`reap` to clean up.
Command line: ``pytest-e2b-env reap [--run-id ID | --older-than SECONDS] [--live]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pytest_e2b_env.target.settings import TargetSettings
from pytest_e2b_env.target.tags import RUN_KEY, kill_all, list_tagged

CONFIRM_SECONDS = 20.0


def _age_seconds(started_at: datetime, now: datetime) -> float:
    if started_at.tzinfo is None:
        started_at = started_at.replace(tzinfo=UTC)
    return (now - started_at).total_seconds()


def find_stale_runs(
    sdk_opts: Mapping[str, Any], *, exclude_run_id: str | None = None
) -> list[dict[str, Any]]:
    """Group the tagged sandboxes still alive by run id, oldest run first.

    Each entry: ``{"run_id", "sandbox_ids", "count", "oldest_started_at" (ISO 8601 UTC),
    "age_seconds"}``. ``exclude_run_id`` (the current session) is left out.
    """
    tagged = [(info.metadata[RUN_KEY], info.sandbox_id, info.started_at) for info in list_tagged(sdk_opts)]
    return group_runs(tagged, datetime.now(UTC), exclude_run_id=exclude_run_id)


def group_runs(
    tagged: Iterable[tuple[str, str, datetime]], now: datetime, *, exclude_run_id: str | None = None
) -> list[dict[str, Any]]:
    """Pure part of :func:`find_stale_runs`: ``(run_id, sandbox_id, started_at)`` rows grouped by run."""
    runs: dict[str, dict[str, Any]] = {}
    for run_id, sandbox_id, started_at in tagged:
        if run_id == exclude_run_id:
            continue
        entry = runs.setdefault(run_id, {"run_id": run_id, "sandbox_ids": [], "started": []})
        entry["sandbox_ids"].append(sandbox_id)
        entry["started"].append(started_at if started_at.tzinfo else started_at.replace(tzinfo=UTC))
    result = []
    for entry in runs.values():
        oldest = min(entry.pop("started"))
        entry["sandbox_ids"].sort()
        entry["count"] = len(entry["sandbox_ids"])
        entry["oldest_started_at"] = oldest.astimezone(UTC).isoformat().replace("+00:00", "Z")
        entry["age_seconds"] = round(_age_seconds(oldest, now), 1)
        result.append(entry)
    result.sort(key=lambda e: (-e["age_seconds"], e["run_id"]))
    return result


def describe_stale_runs(runs: Iterable[Mapping[str, Any]], live: bool = False) -> list[str]:
    """One line per stale run, with the command that removes it (for a session header or the CLI)."""
    flag = " --live" if live else ""
    return [
        f"stale run {run['run_id']}: {run['count']} sandbox(es) alive, oldest started "
        f"{run['age_seconds']:.0f} s ago; remove with: pytest-e2b-env reap{flag} --run-id {run['run_id']}"
        for run in runs
    ]


def reap(
    run_id: str | None = None,
    older_than: float | None = None,
    *,
    sdk_opts: Mapping[str, Any],
    confirm_seconds: float = CONFIRM_SECONDS,
) -> dict[str, Any]:
    """Kill every sandbox tagged by this tool (one run, or older than ``older_than`` seconds).

    Returns ``{"matched": [...], "killed": [...], "confirmed": [...], "failed": [...],
    "errors": {sandbox_id: message}}``: ``killed`` got a successful DELETE, ``confirmed`` are
    verified absent afterwards (including ones already gone), ``failed`` are unresolved.
    """
    if run_id is not None and older_than is not None:
        raise ValueError("pass run_id or older_than, not both")
    if older_than is not None and older_than < 0:
        raise ValueError(f"older_than={older_than!r} must be >= 0 seconds")
    now = datetime.now(UTC)
    matched = [
        info.sandbox_id
        for info in list_tagged(sdk_opts, {RUN_KEY: run_id} if run_id else None)
        if older_than is None or _age_seconds(info.started_at, now) >= older_than
    ]
    result: dict[str, Any] = {
        "matched": sorted(matched),
        "killed": [],
        "confirmed": [],
        "failed": [],
        "errors": {},
    }
    for kill in kill_all(matched, sdk_opts, attempts=1, confirm_seconds=confirm_seconds):
        if kill.killed:
            result["killed"].append(kill.sandbox_id)
        result["confirmed" if kill.confirmed else "failed"].append(kill.sandbox_id)
        if kill.error and not kill.confirmed:
            result["errors"][kill.sandbox_id] = kill.error
    return result


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
