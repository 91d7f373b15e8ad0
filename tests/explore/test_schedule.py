"""Schedules are data: they round-trip through JSON, read as one sentence, and compile to catalog faults."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.explore.compile import fault_order, to_case
from pytest_e2b_env.explore.schedule import FaultStep, Schedule
from pytest_e2b_env.explore.strategies import schedules

ROUTES = {"create": 1, "kill": 1, "run": 2, "write": 1, "set_timeout": 1, "run_code": 1}


@settings(max_examples=60, deadline=None)
@given(schedules(ROUTES))
def test_a_schedule_survives_its_json(schedule: Schedule) -> None:
    """What a finding file holds reads back as the same schedule, and compiles to a valid case."""
    assert Schedule.from_json(schedule.to_json()) == schedule
    case = to_case(schedule)
    assert len(case.faults) == len(schedule.steps)
    assert case.expect == {"score_mask_or_raise": schedule.expected_scores()}


def test_a_schedule_reads_as_one_sentence() -> None:
    """The words name each fault, its repeats and position, then the batch."""
    schedule = Schedule(
        ("correct", "wrong"),
        (FaultStep("rate-limit", "create", times=4), FaultStep("lost-sandbox", "run", nth=2, sandbox=2)),
    )
    assert schedule.words() == (
        "429 (Retry-After 0) x4 on the 1st create, then a lost sandbox (502 'sandbox was not found' after) "
        "on the 2nd command of sandbox 2; completions 1: correct, 2: wrong"
    )


def test_steps_compile_to_the_catalogs_fault_rules() -> None:
    """Position becomes after/sandbox_nth/contains; rules pinned to a sandbox are added last, by sandbox."""
    pinned = FaultStep("kill-fails", "kill", sandbox=2)
    aimed = FaultStep("server-error", "write", nth=3, times=2, completion=1)
    schedule = Schedule(("correct",), (pinned, aimed))
    assert fault_order(schedule) == [1, 0]
    assert aimed.fault() == {
        "route": "POST /files",
        "answer": {"status": 500},
        "times": 2,
        "after": 2,
        "contains": "# explore-completion-1 #",
    }
    assert pinned.fault()["sandbox_nth"] == 2


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"behaviours": ["sleepy"]}, "behaviour 'sleepy' is not one of correct, wrong, hanging, hostile"),
        (
            {"behaviours": ["correct"], "steps": [{"kind": "kill-fails", "route": "create"}]},
            "fault kind 'kill-fails' is not aimed at route 'create'; use one of kill",
        ),
        ({"steps": []}, "a schedule is {'behaviours': [...], 'steps': [...]}"),
    ],
)
def test_a_bad_schedule_names_the_value_and_the_fix(raw: dict[str, object], message: str) -> None:
    """A finding file edited by hand is rejected with the bad value and what is allowed."""
    with pytest.raises(
        ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        Schedule.from_json(raw)


def test_an_sdk_retried_fault_says_so() -> None:
    """A 429 on create is retried by the SDK itself; a 500 is not."""
    assert FaultStep("rate-limit", "create").retried_by_sdk()
    assert not FaultStep("server-error", "create").retried_by_sdk()


@given(st.sampled_from(["correct", "wrong", "hanging", "hostile"]), st.integers(1, 4))
def test_each_program_carries_its_completion_marker(behaviour: str, completion: int) -> None:
    """A step aimed at one completion finds its program by the marker in the request body."""
    from pytest_e2b_env.explore.schedule import marker, program

    source = program(behaviour, completion)
    assert marker(completion) in source
    compile(source, "<program>", "exec")


EPISODE_ROUTES = {"create": 2, "kill": 2, "run": 2, "write": 2, "read": 1, "info": 2}


@settings(max_examples=60, deadline=None)
@given(schedules(EPISODE_ROUTES, subject="episode"))
def test_an_episode_schedule_survives_its_json_and_compiles(schedule: Schedule) -> None:
    """An episode schedule reads back as itself and is an episode case: its tool calls then submit, its
    steps plus the companion watch, and the catalog's verifier and cleanup predicates."""
    assert Schedule.from_json(schedule.to_json()) == schedule
    case = to_case(schedule)
    assert case.subject == "episode"
    assert case.episode is not None
    assert [s.tool for s in case.episode.script] == ["terminal"] * len(schedule.behaviours) + ["submit"]
    assert len(case.faults) == len(schedule.steps) + 1
    assert case.expect == {
        "score_mask_or_raise": schedule.expected_scores()[0],
        "verifier_created": True,
        "verifier_offline": True,
        "score_committed_after_cleanup": True,
    }
    assert case.never_in_sandbox


def test_an_episode_schedule_reads_as_one_sentence_and_aims_at_a_tool_call() -> None:
    """A step aimed at a tool call matches that call's marked command; the last program written decides."""
    step = FaultStep("lost-sandbox", "run", completion=2)
    schedule = Schedule(("repair", "look", "wrong"), (step,), "episode")
    assert schedule.words() == (
        "A lost sandbox (502 'sandbox was not found' after) on the 1st command carrying tool call 2; "
        "tool calls 1: repair, 2: look, 3: wrong, then submit"
    )
    assert step.fault("episode")["contains"] == "explore-tool-2;"
    assert "explore-tool-2;" in to_case(schedule).episode.script[1].args["command"]  # type: ignore[union-attr]
    assert schedule.expected_scores() == [0.0]
    assert Schedule(("wrong", "repair", "look"), subject="episode").expected_scores() == [1.0]
