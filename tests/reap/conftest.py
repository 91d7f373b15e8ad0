"""Fixtures for the reap tests: an emulator and helpers to tag sandboxes like our code does."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def emulator() -> Iterator[Any]:
    """One local emulator for the module; tests keep apart by unique run ids."""
    from pytest_e2b_env.emulator import Emulator

    with Emulator() as emu:
        yield emu


@pytest.fixture
def sdk_opts(emulator: Any) -> dict[str, str]:
    """SDK options for the emulator's control plane (what reap needs offline)."""
    return {"api_key": emulator.api_key, "api_url": emulator.url, "sandbox_url": emulator.url}


@pytest.fixture
def run_id() -> str:
    """A fresh run id, so tests sharing the emulator never see each other's sandboxes."""
    return f"reap-test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_tagged(sdk_opts: dict[str, str]) -> Callable[..., list[str]]:
    """Create ``n`` sandboxes carrying ``pytest_e2b_env_run=<run>`` (or other metadata)."""
    from e2b import Sandbox

    def make(n: int, run: str | None, **metadata: str) -> list[str]:
        tags = {**metadata, **({"pytest_e2b_env_run": run} if run else {})}
        return [Sandbox.create(timeout=300, metadata=tags, **sdk_opts).sandbox_id for _ in range(n)]

    return make


@pytest.fixture
def alive(emulator: Any) -> Callable[[], dict[str, dict[str, Any]]]:
    """A function giving the emulator's live sandboxes by id."""

    def current() -> dict[str, dict[str, Any]]:
        return {s["sandbox_id"]: s for s in emulator.sandboxes()}

    return current
