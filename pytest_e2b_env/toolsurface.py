"""The model tools TRL derives from an ``environment_factory`` class: one definition for everyone.

TRL 1.16 (``GRPOTrainer.__init__`` and ``_calculate_rewards``) lists
``inspect.getmembers(type(env), predicate=inspect.isfunction)`` and exposes every name other
than ``reset`` and ``get_reward`` that does not start with ``_``. Listing on the class keeps
properties unevaluated; instance attributes and classmethods are therefore never tools. The
catalog's tool-surface cases and the training warm-up both use this, so they see what TRL sees.
"""

from __future__ import annotations

import inspect
from typing import Any

NOT_TOOLS = ("reset", "get_reward")


def tool_names(cls: type) -> list[str]:
    """Names of the methods TRL turns into model tools, sorted."""
    return sorted(
        name
        for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
        if name not in NOT_TOOLS and not name.startswith("_")
    )


def tool_methods(cls: type) -> list[Any]:
    """The tools bound to an uninitialised probe (``__init__`` is not run; nothing is allocated)."""
    probe: Any = object.__new__(cls)
    return [getattr(probe, name) for name in tool_names(cls)]
