"""Run one case: faults on, drive the subject, faults off, observe, clean up leaks, judge.

Everything here runs in the controller: the drivers play TRL's part and send each subject call to
where the subject runs (its case host, :mod:`~pytest_e2b_env.catalog.calls`), which answers only
what the call returned or raised. The ledger, the sandbox list, the faults, the cleanup and every
verdict are read and computed here, with the target's control key, which no subject code holds.

:func:`run_case` never raises for anything the subject does; it returns the case's typed
:class:`~pytest_e2b_env.catalog.record.CaseRecord`.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pytest_e2b_env.catalog.calls import DriverError, HostDied, LocalCalls, SubjectCalls
from pytest_e2b_env.catalog.contract import Contract, Subject
from pytest_e2b_env.catalog.drive_episode import EpisodeDriver, task_of, unmet_window
from pytest_e2b_env.catalog.drive_reward import RewardDriver
from pytest_e2b_env.catalog.expected import WATCH, case_needles
from pytest_e2b_env.catalog.harness import harness_fault
from pytest_e2b_env.catalog.hints import shape_hints
from pytest_e2b_env.catalog.model import Case
from pytest_e2b_env.catalog.observe import Observation, exception_info, rule_of, scrub
from pytest_e2b_env.catalog.record import CaseRecord
from pytest_e2b_env.catalog.trlrules import not_applicable as trl_not_applicable
from pytest_e2b_env.catalog.verdict import judge
from pytest_e2b_env.evidence.records import criterion
from pytest_e2b_env.targets import Target
from pytest_e2b_env.targets.tags import created_ids, used_ids

#: Families whose candidates or scripts attack the sandbox: below the namespaces isolation level
#: they would run on the host itself, so they are skipped with the level's reason instead.
NEEDS_NAMESPACES = ("hostile", "isolation")
#: How long a case's end waits for create requests still in flight (each is this case's sandbox).
CREATE_SETTLE = 30.0
#: How long past its longest delay a case waits for the requests a delaying fault held back.
DELAY_SETTLE = 10.0


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
        self.added: list[str] = []  # ids of the rules pinned so far
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="e2b-sandbox-watcher", daemon=True)

    def _arm(self) -> None:
        """Pin deferred faults to the n-th sandbox created in the case, once it exists."""
        if not self.deferred:
            return
        created = created_ids(self.target.ledger(since=self.mark))
        for fault in list(self.deferred):
            if len(created) >= fault.sandbox_nth:
                rule = self.target.faults.add(sandbox=created[fault.sandbox_nth - 1], **fault.add_kwargs())
                self.added.append(str(rule))
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
        for key in ("lifetime_s", "auto_pause"):
            if key in entry:
                info[key] = entry[key]
        if "drop_stream" in str(entry.get("fault") or ""):
            info["answer_lost"] = True  # the subject never got this id
        obs.create_info[str(sid)] = info


def _settle_delays(case: Case, target: Target, mark: int) -> None:
    """Wait (bounded) until the ledger shows every request a delaying fault held back.

    The ledger records a request when its answer starts: a request delayed past the moment the
    subject gave up is recorded only when the delay ends or its sandbox is killed, and it is this
    case's fault.
    """
    delays = [float(f.answer.get("delay") or 0) for f in case.faults]
    if not any(delays):
        return
    deadline = time.monotonic() + max(delays) + DELAY_SETTLE
    with contextlib.suppress(Exception):  # the target may be busy or gone: the verdict then says so
        while time.monotonic() < deadline:
            fired = {str(r["id"]): int(r.get("fired") or 0) for r in target.faults.list()}
            recorded = Counter(rule_of(e) for e in target.ledger(since=mark))
            if all(recorded[rule] >= count for rule, count in fired.items()):
                return
            time.sleep(0.1)


def _watched(case: Case) -> list[str]:
    """The forms of the case's expected outputs to watch for (none when its inputs cannot be read:
    the driver then reports the case's own error)."""
    try:
        return case_needles(case)
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _cut_off(obs: Observation) -> set[str]:
    """Sandboxes made by a create during the catalog's cancelled batch that nothing ever used.

    Whether the subject ever had such an id cannot be told from outside: the server records a
    create as it answers, and the cancellation can land while that answer is still on its way
    (in a socket buffer, in the SDK's parse), so the SDK call raises ``CancelledError`` and the
    id is lost to any subject. A sandbox the subject did use is its own to kill, as any other.
    """
    for call in obs.calls:
        if call.args.get("cancel_on") is not None:
            return set(obs.created(start=call.mark_start)) - used_ids(obs.ledger)
    return set()


