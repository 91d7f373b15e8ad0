"""pytest-e2b-env: prove a TRL reward or OpenEnv episode on E2B is safe to train on.

The public facade. Names resolve lazily so that loading the pytest plugin (which imports
this package) never pulls in the e2b SDK, openenv, torch or trl.

PYTEST_DONT_REWRITE: the console script imports this package before pytest starts, and the
package has no asserts to rewrite; the marker keeps pytest from warning that it was imported early.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pytest_e2b_env.errors import (
    CleanupError,
    ConfigError,
    E2BEnvError,
    EmulatorError,
    InfrastructureError,
)

if TYPE_CHECKING:
    from pytest_e2b_env.emulator import Emulator
    from pytest_e2b_env.episode import ReportEpisode, create_app
    from pytest_e2b_env.reward import RewardPool

__version__ = "0.1.0"

_LAZY = {
    "Emulator": "pytest_e2b_env.emulator",
    "RewardPool": "pytest_e2b_env.reward",
    "ReportEpisode": "pytest_e2b_env.episode",
    "create_app": "pytest_e2b_env.episode",
}

__all__ = [
    "CleanupError",
    "ConfigError",
    "E2BEnvError",
    "Emulator",
    "EmulatorError",
    "InfrastructureError",
    "ReportEpisode",
    "RewardPool",
    "__version__",
    "create_app",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_e2b_env' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
