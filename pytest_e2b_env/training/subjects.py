"""What GRPO trains on: the validated reward pool or the validated episode class.

A subject hands TRL exactly the code the catalog validates (``RewardPool.code_reward`` as a
reward function, ``ReportEpisode`` as ``environment_factory``), plus the dataset rows, the
warm-up examples for ``--tiny``, its metrics and its cleanup. Cleanup failures raise.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_e2b_env.data import fixtures_dir
from pytest_e2b_env.errors import CleanupError, ConfigError, InfrastructureError
from pytest_e2b_env.targets.tags import RUN_KEY, list_ids
from pytest_e2b_env.toolsurface import tool_methods
from pytest_e2b_env.training.timing import StageClock, timed, timed_env_class
from pytest_e2b_env.training.tiny import Example

if TYPE_CHECKING:
    from pytest_e2b_env.targets import Target


def live_sandboxes(target: Target) -> list[str]:
    """Ids of sandboxes still alive that carry this run's id in their metadata."""
    return list_ids(target.sdk_opts(), {RUN_KEY: target.run_id})


def check_no_leaks(target: Target, attempts: int = 3, pause: float = 1.0) -> dict[str, Any]:
    """Confirm no sandbox of the run is alive; kill and raise :class:`CleanupError` if one is.

    Live E2B may list a just-killed sandbox for a moment, so a non-empty listing is re-read
    (``attempts`` times, ``pause`` seconds apart) before anything counts as a leak.
    """
    alive = live_sandboxes(target)
    for _ in range(attempts - 1):
        if not alive:
            break
        time.sleep(pause)
        alive = live_sandboxes(target)
    if not alive:
        return {"leaked": []}
    stuck = target.kill_all(alive)
    raise CleanupError(
        f"{len(alive)} sandbox(es) of run {target.run_id} were still alive after the subject closed "
        f"({len(stuck)} could not be killed); the subject leaks sandboxes",
        alive,
    )


class RewardSubject:
    """``RewardPool.code_reward`` as the TRL reward function; the pool is closed on TRL's loop."""

    kind = "reward"

    def __init__(self, settings: Any, target: Target, clock: StageClock) -> None:
        from pytest_e2b_env.reward import RewardPool

        self.target = target
        self.pool = RewardPool(
            workers=settings.sandbox_workers,
            create_interval=settings.create_interval,
            api_opts=target.sdk_opts(),
            run_id=target.run_id,
            on_infrastructure=settings.on_infrastructure,
        )
        self._tasks = load_reward_tasks()
        self._reward = timed(self.pool.code_reward, clock)
        self._loop: asyncio.AbstractEventLoop | None = None

    def train_rows(self) -> list[dict[str, Any]]:
        """Dataset rows of the train split: ``prompt`` (chat) and ``test_cases``."""
        return [_reward_row(t) for t in self._tasks["train"]]

    def eval_rows(self) -> list[dict[str, Any]]:
        """Dataset rows of the held-out split."""
        return [_reward_row(t) for t in self._tasks["eval"]]

    def trainer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``GRPOTrainer``."""
        return {"reward_funcs": [self._reward]}

    def warmup_examples(self) -> list[Example]:
        """Each train prompt answered by its bundled correct program and by its partial one."""
        examples: list[Example] = []
        self._weights: list[float] = []
        for task in self._tasks["train"]:
            prompt = _reward_row(task)["prompt"]
            for kind, weight in (("correct", 2.0), ("partial", 1.0)):
                code = _candidate(task["task_id"], kind)
                if code is not None:
                    examples.append(([*prompt, _answer(code)], None))
                    self._weights.append(weight)
        return examples

    def tokenizer_examples(self) -> list[Example]:
        """Extra text the tiny tokenizer should encode compactly: the held-out prompts."""
        return [(row["prompt"], None) for row in self.eval_rows()]

    def warmup_weights(self) -> list[float] | None:
        """Correct programs weigh twice a partial one, so sampled groups usually have reward spread."""
        return list(getattr(self, "_weights", [])) or None

    def preflight(self, progress: Callable[[str], None]) -> dict[str, Any] | None:
        """Nothing to do before the model loads; the pool starts on its first batch."""
        return None

    def attach(self, trainer: Any) -> None:
        """Remember TRL's event loop: the pool lives on it and must be closed there."""
        self._loop = getattr(trainer, "async_loop", None)

    def metrics(self) -> dict[str, Any]:
        """The pool's own metrics."""
        value = self.pool.metrics
        return dict(value() if callable(value) else value)

    def masked(self) -> int:
        """Completions masked so far (unscorable: ``None`` for TRL)."""
        return self.pool.budget.masked

    def close(self) -> None:
        """Close the pool on the loop it runs on, then prove nothing of the run is alive."""
        loop = self._loop
        if loop is not None and loop.is_running():
            asyncio.run_coroutine_threadsafe(self.pool.close(), loop).result(timeout=300)
        else:
            asyncio.run(self.pool.close())


