"""The evidence bundle of a training run, written with the project's ``BundleWriter``.

A training run is recorded as a handful of checks ("cases" in the bundle's terms), each
with criteria a reviewer can recheck against ``metrics.json`` (kept in the bundle as
``logs/metrics.txt``):

* ``train-preflight`` (episode mode): the scripted repair scores 1.0, the buggy submit 0.0;
* ``train-baseline``: the held-out split was evaluated before training;
* ``train-grpo``: every step ran, rewards came from real sandboxes, weights changed;
* ``train-after``: the held-out split was evaluated after training;
* ``train-cleanup``: the subject closed and no sandbox of the run was left alive.

The emulator's ledger (every sandbox operation, timestamped) is the trajectory of
``train-grpo``; ``cleanup.json`` lists every sandbox the run created and when it was killed.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_e2b_env.evidence.records import criterion
from pytest_e2b_env.targets.tags import created_entries
from pytest_e2b_env.training.record import RunRecord

CASE_IDS = {
    "reward": ["train-baseline", "train-grpo", "train-after", "train-cleanup"],
    "episode": ["train-preflight", "train-baseline", "train-grpo", "train-after", "train-cleanup"],
}


def _iso(t: Any) -> Any:
    if isinstance(t, int | float):
        return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")
    return t


def sandbox_summary(ledger: list[dict[str, Any]], alive: list[str]) -> dict[str, Any]:
    """Counts of sandbox operations in an emulator ledger, and the cleanup record of each sandbox."""
    created: dict[str, dict[str, Any]] = {
        sandbox_id: {"sandbox_id": sandbox_id, "created_at": _iso(entry.get("t"))}
        for sandbox_id, entry in created_entries(ledger).items()
    }
    ops: dict[str, int] = {}
    born = {sid: entry.get("t") for sid, entry in created_entries(ledger).items()}
    ended: dict[str, Any] = {}
    failed = 0
    for entry in ledger:
        op = str(entry.get("op"))
        ops[op] = ops.get(op, 0) + 1
        sandbox_id = entry.get("sandbox_id")
        status = entry.get("status")
        ok = isinstance(status, int) and status < 400
        failed += isinstance(status, int) and status >= 500
        if sandbox_id in created:
            ended[sandbox_id] = entry.get("t")  # the last operation seen, the kill when it was killed
        if op == "kill" and ok and sandbox_id in created:
            created[sandbox_id]["confirmed_absent_at"] = _iso(entry.get("t"))
    # Sandbox seconds: creation to the last operation seen (its kill), what a sandbox provider bills.
    seconds = sum(
        float(ended[sid]) - float(t)
        for sid, t in born.items()
        if isinstance(t, int | float) and isinstance(ended.get(sid), int | float)
    )
    for sandbox_id, rec in created.items():
        if sandbox_id in alive:
            rec["confirmed_absent_at"] = None
            rec["error"] = "still alive at the end of the run"
        elif not rec.get("confirmed_absent_at"):
            # gone without a DELETE: expired server-side or killed with the emulator's sweep
            rec["confirmed_absent_at"] = "absent from the final sandbox list"
    return {
        "created": len(created),
        "ops": ops,
        "sandbox_seconds": round(seconds, 3),
        #: operations the backend answered with a server error (5xx): infrastructure failures
        "infrastructure_errors": failed,
        "alive_at_end": list(alive),
        "records": list(created.values()),
    }


def _case(
    cid: str, mode: str, description: str, criteria: list[dict[str, Any]], skip: str | None = None
) -> dict:
    reason: str | None
    if skip:
        status, reason = "skipped", skip
    else:
        failed = [c["id"] for c in criteria if not c["passed"]]
        status = "failed" if failed else "passed"
        reason = f"failed: {', '.join(failed)}" if failed else None
    return {
        "id": cid,
        "subject": mode,
        "family": "training",
        "description": description,
        "status": status,
        "reason": reason,
        "criteria": criteria,
        "expected": {c["id"]: c["expected"] for c in criteria},
        "observed": {c["id"]: c["actual"] for c in criteria},
    }


def training_cases(doc: dict[str, Any], sandboxes: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The bundle's case records for one run, judged from its ``metrics.json`` document."""
    mode, settings = doc["mode"], doc["settings"]
    error = doc.get("error") or {}
    failed_in = error.get("phase")
    cases: list[dict[str, Any]] = []
    if mode == "episode":
        pre = (doc.get("preflight") or {}).get("episodes") or []
        wanted = [1.0 if e.get("script") == "repair" else 0.0 for e in pre]
        got = [e.get("reward") for e in pre]
        cases.append(
            _case(
                "train-preflight",
                mode,
                "The scripted repair of each train task scores 1.0 and submitting the buggy program 0.0.",
                [criterion("scores", "preflight rewards", bool(pre) and got == wanted, wanted, got)],
            )
        )
    before = doc.get("before") or {}
    cases.append(
        _case(
            "train-baseline",
            mode,
            "The held-out split is evaluated before any training step.",
            [
                criterion(
                    "evaluated",
                    "eval_reward recorded",
                    "eval_reward" in before,
                    "a number",
                    before.get("eval_reward"),
                )
            ],
        )
    )
    baseline_only = bool(settings.get("baseline_only"))
    skip = "--baseline-only: no training requested" if baseline_only else None
    steps = len(doc.get("steps") or [])
    created = (sandboxes or {}).get("created")
    subject = doc.get(mode) or {}
    used = created if created is not None else subject.get("workers_created", subject.get("instances"))
    weights = doc.get("weights") or {}
    cases.append(
        _case(
            "train-grpo",
            mode,
            "Every GRPO step ran, its rewards came from real sandboxes, and the weights changed.",
            [
                criterion(
                    "steps",
                    "optimizer steps completed",
                    steps == settings["max_steps"],
                    settings["max_steps"],
                    steps,
                ),
                criterion("sandboxes", "sandboxes used by the reward stage", bool(used), "> 0", used),
                criterion(
                    "weights",
                    "parameters changed by training",
                    bool(weights.get("changed_any")),
                    True,
                    weights.get("changed"),
                ),
            ],
            skip,
        )
    )
    after = doc.get("after") or {}
    cases.append(
        _case(
            "train-after",
            mode,
            "The held-out split is evaluated again with the same settings after training.",
            [
                criterion(
                    "evaluated",
                    "eval_reward recorded",
                    "eval_reward" in after,
                    "a number",
                    after.get("eval_reward"),
                )
            ],
            skip,
        )
    )
    cleanup = doc.get("cleanup") or {}
    alive = (sandboxes or {}).get("alive_at_end", cleanup.get("leaked", []))
    cases.append(
        _case(
            "train-cleanup",
            mode,
            "The subject is closed in finally and no sandbox of the run is left alive.",
            [
                criterion(
                    "closed",
                    "subject closed without error",
                    cleanup.get("closed") is True,
                    True,
                    cleanup.get("closed"),
                ),
                criterion("no-leak", "sandboxes of the run alive at the end", not alive, [], alive),
            ],
        )
    )
    if failed_in:
        for case in cases:
            if case["status"] == "passed":
                continue
            case.setdefault("exceptions", []).append(
                {"type": error.get("type"), "message": error.get("message")}
            )
    return cases


