"""The user's own tasks, validated as tasks: oracle, floor and determinism per task.

The catalog proves reward and episode code on our fixture tasks; these checks prove the user's
tasks through the user's own subject: the reference solution reaches the maximum on every case
(``oracle``), no no-op or shortcut program does (``floor``), the oracle's score is the same run
after run (``repeat``), and no expected output ever enters a sandbox. docs/tasks.md is the
user-facing description.
"""

from __future__ import annotations

from pytest_e2b_env.catalog.tasks.load import EpisodeTask, RewardTask, load_tasks, tasks_digest

__all__ = ["EpisodeTask", "RewardTask", "load_tasks", "tasks_digest"]
