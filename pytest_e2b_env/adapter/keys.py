"""Where the plugin keeps its per-process state on ``config.stash`` (no import beyond pytest).

A module of its own so that a dormant plugin can ask whether a runtime was ever made without
importing the catalog.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_e2b_env.adapter.runtime import Runtime
    from pytest_e2b_env.adapter.settings import Settings

settings_key: pytest.StashKey[Settings] = pytest.StashKey()
runtime_key: pytest.StashKey[Runtime] = pytest.StashKey()
