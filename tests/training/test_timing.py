"""The reward-stage stopwatch keeps what TRL sees: names, docstrings, signatures, tool schemas, async-ness."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from pytest_e2b_env.toolsurface import tool_methods
from pytest_e2b_env.training.timing import StageClock, timed, timed_env_class


class Env:
    """A small environment class written the way TRL expects one."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def reset(self, **row: object) -> str:
        """Start."""
        self.seen = []
        return "ready"

    def terminal(self, command: str) -> str:
        """Run a command.

        Args:
            command: The shell command.
        """
        self.seen.append(command)
        return f"ran {command}"

    async def submit(self) -> str:
        """Submit the work."""
        await asyncio.sleep(0)
        return "submitted"

    def get_reward(self) -> float:
        """The score."""
        return float(len(self.seen))

    def _helper(self) -> None:
        """Private: never a tool."""


def test_timed_counts_calls_and_keeps_rewards() -> None:
    """Each call is counted under its name; get_reward results are kept as rewards."""
    clock = StageClock()
    cls = timed_env_class(Env, clock, [])
    env = cls()
    env.reset()
    env.terminal(command="ls")
    asyncio.run(env.submit())
    assert env.get_reward() == 1.0
    assert dict(clock.counts) == {"reset": 1, "terminal": 1, "submit": 1, "get_reward": 1}
    assert clock.rewards == [1.0]
    assert clock.take() >= 0.0
    assert clock.take() == 0.0


def test_timed_class_looks_the_same_to_trl() -> None:
    """Same class name (reward column), same public methods, signatures, docstrings and async-ness."""
    instances: list[object] = []
    cls = timed_env_class(Env, StageClock(), instances)
    assert cls.__name__ == "Env"
    public = {n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}
    assert public == {"reset", "terminal", "submit", "get_reward"}
    for name in public:
        wrapped, original = getattr(cls, name), getattr(Env, name)
        assert inspect.signature(wrapped) == inspect.signature(original)
        assert wrapped.__doc__ == original.__doc__
        assert inspect.iscoroutinefunction(wrapped) == inspect.iscoroutinefunction(original)
    env = cls()
    assert instances == [env]
    assert isinstance(env, Env)


@pytest.mark.full
def test_tool_schemas_are_unchanged() -> None:
    """transformers derives byte-identical tool schemas from the timed class and from the original."""
    from transformers.utils import get_json_schema

    timed_cls = timed_env_class(Env, StageClock(), [])
    original = [get_json_schema(t) for t in tool_methods(Env)]
    wrapped = [get_json_schema(t) for t in tool_methods(timed_cls)]
    assert wrapped == original
    assert [s["function"]["name"] for s in original] == ["submit", "terminal"]


def test_tool_methods_allocate_nothing() -> None:
    """Discovering the tools never runs __init__ (an episode's constructor may connect)."""
    instances: list[object] = []
    cls = timed_env_class(Env, StageClock(), instances)
    tools = tool_methods(cls)
    assert [t.__name__ for t in tools] == ["submit", "terminal"]
    assert instances == []


def test_timed_async_function_stays_async() -> None:
    """A timed coroutine function (the pool's code_reward) is still awaited by TRL's async path."""
    clock = StageClock()

    async def code_reward(completions: list[str], **kwargs: object) -> list[float]:
        return [1.0 for _ in completions]

    fn = timed(code_reward, clock)
    assert inspect.iscoroutinefunction(fn)
    assert fn.__name__ == "code_reward"
    assert asyncio.run(fn(["a", "b"])) == [1.0, 1.0]
    assert clock.counts["code_reward"] == 1