def _cleanup(target: Target, obs: Observation) -> None:
    """The harness owns cleanup: kill every sandbox the case created (ledger), whatever its tags.

    ``leaked`` is what the subject left alive; ``cut_off`` what a create the catalog's
    cancellation cut off left (not the subject's); ``leaked_after_sweep`` what the harness itself
    could not remove (the run-id sweep and ``reap`` then still own it).
    """
    created = obs.created()
    alive = target.alive_ids()
    left = [sid for sid in created if sid in alive]
    cut = _cut_off(obs)
    obs.leaked = [sid for sid in left if sid not in cut]
    obs.cut_off = [sid for sid in left if sid in cut]
    stuck: dict[str, str] = {}
    for sid in left:
        if not target.kill(sid):
            stuck[sid] = "would not die after the case; the emulator/proxy reaps it at session end"
    alive = target.alive_ids() if left else alive
    obs.leaked_after_sweep = [sid for sid in created if sid in alive]
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
                or ("leaked: alive after the case, killed by the catalog" if sid in obs.leaked else None)
                or (
                    "made by a create the catalog's cancellation cut off (the subject never had its id); "
                    "killed by the catalog"
                    if sid in obs.cut_off
                    else None
                ),
            }
        )


def not_applicable(case: Case, obs: Observation) -> str | None:
    """Why a pool-only case does not apply to this subject (from the ledger), else None."""
    if obs.driver_error is not None:
        return None
    if case.reward is not None and case.reward.cancel_on and obs.reward_async is False:
        return "not applicable: the reward function is sync, and a sync call cannot be cancelled mid-batch"
    if case.needs == "keeps_sandboxes" and not obs.alive_after_first_call:
        return "not applicable: the ledger shows the subject keeps no sandbox across calls"
    if case.needs == "extra_tools":
        return trl_not_applicable(case, obs)
    if case.needs == "renews_lifetime":
        renewals = [e for e in obs.ledger if "/timeout" in str(e.get("route", ""))]
        if not renewals:
            return (
                "not applicable: the ledger shows no lifetime renewal during the case "
                "(the subject keeps no sandbox, or renews less often than a case lasts)"
            )
    return None


def skip_reason(case: Case, contract: Contract, target: Target) -> str | None:
    """Why a case cannot run here (mode, isolation level, a window the subject does not offer)."""
    if target.mode not in case.modes:
        return f"not runnable {target.mode}: {case.modes_reason}"
    below = target.mode == "offline" and not target.isolation.startswith("namespaces")
    if below and case.family in NEEDS_NAMESPACES:
        return (
            f"needs the emulator's namespaces isolation level, got {target.isolation!r} "
            f"({target.isolation_reason}): {case.family} cases would run their programs on this host"
        )
    if below and contract.needs_isolation:
        return (
            f"the subject declares it needs sandboxes as E2B gives them (contract 'needs_isolation'), and "
            f"the emulator's level is {target.isolation!r} ({target.isolation_reason})"
        )
    if case.episode is not None:
        return unmet_window(case, task_of(case, contract), contract)
    return None


def run_case(
    case: Case,
    subject: Subject | SubjectCalls,
    target: Target,
    *,
    extra_tools: list[str] | None = None,
    relax: frozenset[str] = frozenset(),
) -> CaseRecord:
    """Run ``case`` against ``subject`` on ``target``; never raises for anything the subject does.

    ``subject`` is where the subject's code runs: a case host (the plugin's way), or a
    :class:`Subject` loaded in this process (its calls then run here: no isolation). A case the
    harness failed (the target's own error, a starved machine, a sweep that could not remove a
    sandbox) is an ``error`` naming the harness, never a failure of the subject, and runs once more.
    """
    calls = subject if isinstance(subject, SubjectCalls) else LocalCalls(subject)
    record, harness = _attempt(case, calls, target, extra_tools or [], relax)
    if harness is None:
        return record
    again, _ = _attempt(case, calls, target, extra_tools or [], relax)
    again.attempts = 2
    again.seconds = round(again.seconds + record.seconds, 4)
    again.advice.insert(0, f"the first attempt was the harness's error, so the case ran again: {harness}")
    return again


def _drive(
    case: Case, calls: SubjectCalls, target: Target, secrets: list[str], extra_tools: list[str]
) -> tuple[Observation, str | None]:
    """Play TRL's part for the case; (what was observed, how the subject's process ended if it did)."""
    obs = Observation(subject=case.subject)
    try:
        calls.begin()
        driver: RewardDriver | EpisodeDriver
        if case.subject == "reward":
            driver = RewardDriver(case, calls, target, secrets)
        else:
            driver = EpisodeDriver(case, calls, target, secrets, extra_tools)
        obs = driver.obs
        try:
            obs = driver.run()
        except DriverError as exc:  # the case's own inputs failed where the subject runs
            obs.driver_error = exc.info
        except HostDied:
            raise
        except Exception as exc:  # a driver bug must still produce a record
            obs.driver_error = exception_info(exc, secrets)
        calls.end()
    except HostDied as exc:
        return obs, str(exc)
    return obs, None


