"""Regression tests: the catalog judges third-party-shaped code fairly (no false failures, no misses)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_e2b_env.catalog.contract import Contract, load_subject, parse_contract
from pytest_e2b_env.catalog.loader import parse_cases_from_dicts
from pytest_e2b_env.catalog.observe import Call, Observation
from pytest_e2b_env.catalog.runner import run_case
from pytest_e2b_env.catalog.verdict import LOST_CREATE_LIFETIME_BOUND, _failed_kills, judge
from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.targets import Target

TESTS = [{"input": "1", "output": "1"}]
TASK = {
    "id": "tiny",
    "workdir": "/home/user/work",
    "files": {"report.py": "print('{\"a\": 1}')\n"},
    "artifact": "report.py",
    "command": "python3 -B report.py",
    "limits": {"command_seconds": 10},
    "verification": {"files": {"in.txt": "x"}, "expected": {"a": 1}},
}


def _case(raw: dict[str, Any]) -> Any:
    base = {"id": "reward-t", "subject": "reward", "family": "good", "description": "A fairness test case."}
    return parse_cases_from_dicts([{**base, **raw}], __file__)[0]


def _reward(expect: dict[str, Any], **extra: Any) -> Any:
    return _case({"reward": {"test_cases": TESTS, "completions": [{"text": "x"}]}, "expect": expect, **extra})


def test_untagged_subject_passes_kill_failure_and_the_harness_sweeps(target: Target) -> None:
    """No tag of ours is needed: the harness kills what the ledger says the case created."""
    case = _reward(
        {
            "raises": "CleanupError",
            "kill_failed_seen": True,
            "raises_names_ids": True,
            "leaked_after_sweep": 0,
        },
        faults=[{"route": "DELETE /sandboxes/*", "answer": {"kill_fails": True}, "times": 1000}],
        policy={"raises_names_ids": "cleanup-names-ids"},
    )
    subject = load_subject("catalog_subjects:untagged_kill_checked", "reward")
    result = run_case(case, subject, target)
    strict = result.status
    relaxed = run_case(case, subject, target, relax=frozenset({"cleanup-names-ids"}))
    assert target.alive_ids() == set()
    assert strict == "failed"
    assert [c["id"] for c in result.criteria if not c["passed"]] == ["raises_names_ids"]
    assert relaxed.status == "relaxed", relaxed.failure_message()
    assert relaxed.observed["leaked_after_sweep"] == []


def test_gone_means_gone() -> None:
    """A kill answered 500 and then 404 (already gone) is a confirmed kill, not a failed one."""
    obs = Observation(subject="reward")
    obs.ledger = [
        {"seq": 0, "route": "DELETE /sandboxes/{id}", "sandbox_id": "a", "status": 500, "op": "fault"},
        {"seq": 1, "route": "DELETE /sandboxes/{id}", "sandbox_id": "a", "status": 404, "op": "kill"},
        {"seq": 2, "route": "DELETE /sandboxes/{id}", "sandbox_id": "b", "status": 500, "op": "fault"},
        {"seq": 3, "route": "GET /sandboxes/{id}", "sandbox_id": "c", "status": 404, "op": "get_info"},
    ]
    assert _failed_kills(obs) == ["b"]


@pytest.mark.parametrize(
    ("spec", "lifetime"), [("untagged_kill_checked", 60.0), ("long_lived_kill_checked", 3600.0)]
)
def test_lost_create_response_is_a_created_sandbox(target: Target, spec: str, lifetime: float) -> None:
    """A create whose answer was dropped is ledgered as a create; left alive, its lifetime decides.

    Within the bound (it ends by itself, as E2B's cookbook relies on) it is no leak, and the record
    says so; an hour-long one is a leak.
    """
    case = _reward(
        {"tolerate_raises": True, "leaked_sandboxes": 0},
        faults=[{"route": "POST /v2/sandboxes", "answer": {"drop_stream": True}, "times": 1}],
    )
    result = run_case(case, load_subject(f"catalog_subjects:{spec}", "reward"), target)
    creates = [e for e in result.trajectory if e.get("kind") == "sandbox_op" and e.get("op") == "create"]
    assert creates, result.trajectory
    assert creates[0].get("fault"), creates
    lost = creates[0]["sandbox_id"]
    assert result.observed["leaked"] == [lost]
    (leak,) = [c for c in result.criteria if c["id"] == "leaked_sandboxes"]
    assert leak["actual"]["lifetime_bound_s"] == LOST_CREATE_LIFETIME_BOUND
    assert leak["actual"]["create_answer_lost"][lost]["lifetime"] == f"{lifetime:g} s"
    assert result.status == ("passed" if lifetime <= LOST_CREATE_LIFETIME_BOUND else "failed")
    assert target.alive_ids() == set()


def test_factory_that_raises_is_not_a_raise(target: Target) -> None:
    """A broken factory never satisfies 'raises': the case fails as 'subject could not be built'."""
    case = _reward({"raises": "any", "no_score": True})
    result = run_case(case, load_subject("catalog_subjects:raising_factory", "reward"), target)
    assert result.status == "failed"
    assert [c["id"] for c in result.criteria] == ["subject-built"]
    assert "subject could not be built: RuntimeError: reward config missing" in result.failure_message()


def test_verification_info_column_and_trl_keywords(target: Target) -> None:
    """A subject declaring columns = verification_info gets open-r1's column and TRL's keywords."""
    subject = load_subject("catalog_subjects:verification_info_reward", "reward")
    assert subject.contract.columns == "verification_info"
    result = run_case(_reward({"rewards": [1.0]}), subject, target)
    assert result.status == "passed", result.failure_message()


@pytest.mark.full
def test_command_deadline_overrun_fails_with_both_numbers(target: Target) -> None:
    """A subject ignoring the command limit fails deadline_kept, naming the limit and the time taken."""
    case = _case(
        {
            "id": "episode-t",
            "subject": "episode",
            "family": "timeout",
            "episode": {
                "task": TASK,
                "task_override": {"limits": {"command_seconds": 1}},
                "script": [
                    {
                        "tool": "terminal",
                        "args": {"command": "sleep {past_command_deadline}; echo done"},
                        "deadline": "command_seconds",
                    }
                ],
            },
            "expect": {"deadline_kept": True},
        }
    )
    result = run_case(case, load_subject("catalog_subjects:TinyEpisode", "episode"), target)
    assert result.status == "failed"
    kept = next(c for c in result.criteria if c["id"] == "deadline_kept")
    over = kept["actual"]["overran"][0]
    assert over["limit_s"] == 1.0
    assert over["allowed_s"] == 3.5
    assert over["returned_after_s"] > over["allowed_s"]


def test_fixed_policy_window_past_the_cap_is_a_named_skip(target: Target) -> None:
    """A subject with a fixed 120 s window skips the window case with the reason, never fails it."""
    case = _case(
        {
            "id": "episode-t",
            "subject": "episode",
            "family": "timeout",
            "episode": {
                "task": TASK,
                "task_override": {"limits": {"policy_seconds": 1}},
                "script": [{"tool": "sleep", "until": "policy_seconds"}],
            },
            "expect": {"reward": 0.0},
        }
    )
    subject = load_subject("catalog_subjects:TinyEpisode", "episode")
    fixed = type(subject)(
        subject.kind,
        subject.spec,
        subject.factory,
        parse_contract({"limits": {"policy_seconds": 120}}, "episode", "test"),
    )
    result = run_case(case, fixed, target)
    assert result.status == "skipped"
    assert result.reason == "policy window 120 s exceeds the 30 s cap (a fixed limit)"


def test_raises_is_judged_from_outside_without_a_class() -> None:
    """For third-party code any exception at a scoring call satisfies raises, and says so."""
    case = _reward({"raises": "InfrastructureError"})
    obs = Observation(subject="reward")
    obs.calls = [
        Call(name="factory", returned=True),
        Call(name="reward", error={"type": "RuntimeError", "hierarchy": ["RuntimeError"], "message": "boom"}),
    ]
    criteria = judge(case, obs, Contract(kind="reward"), [])
    raises = next(c for c in criteria if c["id"] == "raises")
    assert raises["passed"]
    assert "any exception type" in raises["description"]
    assert not [c for c in criteria if c["id"] == "raises-class"]
    declared = judge(case, obs, Contract(kind="reward", raises_classes=("InfrastructureError",)), [])
    assert not next(c for c in declared if c["id"] == "raises-class")["passed"]


def test_failure_line_names_the_completion() -> None:
    """A score mismatch names the case description and which completion scored what."""
    case = _reward({"rewards": [1.0, 0.0]})
    case.reward.completions = case.reward.completions * 2
    obs = Observation(subject="reward")
    obs.calls = [Call(name="factory", returned=True), Call(name="reward", returned=True, value=[1.0, 1.0])]
    rewards = next(c for c in judge(case, obs, Contract(kind="reward"), []) if c["id"] == "rewards")
    assert rewards["actual"]["differs"] == [{"completion": 1, "expected": 0.0, "got": 1.0}]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"columns": "vinfo"}, "columns='vinfo' is not valid"),
        ({"task": "yaml"}, "task='yaml' is not valid"),
        ({"limits": {"command_seconds": -1}}, "limits.command_seconds=-1 is not valid"),
        ({"tool": {}}, "unknown episode contract key(s) ['tool']"),
    ],
)
def test_bad_contract_names_the_key(raw: dict[str, Any], message: str) -> None:
    """A bad declaration is one ConfigError naming the key, the value and the fix."""
    kind = "reward" if "columns" in raw else "episode"
    with pytest.raises(ConfigError) as info:
        parse_contract(raw, kind, "mypkg.env:Env e2b_contract")
    assert message in str(info.value)


def test_untagged_sandboxes_are_advice_never_a_failure(target: Target) -> None:
    """A subject whose sandboxes carry no metadata passes; the record recommends tagging them."""
    result = run_case(
        _reward({"rewards": [1.0]}), load_subject("catalog_subjects:untagged_kill_checked", "reward"), target
    )
    assert result.status == "passed", result.failure_message()
    assert result.advice
    assert "carry no metadata" in result.advice[0]
    tagged = run_case(
        _reward({"rewards": [1.0]}), load_subject("pytest_e2b_env.reward:reward_subject", "reward"), target
    )
    assert tagged.advice == []


def _cancel_case(faults: list[dict[str, Any]]) -> Any:
    """The catalog's ``reward-lifecycle-cancel-poisons`` with these faults (sample subjects importable)."""
    import sys

    from pytest_e2b_env.catalog.loader import default_cases_dir, load_cases

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures" / "subjects"))
    (base,) = [c for c in load_cases([default_cases_dir()]) if c.id == "reward-lifecycle-cancel-poisons"]
    raw = {**base.model_dump(mode="json", exclude_none=True), "faults": faults}
    return parse_cases_from_dicts([raw], str(default_cases_dir() / "lifecycle.toml"))[0]


@pytest.mark.full
def test_a_create_in_flight_at_cancellation_is_no_kept_sandbox(target: Target) -> None:
    """A stateless reward cancelled while a create is in flight keeps nothing: the pool case does not apply.

    The create the cancellation cut off still makes a sandbox the subject never heard of. Counting
    it as "kept across calls" ran the cancel-poisons case on a subject without a pool, and a
    correct one failed it on a loaded machine, where that window is wide.
    """
    # the second create is slow
    case = _cancel_case([{"route": "POST /v2/sandboxes", "after": 1, "answer": {"delay": 3}}])
    result = run_case(case, load_subject("baseline_reward_mask:make_reward", "reward"), target)
    assert result.status == "skipped", result.failure_message()
    assert "keeps no sandbox" in str(result.reason)
    assert target.alive_ids() == set()


@pytest.mark.full
def test_a_kill_in_flight_at_cancellation_is_no_kept_sandbox(target: Target) -> None:
    """A stateless reward whose cancelled tasks are still killing their sandboxes keeps nothing.

    ``gather`` raises at the first cancelled child while the others run their ``finally``; on a
    loaded machine their kills landed after the second batch, so the sandboxes were still alive
    when asked, counted as kept, and a correct subject failed the cancel-poisons case.
    """
    # the first call's second kill is slow; gather has raised at the first, which was quick
    case = _cancel_case([{"route": "DELETE /sandboxes/*", "after": 1, "answer": {"delay": 3}, "times": 1}])
    result = run_case(case, load_subject("baseline_reward_mask:make_reward", "reward"), target)
    assert result.status == "skipped", result.failure_message()
    assert "keeps no sandbox" in str(result.reason)
    assert target.alive_ids() == set()


@pytest.mark.full
def test_a_create_the_cancellation_cut_off_is_the_harness_to_remove(target: Target) -> None:
    """A pool cancelled while creating a worker passes; the sandbox that create made is swept.

    The cancelled SDK call never gets the answer, yet the sandbox is made when it is ready: by
    the case's end (a leak the subject could not have avoided) or after it (then nobody's). The
    case waits for creates in flight and the harness kills, and names, what such a create made.
    """
    # the second worker's create is slow: still unanswered when the first worker's command starts
    case = _cancel_case([{"route": "POST /v2/sandboxes", "after": 1, "answer": {"delay": 3}}])
    result = run_case(case, load_subject("baseline_reward_pool:SandboxPool", "reward"), target)
    assert target.alive_ids() == set()
    assert result.status == "passed", result.failure_message()
    assert len(result.observed["cut_off"]) == 1, result.observed["cut_off"]
    (swept,) = [r for r in result.cleanup if r["sandbox_id"] in result.observed["cut_off"]]
    assert "cancellation cut off" in swept["error"]
    assert swept["confirmed_absent_at"]


def test_an_unused_create_answered_during_the_cancelled_call_is_cut_off() -> None:
    """The CI failure's ledger: worker 2's create was answered before the cancelled call returned.

    The server records a create as it answers; the cancellation landed while that answer was
    still on its way, so the SDK call raised ``CancelledError`` and the pool never had the id.
    Counting it as the subject's leak failed a correct pool on a loaded machine.
    """
    from pytest_e2b_env.catalog.runner import _cut_off

    def entry(seq: int, op: str, sandbox_id: str) -> dict[str, Any]:
        return {"seq": seq, "op": op, "sandbox_id": sandbox_id}

    before = entry(3, "create", "made-before-the-batch")
    obs = Observation(subject="pool")
    obs.calls = [Call(name="reward", args={"completions": 2, "cancel_on": "run"}, mark_start=10, mark_end=20)]
    obs.ledger = [
        before,
        entry(11, "create", "worker-1"),
        entry(12, "run", "worker-1"),
        entry(15, "create", "answer-in-flight"),  # before mark_end, never used
        entry(25, "create", "answered-after"),
    ]
    assert _cut_off(obs) == {"answer-in-flight", "answered-after"}
    plain = Observation(subject="pool", ledger=obs.ledger, calls=[Call(name="reward", mark_start=10)])
    assert _cut_off(plain) == set()


@pytest.mark.full
@pytest.mark.parametrize("delay", [0.2, 0.6, 1.5])
def test_a_pool_cancelled_near_a_create_answer_passes_whatever_the_timing(
    target: Target, delay: float
) -> None:
    """Worker 2's create answered before, around or after the cancellation: the pool passes each time."""
    case = _cancel_case([{"route": "POST /v2/sandboxes", "after": 1, "answer": {"delay": delay}}])
    result = run_case(case, load_subject("baseline_reward_pool:SandboxPool", "reward"), target)
    assert target.alive_ids() == set()
    assert result.status == "passed", result.failure_message()
    assert len(result.observed["cut_off"]) <= 1, result.observed["cut_off"]
