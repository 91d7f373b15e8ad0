"""The plugin's terminal summary puts the failing cases first, each with what failed and the fix."""

from __future__ import annotations

import pytest
from plugin_helpers import write_project

from pytest_e2b_env.adapter.report import failure_lines


def test_failing_cases_come_first_with_their_first_failed_criterion(pytester: pytest.Pytester) -> None:
    """A reward scoring everything 1.0 fails both tiny cases: each is listed, with the scores it was
    expected to give and gave, above the family table."""
    write_project(pytester, subject="tinyreward:constant_reward")
    result = pytester.runpytest_subprocess("--e2b-evidence", "ev", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    section = out[out.index("e2b catalog ===") :]
    correct = section.index("FAILED [safety] reward-tiny-correct: rewards: ")
    no_fence = section.index("FAILED [safety] reward-tiny-no-fence: rewards: ")
    assert correct < no_fence < section.index("\ngood ")
    assert no_fence < section.index("\ndefect ")
    assert "    expected [1.0, 0.0], observed " in section[correct:no_fence], section


def _record(case_id: str, status: str, *criteria: dict[str, object], advice: list[str] | None = None) -> dict:
    return {
        "id": case_id,
        "status": status,
        "criteria": list(criteria),
        "advice": advice or [],
        "reason": "r",
    }


def _criterion(name: str, severity: str, policy: str | None = None) -> dict[str, object]:
    return {
        "id": name,
        "description": f"{name} holds",
        "passed": False,
        "severity": severity,
        "policy": policy,
        "expected": 1,
        "actual": 2,
    }


def test_safety_before_policy_before_no_verdict_and_the_fix_is_said() -> None:
    """Order by kind, whatever the records' order; a policy failure names the e2b_relax that would
    excuse it, advice comes as the fix, an error shows its reason."""
    records = [
        _record("case-error", "error"),
        _record("case-policy", "failed", _criterion("tagged", "policy", "cleanup-tags")),
        _record(
            "case-safety",
            "failed",
            _criterion("no-leak", "safety"),
            _criterion("b", "safety"),
            advice=["kill every sandbox you create"],
        ),
        _record("case-passed", "passed"),
    ]
    lines = [line for line, _ in failure_lines(records)]
    assert lines == [
        "FAILED [safety] case-safety: no-leak: no-leak holds (+1 more)",
        "    expected 1, observed 2",
        "    fix: kill every sandbox you create",
        "FAILED [policy] case-policy: tagged: tagged holds",
        "    expected 1, observed 2",
        "    fix: a house policy: fix it, or relax it by name (e2b_relax = cleanup-tags)",
        "ERROR [error] case-error: r",
    ]
