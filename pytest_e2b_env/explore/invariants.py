"""Invariants over one schedule's whole history: the calls the driver made and the ledger.

Most are the catalog's own safety criteria, read from the case record the catalog's runner
judged (so a finding here is one the catalog would fail if it had a case of that shape). One is
new, and is judged here from the ledger in its order: every kill the subject attempts is
confirmed before the call that discarded the sandbox returns (an episode: before get_reward()
returns its score). An episode's verifier and cleanup predicates are the catalog's too, and count
only once a score came out: a subject that raised committed nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_e2b_env.catalog.record import CaseRecord

#: catalog criterion -> the invariant a failure of it breaks
CRITERIA: dict[str, str] = {
    "score_mask_or_raise": "infrastructure-never-a-number",
    "no-leak": "nothing-alive-after-close",
    "no-expected-output-in-sandbox": "expected-outputs-never-in-a-sandbox",
    "no-secret": "no-secret-observed",
    "subject-process": "subject-process-survives",
}
KILL_CONFIRMED = "kills-confirmed-before-a-score"
SCORES = "scores-in-range-and-order"
COMMITTED = "score-committed-after-cleanup"
FRESH_VERIFIER = "verifier-fresh-and-offline"
#: an episode's catalog criteria that break an invariant only when get_reward() returned a number
ONCE_SCORED: dict[str, str] = {
    "score_committed_after_cleanup": COMMITTED,
    "verifier_created": FRESH_VERIFIER,
    "verifier_offline": FRESH_VERIFIER,
}

#: every invariant, with what it means (docs/explore.md lists them)
INVARIANTS: dict[str, str] = {
    "infrastructure-never-a-number": "once a fault landed, every returned score is the right one or None; "
    "otherwise the call raises",
    SCORES: "with no fault landed, the scores are in [0, 1], one per completion, in completion order",
    KILL_CONFIRMED: "a kill that did not answer success is confirmed (a later kill succeeds, or a lookup "
    "answers 404) before the call that made it returns; otherwise that call raises",
    "nothing-alive-after-close": "no sandbox the subject created is alive after it was closed",
    "expected-outputs-never-in-a-sandbox": "no request carried an expected output into a sandbox",
    "no-secret-observed": "no key of the target appears in anything observed",
    "subject-process-survives": "the subject's process lives through the schedule",
    COMMITTED: "an episode's score is returned only once every sandbox of the episode is gone (the policy "
    "sandbox and the verifier confirmed killed)",
    FRESH_VERIFIER: "an episode that returns a score graded it on a sandbox created after submit() started, "
    "with internet access off, that received the submitted artifact and the hidden inputs only (never the "
    "policy sandbox's other files)",
}

KILL_ROUTE = "DELETE /sandboxes/{id}"
INFO_ROUTE = "GET /sandboxes/{id}"


@dataclass
class Break:
    """One invariant a schedule broke, with what was observed."""

    invariant: str
    observed: Any

    def to_json(self) -> dict[str, Any]:
        """``{"invariant", "meaning", "observed"}``."""
        return {"invariant": self.invariant, "meaning": INVARIANTS[self.invariant], "observed": self.observed}


def _ops(record: CaseRecord) -> list[dict[str, Any]]:
    return [e for e in record.trajectory if e.get("kind") == "sandbox_op"]


def _settled(entry: dict[str, Any]) -> bool:
    """A kill or lookup the server carried out, with the sandbox gone.

    A fault that answered in the server's place (a status, a failed kill) settles nothing; a lost
    answer or a delay still lets the server act, and the ledger shows what it did.
    """
    fault = str(entry.get("fault") or "")
    if "status" in fault or "kill_fails" in fault:
        return False
    status = int(entry.get("status") or 0)
    if entry.get("route") == KILL_ROUTE:
        return 200 <= status < 300 or status == 404
    return entry.get("route") == INFO_ROUTE and status == 404


def _calls(record: CaseRecord) -> list[dict[str, Any]]:
    return [e for e in record.trajectory if e.get("kind") == "call"]


def _end(call: dict[str, Any]) -> float:
    return float(call["t"] or 0) + float(call["seconds"] or 0)


def _a_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def scored(record: CaseRecord) -> dict[str, Any] | None:
    """An episode's first get_reward() call that returned a number (its score), else None."""
    return next(
        (
            c
            for c in _calls(record)
            if c.get("name") == "get_reward" and c.get("returned") and _a_number(c["value"])
        ),
        None,
    )


def _owner(record: CaseRecord, t: float) -> dict[str, Any] | None:
    """The call whose result a kill at ``t`` must be confirmed before: the call running then
    (reward: the driver's calls run one at a time), or an episode's scoring get_reward()."""
    if record.subject == "episode":
        score = scored(record)
        return score if score is not None and t <= _end(score) else None
    return next((c for c in _calls(record) if float(c["t"] or 0) <= t <= _end(c)), None)


