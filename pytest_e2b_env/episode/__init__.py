"""Reference episode code: an OpenEnv repair environment on E2B sandboxes and its TRL client.

* :class:`ReportEpisode`: the TRL ``environment_factory`` class (tools ``terminal`` and ``submit``);
  :class:`MaskingReportEpisode` masks infrastructure failures as ``None`` rewards instead.
* :func:`create_app`: the OpenEnv app serving :class:`RepairEnvironment` on loopback.
* :func:`load_task`, :func:`task_row`, :func:`grade_output`: the bundled repair tasks and the grader.

Names resolve lazily: importing this package never imports openenv (about 3 s) or the e2b SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_e2b_env.episode.client import MaskingReportEpisode, ReportEpisode
    from pytest_e2b_env.episode.environment import RepairEnvironment
    from pytest_e2b_env.episode.server import LoopbackServer, create_app
    from pytest_e2b_env.episode.smoke import episode_smoke
    from pytest_e2b_env.episode.task import (
        RepairTask,
        grade_output,
        load_repair,
        load_task,
        parse_task,
        task_row,
    )

_LAZY = {
    "MaskingReportEpisode": "pytest_e2b_env.episode.client",
    "ReportEpisode": "pytest_e2b_env.episode.client",
    "RepairEnvironment": "pytest_e2b_env.episode.environment",
    "create_app": "pytest_e2b_env.episode.server",
    "LoopbackServer": "pytest_e2b_env.episode.server",
    "episode_smoke": "pytest_e2b_env.episode.smoke",
    "RepairTask": "pytest_e2b_env.episode.task",
    "grade_output": "pytest_e2b_env.episode.task",
    "load_repair": "pytest_e2b_env.episode.task",
    "load_task": "pytest_e2b_env.episode.task",
    "parse_task": "pytest_e2b_env.episode.task",
    "task_row": "pytest_e2b_env.episode.task",
}

__all__ = [
    "LoopbackServer",
    "MaskingReportEpisode",
    "RepairEnvironment",
    "RepairTask",
    "ReportEpisode",
    "create_app",
    "episode_smoke",
    "grade_output",
    "load_repair",
    "load_task",
    "parse_task",
    "task_row",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_e2b_env.episode' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
