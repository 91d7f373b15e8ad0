"""Repair tasks: the task JSON schema, its documented defaults, the fixture loader and the grader.

Pure code: no sandbox, no network, no openenv import. The schema is the repair-task schema of
``docs/catalog.md`` exactly; ``limits`` is optional and defaults to the values documented there.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pytest_e2b_env.data import fixtures_dir
from pytest_e2b_env.errors import ConfigError

#: Where the bundled tasks live (``fixtures/episode/<id>/task.json``) in a source checkout.
FIXTURES = fixtures_dir() / "episode"


class Limits(BaseModel):
    """Deadlines and sizes of one episode; the defaults are the catalog's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command_seconds: Annotated[float, Field(gt=0, le=600)] = 10
    policy_seconds: Annotated[float, Field(gt=0, le=3600)] = 120
    verify_seconds: Annotated[float, Field(gt=0, le=600)] = 20
    artifact_bytes: Annotated[int, Field(gt=0, le=16 * 1024 * 1024)] = 65536


class Verification(BaseModel):
    """The hidden part of a task: it never enters the policy sandbox."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    files: dict[str, str]
    expected: dict[str, int]

    @field_validator("expected", mode="before")
    @classmethod
    def _integers_only(cls, value: Any) -> Any:
        # Checked before pydantic coerces True -> 1: the grader compares exact ints, so must the spec.
        for key, item in value.items() if isinstance(value, dict) else ():
            if type(item) is not int:
                raise ValueError(f"expected[{key!r}] = {item!r} is not an integer")
        return value


def _relative_name(name: str) -> str:
    norm = posixpath.normpath(name)
    if not name or name.startswith("/") or norm.startswith("..") or norm == ".":
        raise ValueError(f"file name {name!r} must be a relative path inside workdir, e.g. 'report.py'")
    return norm


class RepairTask(BaseModel):
    """One repair task as the dataset row carries it (``task`` column, JSON text or dict)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=128)
    workdir: str = "/home/user/work"
    files: dict[str, str]
    artifact: str
    command: str = Field(min_length=1)
    limits: Limits = Limits()
    verification: Verification

    @field_validator("workdir")
    @classmethod
    def _absolute_workdir(cls, value: str) -> str:
        if not value.startswith("/") or ".." in value.split("/"):
            raise ValueError(f"workdir {value!r} must be an absolute path, e.g. '/home/user/work'")
        return posixpath.normpath(value)

    @field_validator("artifact")
    @classmethod
    def _artifact_name(cls, value: str) -> str:
        return _relative_name(value)

    @field_validator("files")
    @classmethod
    def _file_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            _relative_name(name)
        return value

    @model_validator(mode="after")
    def _verification_names(self) -> RepairTask:
        for name in self.verification.files:
            _relative_name(name)
        if self.artifact in self.verification.files:
            raise ValueError(f"verification.files must not replace the artifact {self.artifact!r}")
        return self

    def path(self, name: str) -> str:
        """Absolute sandbox path of ``name`` under ``workdir``."""
        return posixpath.join(self.workdir, name)

    def to_json(self) -> str:
        """The task as JSON text, the form a dataset row carries."""
        return self.model_dump_json()


def parse_task(value: str | Mapping[str, Any] | RepairTask) -> RepairTask:
    """Validate a task given as JSON text, a dict or a :class:`RepairTask`.

    Raises :class:`ConfigError` naming the field and the fix.
    """
    if isinstance(value, RepairTask):
        return value
    try:
        data = json.loads(value) if isinstance(value, str) else dict(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"task is not JSON text or a dict ({type(exc).__name__}); pass the repair task JSON "
            "(pytest-e2b-env docs catalog), e.g. load_task('weekly-sales')"
        ) from None
    try:
        return RepairTask.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "task"
        task_id = data.get("id", "?") if isinstance(data, dict) else "?"
        raise ConfigError(
            f"task {task_id!r}: field {where!r}: {first['msg']}; "
            "see the repair-task schema (pytest-e2b-env docs catalog)"
        ) from None


def task_ids() -> list[str]:
    """Ids of the bundled tasks, sorted."""
    return sorted(p.parent.name for p in FIXTURES.glob("*/task.json"))


def load_task(task_id: str) -> dict[str, Any]:
    """The bundled task ``task_id`` as a dict (validated)."""
    path = FIXTURES / task_id / "task.json"
    if not path.is_file():
        raise ConfigError(f"no bundled task {task_id!r} at {path}; choose one of {task_ids()}")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    parse_task(data)
    return data


def load_repair(task_id: str) -> list[str]:
    """The scripted repair of a bundled task: terminal commands that fix the starter program."""
    path = FIXTURES / task_id / "repair.json"
    commands: list[str] = json.loads(path.read_text(encoding="utf-8"))["commands"]
    return commands


def task_prompt(task: RepairTask) -> str:
    """What the model is told: the visible files, the artifact and the command, nothing hidden."""
    names = ", ".join(sorted(task.files))
    return (
        f"Task {task.id}: the program {task.artifact} in {task.workdir} is buggy. Files: {names}. "
        f"It is run as `{task.command}` and must print a JSON object of integer totals. "
        "Use the terminal tool to inspect, run and edit files (each command is a fresh shell in the "
        f"work directory, killed after {task.limits.command_seconds:g} s), then call submit. Only "
        f"{task.artifact} is graded, on a different input."
    )


def task_row(task_id: str) -> dict[str, Any]:
    """A dataset row for TRL: ``{"prompt": [user message], "task": "<task JSON>"}``."""
    data = load_task(task_id)
    task = parse_task(data)
    return {"prompt": [{"role": "user", "content": task_prompt(task)}], "task": json.dumps(data)}


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _no_constants(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def grade_output(stdout: str | bytes, expected: Mapping[str, int]) -> float:
    """1.0 when ``stdout`` is exactly one JSON object equal to ``expected`` with integer values, else 0.0.

    Integers stay integers: ``true`` or ``15.0`` where ``15`` is expected fails; so do duplicate
    keys, NaN/Infinity, extra or missing keys, and anything that is not valid UTF-8 JSON.
    """
    if isinstance(stdout, bytes):
        try:
            stdout = stdout.decode("utf-8")
        except UnicodeDecodeError:
            return 0.0
    try:
        value = json.loads(stdout, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except (ValueError, RecursionError):
        return 0.0
    if not isinstance(value, dict) or set(value) != set(expected):
        return 0.0
    for key, want in expected.items():
        got = value[key]
        if type(got) is not int or got != want:
            return 0.0
    return 1.0
