"""The user's reward function as TRL gets it, built and closed as the catalog does.

A reward factory's result may be awaitable, a (sync or async) context manager yielding the
function, or the function itself (closed with its ``close`` when it has one); an async function
runs on the subject's own loop, where its context was entered. TRL gets a function of the same
name and sync/async nature that also counts masked completions (``None``) against the budget.
Rows are the user's reward rows shaped as the task checks shape them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.masking import MaskBudget
from pytest_e2b_env.training.project import Project
from pytest_e2b_env.training.timing import StageClock, timed
from pytest_e2b_env.training.tiny import Example
from pytest_e2b_env.training.user import (
    SubjectLoop,
    admit,
    load_project_tasks,
    split_tasks,
    without_docstring,
)

if TYPE_CHECKING:
    from pytest_e2b_env.targets import Target


class UserRewardSubject:
    """The user's reward function, built and closed as the catalog does, on the user's task rows."""

    kind = "reward"

    def __init__(self, settings: Any, target: Target, clock: StageClock, project: Project) -> None:
        from pytest_e2b_env.catalog.contract import load_subject
        from pytest_e2b_env.catalog.execute import context_kind, reward_closer
        from pytest_e2b_env.catalog.trl import is_async_callable

        self.project = project
        self.subject = load_subject(project.subject, "reward", project.contract_spec)
        tasks, self.source = load_project_tasks(project)
        self.train_tasks, self.eval_tasks = split_tasks(tasks, "reward", self.source)
        self.budget = MaskBudget()
        self._policy = settings.on_infrastructure
        self.calls = 0
        self.loop = SubjectLoop()
        self._made = self.loop.run(self.subject.factory())
        self._context = context_kind(self._made)
        fn: Any = self._made
        if self._context == "async":
            fn = self.loop.run(self._made.__aenter__())
        elif self._context == "sync":
            fn = self._made.__enter__()
        if not callable(fn):
            raise ConfigError(
                f"e2b_reward_subject={project.subject!r} gave {type(fn).__name__}, not a function"
            )
        self.fn = fn
        self._close = None if self._context else reward_closer(fn)
        self._reward = timed(self._wrap(fn, is_async_callable(fn)), clock)

    def _wrap(self, fn: Any, is_async: bool) -> Callable[..., Any]:
        """TRL's view of ``fn``: same name and nature; the async one runs on the subject's loop."""
        where = f"reward subject {self.project.subject}"
        name = getattr(fn, "__name__", type(fn).__name__)

        def check(values: Any) -> Any:
            self.calls += 1
            admit(self.budget, self._policy, where, list(values or []))
            return values

        if is_async:

            async def call_async(**kwargs: Any) -> Any:
                async def inner() -> Any:
                    return await fn(**kwargs)

                coroutine: Coroutine[Any, Any, Any] = inner()
                future = asyncio.run_coroutine_threadsafe(coroutine, self.loop.loop)
                return check(await asyncio.wrap_future(future))

            wrapper: Callable[..., Any] = call_async
        else:

            def call_sync(**kwargs: Any) -> Any:
                return check(fn(**kwargs))

            wrapper = call_sync
        wrapper.__name__ = wrapper.__qualname__ = name
        wrapper.__doc__ = getattr(fn, "__doc__", None)
        return wrapper

    def _row(self, task: Any) -> dict[str, Any]:
        """A dataset row as the task checks shape it: prompt, the row's columns, the declared test column."""
        from pytest_e2b_env.catalog.trl import columns_for

        columns = columns_for(self.subject.contract, [task.test_cases])
        return {"prompt": task.prompt, **task.columns, **{k: v[0] for k, v in columns.items()}}

    def train_rows(self) -> list[dict[str, Any]]:
        """Dataset rows of the train tasks."""
        return [self._row(t) for t in self.train_tasks]

    def eval_rows(self) -> list[dict[str, Any]]:
        """Dataset rows of the held-out tasks."""
        return [self._row(t) for t in self.eval_tasks]

    def trainer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``GRPOTrainer``."""
        return {"reward_funcs": [self._reward]}

    def warmup_examples(self) -> list[Example]:
        """Each train prompt answered by its reference ``solution`` (weight 2) and by ``print({})`` (1)."""
        from pytest_e2b_env.catalog.drive_reward import fence

        examples: list[Example] = []
        self._weights: list[float] = []
        for task in self.train_tasks:
            if task.solution is None:
                continue
            for code, weight in ((without_docstring(task.solution), 2.0), ("print('{}')", 1.0)):
                answer = {"role": "assistant", "content": fence(code).strip()}
                examples.append(([*task.prompt, answer], None))
                self._weights.append(weight)
        if not examples:
            raise ConfigError(
                f"{self.source}: no train task has a 'solution'; --tiny warms the model up on the "
                "reference programs, so give at least one train row its 'solution' (or pass --model)"
            )
        return examples

    def tokenizer_examples(self) -> list[Example]:
        """The held-out prompts, so the tiny tokenizer encodes them compactly."""
        return [(task.prompt, None) for task in self.eval_tasks]

    def warmup_weights(self) -> list[float] | None:
        """Reference programs weigh twice a wrong answer: sampled groups then mostly have spread."""
        return list(getattr(self, "_weights", [])) or None

    def preflight(self, progress: Callable[[str], None]) -> dict[str, Any] | None:
        """Nothing: the validation's task checks ran each solution (oracle) and the floor."""
        return None

    def attach(self, trainer: Any) -> None:
        """Nothing to remember: the subject's loop is its own."""

    def masked(self) -> int:
        """Completions masked so far (the function returned ``None``)."""
        return self.budget.masked

    def metrics(self) -> dict[str, Any]:
        """Calls, masking and where the rows came from."""
        seen = self.budget.seen
        return {
            "subject": self.project.subject,
            "tasks": self.source,
            "train_tasks": [t.task_id for t in self.train_tasks],
            "eval_tasks": [t.task_id for t in self.eval_tasks],
            "calls": self.calls,
            "completions": seen,
            "masked": self.budget.masked,
            "masked_fraction": round(self.budget.masked / seen, 4) if seen else 0.0,
        }

    def close(self) -> None:
        """Leave the context (or call ``close``), release what the contract declares, stop the loop."""
        try:
            if self._context == "async":
                self.loop.run(self._made.__aexit__(None, None, None))
            elif self._context == "sync":
                self._made.__exit__(None, None, None)
            elif self._close is not None:
                self.loop.run(self._close())
            release = self.subject.contract.release
            if release is not None:
                self.loop.run(release())
        finally:
            self.loop.close()
