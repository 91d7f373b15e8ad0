"""The plugin's fixtures: the target, sandboxes, the reward pool, episodes, faults and the catalog.

Every sandbox these fixtures make carries ``{"pytest_e2b_env_run": <run id>, "role": ...}``
metadata and a server-side lifetime; at teardown every sandbox created while the fixture
lived (read from the target's ledger, so it holds for code under test too) is killed and
confirmed gone, and a leftover fails the test's teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_e2b_env.catalog.model import Case
    from pytest_e2b_env.targets import Target

DEFAULT_LIFETIME = 300
REFERENCE_REWARD = "pytest_e2b_env.reward:reward_subject"
REFERENCE_EPISODE = "pytest_e2b_env.episode:ReportEpisode"


def _runtime(config: pytest.Config) -> Any:
    from pytest_e2b_env.adapter.items import ensure_runtime

    return ensure_runtime(config)


def _leftovers(target: Target, mark: int) -> list[str]:
    """Kill every sandbox created since ``mark`` that is still alive; return the ones that stayed."""
    alive = target.alive_ids()
    return target.kill_all([sid for sid in target.created_ids(since=mark) if sid in alive])


@pytest.fixture(scope="session")
def e2b_target(pytestconfig: pytest.Config) -> Target:
    """The session's target: the local emulator offline, the fault proxy before real E2B live.

    ``.mode``, ``.run_id``, ``.isolation``, ``.sdk_env()``, ``.scoped_env()``, ``.faults``,
    ``.sandboxes()``, ``.ledger_mark()`` / ``.ledger(since)``.
    """
    target: Target = _runtime(pytestconfig).target()
    return target


@pytest.fixture
def e2b_faults(e2b_target: Target) -> Iterator[Any]:
    """The wire fault plan (``add(route=, answer=, times=, ...)``); cleared after the test."""
    e2b_target.faults.clear()
    yield e2b_target.faults
    e2b_target.faults.clear()


@pytest.fixture
def sandbox_factory(e2b_target: Target) -> Iterator[Callable[..., Any]]:
    """Create sandboxes with the real SDK: ``sandbox_factory(role="test", **create_kwargs)``.

    Each gets the run-id metadata and a lifetime; all are killed and confirmed gone at teardown.
    """
    from e2b import Sandbox

    from pytest_e2b_env.targets.tags import tags

    mark = e2b_target.ledger_mark()

    def create(role: str = "test", **kwargs: Any) -> Any:
        metadata = {**kwargs.pop("metadata", {}), **tags(e2b_target, role)}
        kwargs.setdefault("timeout", DEFAULT_LIFETIME)
        return Sandbox.create(metadata=metadata, **e2b_target.sdk_opts(), **kwargs)

    yield create
    e2b_target.faults.clear()
    stuck = _leftovers(e2b_target, mark)
    if stuck:
        pytest.fail(f"sandboxes would not die at teardown: {', '.join(stuck)}", pytrace=False)


@pytest.fixture
def policy_sandbox(sandbox_factory: Callable[..., Any]) -> Any:
    """A policy sandbox (network allowed), killed at teardown."""
    return sandbox_factory(role="policy")


@pytest.fixture
def verifier_sandbox(sandbox_factory: Callable[..., Any]) -> Any:
    """A verifier sandbox with internet access off, killed at teardown."""
    return sandbox_factory(role="verifier", allow_internet_access=False)


def _subject(config: pytest.Config, kind: str, default: str) -> Callable[[], Any]:
    from pytest_e2b_env.catalog.contract import load_subject

    runtime = _runtime(config)
    subject = runtime.local_subject(kind) or load_subject(default, kind)  # the user's test calls it here
    return subject.factory


@pytest.fixture
def reward_pool(pytestconfig: pytest.Config, e2b_target: Target) -> Iterator[Any]:
    """What the reward subject's factory returns (ini ``e2b_reward_subject``, else the reference).

    The SDK points at the target while the test runs; leave the subject's context (or close the
    pool) in the test. Sandboxes left alive are killed at teardown and fail it.
    """
    factory = _subject(pytestconfig, "reward", REFERENCE_REWARD)
    mark = e2b_target.ledger_mark()
    with e2b_target.scoped_env():
        yield factory()
    e2b_target.faults.clear()
    stuck = _leftovers(e2b_target, mark)
    if stuck:
        pytest.fail(f"reward subject left sandboxes that would not die: {', '.join(stuck)}", pytrace=False)


@pytest.fixture
def episode_factory(pytestconfig: pytest.Config, e2b_target: Target) -> Iterator[Callable[[], Any]]:
    """A zero-argument callable making fresh episode instances, as TRL's ``environment_factory``.

    Uses ini ``e2b_episode_subject``, else the reference ``ReportEpisode``; the SDK points at the
    target during the test and every sandbox left alive is killed at teardown.
    """
    factory = _subject(pytestconfig, "episode", REFERENCE_EPISODE)
    mark = e2b_target.ledger_mark()
    with e2b_target.scoped_env():
        yield factory
    e2b_target.faults.clear()
    stuck = _leftovers(e2b_target, mark)
    if stuck:
        pytest.fail(f"episodes left sandboxes that would not die: {', '.join(stuck)}", pytrace=False)


@pytest.fixture(scope="session")
def case_catalog(pytestconfig: pytest.Config) -> list[Case]:
    """Every catalog case (bundled or ``--e2b-cases``, plus ``pytest_e2b_env_cases`` additions)."""
    cases: list[Case] = _runtime(pytestconfig).cases(pytestconfig)
    return cases
