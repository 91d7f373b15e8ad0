"""Fixtures for the emulator's contract tests: one emulator per session, real SDK against it."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from pytest_e2b_env.emulator import Emulator


@pytest.fixture(scope="session")
def emu() -> Iterator[Emulator]:
    """The session's emulator (or an already running one named by PYTEST_E2B_ENV_ATTACH="URL KEY")."""
    attach = os.environ.get("PYTEST_E2B_ENV_ATTACH")
    if attach:
        url, key = attach.split()
        yield Emulator.connect(url, key)
        return
    with Emulator() as emulator:
        yield emulator


@pytest.fixture
def needs_namespaces(emu: Emulator) -> None:
    """Skip, with the emulator's own reason, unless sandboxes get namespace isolation."""
    if emu.isolation != "namespaces":
        pytest.skip(f"emulator isolation is {emu.isolation!r}: {emu.isolation_reason}")


@pytest.fixture
def opts(emu: Emulator) -> dict[str, str]:
    """SDK keyword arguments pointing at the emulator (no global env mutation)."""
    return emu.sdk_opts()


@pytest.fixture
def faults(emu: Emulator) -> Iterator[Any]:
    """The emulator's fault rules, cleared after the test."""
    emu.faults.clear()
    yield emu.faults
    emu.faults.clear()


@pytest.fixture
def run_id() -> str:
    """A metadata tag unique to this test, to find its own sandboxes."""
    return uuid.uuid4().hex[:12]


@pytest.fixture
def sbx(opts: dict[str, str], run_id: str) -> Iterator[Any]:
    """A sync sandbox, killed after the test."""
    from e2b import Sandbox

    sandbox = Sandbox.create(timeout=120, metadata={"test_run": run_id}, **opts)
    yield sandbox
    sandbox.kill()


@pytest.fixture
async def asbx(opts: dict[str, str], run_id: str) -> AsyncIterator[Any]:
    """An async sandbox, killed after the test."""
    from e2b import AsyncSandbox

    sandbox = await AsyncSandbox.create(timeout=120, metadata={"test_run": run_id}, **opts)
    yield sandbox
    await sandbox.kill()


#: Caps small enough that every hardening test stays cheap in memory and time.
SMALL_LIMITS = {
    "body_bytes": 64 << 10,
    "file_bytes": 1 << 20,
    "list_entries": 5000,
    "output_bytes": 256 << 10,
    "stdin_wait_s": 5.0,
}


@pytest.fixture(scope="session")
def small_emu() -> Iterator[Emulator]:
    """An emulator of its own with small limits (see SMALL_LIMITS), for the hardening tests."""
    with Emulator(limits=SMALL_LIMITS) as emulator:
        yield emulator


@pytest.fixture
def small_sbx(small_emu: Emulator) -> Iterator[Any]:
    """A sync sandbox on the small-limits emulator, killed after the test."""
    from e2b import Sandbox

    sandbox = Sandbox.create(timeout=300, **small_emu.sdk_opts())
    yield sandbox
    sandbox.kill()
