"""TRL's own rules for an environment class, judged in the controller from what the driver observed.

* ``reset`` returns ``None``, a string or a list of content blocks: TRL 1.16 appends it to the last
  user message (``content + observation``); anything else ends ``train()`` with a ``TypeError``.
  Judged on every episode case whose ``reset`` returned (``trl-reset-value``).
* TRL pools environment instances and reuses them, batch after batch, with ``reset`` before each
  rollout, and never closes them: a reused instance must earn the right reward again and keep no
  sandbox alive once its reward was read (``reward_reads``, ``released_at_reads``).
* Every tool the class exposes gets whatever arguments the model writes: the episode must answer
  each call (a value or an exception, as TRL's tool loop takes either) without touching the host it
  runs on (``tools_probed``, ``host_untouched``).
* ``AsyncGRPOTrainer`` pickles ``environment_factory`` for its spawned rollout worker
  (``factory_picklable``, a policy: ``GRPOTrainer`` does not).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pytest_e2b_env.catalog.model import Case
from pytest_e2b_env.catalog.observe import Observation
from pytest_e2b_env.catalog.toolprobe import arguments
from pytest_e2b_env.evidence.records import criterion

Judge = Callable[[Any, Observation], tuple[bool, Any]]
#: The kinds of value ``reset`` may return (``NoneType``: it returned ``None``).
RESET_VALUES = ("NoneType", "str", "list")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(float(value)):
        return None
    return float(value)


def _reads(obs: Observation) -> list[Any]:
    return [c.value if c.returned else {"raised": c.error} for c in obs.calls_named("get_reward")]


def _reward_reads(expected: Any, obs: Observation) -> tuple[bool, Any]:
    """The reward, read as TRL reads it after each rollout of one instance, in order."""
    values = _reads(obs)
    numbers = [_number(v) for v in values]
    want = [float(w) for w in expected]
    ok = len(numbers) == len(want) and all(
        n is not None and abs(n - w) <= 1e-9 for n, w in zip(numbers, want, strict=True)
    )
    return ok, values


def _released_at_reads(expected: Any, obs: Observation) -> tuple[bool, Any]:
    """No sandbox of the episode alive at any reward read."""
    reads = obs.alive_at_reads
    if not reads:
        return False, "no reward read was observed"
    return (not any(reads)) == bool(expected), {"alive_at_each_read": reads}


def _host_untouched(expected: Any, obs: Observation) -> tuple[bool, Any]:
    """Nothing written into the host directory the hostile paths name, its canary unchanged and unread."""
    seen = obs.host_probe
    if not seen or not seen.get("dir"):
        return False, "no tool was called with a host path"
    ok = not seen["written"] and not seen["canary_changed"] and not seen["canary_read"]
    return ok == bool(expected), {k: seen[k] for k in ("written", "canary_changed", "canary_read")}


def _tools_probed(expected: Any, obs: Observation) -> tuple[bool, Any]:
    """Every tool besides the terminal and submit got each hostile call, and answered each."""
    if not obs.probe_targets:
        return False, "the case probed no tool"
    want = [label for label, _ in arguments("t", [], "/")]
    answered: dict[str, list[str]] = {tool: [] for tool in obs.probe_targets}
    for call in obs.calls:
        if call.probe is not None and call.name in answered and (call.returned or call.error is not None):
            answered[call.name].append(call.probe)
    unanswered = {tool: [w for w in want if w not in got] for tool, got in answered.items()}
    unanswered = {tool: labels for tool, labels in unanswered.items() if labels}
    return (not unanswered) == bool(expected), {"tools": sorted(answered), "unanswered": unanswered}


def _factory_picklable(expected: Any, obs: Observation) -> tuple[bool, Any]:
    """AsyncGRPOTrainer can pickle the factory for its spawned rollout worker."""
    if obs.factory_pickle is None:
        return False, "the factory was not observed"
    return (obs.factory_pickle == "ok") == bool(expected), {"pickle": obs.factory_pickle}


TRL_JUDGES: dict[str, Judge] = {
    "reward_reads": _reward_reads,
    "released_at_reads": _released_at_reads,
    "host_untouched": _host_untouched,
    "tools_probed": _tools_probed,
    "factory_picklable": _factory_picklable,
}


def _reset_value(call: Any) -> bool:
    if call.value_type not in RESET_VALUES:
        return False
    return call.value_type != "list" or all(isinstance(item, dict) for item in call.value or [])


def trl_criteria(case: Case, obs: Observation) -> list[dict[str, Any]]:
    """The rules checked on every episode case: ``reset``'s value (when it returned)."""
    if case.subject != "episode":
        return []
    resets = [c for c in obs.calls_named("reset") if c.returned and c.value_type is not None]
    if not resets:
        return []
    wrong = [{"type": c.value_type, "value": c.value} for c in resets if not _reset_value(c)]
    return [
        criterion(
            "trl-reset-value",
            "reset() returns None, a string or a list of content blocks: TRL appends it to the last user "
            "message, and anything else ends train() with a TypeError",
            not wrong,
            "None, a str or a list of content-block dicts",
            wrong or sorted({str(c.value_type) for c in resets}),
        )
    ]


def not_applicable(case: Case, obs: Observation) -> str | None:
    """Why a case needing tools besides the terminal and submit does not apply here, else None."""
    if case.needs == "extra_tools" and obs.driver_error is None and not obs.probe_targets:
        return "not applicable: the class exposes no model tool besides the terminal and submit"
    return None
