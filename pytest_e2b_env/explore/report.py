"""What a finding leaves behind: a JSON file, an evidence bundle of the failing run, and words."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Any

from pytest_e2b_env.explore.invariants import COMMITTED, KILL_CONFIRMED, SCORES
from pytest_e2b_env.explore.run import Attempt
from pytest_e2b_env.explore.search import Coverage


def consequence(attempt: Attempt) -> str:
    """What went wrong, in words: ``completion 1 scored 0.0, an infrastructure fault was scored``."""
    parts = []
    want, got = attempt.schedule.expected_scores(), attempt.record.rewards
    for broken in attempt.broken:
        if (
            broken.invariant in ("infrastructure-never-a-number", SCORES)
            and attempt.schedule.subject == "episode"
        ):
            what = "an infrastructure fault was scored" if broken.invariant != SCORES else "a wrong score"
            parts.append(f"get_reward() returned {got} (a correct episode commits {want[0]}): {what}")
        elif broken.invariant in ("infrastructure-never-a-number", SCORES) and isinstance(got, list):
            wrong = [
                f"completion {i} scored {g}"
                for i, (w, g) in enumerate(zip(want, got, strict=False), 1)
                if g is not None and g != w
            ]
            what = "an infrastructure fault was scored" if broken.invariant != SCORES else "wrong scores"
            parts.append(f"{', '.join(wrong) or f'scores {got}'} (a correct reward gives {want}): {what}")
        elif broken.invariant == KILL_CONFIRMED:
            for kill in broken.observed:
                parts.append(
                    f"the kill of sandbox {kill['sandbox']} answered {kill['kill_answer']} and the "
                    f"{kill['call']} call returned {kill['call_returned']} without confirming it gone"
                )
        elif broken.invariant == COMMITTED:
            alive = broken.observed.get("score_committed_after_cleanup")
            parts.append(
                f"get_reward() returned {broken.observed.get('score')} while sandboxes were alive: {alive}"
            )
        elif broken.invariant == "nothing-alive-after-close":
            parts.append(
                f"sandbox(es) {', '.join(map(str, broken.observed))} alive after close, never reported"
            )
        else:
            parts.append(f"{broken.invariant}: {json.dumps(broken.observed, default=str)[:300]}")
    return "; ".join(parts)


def replay_command(path: Path) -> str:
    """The command line that replays a finding file."""
    return shlex.join(["pytest-e2b-env", "explore", "--replay", str(path)])


def write_finding(
    output: Path,
    attempt: Attempt,
    *,
    spec: str,
    contract: str | None,
    seed: int,
    run_id: str,
    coverage: Coverage,
    secrets: list[str],
    extra: dict[str, Any] | None = None,
) -> tuple[Path, Path]:
    """Write ``<output>/finding-<run id>.json`` and the failing run's bundle; both paths."""
    from pytest_e2b_env.evidence import BundleWriter
    from pytest_e2b_env.evidence.redaction import Redactor

    output.mkdir(parents=True, exist_ok=True)
    path = output / f"finding-{run_id}.json"
    mode = str((extra or {}).get("mode") or "offline")
    manifest = {"mode": mode, "kind": "explore", "subject": spec, "seeds": {"seed": seed}}
    writer = BundleWriter(output / "evidence", run_id, manifest, secrets=secrets)
    record = attempt.record
    writer.add_case(record.to_dict())
    writer.add_trajectory(record.id, record.trajectory)
    writer.add_cleanup(record.cleanup)
    writer.add_log("schedule.txt", attempt.schedule.words() + "\n" + consequence(attempt))
    bundle = writer.finish([record.id], secrets=secrets)
    doc = {
        "schedule": attempt.schedule.to_json(),
        "in_words": attempt.schedule.words(),
        "invariant": [b.to_json() for b in attempt.broken],
        "consequence": consequence(attempt),
        "seed": seed,
        "subject": spec,
        "contract": contract,
        "replay": replay_command(path),
        "run": attempt.to_json(),
        "coverage": coverage.to_json(),
        "evidence": str(bundle),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **(extra or {}),
    }
    text = Redactor(secrets).text(json.dumps(doc, indent=2, default=str))
    path.write_text(text + "\n", encoding="utf-8")
    return path, bundle
