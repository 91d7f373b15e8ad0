"""Shared fixtures of the catalog tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_e2b_env.settings import TargetSettings, new_run_id
from pytest_e2b_env.targets import Target, open_target


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    """One emulator for the module."""
    opened = open_target(TargetSettings(run_id=new_run_id()))
    try:
        yield opened
    finally:
        opened.close()
