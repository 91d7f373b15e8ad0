"""Hypothesis strategies over schedules: a batch of behaviours, then fault steps aimed into it.

Steps are drawn only where they can land: on the routes a clean run of the subject used, at a call
number that run reached (scaled by the batch size), on a sandbox number the batch can create. A
schedule has at least one step (the clean run is the search's first probe). Every choice shrinks
toward the simple end: fewer steps, the first call, one repeat, no pinning, correct programs.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from hypothesis import strategies as st

from pytest_e2b_env.explore.schedule import KINDS, FaultStep, Schedule

#: behaviours as drawn: correct first (what shrinking tends to); a hanging program rare (1 in 41),
#: since it costs the subject's whole deadline (a fast schedule costs a fraction of a second)
DRAWN = (*("correct", "wrong", "correct", "hostile") * 10, "hanging")
#: an episode's tool calls as drawn: the repair most (an outage scored as the starter's 0.0 shows
#: only against a 1.0), a look at the program twice, a wrong and a hostile program once
DRAWN_ACTIONS = ("repair", "look", "repair", "wrong", "repair", "look", "hostile")
#: routes whose request bodies carry a completion's program (an upload, a command, a cell); an
#: episode's tool call is a command
CARRIERS = {"reward": ("write", "run", "run_code"), "episode": ("run",)}
#: sandboxes a step may pin, past the batch size (reward: a replacement) or in all (episode: the
#: policy sandbox, the verifier, one replacement)
EPISODE_SANDBOXES = 3
#: how far past the clean run's count of a route a step may aim (a retry adds calls)
MAX_NTH = 3


def kinds_for(routes: Mapping[str, int], faults: Collection[str] | None = None) -> list[tuple[str, str]]:
    """Every (kind, route) pair aimed at a route the subject used, in the catalog's kind order.

    ``faults``: the kinds the search may draw (``explore --faults``); None, every kind.
    """
    return [
        (kind, route)
        for kind, (_, aimed, _) in KINDS.items()
        if faults is None or kind in faults
        for route in aimed
        if route in routes
    ]


#: how often each kind is drawn among those aimed at a route: a lost sandbox (what starts a lost
#: worker's retry, kill and replacement) thrice, other faults that take an operation away twice
WEIGHTS = {"lost-sandbox": 3, "kill-fails": 2, "server-error": 2}


def weighted(route: str, faults: Collection[str] | None = None) -> list[str]:
    """The kinds aimed at ``route`` (of ``faults``), each repeated by its weight (in the catalog's order)."""
    kinds = [k for k, (_, aimed, _) in KINDS.items() if route in aimed and (faults is None or k in faults)]
    return [kind for kind in kinds for _ in range(WEIGHTS.get(kind, 1))]


@st.composite
def free_step(
    draw: Any,
    routes: Mapping[str, int],
    completions: int,
    subject: str = "reward",
    faults: Collection[str] | None = None,
) -> FaultStep:
    kind, route = draw(st.sampled_from(kinds_for(routes, faults)))
    reach = min(MAX_NTH, max(1, routes[route]) * completions)
    where = draw(
        st.sampled_from(
            ("call", "sandbox", "completion") if route in CARRIERS[subject] else ("call", "sandbox")
        )
    )
    sandboxes = completions + 1 if subject == "reward" else EPISODE_SANDBOXES
    return FaultStep(
        kind,
        route,
        nth=draw(st.integers(1, reach)),
        times=draw(st.sampled_from((1, 2, 4))),
        sandbox=draw(st.integers(1, sandboxes)) if where == "sandbox" else None,
        completion=draw(st.integers(1, completions)) if where == "completion" else None,
    )


def batches(max_completions: int = 3, subject: str = "reward") -> st.SearchStrategy[list[str]]:
    """A batch of candidate behaviours, one per completion (an episode: its tool calls before submit)."""
    drawn = DRAWN if subject == "reward" else DRAWN_ACTIONS
    return st.lists(st.sampled_from(drawn), min_size=1, max_size=max_completions)


@st.composite
def schedules(
    draw: Any,
    routes: Mapping[str, int],
    max_completions: int = 3,
    max_steps: int = 3,
    subject: str = "reward",
    faults: Collection[str] | None = None,
) -> Schedule:
    """A schedule over ``routes`` (route name -> calls a clean one-completion run made)."""
    behaviours = tuple(draw(batches(max_completions, subject)))
    if not kinds_for(routes, faults) or max_steps < 1:
        return Schedule(behaviours, subject=subject)
    # As many schedules of two and three steps as of one: combinations are what this search is for.
    count = draw(st.integers(1, max_steps))
    step = free_step(routes, len(behaviours), subject, faults)
    steps = draw(st.lists(step, min_size=count, max_size=count))
    return Schedule(behaviours, tuple(steps), subject)
