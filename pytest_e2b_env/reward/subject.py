"""The catalog's reward subject: ``pytest_e2b_env.reward:reward_subject``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pytest_e2b_env.reward.pool import RewardPool

RewardFn = Callable[..., Awaitable[list[float | None]]]


@contextlib.asynccontextmanager
async def _pool_context(**kwargs: Any) -> AsyncIterator[RewardFn]:
    pool = RewardPool(**kwargs)
    try:
        yield pool.code_reward
    finally:
        await pool.close()  # close errors (CleanupError) propagate: that is the subject's cleanup


def reward_subject(**kwargs: Any) -> contextlib.AbstractAsyncContextManager[RewardFn]:
    """Zero-argument factory: an async context yielding ``pool.code_reward``; leaving it closes the pool.

    The e2b SDK reads its target from ``E2B_API_URL``/``E2B_SANDBOX_URL``/``E2B_API_KEY`` and the
    run id from ``PYTEST_E2B_ENV_RUN``, both set by the plugin. Keyword arguments go to
    :class:`RewardPool`; the catalog passes none, so it validates the pool ``train.py`` builds
    (the same defaults, ``create_interval`` included: see
    ``pytest_e2b_env.settings.DEFAULT_CREATE_INTERVAL``).
    """
    return _pool_context(**kwargs)


def preload() -> None:
    """Assemble the runner and the isolation probe every pool installs, and start nothing.

    The catalog runs this once where it forks its case hosts from (``preload`` in the contract):
    each host then finds both texts assembled instead of parsing the standalone modules again
    (about 0.1 s of CPU per host). Nothing here starts a thread, a socket or a sandbox.
    """
    from pytest_e2b_env.reward import protocol

    protocol.runner_text()
    protocol.probe_text()


#: What the catalog needs to know (docs/catalog.md): the classes this subject raises, what to do
#: once before forking its hosts, and that it needs the sandboxes E2B gives.
reward_subject.e2b_contract = {  # type: ignore[attr-defined]
    "raises_classes": ["InfrastructureError", "CleanupError"],
    "preload": preload,
    # The pool isolates each case inside its sandbox (nested namespaces, an unprivileged account):
    # below the emulator's namespaces level its workers cannot start.
    "needs_isolation": True,
}


def masking_reward_subject() -> contextlib.AbstractAsyncContextManager[RewardFn]:
    """The same pool with ``on_infrastructure="mask"`` (the default budget), as ``train.py`` builds it.

    ``pytest-e2b-env validate --reward-subject pytest_e2b_env.reward:masking_reward_subject``
    runs the catalog against the masking policy.
    """
    return _pool_context(on_infrastructure="mask")


masking_reward_subject.e2b_contract = reward_subject.e2b_contract  # type: ignore[attr-defined]
