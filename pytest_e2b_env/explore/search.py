"""The search: Hypothesis draws schedules, each runs in the case host, a break is shrunk.

Hypothesis drives generation (seeded), keeps failures in its example database (tried first on the
next run) and shrinks a failure; a wall-clock budget stops it (schedules drawn past the budget are
rejected at once). Real subjects race, so a replay may not break again: every schedule that did
break is kept here, the smallest is taken, and a last pass removes each remaining step (and makes
each program correct) while the break still reproduces, so the schedule reported is one where
every step is needed.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_e2b_env.explore.run import Attempt
from pytest_e2b_env.explore.schedule import ROUTES, FaultStep, Schedule

#: ledger op -> the route name a step aims at
OP_ROUTES = {
    "create": "create",
    "kill": "kill",
    "run": "run",
    "file_write": "write",
    "set_timeout": "set_timeout",
    "run_code": "run_code",
}
#: ledger ops an episode's faults aim at besides those: reading the artifact back, a lookup
EPISODE_OPS = {"file_read": "read", "get_info": "info"}


class _Broken(Exception):
    """A schedule broke an invariant (Hypothesis shrinks what raises this)."""


class _Stopped(Exception):
    """The target ended the search (live: the sandbox cap); no more schedules run."""


@dataclass
class Coverage:
    """What the search ran, and which fault kinds at which positions landed."""

    schedules: int = 0
    explored: int = 0
    unlanded: int = 0
    harness: int = 0
    seconds: float = 0.0
    landed: Counter[str] = field(default_factory=Counter)

    def add(self, attempt: Attempt) -> None:
        """Count one run."""
        self.schedules += 1
        self.seconds += attempt.seconds
        if attempt.harness:
            self.harness += 1
        elif attempt.explored:
            self.explored += 1
        else:
            self.unlanded += 1
        for landing in attempt.landings:
            if landing.landed:
                step = attempt.schedule.steps[landing.step]
                where = "sandbox" if step.sandbox else "completion" if step.completion else "call"
                self.landed[f"{step.kind}@{step.route}/{where}"] += 1

    def line(self) -> str:
        """The coverage line the command prints."""
        per = self.seconds / self.schedules if self.schedules else 0.0
        kinds = ", ".join(f"{k} x{n}" for k, n in sorted(self.landed.items())) or "none"
        return (
            f"coverage: {self.schedules} schedules run ({self.explored} explored, "
            f"{self.unlanded} with a fault that never landed, not counted, {self.harness} harness errors); "
            f"{len(self.landed)} fault kind x position pairs landed: {kinds}; {per:.2f} s per schedule"
        )

    def to_json(self) -> dict[str, Any]:
        """The coverage as data."""
        return {
            "schedules": self.schedules,
            "explored": self.explored,
            "unlanded": self.unlanded,
            "harness_errors": self.harness,
            "seconds_per_schedule": round(self.seconds / self.schedules, 3) if self.schedules else None,
            "landed": dict(sorted(self.landed.items())),
        }


@dataclass
class Outcome:
    """The search's result: the shrunk failing attempt (None: nothing broke) and the coverage."""

    finding: Attempt | None
    coverage: Coverage
    first_found_after: float | None = None
    #: schedules run (cached answers not counted) when the first break came
    first_found_schedules: int | None = None
    seconds: float = 0.0
    shrink_runs: int = 0
    #: why the target ended the search before its budget (live: the sandbox cap), else None
    stopped: str | None = None


def routes_used(attempt: Attempt) -> dict[str, int]:
    """Route name -> how many calls a clean run made (the only routes a fault can land on)."""
    ops = Counter(str(e.get("op")) for e in attempt.record.trajectory if e.get("kind") == "sandbox_op")
    known = OP_ROUTES | (EPISODE_OPS if attempt.schedule.subject == "episode" else {})
    return {name: ops[op] for op, name in known.items() if ops[op] and name in ROUTES}


def database_dir(root: Path, spec: str) -> Path:
    """Hypothesis' example database of one subject (failures are tried first next time)."""
    return root / hashlib.sha256(spec.encode()).hexdigest()[:16]


