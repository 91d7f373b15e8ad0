"""The bundled fixture tasks as task rows, with their reference solutions.

``e2b_reward_tasks = pytest_e2b_env.catalog.tasks.bundled:reward_tasks`` validates the reward
tasks of ``fixtures/reward/tasks.json`` (both splits); each solution is the fixture candidate
``<task_id>_correct.py``. ``episode_tasks`` gives the repair tasks of ``fixtures/episode/*/``
with their ``repair.json`` commands as the solution.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_e2b_env.data import fixtures_dir


def reward_tasks() -> list[dict[str, Any]]:
    """Every bundled reward task with ``solution`` = its correct candidate's source."""
    root = fixtures_dir() / "reward"
    data = json.loads((root / "tasks.json").read_text(encoding="utf-8"))
    rows = []
    for split in ("train", "eval"):
        for task in data[split]:
            program = root / "candidates" / f"{task['task_id'].replace('-', '_')}_correct.py"
            rows.append({**task, "solution": program.read_text(encoding="utf-8")})
    return rows


def episode_tasks() -> list[dict[str, Any]]:
    """Every bundled repair task with ``solution`` = its ``repair.json`` commands."""
    rows = []
    for folder in sorted(p for p in (fixtures_dir() / "episode").iterdir() if (p / "task.json").is_file()):
        task = json.loads((folder / "task.json").read_text(encoding="utf-8"))
        repair = json.loads((folder / "repair.json").read_text(encoding="utf-8"))
        rows.append({**task, "solution": repair["commands"]})
    return rows
