"""Find and kill sandboxes this tool created, after the run that owned them is gone.

Every sandbox our code creates carries metadata ``{"pytest_e2b_env_run": <run id>}`` and a
server-side lifetime. When a host dies mid-run (SIGKILL, CI timeout, OOM) nothing tears its
sandboxes down, and on real E2B they bill until their lifetime ends. ``reap`` lists them by
that metadata through the real e2b SDK, kills them, and confirms each one gone.

Library use (the plugin): :func:`find_stale_runs` at session start, :func:`reap` to clean up.
Command line: ``pytest-e2b-env reap [--run-id ID | --older-than SECONDS] [--live]``
(:mod:`pytest_e2b_env.cli.reap`). Listing, killing and confirming are :mod:`pytest_e2b_env.targets.tags`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from pytest_e2b_env.settings import TargetSettings
from pytest_e2b_env.targets.tags import RUN_KEY, kill_all, list_tagged

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


def stale_run_lines(run_id: str) -> list[str]:
    """Header lines naming earlier runs whose tagged sandboxes are still alive on live E2B.

    Interrupted runs leak sandboxes that bill until their lifetime ends; saying so at session start,
    with the command that removes them, is the cheapest place to catch it. Never raises: a failed
    check is itself one line, and the run goes on.
    """
    opts = TargetSettings.from_env(live=True, run_id=run_id).sdk_opts()
    try:
        runs = find_stale_runs(opts, exclude_run_id=run_id)
    except Exception as exc:
        failed = type(exc).__name__
        return [f"stale-run check failed ({failed}); list them with: pytest-e2b-env reap --live --list"]
    return describe_stale_runs(runs, live=True)
