"""Run one case: faults on, drive the subject, faults off, observe, clean up leaks, judge.

:func:`run_case` never raises for anything the subject does; it returns a :class:`CaseResult`
whose ``record`` is the evidence writer's case record.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_e2b_env.catalog.drive_episode import EpisodeDriver
from pytest_e2b_env.catalog.drive_reward import RewardDriver
from pytest_e2b_env.catalog.model import Case
from pytest_e2b_env.catalog.observe import Observation, exception_info, scrub
from pytest_e2b_env.catalog.verdict import judge
from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.target import Target
from pytest_e2b_env.target.tags import created_ids

_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
EXAMPLES = {"reward": "mypkg.rewards:make_reward", "episode": "mypkg.env:MyEpisode"}


def load_subject(spec: str, kind: str, key: str | None = None) -> Callable[[], Any]:
    """Import a ``module:attr`` subject; a malformed or missing one is a :class:`ConfigError`."""
    key = key or f"e2b_{kind}_subject"
    if not _SPEC.match(spec or ""):
        raise ConfigError(f"{key}={spec!r} is not 'module:factory'. Example: {EXAMPLES[kind]}")
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{key}={spec!r}: cannot import module {module_name!r} ({exc})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{key}={spec!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(f"{key}={spec!r}: {attr!r} is not callable; give a factory or a class")
    factory: Callable[[], Any] = obj
    return factory


@dataclass
class CaseResult:
    """The outcome of one case."""

    status: str  # passed | failed | skipped | error
    reason: str | None
    criteria: list[dict[str, Any]]
    record: dict[str, Any]
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    cleanup: list[dict[str, Any]] = field(default_factory=list)

    def failure_message(self) -> str:
        """A readable message naming every failed criterion (never empty for a failure)."""
        lines = [f"case {self.record['id']} {self.status}: {self.reason or ''}".rstrip()]
        for c in self.criteria:
            if not c["passed"]:
                actual = json.dumps(c["actual"], default=str)[:400]
                lines.append(
                    f"  - {c['id']}: expected {json.dumps(c['expected'], default=str)}, got {actual}"
                )
        return "\n".join(lines)


class SandboxWatcher:
    """Pins a case's deferred faults to the n-th sandbox it creates, as soon as the ledger shows it.

    Only the ledger is read: each create entry already carries the sandbox's settings
    (``allow_internet_access``), so nothing has to be caught alive.
    """

    def __init__(
        self, target: Target, period: float = 0.02, mark: int = 0, deferred: Sequence[Any] = ()
    ) -> None:
        self.target = target
        self.period = period
        self.mark = mark
        self.deferred = list(deferred)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="e2b-sandbox-watcher", daemon=True)

    def _arm(self) -> None:
        """Pin deferred faults to the n-th sandbox created in the case, once it exists."""
        if not self.deferred:
            return
        created = created_ids(self.target.ledger(since=self.mark))
        for fault in list(self.deferred):
            if len(created) >= fault.sandbox_nth:
                self.target.faults.add(sandbox=created[fault.sandbox_nth - 1], **fault.add_kwargs())
                self.deferred.remove(fault)

    def _loop(self) -> None:
        while self.deferred and not self._stop.is_set():
            with contextlib.suppress(Exception):  # the target may be busy or gone; poll again
                self._arm()
            self._stop.wait(self.period)

    def __enter__(self) -> SandboxWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _create_info(target: Target, obs: Observation) -> None:
    """Internet access per created sandbox, as the target's ledger recorded it at create."""
    for entry in obs.ops("create"):
        sid = entry.get("sandbox_id")
        if not sid:
            continue
        detail = entry.get("detail") or ""
        info: dict[str, Any] = {"created_at": entry.get("t")}
        if isinstance(entry.get("allow_internet_access"), bool):
            info["allow_internet_access"] = entry["allow_internet_access"]
        elif isinstance(detail, dict):
            info["allow_internet_access"] = detail.get("allow_internet_access")
        else:
            match = re.search(r"allow_?[iI]nternet_?[aA]ccess\W+(\w+)", str(detail))
            if match:
                info["allow_internet_access"] = match.group(1).lower() == "true"
        obs.create_info[str(sid)] = info


def _cleanup(target: Target, obs: Observation, run_sweep: bool) -> None:
    """Find sandboxes of the case still alive, kill them, and record each sandbox's fate."""
    created = obs.created()
    alive = target.alive_ids()
    obs.leaked = [sid for sid in created if sid in alive]
    if run_sweep:
        target.sweep()
        alive = target.alive_ids()
        obs.leaked_after_sweep = [sid for sid in created if sid in alive]
    stuck: dict[str, str] = {}
    for sid in created:
        if sid in alive and not target.kill(sid):
            stuck[sid] = "would not die after the case; the emulator/proxy reaps it at session end"
    now = time.time()
    for sid in created:
        info = obs.create_info.get(sid, {})
        obs.cleanup.append(
            {
                "sandbox_id": sid,
                "role": "subject",
                "created_at": info.get("created_at"),
                "confirmed_absent_at": None if sid in stuck else now,
                "error": stuck.get(sid)
                or ("leaked: alive after the case, killed by the catalog" if sid in obs.leaked else None),
            }
        )


