"""Training cleanup against the emulator: leftovers of the run and kill failures fail the run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import e2b
import pytest

from pytest_e2b_env.cli.train import parse_settings
from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.errors import CleanupError
from pytest_e2b_env.settings import TargetSettings
from pytest_e2b_env.targets import Target
from pytest_e2b_env.training.subjects import RUN_KEY, RewardSubject, check_no_leaks
from pytest_e2b_env.training.timing import StageClock

ROOT = Path(__file__).resolve().parents[2]
CORRECT = (ROOT / "fixtures" / "reward" / "candidates" / "total_tokens_correct.py").read_text()


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    """One emulator for this module."""
    with Emulator() as emulator:
        yield emulator


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop on a daemon thread, the way TRL runs async reward functions."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


def _target(emu: Emulator, run_id: str) -> Target:
    return Target(emu, TargetSettings(run_id=run_id))  # no closer: the module's emulator outlives it


def test_no_leaks_when_nothing_of_the_run_is_alive(emu: Emulator) -> None:
    """A run whose sandboxes are all gone passes the leak check, even beside another run's sandbox."""
    other = e2b.Sandbox.create(metadata={RUN_KEY: "someone-else"}, **emu.sdk_opts())
    try:
        assert check_no_leaks(_target(emu, "train-clean")) == {"leaked": []}
    finally:
        other.kill()


def test_leftover_sandbox_of_the_run_is_killed_and_fails_cleanup(emu: Emulator) -> None:
    """A sandbox still tagged with the run after close raises CleanupError naming it, and is killed."""
    left = e2b.Sandbox.create(metadata={RUN_KEY: "train-leaky"}, **emu.sdk_opts())
    with pytest.raises(CleanupError) as caught:
        check_no_leaks(_target(emu, "train-leaky"), pause=0.1)
    assert caught.value.ids == (left.sandbox_id,)
    assert "still alive after the subject closed" in str(caught.value)
    assert left.sandbox_id not in [s["sandbox_id"] for s in emu.sandboxes()]


def test_pool_kill_failure_fails_close(
    emu: Emulator, loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    """When DELETE answers 500, closing the reward subject raises CleanupError with the worker ids."""
    settings = parse_settings(["--tiny", "--offline", "--sandbox-workers", "1", "--create-interval", "0"], {})
    subject = RewardSubject(settings, _target(emu, "train-killfail"), StageClock())

    class _Trainer:  # what attach() reads from GRPOTrainer: the loop TRL runs async rewards on
        async_loop = loop

    subject.attach(_Trainer())
    completion = [{"role": "assistant", "content": f"```python\n{CORRECT}\n```"}]
    cases = subject.train_rows()[0]["test_cases"]
    scores = asyncio.run_coroutine_threadsafe(subject.pool.code_reward([completion], [cases]), loop).result(
        timeout=120
    )
    assert scores == [1.0]
    emu.faults.add(route="DELETE /sandboxes/*", answer={"kill_fails": True}, times=None)
    try:
        with pytest.raises(CleanupError) as caught:
            subject.close()
        assert caught.value.ids
    finally:
        emu.faults.clear()
        emu.kill_all()
