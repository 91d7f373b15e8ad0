"""``train`` in a user's project: read the pytest config ``validate`` reads, then pass the gate.

The project is read through pytest itself (the project's ini, conftest hooks adding cases,
``pythonpath``), with the subjects decided exactly as ``validate`` decides them
(:class:`~pytest_e2b_env.adapter.validate_subjects.ValidateSubjects`: flags, else ini keys, else the
bundled reference code). No session runs: nothing is collected, no target starts.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.training.project import Project


def read_project(mode: str | None, named: dict[str, str | None]) -> tuple[str, Project | None]:
    """The kind to train and the project's subject and tasks of it (None: the bundled reference code).

    ``mode`` None: the reward subject when one is configured, else the episode. A usage problem
    (a bad ini value, no subject of the asked kind) is a :class:`ConfigError` naming it.
    """
    import pytest
    from _pytest.config import _prepareconfig

    from pytest_e2b_env.adapter.keys import runtime_key
    from pytest_e2b_env.adapter.validate_subjects import REFERENCE, ValidateSubjects

    # Only the plugin's settings are needed: no cache, no collection, no session.
    args = ["-p", "no:cacheprovider", "-p", "no:warnings", "--e2b-catalog-only"]
    # The project's plugins warn about their own config as validate's run shows them; here those
    # warnings would only repeat before training.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            config = _prepareconfig(args, plugins=[ValidateSubjects(named, "all")])
        except pytest.UsageError as exc:
            raise ConfigError(str(exc)) from None
        try:
            config._do_configure()
        except pytest.UsageError as exc:
            config._ensure_unconfigure()
            raise ConfigError(str(exc)) from None
    try:
        if runtime_key not in config.stash:
            return mode or "reward", None
        runtime = config.stash[runtime_key]
        settings = runtime.settings
        kind = mode or ("reward" if settings.reward_subject else "episode")
        spec = settings.subject_for(kind)
        where = config.inipath or "your pytest config"
        if not spec:
            raise ConfigError(
                f"--mode {kind}: no {kind} subject is set; name one with --{kind}-subject MODULE:ATTR "
                f"or set e2b_{kind}_subject in {where}"
            )
        # In validate's order (reward first): the manifest's tasks digest covers every configured kind.
        given = {"reward": settings.reward_tasks, "episode": settings.episode_tasks}
        sources = {k: str(v) for k, v in given.items() if v}
        if spec == REFERENCE[kind] and kind not in sources and not named.get(kind):
            return kind, None  # nothing of the user's: the reference code trains as it always did
        cases = runtime.cases(config)
        from pytest_e2b_env.catalog.loader import catalog_hash

        validate_args = ["--subject", kind]
        if named.get(kind):
            validate_args += [f"--{kind}-subject", str(named[kind])]
        pythonpath = [str(Path(p).resolve()) for p in config.getini("pythonpath") or []]
        project = Project(
            kind=kind,
            subject=spec,
            contract_spec=settings.contract_for(kind),
            tasks=sources.get(kind),
            task_sources=sources,
            rootdir=Path(config.rootpath),
            inifile=Path(config.inipath) if config.inipath else None,
            evidence=Path(settings.evidence),
            catalog_hash=catalog_hash(cases),
            case_ids={
                mode_: [c.id for c in cases if c.subject == kind and mode_ in c.modes]
                for mode_ in ("offline", "live")
            },
            validate_args=validate_args,
            pythonpath=pythonpath,
        )
        return kind, project
    finally:
        config._ensure_unconfigure()


def use_pythonpath(project: Project) -> None:
    """Make the subject importable here as pytest made it importable for ``validate``."""
    for entry in reversed(project.pythonpath):
        if entry not in sys.path:
            sys.path.insert(0, entry)


def run_validation(project: Project) -> tuple[int, str]:
    """``pytest-e2b-env validate`` (offline) of exactly what would train, in the project; (exit, run id)."""
    run_id = f"validate-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
    command = [
        sys.executable,
        "-m",
        "pytest_e2b_env.cli",
        "validate",
        *project.validate_args,
        "--run-id",
        run_id,
    ]
    print(f"[validate] {' '.join(['pytest-e2b-env', *command[3:]])}", flush=True)
    done = subprocess.run(command, cwd=project.rootdir, check=False)
    return done.returncode, run_id


def gate(project: Project, validate_first: bool, unvalidated: str | None) -> dict[str, Any]:
    """``validated_by`` for ``metrics.json``; :class:`~pytest_e2b_env.training.gate.GateRefused` if none."""
    from pytest_e2b_env.training.gate import GateRefused, facts_of, find_validation

    use_pythonpath(project)
    facts = facts_of(project)
    if unvalidated is not None:
        try:
            found: dict[str, Any] | None = find_validation(project, facts).as_dict()
        except GateRefused as exc:
            found = {"refused": str(exc)}
        return {"override": unvalidated, "facts": facts.as_dict(), "validation": found}
    if validate_first:
        status, run_id = run_validation(project)
        bundle = project.evidence / run_id
        fix = f"fix what {bundle / 'index.html'} shows, then run again"
        try:
            validation = find_validation(project, facts, fix)
        except GateRefused as exc:
            raise GateRefused(f"--validate-first: validate exited {status} (run {run_id}); {exc}") from None
        if status != 0 or validation.run_id != run_id:  # an older pass never stands in for this run
            raise GateRefused(
                f"--validate-first: validate exited {status} (run {run_id}) and left no passing bundle "
                f"of its own in {project.evidence}; its output above says why"
            )
        return validation.as_dict()
    return find_validation(project, facts).as_dict()
