"""run_case against tiny third-party-style subjects on the real emulator (no mocks)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_e2b_env.catalog.contract import Subject, load_subject
from pytest_e2b_env.catalog.loader import parse_cases_from_dicts
from pytest_e2b_env.catalog.runner import run_case
from pytest_e2b_env.targets import Target

TASK = {
    "id": "tiny",
    "workdir": "/home/user/work",
    "files": {"report.py": "print('{\"a\": 1}')\n"},
    "artifact": "report.py",
    "command": "python3 -B report.py",
    "verification": {"files": {"in.txt": "x"}, "expected": {"a": 1}},
}


def _subject(spec: str) -> Subject:
    """A loaded subject, its kind taken from the spec (episode classes are capitalised)."""
    kind = "episode" if spec.split(":")[1][0].isupper() else "reward"
    return load_subject(spec, kind)


def _reward_case(expect: dict[str, Any], **reward: Any) -> Any:
    body = {"test_cases": [{"input": "1", "output": "1"}], "completions": [{"text": "x"}, {"text": "y"}]}
    body.update(reward)
    raw = {
        "id": "reward-t",
        "subject": "reward",
        "family": "good",
        "description": "A runner test case.",
        "reward": body,
        "expect": expect,
    }
    return parse_cases_from_dicts([raw], __file__)[0]


def _episode_case(expect: dict[str, Any], script: list[dict[str, Any]]) -> Any:
    raw = {
        "id": "episode-t",
        "subject": "episode",
        "family": "isolation",
        "description": "A runner test case.",
        "episode": {"task": TASK, "script": script},
        "expect": expect,
    }
    return parse_cases_from_dicts([raw], __file__)[0]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("catalog_subjects:constant", [1.0, 1.0]),
        ("catalog_subjects:sync_context", [0.5, 0.5]),
        ("catalog_subjects:keeps_worker", [1.0, 1.0]),
    ],
)
def test_reward_contract_shapes(target: Target, spec: str, expected: list[float]) -> None:
    """A bare function, a sync context manager and an async context manager all drive and pass."""
    result = run_case(_reward_case({"rewards": expected}), _subject(spec), target)
    assert result.status == "passed", result.failure_message()


def test_pool_only_case_is_not_applicable_to_a_stateless_subject(target: Target) -> None:
    """A case needing a subject that keeps sandboxes is skipped with the reason, never passed."""
    case = _reward_case({"pool_cleanup": True}, cancel_on="run", second_batch=[{"text": "z"}])
    case.needs = "keeps_sandboxes"
    result = run_case(case, _subject("catalog_subjects:sync_context"), target)
    assert result.status == "skipped"
    assert result.reason == "not applicable: the ledger shows the subject keeps no sandbox across calls"
    kept = run_case(
        _reward_case({"second_batch_rewards": [1.0]}, second_batch=[{"text": "z"}]),
        _subject("catalog_subjects:keeps_worker"),
        target,
    )
    assert kept.status == "passed", kept.failure_message()


def test_third_party_episode_is_observed_from_outside(target: Target) -> None:
    """Verifier creation, its network setting, cleanup before the score and the tool surface are observed."""
    case = _episode_case(
        {
            "reward": 1.0,
            "verifier_created": True,
            "verifier_offline": True,
            "score_committed_after_cleanup": True,
            "tools_allowed_only": True,
            "tool_refused": True,
        },
        [
            {"tool": "terminal", "args": {"command": "cat report.py"}},
            {"tool": "submit"},
            {"tool": "terminal", "args": {"command": "echo late"}},
        ],
    )
    result = run_case(case, _subject("catalog_subjects:TinyEpisode"), target)
    assert result.status == "passed", result.failure_message()
    assert result.observed["tools"] == ["submit", "terminal"]


def test_extra_public_method_is_flagged_unless_declared(target: Target) -> None:
    """A public reset_sandbox method is an undeclared model tool; e2b_episode_tools can declare it."""
    case = _episode_case({"reward": 0.0, "tools_allowed_only": True}, [])
    flagged = run_case(case, _subject("catalog_subjects:ExposesReset"), target)
    assert flagged.status == "failed"
    assert "tools_allowed_only" in flagged.failure_message()
    declared = run_case(
        case, _subject("catalog_subjects:ExposesReset"), target, extra_tools=["reset_sandbox"]
    )
    assert declared.status == "passed", declared.failure_message()


def test_fault_plan_is_cleared_after_the_case(target: Target) -> None:
    """Faults of one case never reach the next one."""
    case = _reward_case({"tolerate_raises": True})
    case.faults = parse_cases_from_dicts(
        [
            {
                "id": "reward-f",
                "subject": "reward",
                "family": "auth",
                "description": "Only for its fault plan.",
                "reward": {"test_cases": [{"input": "1", "output": "1"}], "completions": [{"text": "x"}]},
                "faults": [{"route": "POST /v2/sandboxes", "answer": {"status": 401}, "times": 100}],
                "expect": {"raises": "any"},
            }
        ],
        __file__,
    )[0].faults
    first = run_case(case, _subject("catalog_subjects:sync_context"), target)
    assert first.exceptions
    second = run_case(
        _reward_case({"rewards": [0.5, 0.5]}), _subject("catalog_subjects:sync_context"), target
    )
    assert second.status == "passed", second.failure_message()
