"""``Backend``: what the emulator and the fault proxy both are, so nothing asks which one it got.

:class:`~pytest_e2b_env.emulator.Emulator` (offline) and :class:`~pytest_e2b_env.proxy.FaultProxy`
(live) implement it with the same names; :class:`~pytest_e2b_env.targets.Target` wraps either. A
malformed fault rule raises :class:`~pytest_e2b_env.errors.FaultRuleError` from both.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


def fault_rule_message(exc: Exception) -> str:
    """One line naming each bad field of a rejected fault rule, for both backends' FaultRuleError.

    ``exc`` is pydantic's ``ValidationError`` (read through its ``errors()``) or any other
    ``ValueError``; the rule's own values are never echoed.
    """
    errors = getattr(exc, "errors", None)
    if callable(errors):
        reasons = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'rule'}: {str(e['msg']).removeprefix('Value error, ')}"
            for e in errors()
        )
    else:
        reasons = str(exc)
    return f"bad fault rule: {reasons}"[:1000]


@runtime_checkable
class Faults(Protocol):
    """The wire fault plan: ``add(route=, answer=, times=, sandbox=, contains=, after=)``, ``clear()`` and
    ``list()`` (every rule with its ``seen`` and ``fired`` counters)."""

    def add(
        self,
        route: str = "*",
        answer: Any = None,
        times: int | None = 1,
        sandbox: str | None = None,
        contains: str | None = None,
        after: int = 0,
    ) -> str: ...

    def clear(self) -> None: ...

    def list(self) -> list[dict[str, Any]]: ...


@runtime_checkable
class Backend(Protocol):
    """A running E2B-compatible endpoint with wire faults and a request ledger."""

    @property
    def url(self) -> str:
        """The API and sandbox URL the SDK talks to."""
        ...

    @property
    def api_key(self) -> str:
        """The key the SDK uses with it (a secret: never print it)."""
        ...

    @property
    def control_key(self) -> str:
        """The key of its ``/_emulator/*`` control API (a secret: never print it)."""
        ...

    @property
    def isolation(self) -> str:
        """How sandboxes are isolated: ``namespaces`` / ``process`` (emulator), ``e2b`` (live)."""
        ...

    @property
    def faults(self) -> Faults:
        """The wire fault plan."""
        ...

    def sdk_env(self) -> dict[str, str]:
        """Environment variables pointing the e2b SDK here."""
        ...

    def sdk_opts(self) -> dict[str, Any]:
        """The same as keyword arguments: ``Sandbox.create(**backend.sdk_opts())``."""
        ...

    def sandboxes(self) -> list[dict[str, Any]]:
        """Sandboxes alive now, as ``{"sandbox_id", "metadata", ...}`` rows."""
        ...

    def ledger_mark(self) -> int:
        """A ledger position to read from later."""
        ...

    def ledger(self, since: int = 0) -> list[dict[str, Any]]:
        """Ledger entries since ``since``, oldest first."""
        ...

    def creates_in_flight(self) -> int:
        """Create requests received and not yet answered (their ledger entries are to come)."""
        ...

    def close(self) -> None:
        """Stop serving (the emulator also kills its sandboxes)."""
        ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc_info: Any) -> Any: ...
