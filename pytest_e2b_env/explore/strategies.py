"""Hypothesis strategies over schedules: a batch of behaviours, then fault steps aimed into it.

Steps are drawn only for the routes the subject was seen to use (a fault on a route it never
calls cannot land), and every choice shrinks toward the simple end: fewer steps, the first call,
one repeat, no pinning, correct programs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from pytest_e2b_env.explore.schedule import KINDS, FaultStep, Schedule

#: behaviours as drawn: correct first (what shrinking tends to), a hanging program rarer (it costs
#: the subject's whole deadline)
DRAWN = ("correct", "wrong", "hostile", "correct", "wrong", "hanging")


#: routes whose request bodies carry a completion's program (an upload, a command, a cell)
CARRIERS = ("write", "run", "run_code")


def kinds_for(routes: Sequence[str]) -> list[tuple[str, str]]:
    """Every (kind, route) pair aimed at one of ``routes``, in the catalog's kind order."""
    return [(kind, route) for kind, (_, aimed, _) in KINDS.items() for route in aimed if route in routes]


@st.composite
def schedules(
    draw: Any, routes: Sequence[str], max_completions: int = 3, max_steps: int = 3, max_nth: int = 3
) -> Schedule:
    """A schedule over ``routes`` (route names of :data:`~pytest_e2b_env.explore.schedule.ROUTES`)."""
    behaviours = draw(st.lists(st.sampled_from(DRAWN), min_size=1, max_size=max_completions))
    pairs = kinds_for(routes)
    if not pairs:
        return Schedule(tuple(behaviours))
    step = st.builds(
        lambda pair, nth, times, where: FaultStep(
            pair[0],
            pair[1],
            nth=nth,
            times=times,
            sandbox=where[1] if where[0] == "sandbox" else None,
            completion=where[1] if where[0] == "completion" and pair[1] in CARRIERS else None,
        ),
        st.sampled_from(pairs),
        st.integers(1, max_nth),
        st.sampled_from((1, 2, 4)),
        st.one_of(
            st.just(("call", 0)),
            st.tuples(st.just("sandbox"), st.integers(1, max_completions)),
            st.tuples(st.just("completion"), st.integers(1, len(behaviours))),
        ),
    )
    steps = draw(st.lists(step, max_size=max_steps))
    return Schedule(tuple(behaviours), tuple(steps))
