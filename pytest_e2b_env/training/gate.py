"""The gate before training: a passing validation of exactly the code and tasks about to train.

An evidence bundle of ``pytest-e2b-env validate`` counts when its manifest names the same subject
with the same source digest (``subject_sources``), the same contract, the same catalog hash and
the same tasks digest, holds every catalog case of the subject's kind for its mode and a row for
every task, passed (complete, no failed case or task check) and still verifies (checksums).
Anything else refuses with what differs and the command that validates. Pure: no pytest, no torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.training.project import Project

#: A bundle directory with more run directories than this is read newest first up to it.
MAX_BUNDLES = 200


class GateRefused(ConfigError):
    """No passing validation of the code and tasks about to train; the message says what changed."""


@dataclass(frozen=True)
class Facts:
    """What is about to train, in the terms the bundle's manifest records."""

    kind: str
    subject: str
    source_sha256: str | None
    source_error: str | None
    contract: dict[str, Any]
    catalog_hash: str
    tasks_digest: str | None
    #: ids of this kind's tasks, each must have its checks in the bundle's tasks.json
    task_ids: list[str]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for ``validated_by`` in ``metrics.json``."""
        return {
            "subject": self.subject,
            "subject_sha256": self.source_sha256,
            "contract": self.contract,
            "catalog_hash": self.catalog_hash,
            "tasks_digest": self.tasks_digest,
        }


def facts_of(project: Project) -> Facts:
    """Digest the subject's sources, contract and tasks exactly as ``validate``'s manifest does."""
    from pytest_e2b_env.catalog.contract import load_subject
    from pytest_e2b_env.catalog.tasks import load_tasks, tasks_digest
    from pytest_e2b_env.evidence.runinfo import subject_source

    source = subject_source(project.subject)
    subject = load_subject(project.subject, project.kind, project.contract_spec)
    loaded: dict[str, list[Any]] = {
        kind: list(load_tasks(value, kind, project.rootdir)) for kind, value in project.task_sources.items()
    }
    everything = [task for kind in loaded.values() for task in kind]
    return Facts(
        kind=project.kind,
        subject=project.subject,
        source_sha256=source.get("sha256"),
        source_error=source.get("error"),
        # A JSON round trip: the manifest holds the contract as JSON.
        contract=json.loads(json.dumps(subject.contract.summary(), default=str)),
        catalog_hash=project.catalog_hash,
        tasks_digest=tasks_digest(everything) if everything else None,
        task_ids=[task.task_id for task in loaded.get(project.kind, [])],
    )


@dataclass(frozen=True)
class Validation:
    """The bundle the gate accepted."""

    run_id: str
    bundle: Path
    mode: str
    finished_at: str | None
    relaxed: list[str]
    facts: Facts

    def as_dict(self) -> dict[str, Any]:
        """``validated_by`` in ``metrics.json``."""
        return {
            "run_id": self.run_id,
            "bundle": str(self.bundle),
            "mode": self.mode,
            "finished_at": self.finished_at,
            "relaxed_policies": self.relaxed,
            **self.facts.as_dict(),
        }


def _manifests(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every bundle under ``root`` with its manifest, newest first (unreadable ones skipped)."""
    if not root.is_dir():
        return []
    found: list[tuple[str, Path, dict[str, Any]]] = []
    for path in root.iterdir():
        manifest_path = path / "run-manifest.json"
        if path.name.startswith(".") or not manifest_path.is_file():
            continue
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(manifest, dict) and manifest.get("kind") != "training":
            found.append((str(manifest.get("finished_at") or ""), path, manifest))
    found.sort(key=lambda item: item[0], reverse=True)
    return [(path, manifest) for _, path, manifest in found[:MAX_BUNDLES]]


def _short(value: Any) -> str:
    text = str(value)
    return text[:12] if len(text) == 64 else text[:80]


def differences(manifest: dict[str, Any], facts: Facts) -> list[str]:
    """What the bundle validated that differs from what is about to train (empty: the same)."""
    kind = facts.kind
    out: list[str] = []
    sources = (manifest.get("subject_sources") or {}).get(kind) or {}
    validated = sources.get("sha256")
    if facts.source_sha256 is None:
        out.append(f"the subject's sources cannot be digested ({facts.source_error}); nothing pins its code")
    elif validated != facts.source_sha256:
        where = sources.get("root") or sources.get("module_file") or "its package"
        out.append(
            f"subject source: the {kind} subject's files under {where} changed since validation "
            f"(sha256 {_short(validated)} validated, {_short(facts.source_sha256)} now)"
        )
    contract = (manifest.get("contracts") or {}).get(kind)
    if contract != facts.contract:
        out.append(f"contract: validated {json.dumps(contract)}, now {json.dumps(facts.contract)}")
    if manifest.get("catalog_hash") != facts.catalog_hash:
        out.append(
            f"catalog: the case catalog changed (hash {_short(manifest.get('catalog_hash'))} validated, "
            f"{_short(facts.catalog_hash)} now)"
        )
    if facts.tasks_digest is not None and manifest.get("tasks_digest") != facts.tasks_digest:
        if not manifest.get("tasks_digest"):
            out.append("tasks: the validation ran no task checks (e2b_<kind>_tasks was not set then)")
        else:
            out.append(
                f"tasks: the task rows changed since validation (digest "
                f"{_short(manifest.get('tasks_digest'))} validated, {_short(facts.tasks_digest)} now)"
            )
    elif facts.tasks_digest is None and manifest.get("tasks_digest"):
        out.append("tasks: the validation checked task rows the config no longer names")
    return out


