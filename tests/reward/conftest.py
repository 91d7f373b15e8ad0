"""Fixtures for the reward pool tests: one emulator per module, pools pointed at it, candidates."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from reward_helpers import completion

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.reward import PreflightError, RewardPool


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    """A local emulator for this module's tests (faults cleared between tests)."""
    with Emulator() as emu:
        yield emu


@pytest.fixture(scope="module")
def runner_supported(emulator: Emulator) -> None:
    """Skip when the emulator's isolation level cannot host the in-sandbox case isolation."""
    if emulator.isolation == "namespaces":
        return

    async def probe() -> str | None:
        pool = RewardPool(workers=1, create_interval=0, api_opts=emulator.sdk_opts())
        try:
            await pool.code_reward([completion("print(1)\n")], [[{"input": "1", "output": "1"}]])
        except PreflightError as exc:
            return str(exc)
        finally:
            await pool.close()
        return None

    problem = asyncio.run(probe())
    if problem:
        pytest.skip(f"emulator isolation level {emulator.isolation!r} cannot host case isolation: {problem}")


@pytest.fixture
def faults(emulator: Emulator) -> Iterator[Any]:
    """The emulator's fault plan, emptied after the test."""
    emulator.faults.clear()
    yield emulator.faults
    emulator.faults.clear()


@pytest.fixture
async def make_pool(
    emulator: Emulator, runner_supported: None, faults: Any
) -> AsyncIterator[Callable[..., RewardPool]]:
    """Factory of pools on the emulator (no creation pacing); every pool is closed after the test."""
    pools: list[RewardPool] = []

    def make(**kwargs: Any) -> RewardPool:
        kwargs.setdefault("create_interval", 0)
        kwargs.setdefault("api_opts", emulator.sdk_opts())
        pool = RewardPool(**kwargs)
        pools.append(pool)
        return pool

    yield make
    faults.clear()
    for pool in pools:
        await pool.close()  # again after a test's own close: kills whatever a failed close left
    live = [
        s["sandbox_id"] for s in emulator.sandboxes() if s.get("metadata", {}).get("role") == "reward-worker"
    ]
    assert live == [], f"reward workers left alive: {live}"
