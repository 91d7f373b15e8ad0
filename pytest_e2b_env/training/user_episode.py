"""The user's ``environment_factory`` (a class or a factory function, either reward shape) as TRL gets it.

A class is timed as the reference episode is (same name, same tools); ``get_reward()`` or, without
it, TRL's documented reward function reading ``env.reward`` scores the episode, and ``None``
counts against the masking budget. The preflight plays each train task's ``solution`` through
the user's class before any model loads; its transcripts are the ``--tiny`` warm-up.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_e2b_env.errors import ConfigError, InfrastructureError
from pytest_e2b_env.masking import MaskBudget
from pytest_e2b_env.training.project import Project
from pytest_e2b_env.training.timing import StageClock, timed_env_class
from pytest_e2b_env.training.tiny import Example
from pytest_e2b_env.training.user import SubjectLoop, admit, load_project_tasks, split_tasks

if TYPE_CHECKING:
    from pytest_e2b_env.targets import Target


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
        self._loop: SubjectLoop | None = None

    def _keeping(self, factory: Callable[[], Any]) -> Callable[[], Any]:
        @functools.wraps(factory)
        def make() -> Any:
            env = factory()
            self.instances.append(env)
            return env

        return make

    def _on_result(self, name: str, value: Any) -> None:
        if name == "get_reward":
            admit(self.budget, self._policy, self._where, [value])

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

        return self._settle(env.get_reward() if self.owns_reward else documented_reward([env])[0])

    def _settle(self, value: Any) -> Any:
        """An async method's result awaited on one loop kept for the preflight (TRL awaits them too)."""
        if not inspect.isawaitable(value):
            return value
        if self._loop is None:
            self._loop = SubjectLoop()
        return self._loop.run(value)

    def trainer_kwargs(self) -> dict[str, Any]:
        """``environment_factory``, plus TRL's documented ``env.reward`` function without ``get_reward``."""
        kwargs: dict[str, Any] = {"environment_factory": self.env_cls}
        if not self.owns_reward:

            def env_reward(environments: list[Any], **kwargs: Any) -> list[Any]:
                values = [env.reward for env in environments]
                admit(self.budget, self._policy, self._where, values)
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
                observation = self._settle(env.reset(**row))
                calls = []
                for command in commands:
                    args = {self.contract.command_arg: command}
                    calls.append((terminal, args, str(self._settle(getattr(env, terminal)(**args)))))
                calls.append((submit, {}, str(self._settle(getattr(env, submit)()))))
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
        try:
            release = self.contract.release
            if release is not None:
                self._settle(release())
        finally:
            if self._loop is not None:
                self._loop.close()
