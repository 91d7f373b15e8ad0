"""Verdict predicates over hand-built observations (pure data: no subject, no target)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pytest_e2b_env.catalog.contract import Contract
from pytest_e2b_env.catalog.loader import parse_cases_from_dicts
from pytest_e2b_env.catalog.observe import Call, Observation, exception_info
from pytest_e2b_env.catalog.verdict import judge, same_scores

scores = st.lists(st.floats(min_value=0, max_value=1, allow_nan=False), max_size=8)


@given(scores)
def test_scores_equal_themselves_in_order(values: list[float]) -> None:
    """A score list matches itself; any reordering that changes a position does not."""
    assert same_scores(values, list(values))
    flipped = list(reversed(values))
    if any(abs(a - b) > 1e-6 for a, b in zip(values, flipped, strict=True)):
        assert not same_scores(values, flipped)


@given(scores, st.integers(min_value=0, max_value=7))
def test_bools_and_missing_scores_never_match(values: list[float], where: int) -> None:
    """A bool in place of a score, or a missing score, fails the comparison."""
    if values:
        spoiled: list[Any] = list(values)
        spoiled[where % len(values)] = True
        assert not same_scores(values, spoiled)
        assert not same_scores(values, values[:-1])
    assert not same_scores(values, None)


def _case(subject: str, expect: dict[str, Any]) -> Any:
    raw: dict[str, Any] = {
        "id": f"{subject}-x",
        "subject": subject,
        "family": "good",
        "description": "A case built for verdict tests.",
        "expect": expect,
    }
    if subject == "reward":
        raw["reward"] = {"test_cases": [{"input": "1", "output": "1"}], "completions": [{"text": "x"}]}
    else:
        raw["episode"] = {"task": {"id": "t"}}
    (case,) = parse_cases_from_dicts([raw], "t.toml")
    return case


def _failed(case: Any, obs: Observation, reference: bool = False) -> list[str]:
    # The bundled code declares the classes it raises; third-party code declares nothing.
    classes = ("InfrastructureError", "CleanupError") if reference else ()
    contract = Contract(kind=case.subject, raises_classes=classes)
    return [c["id"] for c in judge(case, obs, contract, ["sekrit-key"]) if not c["passed"]]


def _infra() -> dict[str, Any]:
    class InfrastructureError(Exception):
        pass

    return exception_info(InfrastructureError("worker ix1 lost"), [])


def test_rewards_and_global_checks_pass() -> None:
    """Right scores, no leak and no secret: every criterion passes."""
    obs = Observation("reward", calls=[Call("reward", value=[1.0], returned=True)])
    assert _failed(_case("reward", {"rewards": [1.0]}), obs) == []


def test_leak_and_secret_fail_globally() -> None:
    """A leaked sandbox and a secret in an observation fail the global checks."""
    obs = Observation("reward", calls=[Call("reward", value=["sekrit-key"], returned=True)], leaked=["ix1"])
    assert _failed(_case("reward", {"rewards": [1.0]}), obs) == ["rewards", "no-leak", "no-secret"]


def test_raise_is_judged_by_behaviour_then_class_for_reference() -> None:
    """Any raise satisfies `raises`; a subject declaring its classes must also raise the named one."""
    obs = Observation("reward", calls=[Call("reward", error=exception_info(ValueError("x"), []))])
    case = _case("reward", {"raises": "InfrastructureError", "no_score": True})
    assert _failed(case, obs, reference=False) == []
    assert _failed(case, obs, reference=True) == ["raises-class"]
    obs.calls[0].error = _infra()
    assert _failed(case, obs, reference=True) == []


def test_episode_raise_with_a_score_anyway_fails() -> None:
    """An episode that raised at submit but still returned a reward is not a caught failure."""
    obs = Observation(
        "episode",
        calls=[
            Call("submit", error=_infra()),
            Call("get_reward", value=0.0, returned=True, after_submit=True),
        ],
    )
    assert "raises" in _failed(_case("episode", {"raises": "any", "no_score": True}), obs)


def test_unexpected_raise_fails_a_value_case() -> None:
    """When a case expects values, an exception from the subject is its own failure."""
    obs = Observation("reward", calls=[Call("close", error=_infra())])
    assert "no-unexpected-raise" in _failed(_case("reward", {"no_sandbox": True}), obs)


def test_committed_after_cleanup_and_tool_surface() -> None:
    """Sandboxes alive at get_reward and extra public methods fail their predicates."""
    obs = Observation(
        "episode",
        calls=[Call("get_reward", value=1.0, returned=True)],
        tools=["reset_sandbox", "submit", "terminal"],
        allowed_tools=["submit", "terminal"],
        alive_at_reward={0: ["ix2"]},
    )
    case = _case(
        "episode", {"reward": 1.0, "score_committed_after_cleanup": True, "tools_allowed_only": True}
    )
    assert _failed(case, obs) == ["score_committed_after_cleanup", "tools_allowed_only"]


def test_tool_refused_reads_the_ledger() -> None:
    """A call after submit during which a command started counts as executed, not refused."""
    ledger = [{"seq": 5, "op": "run", "route": "POST /process.Process/Start", "sandbox_id": "ix1"}]
    late = Call("terminal", returned=True, value="ok", after_submit=True, mark_start=5, mark_end=6)
    obs = Observation("episode", calls=[late, Call("get_reward", value=1.0, returned=True)], ledger=ledger)
    assert _failed(_case("episode", {"reward": 1.0, "tool_refused": True}), obs) == ["tool_refused"]
    obs.ledger = []
    assert _failed(_case("episode", {"reward": 1.0, "tool_refused": True}), obs) == []


def test_a_failed_raise_says_any_exception_would_do() -> None:
    """A subject that scored instead of raising is shown "expected an exception of any type", not the
    reference's class name, which only the declared-class criterion checks."""
    case = _case("reward", {"raises": "InfrastructureError"})
    obs = Observation("reward", calls=[Call("reward", value=[0.0], returned=True)])
    (raises,) = [c for c in judge(case, obs, Contract(kind="reward"), []) if c["id"] == "raises"]
    assert not raises["passed"]
    assert raises["expected"] == "an exception of any type, no score"
