"""The emulator and the fault proxy are one Backend: same names, same bad-rule error."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.errors import ConfigError, FaultRuleError
from pytest_e2b_env.proxy import FaultProxy
from pytest_e2b_env.targets.backend import Backend, Faults

BAD_ANSWER = {"status": 429, "lose_sandbox": True}


@pytest.fixture(scope="module")
def backends() -> Iterator[dict[str, Any]]:
    """A running emulator and a fault proxy in front of it."""
    with Emulator() as emulator, FaultProxy(emulator.url, emulator.url, api_key=emulator.api_key) as proxy:
        yield {"emulator": emulator, "proxy": proxy}


def _members(protocol: type) -> list[str]:
    return sorted(
        name for name in vars(protocol) if not name.startswith("_") or name in ("__enter__", "__exit__")
    )


@pytest.mark.parametrize("kind", ["emulator", "proxy"])
def test_each_implements_the_protocol(backends: dict[str, Any], kind: str) -> None:
    """Emulator and FaultProxy pass isinstance(Backend) and expose every member by the same name."""
    backend = backends[kind]
    assert isinstance(backend, Backend)
    assert isinstance(backend.faults, Faults)
    for name in _members(Backend):
        assert hasattr(backend, name), f"{kind} lacks {name}"
    assert backend.url.startswith("http://127.0.0.1:")
    assert set(backend.sdk_opts()) >= {"api_key", "api_url", "sandbox_url"}
    assert isinstance(backend.ledger(since=backend.ledger_mark()), list)


def test_both_take_the_same_arguments() -> None:
    """faults.add, ledger and sdk_opts have the same parameters on both."""
    from pytest_e2b_env.emulator.handle import Faults as EmulatorFaults
    from pytest_e2b_env.proxy import ProxyFaults

    def params(fn: Any) -> list[str]:
        return list(inspect.signature(fn).parameters)

    assert params(EmulatorFaults.add) == params(ProxyFaults.add)
    assert params(Emulator.ledger) == params(FaultProxy.ledger)
    assert params(Emulator.sdk_opts) == params(FaultProxy.sdk_opts)


@pytest.mark.parametrize("kind", ["emulator", "proxy"])
def test_bad_rule_raises_fault_rule_error(backends: dict[str, Any], kind: str) -> None:
    """A malformed rule raises FaultRuleError (a ConfigError) naming the problem, on both."""
    faults = backends[kind].faults
    with pytest.raises(FaultRuleError, match=r"bad fault rule.*exactly one of status") as info:
        faults.add(route="*", answer=BAD_ANSWER)
    assert isinstance(info.value, ConfigError)
    faults.add(route="*", answer={"status": 503})
    faults.clear()