def not_applicable(case: Case, obs: Observation) -> str | None:
    """Why a pool-only case does not apply to this subject (from the ledger), else None."""
    if obs.driver_error is not None:
        return None
    if case.needs == "keeps_sandboxes" and not obs.alive_after_first_call:
        return "not applicable: the ledger shows the subject keeps no sandbox across calls"
    if case.needs == "renews_lifetime":
        renewals = [e for e in obs.ledger if "/timeout" in str(e.get("route", ""))]
        if not renewals:
            return (
                "not applicable: the ledger shows no lifetime renewal during the case "
                "(the subject keeps no sandbox, or renews less often than a case lasts)"
            )
    return None


def run_case(
    case: Case,
    subject: str,
    target: Target,
    *,
    extra_tools: list[str] | None = None,
) -> CaseResult:
    """Run ``case`` against the subject named ``subject`` (``module:attr``) on ``target``."""
    started = time.perf_counter()
    secrets = [target.api_key]
    base = {
        "id": case.id,
        "subject": case.subject,
        "family": case.family,
        "description": case.description,
        "expected": case.expect,
        "subject_spec": subject,
    }
    if target.mode not in case.modes:
        skip = f"not runnable {target.mode}: {case.modes_reason}"
        return _result(base, "skipped", skip, [], Observation(subject=case.subject), started)
    factory = load_subject(subject, case.subject)
    target.faults.clear()
    mark = target.ledger_mark()
    deferred = [f for f in case.faults if f.sandbox_nth is not None]
    for fault in case.faults:
        if fault.sandbox_nth is None:
            target.faults.add(**fault.add_kwargs())
    obs: Observation
    watcher: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if deferred:
        watcher = SandboxWatcher(target, mark=mark, deferred=deferred)
    with target.scoped_env(), watcher:
        try:
            if case.subject == "reward":
                obs = asyncio.run(RewardDriver(case, factory, target, secrets).run())
            else:
                obs = EpisodeDriver(case, factory, target, secrets, extra_tools or []).run()
        except Exception as exc:  # a driver bug must still produce a record
            obs = Observation(subject=case.subject, driver_error=exception_info(exc, secrets))
        finally:
            target.faults.clear()
    target.faults.clear()  # again: the watcher may have pinned a deferred fault at the very end
    obs.ledger = target.ledger(since=mark)
    _create_info(target, obs)
    _cleanup(target, obs, run_sweep="leaked_after_sweep" in case.expect)
    not_applicable_reason = not_applicable(case, obs)
    if not_applicable_reason is not None:
        return _result(base, "skipped", not_applicable_reason, [], obs, started)
    reference = subject.startswith("pytest_e2b_env.")
    criteria = judge(case, obs, reference, secrets)
    failed = [c["id"] for c in criteria if not c["passed"]]
    status = "failed" if failed else "passed"
    reason = f"failed criteria: {', '.join(failed)}" if failed else None
    return _result(base, status, reason, criteria, obs, started, secrets)


def _replacements(obs: Observation) -> int:
    """Sandboxes created after the first injected fault fired (the subject's retries on new sandboxes)."""
    fired = [e["seq"] for e in obs.ledger if e.get("op") == "fault"]
    return len(obs.created(start=min(fired))) if fired else 0


def _result(
    base: dict[str, Any],
    status: str,
    reason: str | None,
    criteria: list[dict[str, Any]],
    obs: Observation,
    started: float,
    secrets: list[str] | None = None,
) -> CaseResult:
    observed = json.loads(scrub(json.dumps(obs.to_dict(), default=str), secrets or []))
    rewards = None
    for call in obs.calls:
        if call.name in ("reward", "get_reward") and call.returned:
            value = call.value
            rewards = list(value) if isinstance(value, list | tuple) else [*(rewards or []), value]
    record = {
        **base,
        "status": status,
        "reason": reason,
        "observed": observed,
        "criteria": criteria,
        "seconds": round(time.perf_counter() - started, 4),
        "rewards": json.loads(json.dumps(rewards, default=str)) if rewards is not None else None,
        "exceptions": [
            {"type": c.error["type"], "message": c.error["message"]} for c in obs.calls if c.error is not None
        ],
        "attempts": 1,
        "retries": _replacements(obs),
    }
    trajectory = [c.to_event() for c in obs.calls] + [{"kind": "sandbox_op", **e} for e in obs.ledger]
    trajectory.sort(key=lambda ev: float(ev.get("t") or 0))
    trajectory = json.loads(scrub(json.dumps(trajectory, default=str), secrets or []))
    return CaseResult(status, reason, criteria, record, trajectory, obs.cleanup)
