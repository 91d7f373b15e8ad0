"""Faults on live sandboxes, vanished sandboxes, expected outputs in requests, lost creates' lifetimes.

The verdicts are pure functions of an observation (built by hand here); the runner tests drive tiny
third-party-style subjects on the real emulator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_e2b_env.catalog.contract import Contract, load_subject
from pytest_e2b_env.catalog.expected import CRITERION, MIN_NEEDLE, forms, needles, reward_needles
from pytest_e2b_env.catalog.loader import default_cases_dir, load_cases, parse_cases_from_dicts
from pytest_e2b_env.catalog.observe import Call, Observation
from pytest_e2b_env.catalog.runner import run_case
from pytest_e2b_env.catalog.verdict import LOST_CREATE_LIFETIME_BOUND, judge
from pytest_e2b_env.targets import Target

OUTPUT = '{"acme": 20, "beta": 3}'
TESTS = [{"input": '[{"customer": "acme", "tokens": 20}]', "output": OUTPUT}]
TASK = {
    "id": "tiny",
    "workdir": "/home/user/work",
    "files": {"report.py": "print('{\"a\": 1}')\n"},
    "artifact": "report.py",
    "command": "python3 -B report.py",
    "verification": {"files": {"in.txt": "x"}, "expected": {"a": 1}},
}


def _case(subject: str, expect: dict[str, Any], **extra: Any) -> Any:
    raw: dict[str, Any] = {
        "id": f"{subject}-t",
        "subject": subject,
        "family": "live-fault",
        "description": "A case built for the live-fault tests.",
        "expect": expect,
        **extra,
    }
    if subject == "reward":
        raw.setdefault("reward", {"test_cases": TESTS, "completions": [{"text": "x"}]})
    else:
        raw.setdefault("episode", {"task": TASK})
    (case,) = parse_cases_from_dicts([raw], __file__)
    return case


def _failed(case: Any, obs: Observation) -> dict[str, Any]:
    criteria = judge(case, obs, Contract(kind=case.subject), ["sekrit-key"])
    return {c["id"]: c["actual"] for c in criteria if not c["passed"]}


def _fault(seq: int, sid: str, label: str = "f1: status 500") -> dict[str, Any]:
    return {
        "seq": seq,
        "op": "fault",
        "route": "POST /files",
        "sandbox_id": sid,
        "status": 500,
        "fault": label,
    }


def _kill(seq: int, sid: str, status: int = 204) -> dict[str, Any]:
    return {"seq": seq, "op": "kill", "route": "DELETE /sandboxes/{id}", "sandbox_id": sid, "status": status}


# -- score_mask_or_raise -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "passed"),
    [
        (Call("reward", value=[1.0], returned=True), True),
        (Call("reward", value=[None], returned=True), True),
        (Call("reward", error={"type": "RuntimeError", "hierarchy": [], "message": "x"}), True),
        (Call("reward", value=[0.0], returned=True), False),
        (Call("reward", value=[True], returned=True), False),
    ],
)
def test_a_fault_becomes_the_right_score_none_or_a_raise_never_another_number(
    call: Call, passed: bool
) -> None:
    """score_mask_or_raise: 1.0, None or a raise pass; 0.0 (the fault scored) and a bool fail."""
    obs = Observation("reward", calls=[call])
    assert (
        "score_mask_or_raise" not in _failed(_case("reward", {"score_mask_or_raise": [1.0]}), obs)
    ) is passed


def test_an_episode_masks_a_fault_only_once_its_sandboxes_are_gone() -> None:
    """None from get_reward passes with nothing alive, fails with the policy sandbox alive; 0.0 fails."""
    case = _case("episode", {"score_mask_or_raise": 1.0})
    masked = Observation(
        "episode", calls=[Call("get_reward", value=None, returned=True)], alive_at_reward={0: []}
    )
    assert _failed(case, masked) == {}
    masked.alive_at_reward = {0: ["ix1"]}
    assert "score_mask_or_raise" in _failed(case, masked)
    zero = Observation(
        "episode", calls=[Call("get_reward", value=0.0, returned=True)], alive_at_reward={0: []}
    )
    assert _failed(case, zero)["score_mask_or_raise"]["scored"] == [0.0]


# -- faulted_sandbox_released ------------------------------------------------------------------


def test_a_sandbox_dropped_alive_after_a_fault_fails_a_killed_one_passes() -> None:
    """The sandbox a 500 hit: killed (even before the delayed fault entry) passes; left alive fails."""
    case = _case("reward", {"faulted_sandbox_released": True, "tolerate_raises": True})
    killed = Observation("reward", ledger=[_kill(3, "ia"), _fault(4, "ia")])
    assert _failed(case, killed) == {}
    dropped = Observation("reward", ledger=[_fault(4, "ia")], leaked=["ia"])
    failed = _failed(case, dropped)
    assert failed["faulted_sandbox_released"] == {
        "ia": {"killed": False, "used_after_the_fault": False, "alive_at_end": True}
    }
    assert failed["no-leak"] == ["ia"]


def test_a_lost_sandbox_or_a_failed_kill_is_not_a_fault_on_a_live_sandbox() -> None:
    """lose_sandbox and kill_fails are other families' faults: no live sandbox was hit."""
    case = _case("reward", {"faulted_sandbox_released": True, "tolerate_raises": True})
    obs = Observation(
        "reward",
        ledger=[
            _fault(1, "ia", "f1: lose_sandbox"),
            {**_kill(2, "ib", 500), "op": "fault", "fault": "f2: kill_fails"},
        ],
    )
    assert _failed(case, obs)["faulted_sandbox_released"] == "no fault hit a sandbox that stayed alive"


