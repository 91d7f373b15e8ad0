"""The user's own subject as TRL gets it: their reward function or ``environment_factory`` class.

The subject is loaded as the catalog loads it (``load_subject``: the spec, the contract) and built
as the catalog builds it: a reward factory's result may be awaitable, a (sync or async) context
manager yielding the function, or the function itself (closed with its ``close`` when it has one);
an async function and every awaitable of the subject run on one event loop in a thread of its own,
as in a catalog case. TRL gets a function of the same name and sync/async nature that also counts
masked completions (``None``) against the budget. Rows come from the user's tasks
(``e2b_<kind>_tasks``), shaped as the catalog's task checks shape them; the last fifth (at least
one) is the held-out split.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import threading
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from pytest_e2b_env.errors import CleanupError, ConfigError, InfrastructureError
from pytest_e2b_env.masking import MaskBudget
from pytest_e2b_env.training.project import Project
from pytest_e2b_env.training.timing import StageClock, timed, timed_env_class
from pytest_e2b_env.training.tiny import Example

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


def _admit(budget: MaskBudget, policy: str, where: str, values: list[Any]) -> None:
    """Count ``None`` rewards (masked) against the budget; with ``raise`` the first one fails the run."""
    masked = [value is None for value in values]
    if policy == "raise" and any(masked):
        raise InfrastructureError(
            f"{where} returned None (unscorable) for {sum(masked)} completion(s) and "
            "--on-infrastructure is raise"
        )
    budget.admit(masked, where)


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
            _admit(self.budget, self._policy, where, list(values or []))
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


class UserEpisodeSubject:
    """The user's ``environment_factory`` (either reward shape) on the user's repair tasks."""

    kind = "episode"

    def __init__(self, settings: Any, target: Target, clock: StageClock, project: Project) -> None:
        from pytest_e2b_env.catalog.contract import load_subject
        from pytest_e2b_env.catalog.trlshape import owns_reward

        self.project = project
        self.subject = load_subject(project.subject, "episode", project.contract_spec)
        self.contract = self.subject.contract
        if self.contract.task != "json":
            raise ConfigError(
                f"{project.subject} declares task={self.contract.task!r}: TRL hands reset() dataset "
                "columns, and a column of task dicts with different keys gains None-filled keys; "
                "declare task='json' (reset gets the task as JSON text) to train it"
            )
        tasks, self.source = load_project_tasks(project)
        self.train_tasks, self.eval_tasks = split_tasks(tasks, "episode", self.source)
        self.clock = clock
        self.instances: list[Any] = []
        self.budget = MaskBudget()
        self._policy = settings.on_infrastructure
        self._where = f"episode subject {project.subject}"
        factory = self.subject.factory
        if inspect.isclass(factory):
            self.env_cls: Any = timed_env_class(factory, clock, self.instances, self._on_result)
            self.owns_reward = owns_reward(factory)
        else:  # a factory function: its instances are kept, their calls not timed
            self.env_cls = self._keeping(factory)
            self.owns_reward = owns_reward(type(self.env_cls()))
        self._scripted: dict[str, int] | None = None

    def _keeping(self, factory: Callable[[], Any]) -> Callable[[], Any]:
        @functools.wraps(factory)
        def make() -> Any:
            env = factory()
            self.instances.append(env)
            return env

        return make

    def _on_result(self, name: str, value: Any) -> None:
        if name == "get_reward":
            _admit(self.budget, self._policy, self._where, [value])

    def _row(self, task: Any) -> dict[str, Any]:
        from pytest_e2b_env.catalog.drive_episode import DEFAULT_PROMPT

        return {"prompt": task.prompt or DEFAULT_PROMPT, self.contract.task_arg: json.dumps(task.task)}

    def train_rows(self) -> list[dict[str, Any]]:
        """Dataset rows of the train tasks: ``prompt`` and the task as the contract declares it."""
        return [self._row(t) for t in self.train_tasks]

    def eval_rows(self) -> list[dict[str, Any]]:
        """Dataset rows of the held-out tasks."""
        return [self._row(t) for t in self.eval_tasks]

    def _reward_of(self, env: Any) -> Any:
        from pytest_e2b_env.catalog.trlshape import documented_reward

        return env.get_reward() if self.owns_reward else documented_reward([env])[0]

    def trainer_kwargs(self) -> dict[str, Any]:
        """``environment_factory``, plus TRL's documented ``env.reward`` function without ``get_reward``."""
        kwargs: dict[str, Any] = {"environment_factory": self.env_cls}
        if not self.owns_reward:

            def env_reward(environments: list[Any], **kwargs: Any) -> list[Any]:
                values = [env.reward for env in environments]
                _admit(self.budget, self._policy, self._where, values)
                return values

            kwargs["reward_funcs"] = [env_reward]
        return kwargs

    def _commands(self, task: Any) -> list[str]:
        from pytest_e2b_env.catalog.drive_episode import in_workdir, placeholders
        from pytest_e2b_env.training.subjects import essential_commands

        values = placeholders(task.task, self.contract)
        return [in_workdir(c, values) for c in essential_commands(task.solution or [], task.task)]

    def preflight(self, progress: Callable[[str], None]) -> dict[str, Any]:
        """Each train task with a ``solution``: the repair must score 1.0, submitting unchanged below it."""
        terminal, submit = self.contract.tool("terminal"), self.contract.tool("submit")
        self._transcripts: list[tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any], str]]]] = []
        receipts = []
        for task in self.train_tasks:
            if not task.solution:
                continue
            for label, commands in (("repair", self._commands(task)), ("unchanged", [])):
                env = self.env_cls()
                row = self._row(task)
                observation = env.reset(**row)
                calls = []
                for command in commands:
                    args = {self.contract.command_arg: command}
                    calls.append((terminal, args, str(getattr(env, terminal)(**args))))
                calls.append((submit, {}, str(getattr(env, submit)())))
                reward = self._reward_of(env)
                receipts.append(
                    {"task": task.task_id, "script": label, "reward": reward, "tool_calls": len(calls)}
                )
                progress(f"preflight {task.task_id} {label}: reward {reward}")
                good = (
                    reward == 1.0 if label == "repair" else isinstance(reward, int | float) and reward < 1.0
                )
                if not good:
                    raise InfrastructureError(
                        f"preflight: the {label} script of task {task.task_id!r} scored {reward!r}, expected "
                        f"{'1.0' if label == 'repair' else 'below 1.0'}; the validated task or subject "
                        "behaves differently here, fix it before training"
                    )
                user = dict(row["prompt"][-1])
                if isinstance(observation, str):  # TRL appends a string reset() returns to the prompt
                    user["content"] = str(user["content"]) + observation
                self._transcripts.append(([*row["prompt"][:-1], user], calls))
        return {"episodes": receipts}

    def tokenizer_examples(self) -> list[Example]:
        """The held-out prompts, with the episode's tools."""
        from pytest_e2b_env.toolsurface import tool_methods

        tools = tool_methods(self.env_cls if inspect.isclass(self.env_cls) else type(self.instances[0]))
        return [(self._row(task)["prompt"], tools) for task in self.eval_tasks]

    def warmup_examples(self) -> list[Example]:
        """The preflight transcripts as chat conversations with the episode's exact tool schema."""
        from pytest_e2b_env.toolsurface import tool_methods

        if not getattr(self, "_transcripts", None):
            raise ConfigError(
                f"{self.source}: no train task has a 'solution'; --tiny warms the model up on the "
                "repairs, so give at least one train row its 'solution' commands (or pass --model)"
            )
        tools = tool_methods(self.env_cls if inspect.isclass(self.env_cls) else type(self.instances[0]))
        examples: list[Example] = []
        for prompt, calls in self._transcripts:
            messages: list[dict[str, Any]] = list(prompt)
            for name, arguments, output in calls:
                call = {"type": "function", "function": {"name": name, "arguments": arguments}}
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
                messages.append({"role": "tool", "name": name, "content": output})
            messages.append({"role": "assistant", "content": "Done."})
            examples.append((messages, tools))
        return examples

    def warmup_weights(self) -> list[float]:
        """Repairs weigh twice an unchanged submit, so sampled groups have reward spread."""
        return [2.0 if len(calls) > 1 else 1.0 for _, calls in getattr(self, "_transcripts", [])]

    def attach(self, trainer: Any) -> None:
        """Mark where scripted calls end: every later call was made by the model under TRL."""
        self._scripted = dict(self.clock.counts)

    def masked(self) -> int:
        """Episodes masked so far (their reward was ``None``)."""
        return self.budget.masked

    def metrics(self) -> dict[str, Any]:
        """Instances, calls per tool (all, and the model's), rewards and masking."""
        seen = self.budget.seen
        return {
            "subject": self.project.subject,
            "tasks": self.source,
            "train_tasks": [t.task_id for t in self.train_tasks],
            "eval_tasks": [t.task_id for t in self.eval_tasks],
            "reward_source": "get_reward()" if self.owns_reward else "env.reward",
            "instances": len(self.instances),
            "calls": dict(self.clock.counts),
            "model_calls": {}
            if self._scripted is None
            else {name: count - self._scripted.get(name, 0) for name, count in self.clock.counts.items()},
            "rewards": list(self.clock.rewards),
            "masking": {
                "episodes": seen,
                "masked": self.budget.masked,
                "masked_fraction": round(self.budget.masked / seen, 4) if seen else 0.0,
            },
        }

    def close(self) -> None:
        """Release what the contract declares; the run then confirms every sandbox it saw created is gone.

        TRL never closes its pooled instances and a user's class has no agreed close, so what an
        unfinished episode holds is found by the leak check (every sandbox the target saw created).
        """
        release = self.contract.release
        if release is not None:
            result = release()
            if inspect.isawaitable(result):
                asyncio.run(_awaited(result))


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


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
