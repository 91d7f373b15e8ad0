"""The gate before training: only a passing validation of the same subject, contract, catalog and tasks.

Bundles are written by the real ``BundleWriter`` with the manifest ``validate`` writes (subject source
digest, contract, catalog hash, tasks digest); the gate reads them as it reads a real run's. No
training here: these are fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_e2b_env.catalog.loader import catalog_hash, load_cases
from pytest_e2b_env.catalog.tasks import load_tasks, tasks_digest
from pytest_e2b_env.evidence import BundleWriter
from pytest_e2b_env.evidence.runinfo import subject_source
from pytest_e2b_env.training.gate import GateRefused, facts_of, find_validation
from pytest_e2b_env.training.project import Project

ROOT = Path(__file__).resolve().parents[2]
SUBJECT = """
def code_reward(completions, verification_info, **kwargs):
    return [0.0 for _ in completions]


def make_reward():
    return code_reward


make_reward.e2b_contract = {"columns": "verification_info"}
"""
ROWS = [
    {"task_id": f"t{n}", "prompt": f"print {n}", "test_cases": [{"input": "{}", "output": str(n)}]}
    for n in range(3)
]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Project:
    """A user project: a reward module (named per test: imports are cached), a task file, the catalog."""
    module = f"gate_reward_{request.node.name.replace('-', '_').replace('[', '_').replace(']', '')}"
    (tmp_path / f"{module}.py").write_text(SUBJECT, encoding="utf-8")
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    cases = load_cases([ROOT / "cases"])
    return Project(
        kind="reward",
        subject=f"{module}:make_reward",
        contract_spec=None,
        tasks=str(tmp_path / "tasks.jsonl"),
        task_sources={"reward": str(tmp_path / "tasks.jsonl")},
        rootdir=tmp_path,
        inifile=None,
        evidence=tmp_path / "e2b-evidence",
        catalog_hash=catalog_hash(cases),
        case_ids={
            m: [c.id for c in cases if c.subject == "reward" and m in c.modes] for m in ("offline", "live")
        },
        validate_args=["--subject", "reward"],
    )


def validate_bundle(project: Project, run_id: str, failed: str | None = None, skip: int = 0) -> Path:
    """A bundle as ``validate`` writes it for ``project`` now: every case passed, except ``failed``."""
    tasks = load_tasks(str(project.tasks), "reward", project.rootdir)
    from pytest_e2b_env.catalog.contract import load_subject

    contract = load_subject(project.subject, "reward").contract.summary()
    manifest: dict[str, Any] = {
        "mode": "offline",
        "catalog_hash": project.catalog_hash,
        "subjects": {"reward": project.subject, "episode": None},
        "subject_sources": {"reward": subject_source(project.subject)},
        "contracts": {"reward": contract},
        "relaxed_policies": [],
        "tasks_digest": tasks_digest(tasks),
    }
    writer = BundleWriter(project.evidence, run_id, manifest)
    ids = project.case_ids["offline"][skip:]
    for case_id in ids:
        status = "failed" if case_id == failed else "passed"
        writer.add_case({"id": case_id, "subject": "reward", "family": "f", "status": status, "reason": None})
    writer.add_tasks(
        [
            {"task_id": t.task_id, "kind": "reward", "check": check, "status": "passed", "details": {}}
            for t in tasks
            for check in ("oracle", "floor", "repeat")
        ]
    )
    return writer.finish(ids)


def test_no_bundle_is_refused_naming_the_command(project: Project) -> None:
    """Without any validation the gate refuses, naming the subject and the validate command."""
    with pytest.raises(GateRefused) as info:
        find_validation(project, facts_of(project))
    message = str(info.value)
    assert (
        f"no evidence bundle in {project.evidence} validates the reward subject {project.subject!r}"
        in message
    )
    assert "`pytest-e2b-env validate --subject reward`" in message
    assert "--validate-first" in message


def test_a_passing_validation_of_the_same_code_is_found(project: Project) -> None:
    """A passing bundle with equal digests is the validation the run relies on."""
    bundle = validate_bundle(project, "validate-ok")
    found = find_validation(project, facts_of(project)).as_dict()
    assert found["run_id"] == "validate-ok"
    assert found["bundle"] == str(bundle)
    assert found["subject_sha256"] == subject_source(project.subject)["sha256"]
    assert found["catalog_hash"] == project.catalog_hash
    assert found["contract"] == {"source": f"{project.subject} e2b_contract", "columns": "verification_info"}


def test_a_failing_validation_is_refused(project: Project) -> None:
    """A bundle of the same code whose catalog failed does not open the gate."""
    first = project.case_ids["offline"][0]
    validate_bundle(project, "validate-failed", failed=first)
    with pytest.raises(GateRefused, match=r"validate-failed.*the catalog did not pass \(\{'failed': 1\}\)"):
        find_validation(project, facts_of(project))


def test_a_newer_failure_of_the_same_code_outweighs_an_older_pass(project: Project) -> None:
    """The newest validation of exactly this code decides."""
    validate_bundle(project, "validate-a-ok")
    validate_bundle(project, "validate-b-failed", failed=project.case_ids["offline"][0])
    with pytest.raises(GateRefused, match="validate-b-failed"):
        find_validation(project, facts_of(project))


def test_a_narrowed_validation_is_refused(project: Project) -> None:
    """A validation that ran only some of the kind's cases (-k) is not the whole catalog."""
    validate_bundle(project, "validate-narrow", skip=5)
    with pytest.raises(GateRefused, match=r"5 of the \d+ reward cases did not run"):
        find_validation(project, facts_of(project))


