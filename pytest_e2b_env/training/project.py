"""The user's project as training sees it: the subject, contract, tasks and catalog ``validate`` ran.

Pure data. :mod:`pytest_e2b_env.cli.train_project` reads it from the same pytest config that
``pytest-e2b-env validate`` reads (flags override the ini keys), so the gate
(:mod:`~pytest_e2b_env.training.gate`) compares what is about to train with what was validated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Project:
    """One kind's subject and tasks in the user's pytest project, and where its evidence goes."""

    kind: str
    #: ``module:attr`` of the subject (the bundled reference code when the config names none)
    subject: str
    #: the ini-named contract dict (``e2b_<kind>_contract``), if any
    contract_spec: str | None
    #: ``e2b_<kind>_tasks`` (``module:attr`` or an absolute path), None: the bundled tasks
    tasks: str | None
    #: every configured kind's task source: the manifest's ``tasks_digest`` covers them all
    task_sources: dict[str, str]
    rootdir: Path
    inifile: Path | None
    #: the evidence root ``validate`` writes to (``e2b_evidence``, default ``e2b-evidence``)
    evidence: Path
    catalog_hash: str
    #: ``mode -> case ids`` of this kind's catalog cases (what a whole validation must hold)
    case_ids: dict[str, list[str]]
    #: the ``validate`` command line that validates exactly this (subject flags included)
    validate_args: list[str]
    #: the ``pythonpath`` ini entries (absolute): where the subject imports from
    pythonpath: list[str] = field(default_factory=list)

    def validate_command(self) -> str:
        """The command to run in the project to validate what would train."""
        return " ".join(["pytest-e2b-env", "validate", *self.validate_args])

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready description for ``metrics.json``."""
        return {
            "kind": self.kind,
            "subject": self.subject,
            "contract_spec": self.contract_spec,
            "tasks": self.tasks,
            "rootdir": str(self.rootdir),
            "inifile": str(self.inifile) if self.inifile else None,
            "evidence": str(self.evidence),
            "catalog_hash": self.catalog_hash,
        }
