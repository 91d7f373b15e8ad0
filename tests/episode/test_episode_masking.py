"""MaskingReportEpisode: an episode whose infrastructure failed is None at get_reward, after its cleanup."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from episode_helpers import make_row, policy_id

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.episode.client import UNAVAILABLE, MaskingReportEpisode, ReportEpisode
from pytest_e2b_env.episode.server import LoopbackServer
from pytest_e2b_env.errors import CleanupError, InfrastructureError

START = "POST /process.Process/Start"
Factory = Callable[[], ReportEpisode]
Masking = tuple[type[MaskingReportEpisode], Factory]


@pytest.fixture
def masking(server: LoopbackServer) -> Iterator[Masking]:
    """A masking class of its own (its own budget) and a factory of its instances on the module's server."""
    cls = type("MaskingReportEpisode", (MaskingReportEpisode,), {})
    made: list[ReportEpisode] = []

    def make() -> ReportEpisode:
        made.append(cls(server.url))
        return made[-1]

    yield cls, make
    for env in made:
        env._close()


def test_lost_policy_is_none_after_cleanup(masking: Masking, emu: Emulator) -> None:
    """Policy sandbox lost: the tool raises (TRL shows it), get_reward is None once nothing is owned."""
    cls, make = masking
    env = make()
    env.reset(**make_row())
    policy = policy_id(env)
    emu.faults.add(route=START, answer={"lose_sandbox": True}, sandbox=policy)
    with pytest.raises(InfrastructureError):
        env.terminal("ls")
    assert env.get_reward() is None
    assert env.receipt["owned"] == []
    assert policy not in {s["sandbox_id"] for s in emu.sandboxes()}
    assert cls.mask_metrics()["masked"] == 1


def test_failed_reset_tells_the_policy_and_masks(masking: Masking, emu: Emulator) -> None:
    """The policy sandbox cannot be created: reset returns the notice instead of ending the run; None."""
    _, make = masking
    env = make()
    emu.faults.add(route="POST /v2/sandboxes", answer={"status": 500}, times=10)
    assert env.reset(**make_row()) == UNAVAILABLE
    emu.faults.clear()
    with pytest.raises(InfrastructureError):
        env.terminal("ls")
    assert env.get_reward() is None


def test_refused_key_is_never_masked(masking: Masking, emu: Emulator) -> None:
    """401 on create is configuration: reset and get_reward raise under the mask policy too."""
    _, make = masking
    env = make()
    emu.faults.add(route="POST /v2/sandboxes", answer={"status": 401}, times=None)
    with pytest.raises(InfrastructureError, match="AuthenticationException"):
        env.reset(**make_row())
    with pytest.raises(InfrastructureError):
        env.get_reward()


def test_cleanup_failure_is_never_masked(masking: Masking, emu: Emulator) -> None:
    """A policy sandbox that will not die: CleanupError at submit and at get_reward, never None."""
    _, make = masking
    env = make()
    env.reset(**make_row())
    emu.faults.add(route="DELETE /sandboxes/*", answer={"kill_fails": True}, times=None)
    with pytest.raises(CleanupError):
        env.submit()
    with pytest.raises(CleanupError):
        env.get_reward()
    emu.faults.clear()
    with pytest.raises(CleanupError):
        env.get_reward()  # the retry releases it; the episode stays void


def test_over_the_budget_raises(masking: Masking, emu: Emulator) -> None:
    """With no share to spend, the second masked episode of the class raises instead of masking."""
    cls, make = masking
    cls.mask_budget = 0.0
    for attempt in (1, 2):
        env = make()
        env.reset(**make_row())
        emu.faults.add(route=START, answer={"lose_sandbox": True}, sandbox=policy_id(env))
        with pytest.raises(InfrastructureError):
            env.terminal("ls")
        if attempt == 1:
            assert env.get_reward() is None
        else:
            with pytest.raises(InfrastructureError, match="2 of 2 completions masked"):
                env.get_reward()
    assert cls.mask_metrics()["masked"] == 1


def test_scored_episode_counts_toward_the_budget(masking: Masking) -> None:
    """A healthy episode scores as usual under the mask policy and is charged to the budget."""
    cls, make = masking
    env = make()
    env.reset(**make_row())
    env.submit()
    assert env.get_reward() == 0.0
    expected = {"masked": 0, "masked_fraction": 0.0, "mask_budget": 0.05, "mask_consecutive": 8}
    assert cls.mask_metrics() == expected