# -- which faults are this case's --------------------------------------------------------------


def test_watching_rules_and_other_cases_rules_are_not_this_cases_faults() -> None:
    """Only entries of the case's own fault rules count; the expected-output watch never does."""
    obs = Observation(
        "reward",
        ledger=[
            _fault(1, "ia", "f7: delay 25s"),
            _fault(2, "ia", "f9: delay 0s"),
            _fault(3, "ia", "f8: status 500"),
        ],
        fault_rules=["f8"],
        watch_rules=["f9"],
    )
    assert [e["seq"] for e in obs.faults()] == [3]
    obs.fault_rules = None  # not known: every fault but the watch counts
    assert [e["seq"] for e in obs.faults()] == [1, 3]


# -- expected outputs never enter a sandbox ----------------------------------------------------


def test_a_request_carrying_an_expected_output_fails_the_reward_case_naming_it() -> None:
    """A watching rule that fired fails no-expected-output-in-sandbox with the route and sandbox."""
    case = _case("reward", {"tolerate_raises": True})
    obs = Observation("reward", watch_rules=["f2"], watched_forms=5)
    assert _failed(case, obs) == {}
    obs.ledger = [
        {"seq": 1, "op": "fault", "route": "POST /execute", "sandbox_id": "ia", "fault": "f2: delay 0s"}
    ]
    assert _failed(case, obs)[CRITERION]["carried_by"] == ["POST /execute (sandbox ia)"]


def test_a_case_with_nothing_long_enough_to_watch_says_so() -> None:
    """With no form to watch for, the criterion passes and says why."""
    criteria = judge(
        _case("reward", {"tolerate_raises": True}), Observation("reward"), Contract(kind="reward"), []
    )
    (found,) = [c for c in criteria if c["id"] == CRITERION]
    assert found["passed"]
    assert found["actual"] == f"no expected output of {MIN_NEEDLE}+ characters to look for"


def test_forms_are_the_text_the_json_value_reserialized_and_as_a_python_literal_escaped_twice() -> None:
    """Each value, then as it reads inside one and two JSON strings."""
    found = forms('{"b": 1, "a": true}')
    for form in (
        '{"b": 1, "a": true}',
        '{"b":1,"a":true}',
        '{"a": true, "b": 1}',
        "{'b': 1, 'a': True}",
        '{\\"b\\": 1, \\"a\\": true}',
        '{\\\\\\"b\\\\\\": 1, \\\\\\"a\\\\\\": true}',
    ):
        assert form in found
    assert forms("true", MIN_NEEDLE) == []


