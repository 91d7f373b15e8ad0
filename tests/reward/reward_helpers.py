"""Shared helpers of the reward tests: fixture paths, candidates, completions, tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = ROOT / "fixtures" / "reward" / "candidates"
TASKS = json.loads((ROOT / "fixtures" / "reward" / "tasks.json").read_text())


def program(name: str) -> str:
    """The source of a candidate program from fixtures/reward/candidates."""
    return (CANDIDATES / f"{name}.py").read_text()


def completion(source: str) -> list[dict[str, str]]:
    """A one-message conversation with ``source`` in a python fence."""
    return [{"role": "assistant", "content": f"```python\n{source}```"}]


def task(task_id: str) -> dict[str, Any]:
    """A task of either split by id."""
    return next(t for t in TASKS["train"] + TASKS["eval"] if t["task_id"] == task_id)


TOTAL = task("total-tokens")["test_cases"]
