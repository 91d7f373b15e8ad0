"""The one exception hierarchy of pytest-e2b-env.

Anything that must never become a reward derives from :class:`InfrastructureError`.
Messages name types, ids and values, never secrets or raw sandbox payloads.
"""

from __future__ import annotations

from collections.abc import Iterable


class E2BEnvError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(E2BEnvError, ValueError):
    """A user-supplied value is malformed; the message names the value and the fix."""


class FaultRuleError(ConfigError):
    """A fault rule given to ``target.faults.add`` is malformed (same type for the emulator and the proxy)."""


class InfrastructureError(E2BEnvError):
    """The sandbox infrastructure failed; the affected work yields no score at all."""


class CleanupError(InfrastructureError):
    """Sandboxes could not be confirmed gone; ``ids`` lists every unresolved sandbox."""

    def __init__(self, message: str, ids: Iterable[str] = ()) -> None:
        self.ids: tuple[str, ...] = tuple(ids)
        suffix = f" (unresolved sandbox ids: {', '.join(self.ids)})" if self.ids else ""
        super().__init__(message + suffix)


class PreflightError(InfrastructureError):
    """A new reward worker failed the isolation preflight; the pool never runs candidates on it."""


class EmulatorError(E2BEnvError):
    """The local emulator could not start or was misused (bad port, port in use...)."""


class MissingExtraError(ConfigError):
    """A feature needs packages of an optional extra that is not installed; the message names it."""
