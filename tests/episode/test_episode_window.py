"""The policy window on a clock the test moves: expiry at every call, and a command never outlasts it.

The server is the real OpenEnv app over the emulator; only the clock measuring the window is fake
(test_episode_faults.py keeps one run on the real clock).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import pytest
from episode_helpers import make_row, ops, policy_id

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.episode.client import ReportEpisode
from pytest_e2b_env.episode.environment import RepairEnvironment
from pytest_e2b_env.episode.server import LoopbackServer, create_app
from pytest_e2b_env.episode.task import load_repair
from pytest_e2b_env.settings import TargetSettings

Factory = Callable[[], ReportEpisode]
EXPIRED = "refused: the policy window expired; the episode scored 0."


class FakeClock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(scope="module")
def clock() -> FakeClock:
    """The clock every environment of this module's server measures its window on."""
    return FakeClock()


@pytest.fixture(scope="module")
def server(target: TargetSettings, clock: FakeClock) -> Iterator[LoopbackServer]:
    """The module's OpenEnv server, its environments on the fake clock."""
    env = functools.partial(RepairEnvironment, clock=clock)
    with LoopbackServer(create_app(env, target=target, max_sessions=4)) as srv:
        yield srv


def test_commands_run_until_the_window_ends(episode: Factory, clock: FakeClock) -> None:
    """A second before the window ends the policy's command still runs."""
    env = episode()
    env.reset(**make_row(policy_seconds=60))
    clock.advance(59)
    assert env.terminal("echo hi") == "hi"
    env.submit()
    assert env.get_reward() == 0.0


def test_a_command_gets_at_most_what_is_left_of_the_window(episode: Factory, clock: FakeClock) -> None:
    """With 1 s of the window left, a command is killed at 1 s, not at limits.command_seconds."""
    env = episode()
    env.reset(**make_row(policy_seconds=60, command_seconds=10))
    clock.advance(59)
    out = env.terminal("echo started; sleep 30")
    assert out == "started\n[killed: the command exceeded its 1 s deadline; the episode goes on]"
    assert env.get_reward() == 0.0


def test_expired_policy_window_commits_zero_and_blocks(
    episode: Factory, clock: FakeClock, emu: Emulator
) -> None:
    """After limits.policy_seconds, the next call commits 0, releases the sandbox and refuses commands."""
    env = episode()
    env.reset(**make_row(policy_seconds=60))
    policy = policy_id(env)
    clock.advance(60)
    mark = emu.ledger_mark()
    assert env.terminal("echo hi") == EXPIRED
    assert ops(emu, mark, "run") == []
    assert policy in {e["sandbox_id"] for e in ops(emu, mark, "kill")}
    assert env.terminal("echo again").startswith("refused:")
    assert env.submit().startswith("refused:")
    assert env.get_reward() == 0.0
    assert env.receipt["phase"] == "expired"


def test_expired_window_at_submit_scores_zero_without_verifier(
    episode: Factory, clock: FakeClock, emu: Emulator
) -> None:
    """Submit after the window: 0 committed, no verifier created, even for a repaired program."""
    env = episode()
    env.reset(**make_row(policy_seconds=60))
    for command in load_repair("weekly-sales"):
        env.terminal(command)
    clock.advance(61)
    mark = emu.ledger_mark()
    env.submit()
    assert env.get_reward() == 0.0
    assert ops(emu, mark, "create") == []
    assert env.receipt["phase"] == "expired"


def test_a_repaired_program_submitted_in_time_scores(episode: Factory, clock: FakeClock) -> None:
    """Submit a second before the window ends: the verifier runs and the repair scores 1."""
    env = episode()
    env.reset(**make_row(policy_seconds=60))
    for command in load_repair("weekly-sales"):
        env.terminal(command)
    clock.advance(59)
    env.submit()
    assert env.get_reward() == 1.0


def test_window_ending_before_the_reward_boundary_is_expired(episode: Factory, clock: FakeClock) -> None:
    """No call during the window: the reward boundary finds it over and commits 0 as expired."""
    env = episode()
    env.reset(**make_row(policy_seconds=60))
    clock.advance(61)
    assert env.get_reward() == 0.0
    assert env.receipt["phase"] == "expired"