def search(
    run: Callable[[Schedule], Attempt],
    routes: dict[str, int],
    *,
    budget: float,
    seed: int,
    database: Path | None,
    max_completions: int = 3,
    max_steps: int = 3,
    on_attempt: Callable[[Attempt], None] | None = None,
    subject: str = "reward",
    faults: Collection[str] | None = None,
) -> Outcome:
    """Search for ``budget`` seconds (shrinking may take as long again); never raises for the subject.

    ``faults``: the fault kinds steps may be (``explore --faults``); None, every kind.

    A run the target cut short (:attr:`Attempt.stopped`: live, the sandbox cap) ends the search at
    once, shrinking included: the outcome says so, with the coverage up to then.
    """
    from hypothesis import HealthCheck, Verbosity, assume, given, settings
    from hypothesis import seed as seeded
    from hypothesis import strategies as st
    from hypothesis.database import DirectoryBasedExampleDatabase

    from pytest_e2b_env.explore.aim import last_fault_seq, positions_after
    from pytest_e2b_env.explore.strategies import batches, free_step, kinds_for, weighted

    started = time.monotonic()
    # Hypothesis shrinks for at most half the budget past the first break; the last pass then
    # gets at least as long again (both bounded: the whole search ends within twice its budget).
    stop_generating = started + budget
    stop_shrinking = [started + budget * 1.5]
    coverage = Coverage()
    outcome_stopped: list[str] = []
    broken: list[Attempt] = []
    found_at: list[float] = []

    seen: dict[Schedule, Attempt] = {}

    def attempt(schedule: Schedule) -> Attempt:
        if outcome_stopped:
            raise _Stopped(outcome_stopped[0])
        result = run(schedule)
        if result.stopped:
            outcome_stopped.append(result.stopped)
            raise _Stopped(result.stopped)
        coverage.add(result)
        if on_attempt is not None:
            on_attempt(result)
        seen.setdefault(schedule, result)
        return result

    def once(schedule: Schedule) -> Attempt:
        # Hypothesis draws the same prefixes again and again (and replays while it shrinks): a
        # schedule already run is answered from its first run, which also keeps its verdict fixed.
        return seen[schedule] if schedule in seen else attempt(schedule)

    clean: dict[tuple[str, ...], Attempt] = {}

    def step_after(data: Any, previous: Attempt) -> FaultStep | None:
        """The next step: aimed at a call the previous run made after its last fault, or drawn free."""
        seq = last_fault_seq(previous)
        if seq is None:
            return None  # the last step never fired: nothing after it to aim at
        places = positions_after(previous, seq + 1 if previous.schedule.steps else 0)
        places = [p for p in places if any(route == p.route for _, route in kinds_for(routes, faults))]
        if not places or data.draw(st.integers(0, 7), label="free step") == 7:
            free = free_step(routes, len(previous.schedule.behaviours), subject, faults)
            return data.draw(free, label="free")
        mirrored = _mirror(data, previous.schedule) if subject == "reward" else None
        if mirrored is not None:
            return mirrored
        # Half the time one of the two calls right after the fault: its direct consequences (the
        # lost sandbox's kill, its replacement's create) are where a second fault meets the first.
        near = bool(previous.schedule.steps) and data.draw(st.booleans(), label="near")
        place = data.draw(st.sampled_from(places[:2] if near else places), label="aimed at")
        kind = data.draw(st.sampled_from(weighted(place.route, faults)), label="kind")
        times = data.draw(st.sampled_from((1, 2, 4)), label="times")
        if place.sandbox is not None and data.draw(st.booleans(), label="pinned"):
            return FaultStep(
                kind, place.route, nth=place.nth_on_sandbox or 1, times=times, sandbox=place.sandbox
            )
        return FaultStep(kind, place.route, nth=place.nth, times=times)

    def _mirror(data: Any, schedule: Schedule) -> FaultStep | None:
        """A quarter of the time, the last step's fault again on another completion or sandbox of the
        batch (or the route's next call): an outage seldom takes one worker alone, and a pool that
        handles one lost worker can still score the second as a wrong answer."""
        completions = len(schedule.behaviours)
        if not schedule.steps or completions < 2 or data.draw(st.integers(0, 3), label="mirror") != 0:
            return None
        last = schedule.steps[-1]
        if last.completion is not None:
            other = [n for n in range(1, completions + 1) if n != last.completion]
            return replace(last, completion=data.draw(st.sampled_from(other), label="other completion"))
        if last.sandbox is not None:
            other = [n for n in range(1, completions + 2) if n != last.sandbox]
            return replace(last, sandbox=data.draw(st.sampled_from(other), label="other sandbox"))
        return replace(last, nth=last.nth + 1)

    @settings(
        max_examples=max(50, int(budget * 2)),
        deadline=None,
        database=DirectoryBasedExampleDatabase(str(database)) if database is not None else None,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
    )
    @seeded(seed)
    @given(st.data())
    def probe(data: Any) -> None:
        behaviours = tuple(data.draw(batches(max_completions, subject), label="behaviours"))
        # Two steps first (what Hypothesis' choices shrink toward): combinations are the point, and
        # the last shrink pass removes a step the break does not need.
        count = data.draw(
            st.sampled_from(sorted(range(1, max_steps + 1), key=lambda n: (n != 2, n))), label="steps"
        )
        previous = clean.get(behaviours)
        steps: list[FaultStep] = []
        for _ in range(count):
            assume(
                not outcome_stopped and time.monotonic() < (stop_shrinking[0] if broken else stop_generating)
            )
            if previous is None:  # the batch's clean run: what the first step aims at (kept)
                previous = clean[behaviours] = once(Schedule(behaviours, subject=subject))
                check(previous)
            step = step_after(data, previous)
            if step is None:
                return
            steps.append(step)
            previous = once(Schedule(behaviours, tuple(steps), subject))
            check(previous)

    def check(result: Attempt) -> None:
        if result.broken:
            if not broken:
                found_at.append(time.monotonic() - started)
                found_at.append(coverage.schedules)
                stop_shrinking[0] = min(time.monotonic() + budget / 2, started + budget * 1.5)
            broken.append(result)
            raise _Broken(result.schedule.words())

    try:
        probe()
    except KeyboardInterrupt:
        raise
    except Exception:  # a break, a flaky replay or an unsatisfiable run: all judged below
        pass
    outcome = Outcome(None, coverage, found_at[0] if found_at else None)
    outcome.first_found_schedules = int(found_at[1]) if found_at else None
    if broken:
        smallest = min(broken, key=lambda a: a.schedule.size())
        last = max(started + 2 * budget - time.monotonic(), budget / 2)
        try:
            outcome.finding, outcome.shrink_runs = minimise(smallest, once, time.monotonic() + last)
        except _Stopped:  # the target stopped the shrinking: the smallest break so far stands
            outcome.finding = min(broken, key=lambda a: a.schedule.size())
    outcome.stopped = outcome_stopped[0] if outcome_stopped else None
    outcome.seconds = time.monotonic() - started
    return outcome


