"""Load the user's task rows from ``module:attr`` or a JSON / JSONL file, validated and bounded.

Reward rows are the dataset rows users train on: ``task_id``, ``prompt`` (chat messages),
``test_cases`` (``[{"input": "<json text>", "output": "<json text>"}]``), any other dataset
column, and an optional ``solution`` (the reference program's source). Episode rows are repair
tasks in the catalog's task schema (``id``, ``workdir``, ``files``, ``artifact``, ``command``,
``verification``...) plus an optional ``prompt`` and ``solution`` (the repair, as terminal
commands). Every problem is one :class:`ConfigError` naming the source, the row and the field.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_e2b_env.catalog.contract import import_spec
from pytest_e2b_env.errors import ConfigError

#: Bounds: a task source is data from outside; nothing it holds may grow without limit.
MAX_TASKS = 1000
MAX_CASES = 256
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_SOLUTION_COMMANDS = 64
_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
#: Columns the checks build themselves; every other column of a reward row reaches the subject.
_REWARD_OWN = ("task_id", "prompt", "test_cases", "solution")
_EPISODE_REQUIRED = ("id", "workdir", "files", "artifact", "command", "verification")
#: Keywords TRL passes itself: a dataset column of one of these names breaks TRL's reward call.
_TRL_KEYWORDS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")


@dataclass(frozen=True)
class RewardTask:
    """One reward row: the test cases the subject scores against, and the reference program."""

    task_id: str
    prompt: list[dict[str, Any]]
    test_cases: list[dict[str, str]]
    solution: str | None = None
    #: The row's other dataset columns, passed to the reward function as TRL passes them.
    columns: dict[str, Any] = field(default_factory=dict)

    kind = "reward"

    def as_row(self) -> dict[str, Any]:
        """The row as given (for the digest)."""
        row = {"task_id": self.task_id, "prompt": self.prompt, "test_cases": self.test_cases}
        return row | self.columns | ({"solution": self.solution} if self.solution is not None else {})


@dataclass(frozen=True)
class EpisodeTask:
    """One repair task: the task object ``reset`` gets, and the repair as terminal commands."""

    task_id: str
    task: dict[str, Any]
    prompt: list[dict[str, Any]] | None = None
    solution: list[str] | None = None

    kind = "episode"

    def as_row(self) -> dict[str, Any]:
        """The row as given (for the digest)."""
        row = dict(self.task)
        if self.prompt is not None:
            row["prompt"] = self.prompt
        if self.solution is not None:
            row["solution"] = self.solution
        return row


Task = RewardTask | EpisodeTask


def _bad(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where}: {message}")


def _messages(value: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(value, str):  # a plain-text prompt is one user message, as TRL's chat template sees it
        return [{"role": "user", "content": value}]
    ok = isinstance(value, list) and all(isinstance(m, Mapping) and "role" in m for m in value)
    if not ok:
        raise _bad(where, 'field \'prompt\' must be chat messages: [{"role": "user", "content": "..."}]')
    return [dict(m) for m in value]


def _reward_row(row: Mapping[str, Any], where: str) -> RewardTask:
    task_id = row.get("task_id")
    cases = row.get("test_cases")
    if not isinstance(cases, list) or not cases:
        raise _bad(where, 'field \'test_cases\' must be a non-empty list of {"input": ..., "output": ...}')
    if len(cases) > MAX_CASES:
        raise _bad(where, f"field 'test_cases' has {len(cases)} cases; at most {MAX_CASES} per task")
    for i, case in enumerate(cases):
        if not (
            isinstance(case, Mapping)
            and isinstance(case.get("input"), str)
            and isinstance(case.get("output"), str)
        ):
            raise _bad(
                where,
                f'test_cases[{i}] must be {{"input": "<json text>", "output": "<json text>"}} '
                f"(strings), got {str(case)[:120]!r}",
            )
    clash = sorted(set(row) & set(_TRL_KEYWORDS))
    if clash:
        raise _bad(
            where, f"column(s) {clash} clash with the keywords TRL passes a reward function; rename them"
        )
    solution = row.get("solution")
    if solution is not None and not (isinstance(solution, str) and solution.strip()):
        raise _bad(where, "field 'solution' must be the reference program's source text")
    return RewardTask(
        task_id=str(task_id),
        prompt=_messages(row.get("prompt", []), where),
        test_cases=[{"input": c["input"], "output": c["output"]} for c in cases],
        solution=solution,
        columns={k: v for k, v in row.items() if k not in _REWARD_OWN},
    )


def _episode_row(row: Mapping[str, Any], where: str) -> EpisodeTask:
    missing = [k for k in _EPISODE_REQUIRED if k not in row]
    if missing:
        raise _bad(where, f"missing field(s) {missing}; a repair task has {', '.join(_EPISODE_REQUIRED)}")
    files, verification = row.get("files"), row.get("verification")
    if not isinstance(files, Mapping) or not all(isinstance(v, str) for v in files.values()):
        raise _bad(where, "field 'files' must map file names to their text")
    if not isinstance(verification, Mapping) or "expected" not in verification:
        raise _bad(where, "field 'verification' must hold 'expected' (and optional 'files')")
    for key in ("workdir", "artifact", "command"):
        if not isinstance(row.get(key), str) or not row[key]:
            raise _bad(where, f"field {key!r} must be a non-empty string")
    solution = row.get("solution")
    if isinstance(solution, Mapping):  # a repair.json document: {"commands": [...]}
        solution = solution.get("commands")
    if solution is not None:
        ok = isinstance(solution, list) and all(isinstance(c, str) and c.strip() for c in solution)
        if not ok or not solution or len(solution) > MAX_SOLUTION_COMMANDS:
            raise _bad(
                where,
                f"field 'solution' must be 1-{MAX_SOLUTION_COMMANDS} terminal commands (strings), "
                'or {"commands": [...]}',
            )
    prompt = row.get("prompt")
    task = {k: v for k, v in row.items() if k not in ("prompt", "solution")}
    return EpisodeTask(
        task_id=str(row["id"]),
        task=json.loads(json.dumps(task)),
        prompt=_messages(prompt, where) if prompt is not None else None,
        solution=list(solution) if solution is not None else None,
    )


def _rows_of_file(path: Path, key: str) -> list[Any]:
    if not path.is_file():
        raise ConfigError(f"{key}: {str(path)!r} does not exist; give a .json or .jsonl task file")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"{key}: {path} is {size} bytes; task files are read up to {MAX_FILE_BYTES}")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    raise ConfigError(f"{key}: {path} line {n} is not JSON: {exc}") from None
        return rows
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{key}: {path} is not JSON: {exc}") from None
    if isinstance(data, Mapping):
        # A document of splits ({"train": [...], "eval": [...]}); keys starting with "_" are notes.
        return [row for k, v in data.items() if not k.startswith("_") and isinstance(v, list) for row in v]
    if isinstance(data, list):
        return data
    raise ConfigError(f"{key}: {path} must hold a list of task rows, or an object of lists (splits)")


def _rows_of_spec(spec: str, key: str, kind: str) -> list[Any]:
    value = import_spec(spec, key, kind)
    if callable(value):  # a zero-argument loader, e.g. one building rows from a dataset
        try:
            value = value()
        except Exception as exc:  # the user's loader may fail in any way
            raise ConfigError(f"{key}={spec!r}: calling it failed: {type(exc).__name__}: {exc}") from None
    if isinstance(value, Mapping | str | bytes) or not isinstance(value, Iterable):
        raise ConfigError(
            f"{key}={spec!r} must be a list (or iterable) of task rows, got {type(value).__name__}"
        )
    rows = []
    for row in value:
        rows.append(row)
        if len(rows) > MAX_TASKS:
            break
    return rows


def is_spec(value: str) -> bool:
    """``module:attr`` rather than a file path (a path ends in .json or .jsonl)."""
    return bool(_SPEC.match(value)) and not value.endswith((".json", ".jsonl"))


def load_tasks(value: str, kind: str, rootdir: Path | None = None) -> list[Task]:
    """The task rows of ``value`` (``module:attr``, or a path resolved against ``rootdir``), validated."""
    key = f"e2b_{kind}_tasks"
    value = value.strip()
    if is_spec(value):
        rows, source = _rows_of_spec(value, key, kind), f"{key}={value!r}"
    else:
        path = Path(value)
        if not path.is_absolute() and rootdir is not None:
            path = rootdir / path
        rows, source = _rows_of_file(path, key), str(path)
    if len(rows) > MAX_TASKS:
        raise ConfigError(f"{source}: more than {MAX_TASKS} tasks; validate a sample or split the file")
    if not rows:
        raise ConfigError(f"{source}: no task rows")
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    id_key = "task_id" if kind == "reward" else "id"
    for index, row in enumerate(rows):
        where = f"{source} row {index}"
        if not isinstance(row, Mapping):
            raise _bad(where, f"a task row is an object, got {type(row).__name__}")
        task_id = row.get(id_key)
        if not isinstance(task_id, str) or not _TASK_ID.match(task_id):
            raise _bad(
                where,
                f"field {id_key!r}={task_id!r} must be a name of letters, digits, '.', '_' or '-' "
                "(it names the pytest items)",
            )
        where = f"{source} task {task_id!r}"
        if task_id in seen:
            raise _bad(where, f"{id_key} {task_id!r} repeats row {seen[task_id]}; task ids must be unique")
        seen[task_id] = index
        tasks.append(_reward_row(row, where) if kind == "reward" else _episode_row(row, where))
    return tasks


def tasks_digest(tasks: Iterable[Task]) -> str:
    """A stable digest of the tasks' content (kind and row), for the run manifest."""
    digest = hashlib.sha256()
    for task in tasks:
        digest.update(task.kind.encode() + b"\0")
        digest.update(json.dumps(task.as_row(), sort_keys=True, default=str).encode() + b"\n")
    return digest.hexdigest()


def kind_of(source: str) -> str:
    """Which subject checks a task file: ``reward`` when its first row has ``test_cases``,
    ``episode`` when it has ``verification``; a ``module:attr`` source or any other row is a
    :class:`ConfigError` asking for ``--task-kind``."""
    if is_spec(source):
        raise ConfigError(
            f"--tasks {source!r}: say which subject checks them with --task-kind reward|episode"
        )
    text = Path(source).read_text(encoding="utf-8")
    first = (
        next((line for line in text.splitlines() if line.strip()), "") if source.endswith(".jsonl") else None
    )
    data = json.loads(first if first is not None else text)
    if isinstance(data, dict) and not ({"test_cases", "verification"} & set(data)):
        data = next((v for k, v in data.items() if not k.startswith("_") and isinstance(v, list)), [])
    row = data[0] if isinstance(data, list) and data else data
    if isinstance(row, dict) and "test_cases" in row:
        return "reward"
    if isinstance(row, dict) and "verification" in row:
        return "episode"
    raise ConfigError(
        f"--tasks {source!r}: the first row has neither 'test_cases' (reward) nor 'verification' (repair "
        "task); pass --task-kind"
    )
