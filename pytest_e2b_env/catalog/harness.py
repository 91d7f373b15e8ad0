"""Which failures are the harness's: the target's own errors, a starved machine, a failed sweep.

A case fails the subject only for what the subject did. These are read from the target and the
machine, never from the subject's process:

* the target answered a request with an error of its own making (an emulator bug such as
  ``500: internal emulator error: CleanupError``, a sandbox it could not start, a fault proxy that
  could not reach real E2B): the ledger marks such an answer ``harness_error``, and an injected
  fault never carries the mark, so a fault of the same status stays the subject's to handle;
* a deadline overran while the machine gave the harness no CPU: a thread of the target's server
  waited at least as long as the overrun, and the subject's own process tree used no more CPU
  than that wait (a subject that is the load itself is not excused);
* the harness's own sweep could not remove a sandbox the case left.

The first two turn a failed case into ``error``; a failed sweep makes any case an ``error``.
"""

from __future__ import annotations

from typing import Any

from pytest_e2b_env.catalog.observe import Observation

#: Criteria whose failure a starved machine alone can cause.
TIMING = frozenset({"deadline_kept"})


def _target_errors(obs: Observation, target: str) -> list[str]:
    said = []
    for entry in obs.ledger:
        if entry.get("harness_error") and not entry.get("fault"):
            where = entry.get("route") or entry.get("op")
            said.append(f"{where} answered {entry.get('status')}: {entry['harness_error']}")
    return said


def _starved(obs: Observation) -> list[str] | None:
    """Each overrun the machine explains, or None when one of them it does not."""
    explained = []
    for call in obs.calls:
        deadline = call.deadline
        if deadline is None or call.seconds <= deadline["allowed"]:
            continue
        over = call.seconds - deadline["allowed"]
        waited = float(deadline.get("harness_waited_s") or 0.0)
        load = float(deadline.get("subject_cpu_s") or 0.0)
        if waited < over or load > waited:
            return None
        explained.append(
            f"step {call.step} overran by {over:.1f} s while a thread of the target's server waited "
            f"{waited:.1f} s for a CPU (the subject used {load:.1f} s)"
        )
    return explained


def harness_fault(
    obs: Observation, criteria: list[dict[str, Any]], *, failed: bool, target: str
) -> tuple[str | None, str | None]:
    """``(why the case is the harness's error, a note for a case the harness did not fail)``."""
    stuck = obs.leaked_after_sweep
    if stuck:
        return (
            f"the harness's sweep could not remove {len(stuck)} sandbox(es) the case left "
            f"({', '.join(stuck[:3])}): the {target} target would not kill them",
            None,
        )
    errors = _target_errors(obs, target)
    if failed and errors:
        shown = "; ".join(errors[:3])
        return f"the {target} target failed on its own, not through an injected fault: {shown}", None
    unmet = {c["id"] for c in criteria if not c["passed"] and not c.get("relaxed")}
    if failed and unmet <= TIMING:
        starved = _starved(obs)
        if starved:
            return "the machine starved the case: " + "; ".join(starved[:3]), None
    if errors:
        return None, f"the target failed on its own during the case, and the subject coped: {errors[0]}"
    return None, None
