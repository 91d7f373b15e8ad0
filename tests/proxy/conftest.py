"""Fixtures for the fault proxy tests: an emulator upstream and a proxy in front of it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytest_e2b_env.proxy import FaultProxy


@pytest.fixture(scope="module")
def upstream() -> Iterator[Any]:
    """The local emulator, standing in for real E2B behind the proxy."""
    from pytest_e2b_env.emulator import Emulator

    with Emulator() as emu:
        yield emu


@pytest.fixture
def proxy(upstream: Any) -> Iterator[FaultProxy]:
    """A fresh fault proxy in front of the emulator (no rules, empty ledger)."""
    with FaultProxy(upstream.url, upstream.url, api_key=upstream.api_key) as p:
        yield p


@pytest.fixture
def sdk(proxy: FaultProxy) -> Any:
    """An e2b client bound to the proxy, so no test touches os.environ."""
    import e2b

    return e2b.E2B(**proxy.sdk_opts())
