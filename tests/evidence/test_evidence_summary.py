"""The Markdown CI summary renders the bundle's verdict, families and failures safely."""

from __future__ import annotations

from pathlib import Path

from pytest_e2b_env.evidence.coverage import build_coverage
from pytest_e2b_env.evidence.summary import render_summary


def _case(case_id: str, family: str, status: str, reason: str | None) -> dict[str, object]:
    return {
        "id": case_id,
        "subject": "reward",
        "family": family,
        "status": status,
        "reason": reason,
        "seconds": 0.5,
        "files": {"report": f"cases/{case_id}/report.json"},
    }


MANIFEST = {"run_id": "run-1", "mode": "offline", "isolation": "namespaces", "subjects": {"reward": "m:f"}}


def test_failed_case_reason_stays_in_its_table_cell() -> None:
    """Pipes and newlines in a reason are escaped and flattened; a long reason is cut with an ellipsis."""
    cases = [
        _case("reward-a", "good", "passed", None),
        _case("reward-b", "defect", "failed", "got | 1.0\nexpected 0.0"),
        _case("reward-c", "defect", "error", "x" * 400),
    ]
    coverage, problems = build_coverage("run-1", cases, ["reward-a", "reward-b", "reward-c"], {})
    text = render_summary(MANIFEST, coverage, Path("/ev/run-1"), problems)
    assert text.startswith("## ❌ pytest-e2b-env: FAILED\n")
    assert "| `reward-b` | defect | failed | got \\| 1.0 expected 0.0 |" in text
    row = next(line for line in text.splitlines() if line.startswith("| `reward-c`"))
    assert row.endswith("x" * 299 + "… |")
    assert "| defect | 0 | 0 | 1 | 1 | 0 | 0 | 1.00 |" in text  # case seconds when none were measured
    assert "Evidence bundle: `/ev/run-1`" in text


def test_missing_case_makes_the_summary_incomplete() -> None:
    """An expected case never recorded turns the verdict INCOMPLETE and lists the problem."""
    coverage, problems = build_coverage(
        "run-1", [_case("reward-a", "good", "passed", None)], ["reward-a", "reward-z"], {}
    )
    text = render_summary(
        {**MANIFEST, "relaxed_policies": ["fence-variants"]}, coverage, Path("/ev/run-1"), problems
    )
    assert text.startswith("## ⚠️ pytest-e2b-env: INCOMPLETE\n")
    assert "| `reward-z` | unknown | missing |" in text
    assert "* 1 expected case(s) missing: reward-z" in text
    assert "Relaxed policy criteria (reported as warnings, never passes): fence-variants" in text