def test_subject_source_changed_after_validation_is_refused(project: Project) -> None:
    """Editing the subject's file after validation closes the gate, naming the digests."""
    validate_bundle(project, "validate-ok")
    module = project.subject.partition(":")[0]
    path = project.rootdir / f"{module}.py"
    path.write_text(path.read_text() + "\n# tuned after validation\n")
    with pytest.raises(GateRefused, match=r"subject source: the reward subject's files under .* changed"):
        find_validation(project, facts_of(project))


def test_task_file_changed_after_validation_is_refused(project: Project) -> None:
    """Editing a task row after validation closes the gate."""
    validate_bundle(project, "validate-ok")
    rows = [*ROWS[:-1], {**ROWS[-1], "test_cases": [{"input": "{}", "output": "99"}]}]
    Path(str(project.tasks)).write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(GateRefused, match="tasks: the task rows changed since validation"):
        find_validation(project, facts_of(project))


def test_a_tampered_bundle_is_refused(project: Project) -> None:
    """A bundle whose files no longer match their checksums proves nothing."""
    bundle = validate_bundle(project, "validate-ok")
    (bundle / "index.html").write_text("<p>all green</p>")
    with pytest.raises(GateRefused, match="the bundle does not verify"):
        find_validation(project, facts_of(project))


def _project_dir(tmp_path: Path) -> Path:
    (tmp_path / "my_reward.py").write_text(SUBJECT, encoding="utf-8")
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\npythonpath = .\n"
        "e2b_reward_subject = my_reward:make_reward\ne2b_reward_tasks = tasks.jsonl\n"
    )
    return tmp_path


def _train(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "E2B_API_KEY"}
    command = [sys.executable, "-m", "pytest_e2b_env.cli", "train", "--tiny", "--offline", "--cpu", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_train_in_an_unvalidated_project_refuses_before_anything_loads(tmp_path: Path) -> None:
    """`train` in a user's project without a validation exits 2 with the refusal, nothing written."""
    project = _project_dir(tmp_path)
    done = _train(project, "--output-dir", "out")
    assert done.returncode == 2, done.stderr
    assert "train.py: refused: no evidence bundle in" in done.stderr
    assert "validates the reward subject 'my_reward:make_reward'" in done.stderr
    assert "`pytest-e2b-env validate --subject reward`" in done.stderr
    assert not (project / "out").exists()


def test_train_names_a_subject_flag_in_the_validate_command(tmp_path: Path) -> None:
    """A subject given on the command line is the one validated: the command says so."""
    project = _project_dir(tmp_path)
    (project / "other.py").write_text(SUBJECT, encoding="utf-8")
    done = _train(project, "--reward-subject", "other:make_reward", "--output-dir", "out")
    assert done.returncode == 2, done.stderr
    assert "`pytest-e2b-env validate --subject reward --reward-subject other:make_reward`" in done.stderr


def test_train_asking_for_a_kind_the_project_lacks_is_a_usage_error(tmp_path: Path) -> None:
    """--mode episode in a project with only a reward subject names the flag and the ini key."""
    project = _project_dir(tmp_path)
    done = _train(project, "--mode", "episode")
    assert done.returncode == 2
    assert "--mode episode: no episode subject is set; name one with --episode-subject" in done.stderr


def test_an_override_is_recorded_with_the_digests_that_trained(project: Project) -> None:
    """--unvalidated trains unvalidated; validated_by keeps the reason, the digests and the refusal."""
    from pytest_e2b_env.cli.train_project import gate

    recorded = gate(project, validate_first=False, unvalidated="rehearsal on a scratch copy")
    assert recorded["override"] == "rehearsal on a scratch copy"
    assert recorded["facts"]["subject"] == project.subject
    assert recorded["facts"]["subject_sha256"] == subject_source(project.subject)["sha256"]
    assert recorded["validation"]["refused"].startswith("no evidence bundle in")


def test_an_override_still_names_a_matching_validation(project: Project) -> None:
    """With a passing validation present, the override record names it too."""
    from pytest_e2b_env.cli.train_project import gate

    validate_bundle(project, "validate-ok")
    recorded = gate(project, validate_first=False, unvalidated="why not")
    assert recorded["validation"]["run_id"] == "validate-ok"
