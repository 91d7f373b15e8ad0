"""Judge an observation against a case's expectations (catalog.md "How outcomes are judged").

Each predicate yields one criterion in the OpenEnv validate style: ``id``, ``description``,
``passed``, ``expected``, ``actual``. Global checks (no leak, no secret, no unexpected raise)
are added to every case.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from pytest_e2b_env.catalog.contract import Contract
from pytest_e2b_env.catalog.expected import CRITERION, DESCRIPTION, MIN_NEEDLE, carried
from pytest_e2b_env.catalog.model import PREDICATES, Case
from pytest_e2b_env.catalog.observe import Call, Observation
from pytest_e2b_env.catalog.trlrules import TRL_JUDGES, trl_criteria
from pytest_e2b_env.evidence.records import criterion

Judge = Callable[[Any, Observation], tuple[bool, Any]]
SCORING_CALLS = {"reward": ("reward",), "episode": ("get_reward",)}
TOLERANCE = 1e-9


def same_scores(expected: Any, actual: Any) -> bool:
    """Scores equal within a tiny tolerance, length and order kept; bools are not scores."""
    if not isinstance(actual, list | tuple) or len(actual) != len(expected):
        return False
    for want, got in zip(expected, actual, strict=True):
        if isinstance(got, bool) or not isinstance(got, int | float):
            return False
        if not math.isfinite(float(got)) or abs(float(got) - float(want)) > TOLERANCE:
            return False
    return True


def _scoring_calls(obs: Observation) -> list[Call]:
    return obs.calls_named(SCORING_CALLS[obs.subject][0])


#: Where a subject may raise for an infrastructure or cleanup failure: the scoring calls and the
#: points where it releases sandboxes. A factory that raises never counts (the subject was not built).
RAISE_POINTS = {
    "reward": ("enter", "reward", "second_batch", "close"),
    "episode": ("reset", "submit", "get_reward"),
}


def _raise_points(obs: Observation) -> list[Call]:
    """Calls at a raise point that raised."""
    return obs.raised(RAISE_POINTS[obs.subject])


def _is_score(value: Any) -> bool:
    """A returned value carrying a number: None, and a batch of only None (all unscorable), are not."""
    if isinstance(value, list | tuple):
        return any(v is not None for v in value)
    return value is not None


def _score_produced(obs: Observation) -> bool:
    return any(c.returned and _is_score(c.value) for c in _scoring_calls(obs))


def _raises(expected: Any, obs: Observation) -> tuple[bool, Any]:
    raised = _raise_points(obs)
    actual = [{"call": c.name, "type": (c.error or {}).get("type")} for c in raised]
    if not raised:
        returned = [
            {"call": c.name, "value": c.value}
            for c in obs.calls
            if c.name in RAISE_POINTS[obs.subject] and c.returned
        ]
        return False, {"none of these raised": list(RAISE_POINTS[obs.subject]), "returned": returned}
    if obs.subject == "episode" and _score_produced(obs):
        return False, {"raised": actual, "but_score": [c.value for c in _scoring_calls(obs)]}
    return True, actual


def _raises_class(expected: Any, obs: Observation) -> tuple[bool, Any]:
    names = {n for c in _raise_points(obs) for n in (c.error or {}).get("hierarchy", [])}
    return expected in names, sorted(names)


def _failed_kills(obs: Observation) -> list[str]:
    """Sandboxes whose kill was answered with an error and that were not confirmed gone later.

    Gone means gone: a 404 (the sandbox no longer exists) is a confirmed kill, and so is any
    later kill or lookup of the same sandbox answered 2xx/404.
    """
    failed: dict[str, bool] = {}
    for e in obs.ledger:
        sid, status = e.get("sandbox_id"), e.get("status") or 0
        if not sid or not str(e.get("route", "")).startswith(("DELETE /sandboxes", "GET /sandboxes/")):
            continue
        is_kill = str(e.get("route", "")).startswith("DELETE")
        if status == 404 or (is_kill and 200 <= status < 300):
            failed[str(sid)] = False
        elif is_kill and status >= 400:
            failed[str(sid)] = True
    return sorted(sid for sid, bad in failed.items() if bad)


def _raises_names_ids(expected: Any, obs: Observation) -> tuple[bool, Any]:
    failed = _failed_kills(obs)
    messages = " ".join((c.error or {}).get("message", "") for c in _raise_points(obs))
    missing = [sid for sid in failed if sid not in messages]
    return (bool(failed) and not missing) == bool(expected), {"kill_failed": failed, "not_named": missing}


def _score_diff(expected: list[Any], actual: Any) -> Any:
    """Which completions scored differently (index, expected, got), for the failure line."""
    if not isinstance(actual, list | tuple) or len(actual) != len(expected):
        return {"got": actual, "expected_length": len(expected)}
    wrong = [
        {"completion": i, "expected": want, "got": got}
        for i, (want, got) in enumerate(zip(expected, actual, strict=True))
        if not same_scores([want], [got])
    ]
    return {"got": list(actual), "differs": wrong}


def _rewards(expected: Any, obs: Observation) -> tuple[bool, Any]:
    calls = obs.calls_named("reward")
    if not calls or not calls[0].returned:
        return False, {"raised": calls[0].error if calls else "not called"}
    ok = same_scores(expected, calls[0].value)
    return ok, calls[0].value if ok else _score_diff(expected, calls[0].value)


def _score_or_raise(expected: Any, obs: Observation) -> tuple[bool, Any]:
    """Infrastructure never becomes a number: the call raised, or returned exactly the right scores."""
    calls = obs.calls_named("reward")
    if not calls:
        return False, "not called"
    if not calls[0].returned:
        return True, {"raised": (calls[0].error or {}).get("type")}
    ok = same_scores(expected, calls[0].value)
    return ok, calls[0].value if ok else _score_diff(expected, calls[0].value)


#: The mark of a completion whose infrastructure failed: ``None`` is legal there, a number never.
MASKED = "masked"


def _masked_or_raise(expected: Any, obs: Observation) -> tuple[bool, Any]:
    """Unscorable, not fatal: a raise, or None exactly at the masked completions and scores elsewhere."""
    if obs.subject == "episode":
        return _episode_masked_or_raise(obs)
    calls = obs.calls_named("reward")
    if not calls:
        return False, "not called"
    if not calls[0].returned:
        return True, {"raised": (calls[0].error or {}).get("type")}
    value = calls[0].value
    if not isinstance(value, list | tuple) or len(value) != len(expected):
        return False, {"got": value, "expected_length": len(expected)}
    wrong = []
    for i, (want, got) in enumerate(zip(expected, value, strict=True)):
        if want == MASKED:
            if got is not None:
                wrong.append({"completion": i, "expected": "None (masked) or a raise", "got": got})
        elif not same_scores([want], [got]):
            wrong.append({"completion": i, "expected": want, "got": got})
    return not wrong, list(value) if not wrong else {"got": list(value), "differs": wrong}


def _episode_masked_or_raise(obs: Observation) -> tuple[bool, Any]:
    """An episode: get_reward() never a number; None only once every sandbox of the episode was gone."""
    calls = _scoring_calls(obs)
    scored = [c.value for c in calls if c.returned and _is_score(c.value)]
    if scored:
        return False, {"scored": scored}
    raised = _raise_points(obs)
    if raised:
        return True, {"raised": [{"call": c.name, "type": (c.error or {}).get("type")} for c in raised]}
    if not any(c.returned for c in calls):
        return False, "get_reward() neither raised nor returned"
    alive = obs.alive_at_reward.get(0)
    if alive is None:
        return False, "get_reward was not observed"
    return not alive, {"masked": True, "alive_when_get_reward_returned": alive}


def _score_mask_or_raise(expected: Any, obs: Observation) -> tuple[bool, Any]:
    """An injected fault changes no number: a raise, the right scores, or None where it struck."""
    if obs.subject == "episode":
        return _episode_score_mask_or_raise(expected, obs)
    calls = obs.calls_named("reward")
    if not calls:
        return False, "not called"
    if not calls[0].returned:
        return True, {"raised": (calls[0].error or {}).get("type")}
    value = calls[0].value
    if not isinstance(value, list | tuple) or len(value) != len(expected):
        return False, {"got": value, "expected_length": len(expected)}
    wrong = [
        {"completion": i, "expected": f"{want} or None (masked)", "got": got}
        for i, (want, got) in enumerate(zip(expected, value, strict=True))
        if got is not None and not same_scores([want], [got])
    ]
    return not wrong, list(value) if not wrong else {"got": list(value), "differs": wrong}


def _episode_score_mask_or_raise(expected: Any, obs: Observation) -> tuple[bool, Any]:
    scored = [c.value for c in _scoring_calls(obs) if c.returned and _is_score(c.value)]
    if scored:
        ok = all(same_scores([expected], [v]) for v in scored)
        return ok, scored[0] if ok else {"scored": scored, "expected": f"{expected}, None or a raise"}
    return _episode_masked_or_raise(obs)


def _faulted_sandboxes(obs: Observation) -> dict[str, int]:
    """Sandboxes a fault of the case hit while they stayed alive (not a lost sandbox, create or kill)."""
    hit: dict[str, int] = {}
    for entry in obs.faults():
        sid, label = entry.get("sandbox_id"), str(entry.get("fault") or entry.get("detail") or "")
        route = str(entry.get("route", ""))
        if not sid or "lose_sandbox" in label or "kill_fails" in label or entry.get("op") == "create":
            continue
        if route.startswith("DELETE /sandboxes"):  # a failed kill is the cleanup-failure family's
            continue
        hit.setdefault(str(sid), int(entry["seq"]))
    return hit


#: Requests on a sandbox that are no use of it: its kill, a lookup, the SDK's health probe.
NOT_A_USE = ("DELETE /sandboxes", "GET /sandboxes/", "GET /health")


def _faulted_released(expected: Any, obs: Observation) -> tuple[bool, Any]:
    """Each sandbox a fault hit alive was killed or kept in use, never dropped alive (a leak)."""
    hit = _faulted_sandboxes(obs)
    if not hit:
        return False, "no fault hit a sandbox that stayed alive"
    counted, _ = leaks(obs)
    seen: dict[str, Any] = {}
    for sid, seq in hit.items():
        mine = [e for e in obs.ledger if e.get("sandbox_id") == sid and not e.get("fault")]
        route = [str(e.get("route", "")) for e in mine]
        status = [int(e.get("status") or 0) for e in mine]
        killed = any(
            (r.startswith("DELETE /sandboxes") and (200 <= st < 300 or st == 404))
            or (r.startswith("GET /sandboxes/") and st == 404)
            for r, st in zip(route, status, strict=True)
        )
        reused = any(
            e["seq"] > seq
            and 200 <= int(e.get("status") or 0) < 300
            and not str(e.get("route")).startswith(NOT_A_USE)
            for e in mine
        )
        seen[sid] = {"killed": killed, "used_after_the_fault": reused, "alive_at_end": sid in counted}
    ok = not any(v["alive_at_end"] for v in seen.values())
    return ok == bool(expected), seen


def _deadline_kept(expected: Any, obs: Observation) -> tuple[bool, Any]:
    """Every call marked with a deadline came back within the limit in force plus the tolerance."""
    marked = [c for c in obs.calls if c.deadline is not None]
    if not marked:
        return False, "no call of the case carried a deadline"
    over = [
        {
            "step": c.step,
            "returned_after_s": round(c.seconds, 2),
            "limit_s": c.deadline["limit"],
            "allowed_s": round(c.deadline["allowed"], 2),
        }
        for c in marked
        if c.deadline is not None and c.seconds > c.deadline["allowed"]
    ]
    if over:
        return not expected, {"overran": over}
    return bool(expected), [{"step": c.step, "returned_after_s": round(c.seconds, 2)} for c in marked]


def _second_rewards(expected: Any, obs: Observation) -> tuple[bool, Any]:
    calls = obs.calls_named("second_batch")
    if not calls or not calls[0].returned:
        return False, {"raised": calls[0].error if calls else "not called"}
    return same_scores(expected, calls[0].value), calls[0].value


def _second_raises(expected: Any, obs: Observation) -> tuple[bool, Any]:
    calls = obs.calls_named("second_batch")
    raised = bool(calls) and calls[0].error is not None
    return raised == bool(expected), calls[0].error if calls else "not called"


def _reward(expected: Any, obs: Observation) -> tuple[bool, Any]:
    calls = obs.calls_named("get_reward")
    values = [c.value if c.returned else {"raised": c.error} for c in calls]
    ok = bool(calls) and all(c.returned and same_scores([expected], [c.value]) for c in calls)
    return ok, values[0] if len(values) == 1 else values


def _no_score(expected: Any, obs: Observation) -> tuple[bool, Any]:
    produced = _score_produced(obs)
    return (not produced) == bool(expected), [
        c.value if c.returned else "raised" for c in _scoring_calls(obs)
    ]


#: The longest lifetime accepted for a sandbox whose create answer was lost (the subject never got
#: its id, so only a sweep by tag or the sandbox's own lifetime can end it; E2B's cookbook relies on
#: the lifetime). Longer-lived, or auto-paused (kept, not killed, when the lifetime ends): a leak.
LOST_CREATE_LIFETIME_BOUND = 900.0


def _lost_creates(obs: Observation) -> dict[str, dict[str, Any]]:
    """Each sandbox left alive whose create answer a fault lost, with the lifetime its create asked for."""
    lost = {}
    for sid in obs.leaked:
        info = obs.create_info.get(sid, {})
        if not info.get("answer_lost"):
            continue
        life, pause = info.get("lifetime_s"), info.get("auto_pause")
        bounded = isinstance(life, int | float) and life <= LOST_CREATE_LIFETIME_BOUND and pause is False
        shown = "unknown" if not isinstance(life, int | float) else f"{life:g} s"
        lost[sid] = {"lifetime": shown + (" then paused (kept)" if pause else ""), "bounded": bounded}
    return lost


def leaks(obs: Observation) -> tuple[list[str], Any]:
    """(the sandboxes that count as leaked, what the criterion shows).

    A sandbox left alive whose create answer was lost, and whose own lifetime ends it within
    :data:`LOST_CREATE_LIFETIME_BOUND`, does not count: the subject never had its id.
    """
    lost = _lost_creates(obs)
    counted = [sid for sid in obs.leaked if not lost.get(sid, {}).get("bounded")]
    if not lost:
        return counted, obs.leaked
    return counted, {
        "leaked": counted,
        "create_answer_lost": lost,
        "lifetime_bound_s": LOST_CREATE_LIFETIME_BOUND,
    }


def _leaked(expected: Any, obs: Observation) -> tuple[bool, Any]:
    counted, actual = leaks(obs)
    return len(counted) == int(expected), actual


def _created_min(expected: Any, obs: Observation) -> tuple[bool, Any]:
    return len(obs.created()) >= int(expected), len(obs.created())


def _created_max(expected: Any, obs: Observation) -> tuple[bool, Any]:
    return len(obs.created()) <= int(expected), len(obs.created())


def _no_sandbox(expected: Any, obs: Observation) -> tuple[bool, Any]:
    return (not obs.created()) == bool(expected), len(obs.created())


def _starts(obs: Observation, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
    return obs.starts(start, end)


def _no_run(expected: Any, obs: Observation) -> tuple[bool, Any]:
    started = _starts(obs)
    return (not started) == bool(expected), {
        "commands_run": len(started),
        "routes": sorted({str(e.get("route")) for e in started}),
    }


def _replacement(expected: Any, obs: Observation) -> tuple[bool, Any]:
    lost = [e["seq"] for e in obs.faults()] + [e["seq"] for e in obs.ledger if e.get("status") == 502]
    if not lost:
        return not expected, "no sandbox was lost"
    later = obs.created(start=min(lost))
    return bool(later) == bool(expected), {"created_after_loss": later}


def _faults_fired(expected: Any, obs: Observation) -> tuple[bool, Any]:
    return len(obs.faults()) >= int(expected), len(obs.faults())


def _kill_failed(expected: Any, obs: Observation) -> tuple[bool, Any]:
    failed = _failed_kills(obs)
    return bool(failed) == bool(expected), failed


def _verifier_created(expected: Any, obs: Observation) -> tuple[bool, Any]:
    mark = obs.submit_mark()
    made = obs.created(start=mark) if mark is not None else []
    return bool(made) == bool(expected), made


def _verifier_offline(expected: Any, obs: Observation) -> tuple[bool, Any]:
    mark = obs.submit_mark()
    made = obs.created(start=mark) if mark is not None else []
    access = {sid: obs.create_info.get(sid, {}).get("allow_internet_access") for sid in made}
    ok = bool(made) and all(v is False for v in access.values())
    return ok == bool(expected), access


def _committed_after_cleanup(expected: Any, obs: Observation) -> tuple[bool, Any]:
    alive = obs.alive_at_reward.get(0)
    if alive is None:
        return False, "get_reward was not observed"
    return (not alive) == bool(expected), {"alive_when_get_reward_returned": alive}


def _tool_refused(expected: Any, obs: Observation) -> tuple[bool, Any]:
    late = [
        c
        for c in obs.calls
        if (c.after_submit or c.expect_refused) and c.name not in ("get_reward", "submit", "reset")
    ]
    if not late:
        return False, "the case made no tool call after submit (or marked refuse)"
    ran = [c.name for c in late if _starts(obs, c.mark_start, c.mark_end)]
    return (not ran) == bool(expected), {"late_calls": [c.name for c in late], "executed": ran}


def _tools_exclude(expected: Any, obs: Observation) -> tuple[bool, Any]:
    exposed = [name for name in expected if name in obs.tools]
    return not exposed, {"tools": obs.tools, "exposed": exposed}


def _tools_allowed_only(expected: Any, obs: Observation) -> tuple[bool, Any]:
    extra = [name for name in obs.tools if name not in obs.allowed_tools]
    return (not extra) == bool(expected), {"tools": obs.tools, "not_allowed": extra}


def _observed_text(obs: Observation) -> str:
    return "\n".join(
        (c.value if isinstance(c.value, str) else json.dumps(c.value, default=str))
        if c.returned
        else json.dumps(c.error)
        for c in obs.calls
        if c.name != "factory"
    )


def _observations_contain(expected: Any, obs: Observation) -> tuple[bool, Any]:
    text = _observed_text(obs)
    missing = [needle for needle in expected if needle not in text]
    return not missing, {"missing": missing}


def _observations_exclude(expected: Any, obs: Observation) -> tuple[bool, Any]:
    text = _observed_text(obs)
    found = [needle for needle in expected if needle in text]
    return not found, {"found": found}


def _parallel_isolated(expected: Any, obs: Observation) -> tuple[bool, Any]:
    calls = obs.calls_named("get_reward")
    values: list[Any] = [c.value if c.returned else {"raised": c.error} for c in calls]
    want: list[Any] = expected if isinstance(expected, list) else []
    numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    ok = bool(want) and len(numbers) == len(values) == len(want)
    return ok and sorted(numbers) == sorted(float(w) for w in want), values


def _pool_cleanup(expected: Any, obs: Observation) -> tuple[bool, Any]:
    return (not obs.leaked) == bool(expected), obs.leaked


JUDGES: dict[str, Judge] = {
    "rewards": _rewards,
    "score_or_raise": _score_or_raise,
    "deadline_kept": _deadline_kept,
    "reward": _reward,
    "raises": _raises,
    "raises_names_ids": _raises_names_ids,
    "no_score": _no_score,
    "leaked_sandboxes": _leaked,
    "leaked_after_sweep": lambda e, o: (len(o.leaked_after_sweep) == int(e), o.leaked_after_sweep),
    "sandboxes_created_min": _created_min,
    "sandboxes_created_max": _created_max,
    "no_sandbox": _no_sandbox,
    "no_run": _no_run,
    "replacement_created": _replacement,
    "faults_fired_min": _faults_fired,
    "faults_fired_max": lambda e, o: (len(o.faults()) <= int(e), len(o.faults())),
    "kill_failed_seen": _kill_failed,
    "verifier_created": _verifier_created,
    "verifier_offline": _verifier_offline,
    "score_committed_after_cleanup": _committed_after_cleanup,
    "tool_refused": _tool_refused,
    "tools_exclude": _tools_exclude,
    "tools_allowed_only": _tools_allowed_only,
    "observations_contain": _observations_contain,
    "observations_exclude": _observations_exclude,
    "second_batch_rewards": _second_rewards,
    "second_batch_raises": _second_raises,
    "pool_cleanup": _pool_cleanup,
    "parallel_isolated": _parallel_isolated,
    "reset_replaces": lambda e, o: (
        (bool(o.alive_after_reset) and not any(o.alive_after_reset)) == bool(e),
        o.alive_after_reset,
    ),
    "tolerate_raises": lambda e, o: (True, "raises tolerated"),
    "masked_or_raise": _masked_or_raise,
    "score_mask_or_raise": _score_mask_or_raise,
    "faulted_sandbox_released": _faulted_released,
    **TRL_JUDGES,
}
assert set(JUDGES) == set(PREDICATES), "every predicate needs a judge"


#: Predicates that accept a raise: with none of them, any raise fails ``no-unexpected-raise``.
RAISE_ALLOWED = frozenset(
    {"raises", "no_score", "tolerate_raises", "score_or_raise", "masked_or_raise", "score_mask_or_raise"}
)


def _expected_outputs(obs: Observation) -> dict[str, Any]:
    """The safety criterion of every reward case: no request carried an expected output (ledger)."""
    found = carried(obs.ledger, obs.watch_rules)
    if not obs.watched_forms:
        actual: Any = f"no expected output of {MIN_NEEDLE}+ characters to look for"
    else:
        actual = {"forms_watched": obs.watched_forms, "carried_by": found[:10], "requests": len(found)}
    return criterion(CRITERION, DESCRIPTION, not found, [], actual)


def _built(obs: Observation) -> dict[str, Any] | None:
    """The failed 'subject could not be built' criterion when the factory raised, else None."""
    factory = obs.calls_named("factory")
    if factory and factory[0].error is not None:
        error = factory[0].error
        return criterion(
            "subject-built",
            "the subject could be built (factory() returned); nothing else is judged when it raised",
            False,
            "factory() returns the reward function, a context manager or an environment",
            f"subject could not be built: {error.get('type')}: {error.get('message')}",
        )
    return None


def judge(
    case: Case,
    obs: Observation,
    contract: Contract,
    secrets: list[str],
    relax: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """Every criterion for a case: its own predicates, then the global checks."""
    built = _built(obs)
    if built is not None:
        return [built]
    criteria = []
    for name, expected in case.expect.items():
        passed, actual = JUDGES[name](expected, obs)
        policy = case.policy_of(name)
        description = PREDICATES[name]
        if name == "raises":
            description = (
                "a scoring call raised (any exception type: what matters is that no number came out)"
            )
            # The case names the reference's class; any exception meets this criterion (the class
            # is checked on its own, "raises-class", only for a subject that declares it).
            expected = "an exception of any type, no score"
        criteria.append(
            criterion(name, description, passed, expected, actual, policy=policy, relaxed=policy in relax)
        )
    raises = case.expect.get("raises")
    if {"masked_or_raise", "score_mask_or_raise"} & set(case.expect) and _raise_points(obs):
        raises = "InfrastructureError"  # it raised rather than masked: judged as a raise of that class
    if isinstance(raises, str) and raises in contract.raises_classes:
        # Checked only for classes the subject declares (the bundled code declares its own).
        passed, actual = _raises_class(raises, obs)
        criteria.append(
            criterion(
                "raises-class",
                f"the subject raises the class it declares ({raises}, by name anywhere in the hierarchy)",
                passed,
                raises,
                actual,
            )
        )
    if not RAISE_ALLOWED & set(case.expect):
        tolerated = {"second_batch"} if "second_batch_raises" in case.expect else set()
        if case.reward is not None and case.reward.cancel_on:
            tolerated.add("reward")
        unexpected = [
            {"call": c.name, **(c.error or {})}
            for c in obs.calls
            if c.error is not None
            and c.name not in tolerated
            and not c.after_submit
            and c.name not in ("terminal",)
            and c.probe is None  # a probed tool may refuse its hostile arguments by raising
        ]
        criteria.append(
            criterion(
                "no-unexpected-raise",
                "no call raised where the case expects values",
                not unexpected,
                [],
                unexpected,
            )
        )
    criteria += trl_criteria(case, obs)
    if "leaked_sandboxes" not in case.expect and "leaked_after_sweep" not in case.expect:
        counted, actual = leaks(obs)
        criteria.append(criterion("no-leak", PREDICATES["leaked_sandboxes"], not counted, [], actual))
    if case.subject == "reward" or case.never_in_sandbox:
        criteria.append(_expected_outputs(obs))
    dumped = json.dumps(obs.to_dict(), default=str)
    found = [i for i, s in enumerate(secrets) if s and s in dumped]
    criteria.append(
        criterion("no-secret", "no secret value appears in anything observed", not found, 0, len(found))
    )
    if obs.driver_error is not None:
        criteria.append(criterion("driver", "the driver ran to completion", False, None, obs.driver_error))
    return criteria
