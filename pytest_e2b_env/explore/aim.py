"""Aim the next fault at a call the last run made: positions read from the ledger.

A fault aimed blind at "the 2nd kill" lands only when the subject makes a 2nd kill; after a lost
worker the calls that follow (the lost sandbox's kill, its replacement's create) are exactly where
a second fault matters. So the search runs a schedule, reads from its ledger the calls made after
its last fault fired, and draws the next step among them (Jepsen's generators react to the history
the same way). Positions are written as the catalog's fault rules count them: the k-th call of a
route, or the k-th call of a route on the n-th sandbox the run created.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_e2b_env.explore.run import Attempt

#: ledger route template -> route name of :data:`~pytest_e2b_env.explore.schedule.ROUTES`
TEMPLATES = {
    "POST /v2/sandboxes": "create",
    "POST /sandboxes": "create",
    "DELETE /sandboxes/{id}": "kill",
    "POST /process.Process/Start": "run",
    "POST /files": "write",
    "POST /sandboxes/{id}/timeout": "set_timeout",
    "POST /execute": "run_code",
    "GET /files": "read",
    "GET /sandboxes/{id}": "info",
}


@dataclass(frozen=True)
class Position:
    """One call a run made: its route, which call of the route it was, and of which sandbox."""

    route: str
    nth: int
    sandbox: int | None = None
    nth_on_sandbox: int | None = None


def _ops(attempt: Attempt) -> list[dict[str, Any]]:
    return [e for e in attempt.record.trajectory if e.get("kind") == "sandbox_op"]


def last_fault_seq(attempt: Attempt) -> int | None:
    """Where the schedule's last step first fired in the ledger (None: it never fired)."""
    if not attempt.landings:
        return -1
    last = max(attempt.landings, key=lambda x: x.step)
    if not last.landed or last.rule is None:
        return None
    fired = [int(e["seq"]) for e in _ops(attempt) if str(e.get("fault") or "").startswith(f"{last.rule}:")]
    return min(fired) if fired else None


def positions_after(attempt: Attempt, seq: int) -> list[Position]:
    """Every call of a known route the run made from ledger position ``seq`` on."""
    counts: dict[str, int] = {}
    per_sandbox: dict[tuple[str, str], int] = {}
    sandboxes: list[str] = []
    out = []
    for entry in _ops(attempt):
        sid = entry.get("sandbox_id")
        route = TEMPLATES.get(str(entry.get("route")))
        if entry.get("op") == "create" and sid and sid not in sandboxes:
            sandboxes.append(str(sid))
        if route is None:
            continue
        counts[route] = counts.get(route, 0) + 1
        index = None
        if sid and route != "create":
            per_sandbox[(route, str(sid))] = per_sandbox.get((route, str(sid)), 0) + 1
            index = sandboxes.index(str(sid)) + 1 if str(sid) in sandboxes else None
        if int(entry["seq"]) >= seq:
            out.append(
                Position(route, counts[route], index, per_sandbox.get((route, str(sid))) if index else None)
            )
    return out
