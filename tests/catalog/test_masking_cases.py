"""Infrastructure cases against the reference code in both policies: raise, or mask (None), not a number."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_e2b_env.catalog.contract import Subject, load_subject
from pytest_e2b_env.catalog.loader import default_cases_dir, load_cases
from pytest_e2b_env.catalog.runner import run_case
from pytest_e2b_env.episode.client import MaskingReportEpisode, ReportEpisode
from pytest_e2b_env.targets import Target

pytestmark = pytest.mark.full

CASES = {case.id: case for case in load_cases([default_cases_dir()])}

#: Case id -> what the reference returns under (raise, mask); "raises" means the scoring call raised.
REWARD = {
    "reward-mask-per-completion": ("raises", [1.0, None, 0.0]),
    "reward-lost-worker-twice": ("raises", [None]),
    "reward-mask-budget": ("raises", "raises"),
    "reward-lost-worker-retried": ([1.0], [1.0]),
    "reward-rate-limit-exhausted": ("raises", "raises"),  # creation failures always raise
    "reward-auth-401": ("raises", "raises"),  # configuration always raises
}
EPISODE = {
    "episode-lost-worker-policy": ("raises", None),
    "episode-lost-worker-verifier": ("raises", None),
    "episode-cleanup-kill-fails": ("raises", "raises"),
}


def _outcome(record: Any, call: str) -> Any:
    calls = [e for e in record.trajectory if e.get("kind") == "call" and e["name"] == call]
    assert calls, f"{call} was not called"
    return calls[0]["value"] if calls[0]["returned"] else "raises"


def _assert_passed(record: Any) -> None:
    __tracebackhide__ = True
    failed = [(c["id"], c["actual"]) for c in record.criteria if not c["passed"]]
    assert record.status == "passed", (record.reason, failed)


@pytest.mark.parametrize("policy", ["raise", "mask"])
@pytest.mark.parametrize("case_id", list(REWARD))
def test_reward_infrastructure_case_in_both_policies(target: Target, case_id: str, policy: str) -> None:
    """The reference pool passes the case raising, and masking exactly the completions it lost."""
    spec = "pytest_e2b_env.reward:" + ("reward_subject" if policy == "raise" else "masking_reward_subject")
    record = run_case(CASES[case_id], load_subject(spec, "reward"), target)
    _assert_passed(record)
    assert _outcome(record, "reward") == REWARD[case_id][policy == "mask"]


@pytest.mark.parametrize("spec", ["reward_subject", "masking_reward_subject"])
def test_failed_kill_raises_in_both_policies(target: Target, spec: str) -> None:
    """Cleanup failures are never masked: leaving the pool's context raises CleanupError either way."""
    record = run_case(
        CASES["reward-cleanup-kill-fails"], load_subject(f"pytest_e2b_env.reward:{spec}", "reward"), target
    )
    _assert_passed(record)
    assert _outcome(record, "close") == "raises"
    assert record.exceptions[0]["type"] == "CleanupError"


@pytest.mark.parametrize("policy", ["raise", "mask"])
@pytest.mark.parametrize("case_id", list(EPISODE))
def test_episode_infrastructure_case_in_both_policies(target: Target, case_id: str, policy: str) -> None:
    """The reference episode raises at get_reward, or returns None only after its cleanup is confirmed."""
    base = ReportEpisode if policy == "raise" else MaskingReportEpisode
    fresh = type(base.__name__, (base,), {})  # its own mask budget: tests do not share one
    contract = load_subject(f"pytest_e2b_env.episode:{base.__name__}", "episode").contract
    record = run_case(CASES[case_id], Subject("episode", f"test:{base.__name__}", fresh, contract), target)
    _assert_passed(record)
    assert _outcome(record, "get_reward") == EPISODE[case_id][policy == "mask"]
    if policy == "mask" and EPISODE[case_id][1] is None:
        assert record.observed["alive_at_reward"] == {"0": []}
        assert fresh.mask_metrics()["masked"] == 1


SAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "subjects"


@pytest.mark.parametrize(
    ("spec", "case_id", "status", "returned"),
    [
        ("baseline_reward_mask:make_reward", "reward-mask-per-completion", "passed", [1.0, None, 0.0]),
        ("baseline_reward_mask:make_reward", "reward-mask-budget", "passed", "raises"),
        ("reward_mask_over_budget_zero:factory", "reward-mask-budget", "failed", [0.0, 0.0, 0.0]),
    ],
)
def test_third_party_masking_sample_passes_and_zeroing_one_fails(
    target: Target, monkeypatch: pytest.MonkeyPatch, spec: str, case_id: str, status: str, returned: Any
) -> None:
    """A third-party reward that masks per completion passes; turning an outage into 0.0 fails."""
    monkeypatch.syspath_prepend(str(SAMPLES))
    record = run_case(CASES[case_id], load_subject(spec, "reward"), target)
    assert record.status == status, record.reason
    assert _outcome(record, "reward") == returned


def test_a_number_where_the_case_says_masked_fails() -> None:
    """0.0 for a lost completion is the bug masking must never hide: the predicate fails on it."""
    from pytest_e2b_env.catalog.observe import Call, Observation
    from pytest_e2b_env.catalog.verdict import JUDGES

    obs = Observation(subject="reward")
    obs.calls.append(Call(name="reward", value=[1.0, 0.0, 0.0], returned=True))
    passed, actual = JUDGES["masked_or_raise"]([1.0, "masked", 0.0], obs)
    assert not passed
    assert actual["differs"] == [{"completion": 1, "expected": "None (masked) or a raise", "got": 0.0}]
    obs.calls[0].value = [None, None, None]  # masking the whole batch is not per completion
    assert not JUDGES["masked_or_raise"]([1.0, "masked", 0.0], obs)[0]
    obs.calls[0].value = [1.0, None, 0.0]
    assert JUDGES["masked_or_raise"]([1.0, "masked", 0.0], obs) == (True, [1.0, None, 0.0])
