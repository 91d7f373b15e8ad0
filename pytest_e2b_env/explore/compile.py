"""A schedule as a catalog case: the catalog's runner, fault rules and verdicts do the work.

The case expects what a correct reward gives the batch, judged with the catalog's own
``score_mask_or_raise`` (an injected fault never changes a number: the right score, ``None`` or a
raise); every reward case also gets the catalog's global safety checks (no leak, no expected
output in a sandbox, no secret).
"""

from __future__ import annotations

from typing import Any

from pytest_e2b_env.catalog.loader import parse_cases_from_dicts
from pytest_e2b_env.catalog.model import Case
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
    fence = "```python\n{}```\n"
    completions = [
        {"text": "Here is my solution.\n\n" + fence.format(program(b, i))}
        for i, b in enumerate(schedule.behaviours, 1)
    ]
    raw: dict[str, Any] = {
        "id": CASE_ID,
        "subject": "reward",
        "family": "live-fault",
        "description": "One schedule of the fault-schedule search: " + schedule.words()[:300],
        "reward": {
            "completions": completions,
            "test_cases": [{"input": TEST_INPUT, "output": TEST_OUTPUT}],
        },
        "faults": [schedule.steps[i].fault() for i in fault_order(schedule)],
        "expect": {"score_mask_or_raise": schedule.expected_scores()},
    }
    return parse_cases_from_dicts([raw], "explore")[0]