def unconfirmed_kills(record: CaseRecord) -> list[dict[str, Any]]:
    """Kills answered with a failure (or not at all) whose calls returned with no later confirmation.

    The call a kill belongs to is the call running when the ledger recorded it (an episode's: the
    get_reward() that returned its score); a call that raised has said no number is to be trusted.
    """
    ops = _ops(record)
    found: list[dict[str, Any]] = []
    for kill in ops:
        if kill.get("route") != KILL_ROUTE or _settled(kill):
            continue
        sid, t = kill.get("sandbox_id"), float(kill.get("t") or 0)
        if any(f["sandbox"] == sid for f in found):
            continue  # one line per sandbox: its later failed kills say nothing more
        owner = _owner(record, t)
        if owner is None or not owner.get("returned"):
            continue
        end = _end(owner)
        confirmed = any(
            e.get("sandbox_id") == sid
            and e["seq"] > kill["seq"]
            and float(e.get("t") or 0) <= end
            and _settled(e)
            for e in ops
        )
        if not confirmed:
            found.append(
                {
                    "sandbox": sid,
                    "kill_answer": kill.get("fault") or kill.get("status"),
                    "call": owner.get("name"),
                    "call_returned": owner.get("value"),
                }
            )
    return found


def _leaked(actual: Any) -> list[str]:
    if isinstance(actual, dict):
        return [str(x) for x in actual.get("leaked") or []]
    return [str(x) for x in actual or []]


def unreported_leaks(record: CaseRecord, leaked: list[str]) -> list[str]:
    """Leaked sandboxes the subject did not report. Reported: a call raised naming the sandbox, or a
    fault failed its kill and a call raised after (the cleanup-failure shape the catalog accepts;
    the sweep then owns the sandbox). A kill that never reached the server (a connection a lost
    answer broke) leaves no ledger entry, so the raise naming the id is what reports it."""
    ops = _ops(record)
    raised = [c for c in record.trajectory if c.get("kind") == "call" and c.get("returned") is False]
    raised_at = [float(c["t"] or 0) + float(c["seconds"] or 0) for c in raised]
    said = " ".join(str((c.get("error") or {}).get("message") or "") for c in raised)
    reported = {sid for sid in leaked if sid in said}
    for kill in ops:
        faulted = kill.get("route") == KILL_ROUTE and kill.get("fault")
        if faulted and any(end >= float(kill.get("t") or 0) for end in raised_at):
            reported.add(str(kill.get("sandbox_id")))
    return [sid for sid in leaked if sid not in reported]


def fault_landed(record: CaseRecord) -> bool:
    """Whether any injected fault answered a request (watch rules answer nothing and are not faults)."""
    return any(e.get("fault") and "delay 0s" not in str(e.get("fault")) for e in _ops(record))


def companion_in_verifier(record: CaseRecord, rules: list[str]) -> list[str]:
    """Sandboxes created once submit() started that a request carried the policy's companion file into
    (``rules``: the watch rules marking that file after the reset's upload)."""
    submit = next((c for c in _calls(record) if c.get("name") == "submit"), None)
    if submit is None or not rules:
        return []
    since, ops = float(submit["t"] or 0), _ops(record)
    late = {str(e["sandbox_id"]) for e in ops if e.get("op") == "create" and float(e.get("t") or 0) >= since}
    hit = {str(e.get("sandbox_id")) for e in ops if str(e.get("fault") or "").partition(":")[0] in rules}
    return sorted(hit & late)


def breaks(record: CaseRecord, companion: list[str] | None = None) -> list[Break]:
    """Every invariant the run in ``record`` broke (none for a harness error or a skip).

    ``companion``: an episode's watch rules on the policy's companion file (:func:`companion_in_verifier`).
    """
    if record.status in ("error", "skipped"):
        return []
    found = []
    score = scored(record) if record.subject == "episode" else None
    for criterion in record.criteria:
        name = str(criterion.get("id"))
        if name in ONCE_SCORED and not criterion.get("passed") and score is not None:
            found.append(
                Break(ONCE_SCORED[name], {name: criterion.get("actual"), "score": score.get("value")})
            )
            continue
        if criterion.get("passed") or criterion.get("relaxed") or name not in CRITERIA:
            continue
        invariant, actual = CRITERIA[name], criterion.get("actual")
        if name == "score_mask_or_raise" and not fault_landed(record):
            invariant = SCORES
        if name == "no-leak":
            actual = unreported_leaks(record, _leaked(actual))
            if not actual:
                continue
        found.append(Break(invariant, actual))
    kills = unconfirmed_kills(record)
    if kills:
        found.append(Break(KILL_CONFIRMED, kills))
    carried = companion_in_verifier(record, companion or [])
    if carried:
        found.append(Break(FRESH_VERIFIER, {"verifier_received_the_policys_companion_file": carried}))
    return found