def _episode_row(task_id: str) -> dict[str, Any]:
    """A dataset row whose user message is filled by ``reset``.

    TRL appends the string ``reset`` returns (``ReportEpisode`` returns the task text) to the
    last user message, so the row's own prompt stays empty: the model sees the task once.
    """
    from pytest_e2b_env.episode import task_row

    row = task_row(task_id)
    return {"prompt": [{"role": "user", "content": ""}], "task": row["task"]}


def essential_commands(commands: list[str], task: dict[str, Any]) -> list[str]:
    """The commands of a scripted repair that change files (inspection and test runs dropped).

    The tiny model learns to type these exactly; the fewer tokens, the more reliably it does.
    """
    kept = [c for c in commands if not c.startswith("cat ") and c.strip() != task.get("command", "").strip()]
    return kept or list(commands)


#: Bundled task data of a source checkout (fixtures are not package data).
FIXTURES = fixtures_dir()


def load_reward_tasks(path: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """The reward tasks (``train`` and held-out ``eval`` splits) of ``fixtures/reward/tasks.json``."""
    source = path or FIXTURES / "reward" / "tasks.json"
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot read the reward tasks at {source} ({type(exc).__name__}); run from a source checkout"
        ) from None
    for split in ("train", "eval"):
        if not data.get(split):
            raise ConfigError(f"{source} has no {split!r} tasks; both 'train' and 'eval' splits are required")
    return {"train": list(data["train"]), "eval": list(data["eval"])}


def _candidate(task_id: str, kind: str) -> str | None:
    """A bundled candidate program for a train task, without its module docstring."""
    path = FIXTURES / "reward" / "candidates" / f"{task_id.replace('-', '_')}_{kind}.py"
    if not path.is_file():
        return None
    lines = path.read_text(encoding="utf-8").strip().splitlines()
    if lines and lines[0].startswith('"""') and lines[0].rstrip().endswith('"""') and len(lines[0]) > 3:
        lines = lines[1:]
    return "\n".join(lines).strip()


def _answer(code: str) -> dict[str, str]:
    return {"role": "assistant", "content": f"```python\n{code.strip()}\n```"}


def _reward_row(task: dict[str, Any]) -> dict[str, Any]:
    return {"prompt": task["prompt"], "test_cases": task["test_cases"]}


