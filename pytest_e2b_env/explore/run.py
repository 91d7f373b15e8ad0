"""Run one schedule in the subject's case host, through the catalog's runner, and judge it.

The subject's code runs only in a :class:`~pytest_e2b_env.catalog.host.CaseHost` (a crash ends
the schedule, not the search: the next schedule gets a fresh host). Which fault rule each step
became is noted as the runner adds it, so the ledger proves which steps landed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from pytest_e2b_env.catalog.expected import WATCH
from pytest_e2b_env.catalog.record import CaseRecord
from pytest_e2b_env.catalog.runner import run_case
from pytest_e2b_env.explore.compile import fault_order, to_case
from pytest_e2b_env.explore.episode import COMPANION
from pytest_e2b_env.explore.invariants import Break, breaks
from pytest_e2b_env.explore.schedule import SDK_RETRIES, Schedule


class _RuleLog:
    """The target's fault rules, noting each rule's id as the catalog's runner adds it."""

    def __init__(self, faults: Any) -> None:
        self._faults = faults
        self.added: list[tuple[dict[str, Any], str]] = []

    def add(self, **kwargs: Any) -> Any:
        rule = self._faults.add(**kwargs)
        self.added.append((kwargs, str(rule)))
        return rule

    def __getattr__(self, name: str) -> Any:
        return getattr(self._faults, name)


class _Noting:
    """The target as the runner sees it, with its fault rules noted (everything else is the target's)."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self.faults = _RuleLog(target.faults)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


@dataclass
class Landing:
    """Whether one step's fault fired, from the ledger: how many requests it answered."""

    step: int
    rule: str | None
    fired: int
    #: the SDK retries this answer by itself and it fired no more often than that: it never reached
    #: the subject's code (only the SDK saw it)
    absorbed_by_sdk: bool = False

    @property
    def landed(self) -> bool:
        """It answered at least one request."""
        return self.fired > 0


@dataclass
class Attempt:
    """One schedule's run: its record, the steps' landing and the invariants it broke."""

    schedule: Schedule
    record: CaseRecord
    landings: list[Landing]
    broken: list[Break] = field(default_factory=list)
    seconds: float = 0.0
    #: the target cut the run short (live: a create refused at the sandbox cap): it proves nothing
    stopped: str | None = None

    @property
    def harness(self) -> bool:
        """The harness failed the run (the target's own error): it proves nothing either way."""
        return self.record.status == "error"

    @property
    def explored(self) -> bool:
        """Counted as explored: the harness ran it, and every step's fault landed."""
        return not self.harness and self.record.status != "skipped" and all(x.landed for x in self.landings)

    def to_json(self) -> dict[str, Any]:
        """What a finding file keeps of the run."""
        return {
            "status": self.record.status,
            "rewards": self.record.rewards,
            "exceptions": self.record.exceptions,
            "landed": [
                {"step": x.step + 1, "fired": x.fired, "absorbed_by_sdk": x.absorbed_by_sdk}
                for x in self.landings
            ],
            "seconds": round(self.seconds, 3),
        }


def _landings(
    schedule: Schedule, added: list[tuple[dict[str, Any], str]], record: CaseRecord
) -> list[Landing]:
    rules = [rule for kwargs, rule in added if kwargs.get("answer") != WATCH]
    fired: dict[str, int] = {}
    for event in record.trajectory:
        label = str(event.get("fault") or "") if event.get("kind") == "sandbox_op" else ""
        if label:
            fired[label.partition(":")[0]] = fired.get(label.partition(":")[0], 0) + 1
    out = []
    for position, index in enumerate(fault_order(schedule)):
        rule = rules[position] if position < len(rules) else None  # a sandbox that never came
        count = fired.get(rule or "", 0)
        step = schedule.steps[index]
        out.append(Landing(index, rule, count, step.retried_by_sdk() and 0 < count <= SDK_RETRIES))
    return sorted(out, key=lambda x: x.step)


def run_schedule(schedule: Schedule, host: Any, target: Any, extra_tools: list[str] | None = None) -> Attempt:
    """Run ``schedule`` against the subject in ``host`` on ``target``; never raises for the subject.

    ``extra_tools``: an episode's model tools besides the terminal and submit (``e2b_episode_tools``).
    """
    started = time.perf_counter()
    noting = _Noting(target)
    record = run_case(to_case(schedule), host, noting, extra_tools=extra_tools)  # type: ignore[arg-type]
    attempt = Attempt(schedule, record, _landings(schedule, noting.faults.added, record))
    companion = [rule for kwargs, rule in noting.faults.added if kwargs.get("contains") == COMPANION]
    attempt.broken = breaks(record, companion)
    attempt.seconds = time.perf_counter() - started
    return attempt
