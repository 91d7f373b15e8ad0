"""Tiny third-party-style subjects for the runner tests: real e2b SDK, none of our classes.

Reward subjects cover the contract's shapes (bare function, sync context manager, async context
manager); the episode runs a policy sandbox and a no-network verifier of its own.
"""

from __future__ import annotations

import contextlib
import json
import shlex
from collections.abc import AsyncIterator, Iterator
from typing import Any

from e2b import AsyncSandbox, Sandbox


def constant() -> Any:
    """A bare sync reward function scoring everything 1.0 (keeps no sandbox)."""

    def reward(completions: list[Any], test_cases: list[Any], **kwargs: Any) -> list[float]:
        return [1.0 for _ in completions]

    return reward


@contextlib.contextmanager
def sync_context() -> Iterator[Any]:
    """A sync context manager yielding an async reward that uses one sandbox per batch."""

    async def reward(completions: list[Any], test_cases: list[Any], **kwargs: Any) -> list[float]:
        box = await AsyncSandbox.create(timeout=60)
        try:
            out = await box.commands.run("echo 0.5")
            return [float(out.stdout) for _ in completions]
        finally:
            await box.kill()

    yield reward


@contextlib.asynccontextmanager
async def keeps_worker() -> AsyncIterator[Any]:
    """An async context manager whose worker sandbox lives across calls; leaving it kills the worker."""
    box = await AsyncSandbox.create(timeout=60)

    async def reward(completions: list[Any], test_cases: list[Any], **kwargs: Any) -> list[float]:
        out = await box.commands.run("echo 1")
        return [float(out.stdout) for _ in completions]

    try:
        yield reward
    finally:
        await box.kill()


class TinyEpisode:
    """A repair episode without OpenEnv: policy sandbox, then a fresh offline verifier."""

    def __init__(self) -> None:
        self._policy: Any = None
        self._task: dict[str, Any] = {}
        self._reward: float | None = None

    def reset(self, **row: Any) -> str:
        self._task = json.loads(row["task"])
        self._reward = None
        if self._policy is not None:
            self._policy.kill()
        self._policy = Sandbox.create(timeout=60)
        for name, text in self._task["files"].items():
            self._policy.files.write(f"{self._task['workdir']}/{name}", text)
        return "ready"

    def terminal(self, command: str) -> str:
        """Run a command in the work directory.

        Args:
            command: shell command
        """
        if self._policy is None:
            return "refused"
        result = self._policy.commands.run(f"cd {self._task['workdir']} && {command}")
        return result.stdout

    def submit(self) -> str:
        """Submit the artifact for grading."""
        if self._policy is None:
            return "refused"
        artifact = self._policy.files.read(f"{self._task['workdir']}/{self._task['artifact']}")
        self._policy.kill()
        self._policy = None
        verifier = Sandbox.create(timeout=60, allow_internet_access=False)
        try:
            workdir = self._task["workdir"]
            verifier.files.write(f"{workdir}/{self._task['artifact']}", artifact)
            for name, text in self._task["verification"]["files"].items():
                verifier.files.write(f"{workdir}/{name}", text)
            out = verifier.commands.run(f"cd {workdir} && {self._task['command']}")
            self._reward = 1.0 if json.loads(out.stdout) == self._task["verification"]["expected"] else 0.0
        except Exception:
            self._reward = 0.0
        finally:
            verifier.kill()
        return "submitted"

    def get_reward(self) -> float:
        if self._policy is not None:
            self._policy.kill()
            self._policy = None
        return self._reward or 0.0


class ExposesReset(TinyEpisode):
    """Exposes a reset-like public method: a model tool it must not have."""

    def reset_sandbox(self) -> str:
        """Start over."""
        return self.reset(task=json.dumps(self._task))


def raising_factory() -> Any:
    """A factory that cannot build its subject (a broken config, say)."""
    raise RuntimeError("reward config missing")


def verification_info_reward() -> Any:
    """Scores 1.0 per completion when it receives open-r1's ``verification_info`` column, else raises."""

    def reward(completions: list[Any], verification_info: list[Any], **kwargs: Any) -> list[float]:
        for info in verification_info:
            assert info["language"] == "python"
            assert info["test_cases"][0]["type"] == "stdin_stdout"
        assert {"prompts", "completion_ids", "trainer_state", "log_metric"} <= set(kwargs)
        return [1.0 for _ in completions]

    return reward


verification_info_reward.e2b_contract = {"columns": "verification_info"}  # type: ignore[attr-defined]


def untagged_kill_checked() -> Any:
    """One untagged sandbox per call; a failed kill propagates as the SDK's own error (no ids)."""

    async def reward(completions: list[Any], **kwargs: Any) -> list[float]:
        box = await AsyncSandbox.create(timeout=60)
        try:
            out = await box.commands.run("echo 1")
            return [float(out.stdout) for _ in completions]
        finally:
            await box.kill()

    return reward


def renewing() -> Any:
    """A correct reward that renews its sandbox's lifetime once, as a pool does, then scores 1.0."""

    async def reward(completions: list[Any], test_cases: list[Any], **kwargs: Any) -> list[float]:
        box = await AsyncSandbox.create(timeout=60)
        try:
            await box.set_timeout(120)
            out = await box.commands.run("echo 1")
            return [float(out.stdout) for _ in completions]
        finally:
            await box.kill()

    return reward


def long_lived_kill_checked() -> Any:
    """As ``untagged_kill_checked``, with sandboxes that ask for an hour of lifetime."""

    async def reward(completions: list[Any], **kwargs: Any) -> list[float]:
        box = await AsyncSandbox.create(timeout=3600)
        try:
            out = await box.commands.run("echo 1")
            return [float(out.stdout) for _ in completions]
        finally:
            await box.kill()

    return reward


def answers_in_a_command() -> Any:
    """Kills its sandbox, scores 1.0, but first writes the test cases, answers included, with a command."""

    async def reward(completions: list[Any], test_cases: list[Any], **kwargs: Any) -> list[float]:
        box = await AsyncSandbox.create(timeout=60)
        try:
            await box.commands.run(f"echo {shlex.quote(json.dumps(test_cases))} > /tmp/cases.json")
            return [1.0 for _ in completions]
        finally:
            await box.kill()

    return reward


def impatient() -> Any:
    """Gives a command two seconds, then raises; its sandbox is killed either way."""

    async def reward(completions: list[Any], test_cases: list[Any], **kwargs: Any) -> list[float]:
        box = await AsyncSandbox.create(timeout=60)
        try:
            out = await box.commands.run("echo 1", timeout=2)
            return [float(out.stdout) for _ in completions]
        finally:
            await box.kill()

    return reward
