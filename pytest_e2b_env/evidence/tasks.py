"""The bundle's ``tasks`` section: per task, the oracle, the floor gap and the repeat spread.

Rows are the task checks' outcomes (``task_id``, ``kind``, ``check``, ``status``, ``reason``,
``details``, ``seconds``); :func:`tasks_doc` groups them per task for ``tasks.json`` and the
page, and counts statuses for the manifest.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

CHECK_ORDER = ("oracle", "floor", "repeat")
_SEVERITY = {"passed": 0, "skipped": 1, "failed": 3, "error": 4}


def tasks_doc(rows: Iterable[Mapping[str, Any]], digest: str | None = None) -> dict[str, Any]:
    """``tasks.json``: the digest, status counts, and one entry per task with its checks."""
    by_task: dict[tuple[str, str], dict[str, Any]] = {}
    counts: Counter[str] = Counter()
    for row in rows:
        key = (str(row.get("kind")), str(row.get("task_id")))
        entry = by_task.setdefault(key, {"task_id": key[1], "kind": key[0], "checks": {}})
        entry["checks"][str(row.get("check"))] = dict(row)
        counts[str(row.get("status"))] += 1
    tasks = []
    for entry in by_task.values():
        checks: dict[str, dict[str, Any]] = entry["checks"]
        details = {name: checks.get(name, {}).get("details") or {} for name in CHECK_ORDER}
        statuses = [str(c.get("status")) for c in checks.values()]
        entry.update(
            status=max(statuses, key=lambda s: _SEVERITY.get(s, 4)) if statuses else "missing",
            oracle=checks.get("oracle", {}).get("status", "not run"),
            floor_gap=details["floor"].get("gap"),
            repeat_spread=details["repeat"].get("spread"),
        )
        tasks.append(entry)
    return {
        "digest": digest,
        "counts": dict(sorted(counts.items())),
        "passed": not any(counts.get(s) for s in ("failed", "error")),
        "tasks": tasks,
    }
