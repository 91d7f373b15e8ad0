"""Judges inside the sandbox and mask hacking: each hostile case against the defect it must catch.

Every case of the in-sandbox-judge patterns (and the two where a program forces an infrastructure
outcome) fails the single-defect variant meant for it, with the score that variant gives, and passes
the correct in-sandbox judge, the reference pool and, for the mask cases, the masking sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_e2b_env.catalog.contract import load_subject
from pytest_e2b_env.catalog.loader import default_cases_dir, load_cases
from pytest_e2b_env.catalog.runner import run_case
from pytest_e2b_env.targets import Target

SAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "subjects"
SAME_PROCESS = "baseline_reward_in_sandbox_same_process:make_reward"
OWN_DOING = "baseline_reward_mask_own_doing:make_reward"
#: case (after ``reward-hostile-``) -> the defect it catches and what that defect scores
CATCHES: dict[str, tuple[str, Any]] = {
    "early-exit": (SAME_PROCESS, [1.0, 1.0]),
    "always-equal": (SAME_PROCESS, [1.0, 1.0]),
    "overridden-checker": (SAME_PROCESS, [1.0, 1.0]),
    "patched-time": (SAME_PROCESS, "raises"),  # its only deadline is an alarm the program ignores
    "fake-pass-marker": ("baseline_reward_in_sandbox_marker:make_reward", [1.0, 1.0]),
    "result-file": ("baseline_reward_in_sandbox_result_file:make_reward", [1.0, 1.0]),
    "trailing-output": ("baseline_reward_in_sandbox_zip:make_reward", [1.0, 1.0]),
    "kill-own-sandbox": (OWN_DOING, [None, 1.0]),
    "fill-disk": (OWN_DOING, [None, 1.0]),
}
CLEAN = ["baseline_reward_in_sandbox:make_reward", "pytest_e2b_env.reward:reward_subject"]
#: The full tier only: the judge gives up only after two cells outlived its timeout (about 40 s in all)
HELD = {"patched-time"}
ROWS = [
    pytest.param(
        case,
        spec,
        "failed",
        scores,
        id=f"{case}-catches-{spec.split(':')[0]}",
        marks=[pytest.mark.full] if case in HELD else [],
    )
    for case, (spec, scores) in CATCHES.items()
] + [
    pytest.param(case, spec, "passed", [0.0, 1.0], id=f"{case}-passes-{spec.split(':')[0]}")
    for case in CATCHES
    for spec in CLEAN
    + (["baseline_reward_mask:make_reward"] if case in ("kill-own-sandbox", "fill-disk") else [])
]


@pytest.fixture(scope="module")
def cases() -> dict[str, Any]:
    """The catalog's cases by id."""
    return {c.id: c for c in load_cases([default_cases_dir()])}


def _scores(record: Any) -> Any:
    calls = [e for e in record.trajectory if e.get("kind") == "call" and e["name"] == "reward"]
    assert calls, (record.status, record.reason)
    return calls[0]["value"] if calls[0]["returned"] else "raises"


@pytest.mark.parametrize(("case", "spec", "status", "scores"), ROWS)
def test_each_in_sandbox_pattern_catches_its_judge_and_passes_sound_ones(
    target: Target,
    monkeypatch: pytest.MonkeyPatch,
    cases: dict[str, Any],
    case: str,
    spec: str,
    status: str,
    scores: Any,
) -> None:
    """The defect scores the hostile program (or masks, or raises) and fails; sound judges score it 0."""
    if target.isolation != "namespaces":
        pytest.skip(f"hostile programs need the namespaces level: {target.isolation_reason}")
    monkeypatch.syspath_prepend(str(SAMPLES))
    record = run_case(cases[f"reward-hostile-{case}"], load_subject(spec, "reward"), target)
    assert _scores(record) == scores
    assert record.status == status, (record.reason, [c for c in record.criteria if not c["passed"]])
    assert target.alive_ids() == set()