def _attempt(
    case: Case, calls: SubjectCalls, target: Target, extra_tools: list[str], relax: frozenset[str]
) -> tuple[CaseRecord, str | None]:
    """One run of the case: its record, and what of the harness failed it (None: nothing)."""
    started = time.perf_counter()
    secrets = [target.api_key, target.control_key]
    calls.secrets = secrets
    contract = calls.contract
    reason = skip_reason(case, contract, target)
    if reason is not None:
        record = CaseRecord.for_case(case, calls.spec, "skipped", reason)
        record.contract = contract.summary()
        return record, None
    target.faults.clear()
    mark = target.ledger_mark()
    deferred = [f for f in case.faults if f.sandbox_nth is not None]
    rules = [str(target.faults.add(**f.add_kwargs())) for f in case.faults if f.sandbox_nth is None]
    # After the case's own rules, so a fault meant for a request still answers it.
    watching = _watched(case)
    watch = [str(target.faults.add(route="*", answer=WATCH, times=None, contains=n)) for n in watching]
    watcher: SandboxWatcher | None = None
    if deferred:
        watcher = SandboxWatcher(target, mark=mark, deferred=deferred)
    with calls.environment(target), watcher or contextlib.nullcontext():
        try:
            obs, died = _drive(case, calls, target, secrets, extra_tools)
        finally:
            _settle_delays(case, target, mark)
            target.faults.clear()
    target.faults.clear()  # again: the watcher may have pinned a deferred fault at the very end
    target.wait_for_creates(CREATE_SETTLE)  # a create the subject gave up on is this case's
    obs.ledger = target.ledger(since=mark)
    obs.fault_rules = rules + (watcher.added if watcher is not None else [])
    obs.watch_rules, obs.watched_forms = watch, len(watching)
    _create_info(target, obs)
    _cleanup(target, obs)
    if died is not None:
        criteria = [
            criterion(
                "subject-process",
                "the subject's code ran to the end of the case without ending its process",
                False,
                "the case process survives the subject",
                died,
            )
        ]
        reason = f"failed criteria: subject-process ({died})"
        return _record(case, calls, "failed", reason, criteria, obs, started, secrets), None
    not_applicable_reason = not_applicable(case, obs)
    if not_applicable_reason is not None:
        return _record(case, calls, "skipped", not_applicable_reason, [], obs, started, secrets), None
    criteria = judge(case, obs, contract, secrets, relax)
    failed = [c["id"] for c in criteria if not c["passed"] and not c.get("relaxed")]
    relaxed = [c["id"] for c in criteria if c.get("relaxed")]
    if failed:
        status, reason = "failed", f"failed criteria: {', '.join(failed)}"
    elif relaxed:
        status, reason = "relaxed", f"relaxed policy criteria failed: {', '.join(relaxed)}"
    else:
        status, reason = "passed", None
    harness, note = harness_fault(obs, criteria, failed=bool(failed), target=target.mode)
    if harness is not None:
        status, reason = (
            "error",
            f"harness: {harness} (not the subject's failure; {reason or 'no criterion failed'})",
        )
    record = _record(case, calls, status, reason, criteria, obs, started, secrets)
    if note is not None:
        record.advice.append(note)
    return record, harness


def _replacements(obs: Observation) -> int:
    """Sandboxes created after the first injected fault fired (the subject's retries on new sandboxes)."""
    fired = [e["seq"] for e in obs.faults()]
    return len(obs.created(start=min(fired))) if fired else 0


def _advice(obs: Observation) -> list[str]:
    """What a reviewer should know but that fails nothing: untagged sandboxes, from the ledger."""
    untagged = [
        e["sandbox_id"] for e in obs.ops("create") if e.get("sandbox_id") and e.get("metadata_keys") == []
    ]
    if not untagged:
        return []
    return [
        f"{len(untagged)} sandbox(es) carry no metadata ({', '.join(untagged[:3])}): tag them (for example "
        "metadata={'run': <run id>}) so a sweep can find them after a crash; the catalog does not require it"
    ]


def _record(
    case: Case,
    calls: SubjectCalls,
    status: str,
    reason: str | None,
    criteria: list[dict[str, Any]],
    obs: Observation,
    started: float,
    secrets: list[str],
) -> CaseRecord:
    record = CaseRecord.for_case(case, calls.spec, status, reason)
    record.contract = calls.contract.summary()
    if obs.reward_source is not None:  # detected, not declared: get_reward(), or env.reward and its shape
        record.contract["reward"] = obs.reward_source
    record.observed = json.loads(scrub(json.dumps(obs.to_dict(), default=str), secrets))
    record.criteria = criteria
    record.relaxed = sorted({str(c["policy"]) for c in criteria if c.get("relaxed")})
    record.seconds = round(time.perf_counter() - started, 4)
    rewards = None
    for call in obs.calls:
        if call.name in ("reward", "get_reward") and call.returned:
            value = call.value
            rewards = list(value) if isinstance(value, list | tuple) else [*(rewards or []), value]
    record.rewards = json.loads(json.dumps(rewards, default=str)) if rewards is not None else None
    record.exceptions = [
        {"type": c.error["type"], "message": c.error["message"]} for c in obs.calls if c.error is not None
    ]
    record.attempts = 1
    record.retries = _replacements(obs)
    record.advice = _advice(obs) + (shape_hints(obs, calls.contract) if status != "passed" else [])
    trajectory = [c.to_event() for c in obs.calls] + [{"kind": "sandbox_op", **e} for e in obs.ledger]
    trajectory.sort(key=lambda ev: float(ev.get("t") or 0))
    record.trajectory = json.loads(scrub(json.dumps(trajectory, default=str), secrets))
    record.cleanup = obs.cleanup
    return record