values = st.dictionaries(
    st.text("abcdefgh", min_size=3, max_size=6), st.integers(0, 10**6), min_size=1, max_size=4
)


@given(values)
def test_an_expected_output_is_found_however_a_script_or_cell_embeds_it(value: dict[str, int]) -> None:
    """Plain, in a JSON literal of a script, double-encoded in a cell (open-r1), or as a Python literal."""
    output = json.dumps(value)
    found = needles([output], ["[1, 2]"])
    cases = [{"input": "[1, 2]", "output": output}]
    for body in (
        output,
        f"cases = json.loads({json.dumps(json.dumps(cases))})",
        f"expected = {value!r}",
        json.dumps({"cases": cases}),
    ):
        assert any(n in body for n in found), body


@given(values)
def test_what_a_case_sends_on_purpose_is_never_proof(value: dict[str, int]) -> None:
    """An output that is also an input (or part of a program) yields no needle found in the program."""
    output = json.dumps(value)
    program = f"print({output!r})"
    assert not any(n in program for n in needles([output], [program]))


def test_a_bundled_reward_case_watches_its_outputs_but_not_its_inputs() -> None:
    """reward-good-correct: the forms of its expected output, none found in its inputs or programs."""
    (case,) = [c for c in load_cases([default_cases_dir()]) if c.id == "reward-good-correct"]
    found = reward_needles(case)
    assert OUTPUT in found
    assert "{'acme': 20, 'beta': 3}" in found
    assert all(len(n) >= MIN_NEEDLE for n in found)


# -- lost creates: a leak its own lifetime bounds -----------------------------------------------


@pytest.mark.parametrize(
    ("info", "leak"),
    [
        ({"answer_lost": True, "lifetime_s": 300.0, "auto_pause": False}, False),
        ({"answer_lost": True, "lifetime_s": LOST_CREATE_LIFETIME_BOUND, "auto_pause": False}, False),
        ({"answer_lost": True, "lifetime_s": 3600.0, "auto_pause": False}, True),
        ({"answer_lost": True, "lifetime_s": 300.0, "auto_pause": True}, True),
        ({"answer_lost": True}, True),
        ({"lifetime_s": 300.0, "auto_pause": False}, True),
    ],
)
def test_a_lost_create_left_to_a_short_lifetime_is_not_a_leak(info: dict[str, Any], leak: bool) -> None:
    """Answer lost, lifetime within the bound, not auto-paused: accepted, and the bound is reported."""
    obs = Observation("reward", calls=[Call("reward", value=[1.0], returned=True)], leaked=["ia"])
    obs.create_info = {"ia": info}
    failed = _failed(_case("reward", {"rewards": [1.0]}), obs)
    assert ("no-leak" in failed) is leak
    if info.get("answer_lost"):
        criteria = judge(_case("reward", {"rewards": [1.0]}), obs, Contract(kind="reward"), [])
        (no_leak,) = [c for c in criteria if c["id"] == "no-leak"]
        assert no_leak["actual"]["lifetime_bound_s"] == LOST_CREATE_LIFETIME_BOUND


# -- on the emulator ----------------------------------------------------------------------------


def test_answers_sent_with_a_command_are_caught_and_the_case_faults_still_count(target: Target) -> None:
    """The watch fires on the command, fails its criterion, and is not one of the case's faults."""
    case = _case(
        "reward",
        {"rewards": [1.0], "faults_fired_max": 0},
        faults=[{"route": "GET /nowhere", "answer": {"status": 500}}],
    )
    result = run_case(case, load_subject("catalog_subjects:answers_in_a_command", "reward"), target)
    failed = {c["id"]: c["actual"] for c in result.criteria if not c["passed"]}
    assert list(failed) == [CRITERION]
    assert failed[CRITERION]["carried_by"][0].startswith("POST /process.Process/Start (sandbox ")
    assert target.alive_ids() == set()


