"""Evidence kept by a pool: per-candidate ledger records and aggregate metrics."""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field
from typing import Any


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100) or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def digest(data: bytes) -> str:
    """Short sha256 of an output, for the ledger (never the output itself)."""
    return hashlib.sha256(data).hexdigest()[:16]


@dataclass
class CaseRecord:
    """One test case of one candidate, as evaluated."""

    reason: str
    exit_code: int | None
    seconds: float | None
    output_bytes: int
    output_sha256: str
    #: Why it took its time, as the runner measured it: own, waited (runnable, no CPU), cpu and
    #: blocked (uninterruptible sleep) seconds, and its state at the last look.
    timing: dict[str, Any] | None = None


@dataclass
class CandidateRecord:
    """Why a candidate got its score: worker, attempts and every case."""

    index: int
    score: float | None  # None: masked (unscorable), see failure_kind
    reason: str | None
    detail: str = ""
    worker_id: str | None = None
    attempts: int = 0
    queue_seconds: float = 0.0
    exec_seconds: float = 0.0
    cases: list[CaseRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    at: float = field(default_factory=time.time)
    failure_kind: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form."""
        return {
            "index": self.index,
            "score": self.score,
            "reason": self.reason,
            "detail": self.detail,
            "worker_id": self.worker_id,
            "attempts": self.attempts,
            "queue_seconds": round(self.queue_seconds, 6),
            "exec_seconds": round(self.exec_seconds, 6),
            "cases": [vars(c) for c in self.cases],
            "errors": list(self.errors),
            "at": self.at,
            "failure_kind": self.failure_kind,
        }


@dataclass
class Counters:
    """Aggregates behind ``RewardPool.metrics``."""

    created: int = 0
    replaced: int = 0
    retries: int = 0
    create_attempts: int = 0
    renewals: int = 0
    renewal_failures: int = 0
    killed: int = 0
    candidates: int = 0
    cases: int = 0
    queue_seconds: float = 0.0
    exec_seconds: float = 0.0
    closed_worker_seconds: float = 0.0
    reasons: dict[str, int] = field(default_factory=dict)
    candidate_seconds: list[float] = field(default_factory=list)
    preflight_seconds: list[float] = field(default_factory=list)

    def count_reason(self, reason: str) -> None:
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
