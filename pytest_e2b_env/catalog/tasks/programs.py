"""The floor: no-op and shortcut programs a sound task never scores at the maximum.

A verifier that accepts any of these (an empty answer, ``{}``, the input echoed back, a
constant, the expected output of a different task, a program that exits 0 with nothing) rewards
a policy for not solving the task. Reward shortcuts are whole programs (fenced like a model's
answer); episode shortcuts are artifact contents submitted in place of a repair.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_e2b_env.catalog.tasks.load import EpisodeTask, RewardTask


@dataclass(frozen=True)
class Shortcut:
    """One floor program: a name for the report, what it does, and its text (``None``: no change)."""

    name: str
    does: str
    text: str | None


def _printing(text: str) -> str:
    return f"import sys\nsys.stdout.write({text!r} + '\\n')\n"


def most_common_output(outputs: Sequence[str]) -> str:
    """The most frequent expected output (the longest among equals): the strongest constant."""
    counts = Counter(outputs)
    return max(outputs, key=lambda o: (counts[o], len(o)))


def _other(task_id: str, others: Sequence[Any]) -> Any | None:
    """The next task after ``task_id`` (wrapping), or None when there is no other task."""
    ids = [t.task_id for t in others]
    if len(ids) < 2 or task_id not in ids:
        return next((t for t in others if t.task_id != task_id), None)
    return others[(ids.index(task_id) + 1) % len(ids)]


def reward_shortcuts(task: RewardTask, others: Sequence[RewardTask]) -> list[Shortcut]:
    """The reward floor for ``task``; ``others`` is every task of the run (for another's output)."""
    common = most_common_output([c["output"] for c in task.test_cases])
    programs = [
        Shortcut("empty-output", "reads its input and prints nothing", "import sys\nsys.stdin.read()\n"),
        Shortcut("empty-object", "prints {}", _printing("{}")),
        Shortcut("echo-input", "prints its input back", "import sys\nsys.stdout.write(sys.stdin.read())\n"),
        Shortcut("constant-zero", "prints 0", _printing("0")),
        Shortcut("most-common-output", "prints the task's most frequent expected output", _printing(common)),
        Shortcut("exit-zero", "exits 0 without reading or printing anything", "pass\n"),
    ]
    other = _other(task.task_id, others)
    if other is not None:
        theirs = most_common_output([c["output"] for c in other.test_cases])
        programs.append(
            Shortcut(
                "other-task-output", f"prints an expected output of task {other.task_id!r}", _printing(theirs)
            )
        )
    return programs


def interpreter(command: str) -> str | None:
    """``python`` or ``sh`` when the task's command runs the artifact with one of them, else None."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    first = words[0].rsplit("/", 1)[-1] if words else ""
    if first.startswith("python"):
        return "python"
    if first in ("sh", "bash", "dash"):
        return "sh"
    return None


def _artifact_printing(language: str, text: str) -> str:
    return _printing(text) if language == "python" else f"printf '%s\\n' {shlex.quote(text)}\n"


def episode_shortcuts(task: EpisodeTask, others: Sequence[EpisodeTask]) -> tuple[list[Shortcut], str | None]:
    """The episode floor for ``task`` and a note on the programs the task's command cannot run."""
    programs = [
        Shortcut("unchanged", "submits the artifact as the task ships it, without a repair", None),
        Shortcut("exit-zero", "an empty artifact: exits 0 and prints nothing", ""),
    ]
    language = interpreter(str(task.task["command"]))
    if language is None:
        return programs, (
            f"the task's command {task.task['command']!r} runs neither python nor sh: only the "
            "unchanged and empty artifacts were tried"
        )
    programs += [
        Shortcut("empty-object", "prints {}", _artifact_printing(language, "{}")),
        Shortcut("constant-zero", "prints 0", _artifact_printing(language, "0")),
    ]
    other = _other(task.task_id, others)
    if other is not None:
        theirs = json.dumps(other.task["verification"]["expected"])
        programs.append(
            Shortcut(
                "other-task-output",
                f"prints the expected output of task {other.task_id!r}",
                _artifact_printing(language, theirs),
            )
        )
    return programs, None