def _simpler(schedule: Schedule) -> list[Schedule]:
    """Each schedule one notch simpler: a step removed or made plainer (one repeat, the first call, no
    sandbox pin), the last completion dropped, a program made correct."""
    out = [
        replace(schedule, steps=schedule.steps[:i] + schedule.steps[i + 1 :])
        for i in range(len(schedule.steps))
    ]
    for i, step in enumerate(schedule.steps):
        for simpler in (replace(step, times=1), replace(step, nth=1), replace(step, sandbox=None)):
            if simpler != step:
                out.append(replace(schedule, steps=(*schedule.steps[:i], simpler, *schedule.steps[i + 1 :])))
    last = len(schedule.behaviours)
    if last > 1 and all((s.completion or 0) < last for s in schedule.steps):
        out.append(replace(schedule, behaviours=schedule.behaviours[:-1]))
    plain = "correct" if schedule.subject == "reward" else "repair"
    for i, behaviour in enumerate(schedule.behaviours):
        if behaviour != plain:
            out.append(
                replace(schedule, behaviours=(*schedule.behaviours[:i], plain, *schedule.behaviours[i + 1 :]))
            )
    return out


def minimise(found: Attempt, attempt: Callable[[Schedule], Attempt], deadline: float) -> tuple[Attempt, int]:
    """Remove what the break does not need, one piece at a time, while it still reproduces."""
    best, runs = found, 0
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for candidate in _simpler(best.schedule):
            if time.monotonic() >= deadline:
                break
            runs += 1
            result = attempt(candidate)
            if result.broken:
                best, improved = result, True
                break
    return best, runs