class EpisodeSubject:
    """``ReportEpisode`` (timed, same tools) as the TRL ``environment_factory``."""

    kind = "episode"

    def __init__(self, settings: Any, target: Target, clock: StageClock) -> None:
        from pytest_e2b_env.episode import MaskingReportEpisode, ReportEpisode
        from pytest_e2b_env.episode.task import task_ids

        self.target = target
        self.clock = clock
        self.instances: list[Any] = []
        base = MaskingReportEpisode if settings.on_infrastructure == "mask" else ReportEpisode
        self.env_cls: Any = timed_env_class(base, clock, self.instances)
        ids = task_ids()
        if len(ids) < 2:
            raise InfrastructureError(
                f"episode training needs >= 2 bundled tasks (train + held-out), found {ids}"
            )
        # The last task id is held out: never trained on, only evaluated before and after.
        self.train_ids, self.eval_ids = ids[:-1], ids[-1:]
        self._scripted: dict[str, int] | None = None

    def train_rows(self) -> list[dict[str, Any]]:
        """Dataset rows of the train split: ``prompt`` (chat) and ``task`` (JSON text)."""
        return [_episode_row(i) for i in self.train_ids]

    def eval_rows(self) -> list[dict[str, Any]]:
        """Dataset rows of the held-out task."""
        return [_episode_row(i) for i in self.eval_ids]

    def trainer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``GRPOTrainer``."""
        return {"environment_factory": self.env_cls}

    def preflight(self, progress: Callable[[str], None]) -> dict[str, Any]:
        """Play each train task twice through the real episode: scripted repair (1.0), buggy submit (0.0).

        Proves the environment scores before any model loads, and the transcripts (real tool
        outputs) are what ``--tiny`` warms up on.
        """
        from pytest_e2b_env.episode import load_repair

        self._transcripts: list[tuple[dict[str, Any], list[tuple[str, dict[str, Any], str]]]] = []
        receipts = []
        for task_id in self.train_ids:
            row = _episode_row(task_id)
            task = json.loads(row["task"])
            for label, commands in (
                ("repair", essential_commands(load_repair(task_id), task)),
                ("buggy", []),
            ):
                env = self.env_cls()
                observation = env.reset(**row)
                calls = [("terminal", {"command": c}, env.terminal(command=c)) for c in commands]
                calls.append(("submit", {}, env.submit()))
                reward = env.get_reward()
                if reward is None:  # masked: the preflight proves the environment, it never masks
                    raise InfrastructureError(
                        f"preflight: the {label} script of task {task_id!r} hit an infrastructure "
                        "failure (its reward was masked); fix the sandbox backend before training"
                    )
                receipts.append(
                    {"task": task_id, "script": label, "reward": reward, "tool_calls": len(calls)}
                )
                progress(f"preflight {task_id} {label}: reward {reward:g}")
                want = 1.0 if label == "repair" else 0.0
                if reward != want:
                    raise InfrastructureError(
                        f"preflight: the {label} script of task {task_id!r} scored {reward:g}, "
                        f"expected {want:g}; "
                        "the episode or its fixture is broken, fix it before training"
                    )
                user = dict(row["prompt"][-1])
                user["content"] = str(user["content"]) + observation
                self._transcripts.append(({"prompt": [*row["prompt"][:-1], user]}, calls))
        return {"episodes": receipts}

    def tokenizer_examples(self) -> list[Example]:
        """Extra text the tiny tokenizer should encode compactly: the held-out task as the model sees it."""
        from pytest_e2b_env.episode import parse_task
        from pytest_e2b_env.episode.task import task_prompt

        tools = tool_methods(self.env_cls)
        rows = self.eval_rows()
        return [([{"role": "user", "content": task_prompt(parse_task(r["task"]))}], tools) for r in rows]

    def drop_sessions(self) -> None:
        """Close the OpenEnv sessions of the preflight instances, keeping server slots free."""
        for env in list(self.instances):
            drop = getattr(env, "_drop_client", None)
            if callable(drop):
                drop()

    def warmup_examples(self) -> list[Example]:
        """The preflight transcripts as chat conversations with the episode's exact tool schema."""
        tools = tool_methods(self.env_cls)
        examples: list[Example] = []
        for row, calls in getattr(self, "_transcripts", []):
            messages: list[dict[str, Any]] = list(row["prompt"])
            for name, arguments, output in calls:
                messages.append(
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {"type": "function", "function": {"name": name, "arguments": arguments}}
                        ],
                    }
                )
                messages.append({"role": "tool", "name": name, "content": output})
            messages.append({"role": "assistant", "content": "Done."})
            examples.append((messages, tools))
        return examples

    def warmup_weights(self) -> list[float]:
        """Repairs weigh twice a plain submit: most sampled groups then mix a 1.0 and a 0.0,
        i.e. rewards with spread, which is what GRPO learns from."""
        return [2.0 if len(calls) > 1 else 1.0 for _, calls in getattr(self, "_transcripts", [])]

    def attach(self, trainer: Any) -> None:
        """Mark where scripted calls end: every later call was made by the model under TRL."""
        self._scripted = dict(self.clock.counts)

    def masked(self) -> int:
        """Episodes masked so far (``get_reward()`` returned ``None``)."""
        return int(self.env_cls.mask_metrics().get("masked", 0))

    def metrics(self) -> dict[str, Any]:
        """Counts of episode calls and the last receipt of each instance (ids, timings, cleanup)."""
        return {
            "instances": len(self.instances),
            "calls": dict(self.clock.counts),
            "model_calls": {}
            if self._scripted is None
            else {name: count - self._scripted.get(name, 0) for name, count in self.clock.counts.items()},
            "rewards": list(self.clock.rewards),
            "masking": self.env_cls.mask_metrics(),
            "receipts": [
                json.loads(json.dumps(getattr(e, "receipt", {}), default=str)) for e in self.instances
            ],
        }

    def close(self) -> None:
        """Finish any episode still open and drop every session; a cleanup failure raises."""
        errors: list[BaseException] = []
        for env in self.instances:
            if getattr(env, "_client", None) is None:
                continue
            if not getattr(env, "_closed", True):
                try:
                    env.get_reward()  # releases the episode's sandboxes; raises on cleanup failure
                except CleanupError as exc:
                    errors.append(exc)
                except InfrastructureError:
                    pass  # an unfinished episode has no score; its sandboxes were still released
            drop = getattr(env, "_drop_client", None)
            if callable(drop):
                drop()
        from pytest_e2b_env.episode.server import close_shared_servers

        close_shared_servers()  # the in-process OpenEnv server must not outlive the emulator it points at
        if errors:
            ids = [i for exc in errors for i in getattr(exc, "ids", ())]
            raise CleanupError(f"{len(errors)} episode(s) could not release their sandboxes", ids)