def _tasks_seen(bundle: Path, kind: str) -> dict[str, set[str]]:
    try:
        doc = json.loads((bundle / "tasks.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {
        str(task.get("task_id")): set(task.get("checks") or {})
        for task in doc.get("tasks") or []
        if isinstance(task, dict) and task.get("kind") == kind
    }


def failures(bundle: Path, manifest: dict[str, Any], project: Project, facts: Facts) -> list[str]:
    """Why a bundle of the same code is not a passing validation of it (empty: it is)."""
    from pytest_e2b_env.catalog.tasks.checks import CHECKS
    from pytest_e2b_env.evidence import verify_bundle

    out: list[str] = []
    if manifest.get("interrupted"):
        out.append("the validation was interrupted (Ctrl-C)")
    if not manifest.get("complete"):
        problems = manifest.get("problems") or []
        out.append(f"the bundle is incomplete ({'; '.join(map(str, problems[:2])) or 'no reason given'})")
    coverage = manifest.get("coverage") or {}
    counts = coverage.get("counts") or {}
    if not coverage.get("passed"):
        bad = {s: counts.get(s) for s in ("failed", "error", "missing") if counts.get(s)}
        out.append(f"the catalog did not pass ({bad or 'see its index.html'})")
    mode = str(manifest.get("mode") or "offline")
    wanted = project.case_ids.get(mode, [])
    try:
        coverage_doc = json.loads((bundle / "coverage.json").read_text(encoding="utf-8"))
        present = {str(entry.get("id")) for entry in coverage_doc.get("cases") or []}
    except (OSError, ValueError, AttributeError):
        present = set()
    missing = [case_id for case_id in wanted if case_id not in present]
    if missing:
        out.append(
            f"{len(missing)} of the {len(wanted)} {facts.kind} cases did not run "
            f"(e.g. {', '.join(missing[:3])}): a validation narrowed with -k or --tasks is not the "
            "whole catalog"
        )
    tasks = manifest.get("tasks") or {}
    if facts.task_ids:
        if not tasks.get("passed"):
            out.append(f"a task check failed ({tasks.get('counts')}); see the bundle's tasks.json")
        seen = _tasks_seen(bundle, facts.kind)
        unchecked = [t for t in facts.task_ids if not set(CHECKS) <= seen.get(t, set())]
        if unchecked:
            out.append(f"task(s) {', '.join(unchecked[:3])} were not checked (oracle, floor, repeat)")
    if not out:
        problems = verify_bundle(bundle)
        if problems:
            out.append(f"the bundle does not verify: {problems[0]}")
    return out


def find_validation(project: Project, facts: Facts, fix: str | None = None) -> Validation:
    """The newest passing validation of exactly ``facts``; :class:`GateRefused` says why there is none.

    ``fix``: what the refusal tells the user to do (default: run ``validate``, or ``--validate-first``).
    """
    bundles = [(p, m) for p, m in _manifests(project.evidence) if (m.get("subjects") or {}).get(facts.kind)]
    same_subject = [(p, m) for p, m in bundles if m["subjects"][facts.kind] == facts.subject]
    for path, manifest in same_subject:
        if differences(manifest, facts):
            continue
        # The newest validation of exactly this code decides: a later failure is not outvoted by an
        # older pass (it may be the flakiness the catalog exists to find).
        if failures(path, manifest, project, facts):
            raise GateRefused(refusal(project, facts, [(path, manifest)], fix))
        return Validation(
            run_id=str(manifest.get("run_id") or path.name),
            bundle=path,
            mode=str(manifest.get("mode")),
            finished_at=manifest.get("finished_at"),
            relaxed=[str(r) for r in manifest.get("relaxed_policies") or []],
            facts=facts,
        )
    raise GateRefused(refusal(project, facts, same_subject, fix))


def refusal(
    project: Project, facts: Facts, same_subject: list[tuple[Path, dict[str, Any]]], fix: str | None = None
) -> str:
    """The message: which validation came closest, what differs or failed, and what to run."""
    kind = facts.kind
    fix = fix or (
        f"validate it in {project.rootdir}: `{project.validate_command()}`, then train again; "
        "or pass --validate-first to validate and train in one go"
    )
    if not same_subject:
        return (
            f"no evidence bundle in {project.evidence} validates the {kind} subject {facts.subject!r}; "
            f"training is allowed only on validated code. {fix}"
        )
    path, manifest = same_subject[0]
    why = differences(manifest, facts) or failures(path, manifest, project, facts)
    run = manifest.get("run_id") or path.name
    return (
        f"the newest validation of the {kind} subject {facts.subject!r} (run {run}, {path}) does not "
        f"cover what would train: {'; '.join(why)}. {fix}"
    )
