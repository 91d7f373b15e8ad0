"""The catalog's reward subject: ``pytest_e2b_env.reward:reward_subject``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pytest_e2b_env.reward.pool import RewardPool

RewardFn = Callable[..., Awaitable[list[float]]]
#: Set by the catalog while a case runs: "offline" on the local emulator, "live" on real E2B.
MODE_ENV = "PYTEST_E2B_ENV_MODE"
#: Worker-creation pacing on the local emulator. The pool's default (1.0 s) is a courtesy to
#: real E2B's create rate limit; the emulator has none, and every catalog case that needs a
#: second worker (a batch of two, a replacement, a retry) would otherwise wait out a second.
OFFLINE_CREATE_INTERVAL = 0.05


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
    :class:`RewardPool` (the catalog passes none). Offline (``PYTEST_E2B_ENV_MODE=offline``, the
    local emulator) workers are paced ``OFFLINE_CREATE_INTERVAL`` apart, not the pool's 1 s.
    """
    if os.environ.get(MODE_ENV) == "offline":
        kwargs.setdefault("create_interval", OFFLINE_CREATE_INTERVAL)
    return _pool_context(**kwargs)


#: What the catalog needs to know (docs/catalog.md): the classes this subject raises.
reward_subject.e2b_contract = {"raises_classes": ["InfrastructureError", "CleanupError"]}  # type: ignore[attr-defined]