def test_a_request_held_past_the_subjects_timeout_is_still_this_cases_fault(target: Target) -> None:
    """A delayed command the subject gave up on is recorded late; the case waits for it."""
    case = _case(
        "reward",
        {"score_mask_or_raise": [1.0], "faults_fired_min": 1, "faulted_sandbox_released": True},
        faults=[{"route": "POST /process.Process/Start", "answer": {"delay": 5}}],
    )
    result = run_case(case, load_subject("catalog_subjects:impatient", "reward"), target)
    assert result.status == "passed", result.failure_message()
    assert result.exceptions[0]["type"] == "TimeoutException"


def test_vanish_ends_the_policy_sandbox_and_an_unchecked_zero_is_caught(target: Target) -> None:
    """The backend ends the policy sandbox between calls; 0.0 for 'never submitted' then fails."""
    case = _case(
        "episode",
        {"masked_or_raise": True, "no_score": True},
        episode={"task": TASK, "script": [{"tool": "vanish"}]},
    )
    result = run_case(case, load_subject("catalog_subjects:TinyEpisode", "episode"), target)
    failed = [c["id"] for c in result.criteria if not c["passed"]]
    assert failed == ["masked_or_raise", "no_score"]
    (vanish,) = [c for c in result.observed["calls"] if c["name"] == "vanish"]
    assert len(vanish["value"]) == 1
    assert vanish["value"][0] in result.observed["sandboxes_created"]


def test_the_ledger_records_the_lifetime_a_create_asked_for(target: Target) -> None:
    """Each create entry carries lifetime_s and auto_pause, read from the create request."""
    case = _case("reward", {"rewards": [1.0]})
    result = run_case(case, load_subject("catalog_subjects:long_lived_kill_checked", "reward"), target)
    creates = [e for e in result.trajectory if e.get("kind") == "sandbox_op" and e.get("op") == "create"]
    assert [(e["lifetime_s"], e["auto_pause"]) for e in creates] == [(3600.0, False)]


# -- the samples each new case is proven against --------------------------------------------------

SAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "subjects"
LEAK = ["faulted_sandbox_released", "no-leak"]


@pytest.mark.parametrize(
    ("spec", "case_id", "failed"),
    [
        ("baseline_reward_warm_pool:WarmPool", "reward-live-fault-5xx", []),
        ("baseline_reward_warm_pool_drops:DroppingWarmPool", "reward-live-fault-5xx", LEAK),
        ("baseline_reward_warm_pool:WarmPool", "reward-good-correct", []),
        ("reward_script_expected:factory", "reward-good-correct", [CRITERION]),
        ("baseline_episode_home:RepairEpisode", "episode-live-fault-command-5xx", []),
        (
            "baseline_episode_home_forgets_faulted:ForgetsFaultedEpisode",
            "episode-live-fault-command-5xx",
            LEAK,
        ),
        ("baseline_episode_home:RepairEpisode", "episode-lost-worker-vanished-before-reward", []),
        (
            "baseline_episode_home_unchecked_zero:UncheckedZeroEpisode",
            "episode-lost-worker-vanished-before-reward",
            ["masked_or_raise", "no_score"],
        ),
    ],
)
def test_each_sample_fails_only_the_criterion_its_bug_breaks(
    target: Target, monkeypatch: pytest.MonkeyPatch, spec: str, case_id: str, failed: list[str]
) -> None:
    """Correct samples pass; each single-defect variant fails exactly the criteria of its bug."""
    monkeypatch.syspath_prepend(str(SAMPLES))
    (case,) = [c for c in load_cases([default_cases_dir()]) if c.id == case_id]
    record = run_case(case, load_subject(spec, case.subject), target)
    assert [c["id"] for c in record.criteria if not c["passed"]] == failed, record.reason
    assert target.alive_ids() == set()