def write_bundle(
    root: Path,
    record: RunRecord,
    log_text: str,
    ledger: list[dict[str, Any]] | None,
    sandboxes: dict[str, Any] | None,
    secrets: list[str],
) -> Path:
    """Write ``<root>/<run-id>`` and return its path; the run's secrets are redacted everywhere."""
    from pytest_e2b_env.evidence import BundleWriter

    doc = record.to_dict()
    manifest = {
        "mode": "offline" if doc["target"].get("offline") else "live",
        "kind": "training",
        "subject": doc["mode"],
        "seeds": {"seed": doc["settings"]["seed"]},
        "settings": doc["settings"],
        "isolation": doc["target"].get("isolation"),
        "live_endpoint": None if doc["target"].get("offline") else doc["target"].get("api_url"),
        "status": doc["status"],
        # which passing validation of the same code and tasks the run relied on (docs/training.md)
        "validated_by": doc.get("validated_by"),
    }
    writer = BundleWriter(root, record.run_id, manifest, secrets=secrets)
    for case in training_cases(doc, sandboxes):
        writer.add_case(case)
    if ledger is not None:
        writer.add_trajectory("train-grpo", ledger)
    if sandboxes is not None:
        writer.add_cleanup(sandboxes["records"])
    else:
        writer.add_cleanup(list(doc.get("cleanup", {}).get("records", [])))
    writer.add_log("train.log", log_text)
    writer.add_log("metrics.txt", json.dumps(doc, indent=2))
    return writer.finish(CASE_IDS[doc["mode"]], secrets=secrets)
