"""A user's subject as TRL gets it: built, called and closed as the catalog does; None is budgeted.

The subjects here are small user modules written into a temporary project (no sandbox: what is
under test is how training builds, calls and closes them); TRL's side is played as TRL 1.16 plays
it: an async reward function awaited on TRL's own event loop, a sync one called directly.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_e2b_env.cli.train import parse_settings
from pytest_e2b_env.errors import ConfigError, InfrastructureError
from pytest_e2b_env.training.project import Project
from pytest_e2b_env.training.timing import StageClock
from pytest_e2b_env.training.user import split_tasks
from pytest_e2b_env.training.user_episode import UserEpisodeSubject
from pytest_e2b_env.training.user_reward import UserRewardSubject

ASYNC_CONTEXT = '''
import asyncio

EVENTS = []


class Scorer:
    """An async context manager yielding an async reward function, as a pool of sandboxes is."""

    async def __aenter__(self):
        self.loop = asyncio.get_running_loop()
        EVENTS.append("enter")
        return self.score

    async def __aexit__(self, *exc):
        EVENTS.append("exit")

    async def score(self, completions, tests, **kwargs):
        EVENTS.append(("score", asyncio.get_running_loop() is self.loop, sorted(kwargs)))
        return [None if c[0]["content"] == "lost" else 1.0 for c in completions]


def make_reward():
    return Scorer()


make_reward.e2b_contract = {"columns": lambda tests: {"tests": tests}}
'''
EPISODE = '''
class Attr:
    """An environment without get_reward: TRL's documented reward function reads env.reward."""

    def __init__(self):
        self.reward = 0.0

    def reset(self, **kwargs):
        self.task = kwargs["task"]
        return "go"

    def submit(self) -> str:
        """Submit.

        Returns:
            The verdict.
        """
        self.reward = None if "lost" in self.task else 1.0
        return "ok"


def make_env():
    return Attr()
'''
ROWS = [{"task_id": f"t{n}", "prompt": "p", "test_cases": [{"input": "{}", "output": "1"}]} for n in range(5)]


def _project(tmp_path: Path, kind: str, spec: str, rows: list[dict[str, Any]]) -> Project:
    (tmp_path / "tasks.json").write_text(json.dumps(rows))
    return Project(
        kind=kind,
        subject=spec,
        contract_spec=None,
        tasks=str(tmp_path / "tasks.json"),
        task_sources={kind: str(tmp_path / "tasks.json")},
        rootdir=tmp_path,
        inifile=None,
        evidence=tmp_path / "e2b-evidence",
        catalog_hash="x",
        case_ids={},
        validate_args=[],
    )


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """A per-test suffix for the subject modules (imports are cached by name)."""
    suffix = request.node.name.replace("[", "_").replace("]", "").replace("-", "_")
    (tmp_path / f"scorer_{suffix}.py").write_text(ASYNC_CONTEXT)
    (tmp_path / f"attr_env_{suffix}.py").write_text(EPISODE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return suffix


def _settings(policy: str = "mask") -> Any:
    return parse_settings(["--tiny", "--offline", "--on-infrastructure", policy], environ={})


def _trl_calls(fn: Any, batches: list[list[str]]) -> list[Any]:
    """Await ``fn`` once per batch on a loop of its own, as TRL's async loop does."""

    async def run() -> list[Any]:
        out = []
        for batch in batches:
            completions = [[{"role": "assistant", "content": c}] for c in batch]
            tests = [[{"input": "{}", "output": "1"}] for _ in batch]
            out.append(await fn(prompts=[[]] * len(batch), completions=completions, tests=tests))
        return out

    return asyncio.run(run())


def test_async_context_reward_runs_on_the_loop_it_was_entered_on(tmp_path: Path, modules: str) -> None:
    """Entered once, every batch scored on the loop it was entered on, left on close; the column arrives."""
    import importlib

    spec = f"scorer_{modules}:make_reward"
    subject = UserRewardSubject(_settings(), None, StageClock(), _project(tmp_path, "reward", spec, ROWS))
    (fn,) = subject.trainer_kwargs()["reward_funcs"]
    assert fn.__name__ == "score"
    assert asyncio.iscoroutinefunction(fn)
    assert [row["tests"] for row in subject.train_rows()] == [r["test_cases"] for r in ROWS[:4]]
    assert _trl_calls(fn, [["a", "b"], ["c"]]) == [[1.0, 1.0], [1.0]]
    subject.close()
    events = importlib.import_module(f"scorer_{modules}").EVENTS
    assert events[0] == "enter"
    assert events[-1] == "exit"
    assert [e[1] for e in events if isinstance(e, tuple)] == [True, True]
    assert subject.metrics()["calls"] == 2


def test_masked_rewards_count_against_the_budget(tmp_path: Path, modules: str) -> None:
    """None is masked within the budget (at least one), past it the run fails; 'raise' fails at once."""
    spec = f"scorer_{modules}:make_reward"
    subject = UserRewardSubject(_settings(), None, StageClock(), _project(tmp_path, "reward", spec, ROWS))
    (fn,) = subject.trainer_kwargs()["reward_funcs"]
    assert _trl_calls(fn, [["lost", "a", "b", "c"]]) == [[None, 1.0, 1.0, 1.0]]
    assert subject.masked() == 1
    with pytest.raises(InfrastructureError, match="2 of 8 completions masked"):
        _trl_calls(fn, [["lost", "a", "b", "c"]])
    subject.close()
    strict = UserRewardSubject(
        _settings("raise"), None, StageClock(), _project(tmp_path, "reward", spec, ROWS)
    )
    (fn,) = strict.trainer_kwargs()["reward_funcs"]
    with pytest.raises(InfrastructureError, match="--on-infrastructure is raise"):
        _trl_calls(fn, [["lost", "a"]])
    strict.close()


def test_env_reward_episode_gets_the_documented_reward_function(tmp_path: Path, modules: str) -> None:
    """A factory whose class has no get_reward: TRL gets env_reward reading env.reward; None masked."""
    rows = [
        {
            "id": f"task-{n}",
            "workdir": "/w",
            "files": {},
            "artifact": "a",
            "command": "c",
            "verification": {"expected": {}},
        }
        for n in range(3)
    ]
    project = _project(tmp_path, "episode", f"attr_env_{modules}:make_env", rows)
    subject = UserEpisodeSubject(_settings(), None, StageClock(), project)
    kwargs = subject.trainer_kwargs()
    (reward,) = kwargs["reward_funcs"]
    envs = [kwargs["environment_factory"]() for _ in range(2)]
    for env, row in zip(envs, [subject.train_rows()[0], {"task": "lost"}], strict=True):
        env.reset(**row)
        env.submit()
    assert reward(environments=envs) == [1.0, None]
    assert subject.metrics()["reward_source"] == "env.reward"
    assert subject.metrics()["masking"]["masked"] == 1
    assert [json.loads(r["task"])["id"] for r in subject.eval_rows()] == ["task-2"]


def test_too_few_tasks_is_a_config_error() -> None:
    """One task leaves nothing to hold out: the error names the source and the fix."""
    with pytest.raises(ConfigError, match=r"data.jsonl: 1 reward task\(s\); training needs at least 2"):
        split_tasks([object()], "reward", "data.jsonl")
