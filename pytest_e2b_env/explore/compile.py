"""A schedule as a catalog case: the catalog's runner, fault rules and verdicts do the work.

The case expects what a correct reward gives the batch, judged with the catalog's own
``score_mask_or_raise`` (an injected fault never changes a number: the right score, ``None`` or a
raise); every reward case also gets the catalog's global safety checks (no leak, no expected
output in a sandbox, no secret).
"""

from __future__ import annotations

import json
from typing import Any

from pytest_e2b_env.catalog.loader import parse_cases_from_dicts
from pytest_e2b_env.catalog.model import Case
from pytest_e2b_env.explore.episode import COMPANION, PROGRAMS, TASK, command, episode_input
from pytest_e2b_env.explore.schedule import TEST_INPUT, TEST_OUTPUT, Schedule, program

CASE_ID = "explore-schedule"


def fault_order(schedule: Schedule) -> list[int]:
    """Step indexes in the order the runner adds their rules.

    The catalog's runner adds the rules it can place at once in case order, and pins each rule
    aimed at the n-th sandbox when that sandbox appears: ordered by n (stable), the rule ids it
    hands out follow this list, so each fired rule in the ledger names its step.
    """
    now = [i for i, s in enumerate(schedule.steps) if s.sandbox is None]
    later = sorted(
        (i for i, s in enumerate(schedule.steps) if s.sandbox is not None),
        key=lambda i: schedule.steps[i].sandbox or 0,
    )
    return now + later


def to_case(schedule: Schedule) -> Case:
    """The catalog case that runs ``schedule`` (its faults in :func:`fault_order`)."""
    faults = [schedule.steps[i].fault(schedule.subject) for i in fault_order(schedule)]
    raw: dict[str, Any] = {
        "id": CASE_ID,
        "subject": schedule.subject,
        "family": "live-fault",
        "description": "One schedule of the fault-schedule search: " + schedule.words()[:300],
        "faults": faults,
    }
    if schedule.subject == "episode":
        raw |= episode_case(schedule.behaviours)
        raw["faults"] = [*faults, companion_watch()]
        raw["expect"] = {"score_mask_or_raise": schedule.expected_scores()[0], **raw["expect"]}
        return parse_cases_from_dicts([raw], "explore")[0]
    fence = "```python\n{}```\n"
    completions = [
        {"text": "Here is my solution.\n\n" + fence.format(program(b, i))}
        for i, b in enumerate(schedule.behaviours, 1)
    ]
    raw["reward"] = {
        "completions": completions,
        "test_cases": [{"input": TEST_INPUT, "output": TEST_OUTPUT}],
    }
    raw["expect"] = {"score_mask_or_raise": schedule.expected_scores()}
    return parse_cases_from_dicts([raw], "explore")[0]


def episode_case(actions: tuple[str, ...]) -> dict[str, Any]:
    """The episode part of a schedule's case: the tool calls, the watch for the companion file,
    the catalog's verifier and cleanup predicates, and the expected output never in a sandbox.

    The predicates beside ``score_mask_or_raise`` hold only once a score came out: the invariants
    read them that way (:mod:`~pytest_e2b_env.explore.invariants`).
    """
    from pytest_e2b_env.catalog.expected import needles

    sent = [*TASK["files"].values(), *TASK["verification"]["files"].values(), *PROGRAMS.values()]
    sent += [command(a, i) for i, a in enumerate(actions, 1)]
    return {
        "episode": episode_input(actions),
        "expect": {
            "verifier_created": True,
            "verifier_offline": True,
            "score_committed_after_cleanup": True,
        },
        "never_in_sandbox": needles([json.dumps(TASK["verification"]["expected"])], sent),
    }


def companion_watch() -> dict[str, Any]:
    """The rule that marks every request carrying the companion file after the first: the reset's
    upload into the policy sandbox, where it belongs, passes it by to every other fault rule."""
    from pytest_e2b_env.catalog.expected import WATCH

    return {"route": "*", "answer": dict(WATCH), "times": 1000, "after": 1, "contains": COMPANION}
