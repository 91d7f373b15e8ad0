"""The catalog subject factory and the reward smoke, end to end on the emulator."""

from __future__ import annotations

import os

import pytest
from reward_helpers import TOTAL, completion, program

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.reward import reward_subject
from pytest_e2b_env.reward.smoke import reward_smoke

pytestmark = pytest.mark.namespaces


async def test_subject_yields_code_reward_and_closes(
    emulator: Emulator, runner_supported: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reward_subject() reads the SDK env and the run id, and leaving it kills every worker."""
    for key, value in emulator.sdk_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PYTEST_E2B_ENV_RUN", "subject-run")
    async with reward_subject() as reward:
        scores = await reward(
            [completion(program("total_tokens_correct")), completion(program("total_tokens_wrong"))],
            [TOTAL, TOTAL],
        )
        assert scores == [1.0, 0.0]
        tagged = [s for s in emulator.sandboxes() if s["metadata"].get("pytest_e2b_env_run") == "subject-run"]
        assert tagged
    assert [s for s in emulator.sandboxes() if s["metadata"].get("pytest_e2b_env_run") == "subject-run"] == []


@pytest.mark.slow
def test_reward_smoke_offline(runner_supported: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The smoke scores its five fixed candidates as expected and leaves no sandbox."""
    monkeypatch.delenv("PYTEST_E2B_ENV_RUN", raising=False)
    receipt = reward_smoke(live=False)
    assert receipt["ok"], receipt
    assert receipt["scores"] == pytest.approx(receipt["expected"])
    assert receipt["leftover_sandboxes"] == []
    assert receipt["run_id"].startswith("smoke-")
    assert "E2B_API_KEY" not in os.environ or os.environ["E2B_API_KEY"] not in str(receipt)


def test_live_smoke_without_key_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """--live without E2B_API_KEY is a ConfigError naming the variable."""
    from pytest_e2b_env.errors import ConfigError

    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="E2B_API_KEY"):
        reward_smoke(live=True)


def test_close_from_another_thread_runs_on_the_pool_loop(emulator: Emulator, runner_supported: None) -> None:
    """TRL scores on its own loop thread; asyncio.run(pool.close()) from the main thread still works."""
    import asyncio
    import threading

    from pytest_e2b_env.reward import RewardPool

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        pool = RewardPool(workers=1, create_interval=0, api_opts=emulator.sdk_opts(), run_id="thread-run")
        future = asyncio.run_coroutine_threadsafe(
            pool.code_reward([completion(program("total_tokens_correct"))], [TOTAL]), loop
        )
        assert future.result(timeout=60) == [1.0]
        asyncio.run(pool.close())
        assert [
            s for s in emulator.sandboxes() if s["metadata"].get("pytest_e2b_env_run") == "thread-run"
        ] == []
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


async def test_subject_builds_the_pool_train_py_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundled subject's pool has train.py's workers and pacing, whatever the environment says."""
    from pytest_e2b_env.cli.train import parse_settings

    monkeypatch.setenv("PYTEST_E2B_ENV_MODE", "offline")  # the removed switch must change nothing
    train = parse_settings(["--tiny", "--offline"], environ={})
    async with reward_subject() as reward:
        pool = reward.__self__  # type: ignore[attr-defined]
        assert (pool.workers, pool.create_interval) == (train.sandbox_workers, train.create_interval)
        assert pool.create_interval == 1.0
