"""The case record: one typed shape for every case, run or not, built in one place.

The runner, the pytest adapter's skip paths, the reporter and the evidence writer all hold a
:class:`CaseRecord`; ``to_dict()`` is the evidence writer's case record (docs/evidence.md).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_e2b_env.catalog.model import Case


@dataclass
class CaseRecord:
    """What happened to one case: verdict, what was expected and observed, and its evidence."""

    id: str
    subject: str
    family: str
    description: str
    status: str  # passed | relaxed | failed | skipped | error
    reason: str | None
    expected: dict[str, Any] = field(default_factory=dict)
    observed: dict[str, Any] = field(default_factory=dict)
    criteria: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    rewards: list[Any] | None = None
    exceptions: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0
    retries: int = 0
    subject_spec: str | None = None
    contract: dict[str, Any] | None = None
    relaxed: list[str] = field(default_factory=list)
    #: Recommendations that never fail a case (e.g. tag your sandboxes).
    advice: list[str] = field(default_factory=list)
    #: What the subject printed (stdout and stderr of its case host) during the case: the tail.
    subject_output: str | None = None
    trajectory: list[dict[str, Any]] = field(default_factory=list, repr=False)
    cleanup: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @classmethod
    def for_case(cls, case: Case, subject_spec: str | None, status: str, reason: str | None) -> CaseRecord:
        """A record of ``case`` with its catalog fields filled in."""
        return cls(
            id=case.id,
            subject=case.subject,
            family=case.family,
            description=case.description,
            status=status,
            reason=reason,
            expected=dict(case.expect),
            subject_spec=subject_spec,
        )

    @classmethod
    def not_run(cls, case_id: str, reason: str, status: str = "skipped", **fields: Any) -> CaseRecord:
        """A record for a case that did not run (skipped, or never reported); ``fields`` fill the rest."""
        base: dict[str, Any] = {
            "subject": case_id.split("-", 1)[0],
            "family": "unknown",
            "description": "",
        }
        return cls(id=case_id, status=status, reason=reason, **(base | fields))

    @property
    def failed_criteria(self) -> list[dict[str, Any]]:
        """Criteria that failed and were not relaxed."""
        return [c for c in self.criteria if not c["passed"] and not c.get("relaxed")]

    def to_dict(self) -> dict[str, Any]:
        """The evidence writer's case record (trajectory and cleanup go to their own files)."""
        data = asdict(self)
        data.pop("trajectory")
        data.pop("cleanup")
        return data

    def to_json(self) -> str:
        """The record plus trajectory and cleanup, as shipped on a pytest report."""
        data = self.to_dict()
        return json.dumps(
            {"record": data, "trajectory": self.trajectory, "cleanup": self.cleanup}, default=str
        )

    def failure_message(self) -> str:
        """What a user reads in the terminal: the case, then each unmet criterion with its evidence."""
        lines = [f"case {self.id} {self.status}: {self.description}"]
        if self.reason and self.status != "failed":
            lines.append(f"  reason: {self.reason}")
        for c in self.criteria:
            if c["passed"]:
                continue
            tag = (
                f" [policy {c['policy']}{', relaxed' if c.get('relaxed') else ''}]" if c.get("policy") else ""
            )
            actual = json.dumps(c["actual"], default=str)[:600]
            lines.append(f"  - {c['id']}{tag}: {c['description']}")
            lines.append(f"      expected {json.dumps(c['expected'], default=str)}, observed {actual}")
        return "\n".join(lines)
