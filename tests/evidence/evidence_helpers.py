"""Realistic case records and a filler for BundleWriter, shared by the evidence tests."""

from __future__ import annotations

from typing import Any

from pytest_e2b_env.evidence import BundleWriter


def case(case_id: str, status: str = "passed", **overrides: Any) -> dict[str, Any]:
    """A complete case record in the plugin's shape."""
    passed = status == "passed"
    record: dict[str, Any] = {
        "id": case_id,
        "subject": "reward",
        "family": "good",
        "description": f"{case_id} behaves",
        "status": status,
        "reason": None if passed else f"{case_id} did not behave",
        "expected": {"rewards": [1.0, 0.0]},
        "observed": {"rewards": [1.0, 0.0] if passed else [0.0, 0.0]},
        "criteria": [
            {
                "id": "rewards",
                "description": "rewards equal the expectation",
                "passed": passed,
                "expected": [1.0, 0.0],
                "actual": [1.0, 0.0] if passed else [0.0, 0.0],
            }
        ],
        "seconds": 0.25,
        "rewards": [1.0, 0.0] if passed else [0.0, 0.0],
        "exceptions": [],
        "attempts": 1,
        "retries": 0,
    }
    record.update(overrides)
    return record


CASES = [
    case("reward-good-correct"),
    case("reward-defect-wrong-output", family="defect"),
    case(
        "reward-lost-worker-twice",
        "failed",
        family="lost-worker",
        exceptions=[{"type": "AssertionError", "message": "scored instead of raising"}],
    ),
    case("episode-isolation-egress", "error", subject="episode", family="isolation", rewards=None),
    case("episode-live-only", "skipped", subject="episode", family="lifecycle", reason="needs --e2b-live"),
]
IDS = [c["id"] for c in CASES]


def fill(writer: BundleWriter, cases: list[dict[str, Any]] = CASES) -> None:
    """Give ``writer`` cases, a trajectory per case, cleanup records and a log."""
    for record in cases:
        writer.add_case(record)
        writer.add_trajectory(
            record["id"],
            [
                {"t": "2026-01-01T00:00:00.000001Z", "op": "create", "sandbox_id": f"sb-{record['id']}"},
                {"t": "2026-01-01T00:00:01.000001Z", "tool": "terminal", "observation": "ok"},
            ],
        )
    writer.add_cleanup(
        [
            {
                "sandbox_id": "sb-1",
                "role": "worker",
                "created_at": "t0",
                "confirmed_absent_at": "t1",
                "error": None,
            },
            {
                "sandbox_id": "sb-2",
                "role": "verifier",
                "created_at": "t0",
                "confirmed_absent_at": None,
                "error": "DELETE answered 500",
            },
        ]
    )
    writer.add_log("emulator", "started\nsandbox sb-1 created\n")
