"""Episode fixtures: one emulator per session, one real OpenEnv server on loopback per module.

The real e2b SDK talks to the emulator; the real ``ReportEpisode`` talks to the real server over
its WebSocket. Nothing here mocks the code under test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.episode.client import ReportEpisode
from pytest_e2b_env.episode.server import LoopbackServer, create_app
from pytest_e2b_env.settings import TargetSettings
from pytest_e2b_env.targets.tags import RUN_KEY


@pytest.fixture(scope="session")
def emu() -> Iterator[Emulator]:
    """The session's emulator."""
    with Emulator() as emulator:
        yield emulator


@pytest.fixture(scope="session")
def target(emu: Emulator) -> TargetSettings:
    """SDK settings for the emulator with a run id of this test session."""
    return TargetSettings(
        api_key=emu.api_key,
        api_url=emu.url,
        sandbox_url=emu.url,
        run_id=f"episode-tests-{uuid.uuid4().hex[:8]}",
    )


@pytest.fixture(scope="module")
def server(target: TargetSettings) -> Iterator[LoopbackServer]:
    """A real OpenEnv server for this module (four sessions at most)."""
    with LoopbackServer(create_app(target=target, max_sessions=4)) as srv:
        yield srv


@pytest.fixture
def episode(server: LoopbackServer) -> Iterator[Callable[[], ReportEpisode]]:
    """Factory of clients bound to the module's server; their sessions close after the test."""
    made: list[ReportEpisode] = []

    def make() -> ReportEpisode:
        made.append(ReportEpisode(server.url))
        return made[-1]

    yield make
    for env in made:
        env._close()


@pytest.fixture(autouse=True)
def no_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    """After every emulator test: faults cleared, and no sandbox of this run left alive."""
    yield
    if "emu" not in request.fixturenames:
        return
    emu: Emulator = request.getfixturevalue("emu")
    run = request.getfixturevalue("target").run_id
    emu.faults.clear()
    alive = [s["sandbox_id"] for s in emu.sandboxes() if (s.get("metadata") or {}).get(RUN_KEY) == run]
    if alive:
        from pytest_e2b_env.episode.sandboxes import confirm_gone

        confirm_gone(request.getfixturevalue("target"), alive)
        pytest.fail(f"sandboxes left alive after the test: {alive}")
