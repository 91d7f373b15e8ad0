"""coverage.json (the inventory of every expected case) and the per-case report in OpenEnv's style."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

# Worse statuses win when one case was recorded more than once.
_SEVERITY = {"passed": 0, "skipped": 1, "relaxed": 2, "failed": 3, "error": 4}


def build_coverage(
    run_id: str,
    cases: list[dict[str, Any]],
    expected: list[str],
    family_seconds: dict[str, float],
    tasks: int = 0,
) -> tuple[dict[str, Any], list[str]]:
    """coverage.json for normalised ``cases`` against ``expected`` ids, and the problems found.

    Every expected case appears: recorded ones with their (worst) status, the others as
    ``missing``. Cases recorded but not expected are listed too, flagged ``expected: false``.
    ``tasks`` counts task checks recorded beside the cases: a run of only those is not empty.
    """
    problems: list[str] = []
    by_id: dict[str, list[dict[str, Any]]] = {}
    for case in cases:
        by_id.setdefault(case["id"], []).append(case)
    entries: list[dict[str, Any]] = []
    for case_id, records in by_id.items():
        if len(records) > 1:
            problems.append(f"case {case_id} was recorded {len(records)} times; every record is kept")
        worst = max(records, key=lambda c: _SEVERITY.get(c["status"], 4))
        entries.append(
            {
                "id": case_id,
                "subject": worst["subject"],
                "family": worst["family"],
                "status": worst["status"],
                "reason": worst["reason"],
                "seconds": worst["seconds"],
                "records": len(records),
                "expected": case_id in expected,
                "reports": [c["files"]["report"] for c in records],
            }
        )
    missing = [case_id for case_id in expected if case_id not in by_id]
    for case_id in missing:
        entries.append(
            {
                "id": case_id,
                "subject": "unknown",
                "family": "unknown",
                "status": "missing",
                "reason": "expected case was never recorded (it did not run or its result was lost)",
                "seconds": None,
                "records": 0,
                "expected": True,
                "reports": [],
            }
        )
    if missing:
        problems.append(f"{len(missing)} expected case(s) missing: {', '.join(missing[:20])}")
    if not entries and not tasks:
        problems.append("no case was expected or recorded; an empty run proves nothing")
    order = {case_id: i for i, case_id in enumerate(expected)}
    entries.sort(key=lambda e: (order.get(e["id"], len(order)), e["id"]))
    counts = Counter(e["status"] for e in entries)
    families: dict[str, dict[str, Any]] = {}
    for entry in entries:
        family = families.setdefault(
            entry["family"],
            {
                "passed": 0,
                "relaxed": 0,
                "failed": 0,
                "skipped": 0,
                "error": 0,
                "missing": 0,
                "case_seconds": 0.0,
            },
        )
        family[entry["status"]] += 1
        family["case_seconds"] += entry["seconds"] or 0.0
    for name, family in families.items():
        family["seconds"] = family_seconds.get(name, family["case_seconds"])
    complete = not missing and bool(entries or tasks)
    unreasoned = [e["id"] for e in entries if e["status"] == "skipped" and not e["reason"]]
    coverage = {
        "run_id": run_id,
        "complete": complete,
        "passed": complete and not unreasoned and not (counts["failed"] or counts["error"]),
        "expected_count": len(expected),
        "recorded_count": len(cases),
        "counts": {
            s: counts.get(s, 0) for s in ("passed", "relaxed", "failed", "skipped", "error", "missing")
        },
        "families": dict(sorted(families.items())),
        "unexpected": [e["id"] for e in entries if not e["expected"]],
        "skipped_without_reason": unreasoned,
        "cases": entries,
    }
    return coverage, problems


def run_verdict(coverage: Mapping[str, Any], problems: Sequence[str] = ()) -> str:
    """``PASSED``, ``FAILED`` or ``INCOMPLETE`` (a case missing, a bundle problem): one rule for all views."""
    if not coverage.get("complete") or problems:
        return "INCOMPLETE"
    return "PASSED" if coverage.get("passed") else "FAILED"


def case_report(case: dict[str, Any], run_id: str, mode: Any) -> dict[str, Any]:
    """A case's report in the shape of OpenEnv's ``validate`` output (criteria plus a summary)."""
    criteria = case["criteria"]
    failed = [c["id"] for c in criteria if not c["passed"]]
    required = [c for c in criteria if c.get("required", True)]
    report = dict(case)
    report.update(
        target=case["id"],
        validation_type="e2b_env_case",
        standard_profile="pytest-e2b-env/1",
        run_id=run_id,
        mode=mode,
        passed=case["status"] == "passed",
        summary={
            "passed_count": len(criteria) - len(failed),
            "total_count": len(criteria),
            "failed_criteria": failed,
            "required_passed_count": sum(1 for c in required if c["passed"]),
            "required_total_count": len(required),
        },
    )
    return report
