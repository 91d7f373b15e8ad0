"""What training a user's own subject shares between its reward and episode kinds.

The subject is loaded as the catalog loads it (``load_subject``: the spec, the contract) and built
as the catalog builds it (:mod:`.user_reward`, :mod:`.user_episode`); every awaitable of the
subject runs on one event loop in a thread of its own (:class:`SubjectLoop`), as in a catalog
case. ``None`` rewards count against the masking budget (:func:`admit`). Rows come from the user's
tasks (``e2b_<kind>_tasks``); the last fifth (at least one) is the held-out split. A user's code
tags nothing with the run id, so cleanup is proven on every sandbox the target saw created.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from typing import TYPE_CHECKING, Any

from pytest_e2b_env.errors import CleanupError, ConfigError, InfrastructureError
from pytest_e2b_env.masking import MaskBudget
from pytest_e2b_env.training.project import Project

if TYPE_CHECKING:
    from pytest_e2b_env.targets import Target

#: Seconds a subject's factory, context entry or exit may take before the run fails.
CALL_TIMEOUT = 300.0
#: The share of the tasks held out (at least one task) for the before/after evaluation.
HELD_OUT_SHARE = 0.2


def split_tasks(tasks: list[Any], kind: str, source: str) -> tuple[list[Any], list[Any]]:
    """Train and held-out tasks: the last fifth (at least one) of the rows, in source order, is held out."""
    if len(tasks) < 2:
        raise ConfigError(
            f"{source}: {len(tasks)} {kind} task(s); training needs at least 2 (train + held-out): "
            "add rows (the last fifth of them is held out for evaluation)"
        )
    held = max(1, int(len(tasks) * HELD_OUT_SHARE))
    return tasks[:-held], tasks[-held:]


def load_project_tasks(project: Project) -> tuple[list[Any], str]:
    """The project's tasks of its kind (the bundled ones when it names none) and where they came from."""
    from pytest_e2b_env.catalog.tasks import load_tasks

    source = project.tasks or f"pytest_e2b_env.catalog.tasks.bundled:{project.kind}_tasks"
    return list(load_tasks(source, project.kind, project.rootdir)), source


def without_docstring(source: str) -> str:
    """A solution without its module docstring: the tiny model learns a shorter answer that does the same."""
    import ast

    try:
        body = ast.parse(source).body
    except (SyntaxError, ValueError):
        return source
    first = body[0] if body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        lines = source.splitlines()
        return "\n".join(lines[first.end_lineno or 0 :]).strip() or source
    return source


class SubjectLoop:
    """One event loop in a daemon thread: where the subject's awaitables run, start to end."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="e2b-train-subject", daemon=True)
        self._thread.start()

    def run(self, awaitable: Any, timeout: float | None = CALL_TIMEOUT) -> Any:
        """Wait for ``awaitable`` on the loop (plain values pass through)."""
        if not inspect.isawaitable(awaitable):
            return awaitable

        async def settle() -> Any:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(settle(), self.loop).result(timeout=timeout)

    def close(self) -> None:
        """Stop the loop once what it runs has ended."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self.loop.close()


def admit(budget: MaskBudget, policy: str, where: str, values: list[Any]) -> None:
    """Count ``None`` rewards (masked) against the budget; with ``raise`` the first one fails the run."""
    masked = [value is None for value in values]
    if policy == "raise" and any(masked):
        raise InfrastructureError(
            f"{where} returned None (unscorable) for {sum(masked)} completion(s) and "
            "--on-infrastructure is raise"
        )
    budget.admit(masked, where)


def check_created_gone(target: Target, attempts: int = 3, pause: float = 1.0) -> dict[str, Any]:
    """Every sandbox the target saw created is gone; kill the rest and raise :class:`CleanupError`.

    A user's code tags nothing with the run id, so the target's own record of creations is the list.
    """
    alive: list[str] = []
    for attempt in range(attempts):
        if attempt:
            time.sleep(pause)  # live E2B may list a just-killed sandbox for a moment
        alive_now = target.alive_ids()
        alive = [sid for sid in target.created_ids() if sid in alive_now]
        if not alive:
            return {"leaked": []}
    stuck = target.kill_all(alive)
    raise CleanupError(
        f"{len(alive)} sandbox(es) created during run {target.run_id} were still alive after the subject "
        f"closed ({len(stuck)} could not be killed); the subject leaks sandboxes",
        alive,
    )
