"""The target a run talks to: the local emulator (offline) or the fault proxy before real E2B (live).

Both are a :class:`~pytest_e2b_env.targets.backend.Backend` (``sdk_env``, ``faults``, ``sandboxes``,
``ledger_mark``, ``ledger``...), so drivers, verdicts and fixtures never ask which one they got.
The SDK settings reach code under test only through :meth:`Target.scoped_env`, which restores
the process environment afterwards so nothing leaks into the user's session.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from pytest_e2b_env.environ import scoped_environ
from pytest_e2b_env.errors import ConfigError, InfrastructureError
from pytest_e2b_env.settings import TargetSettings
from pytest_e2b_env.targets.backend import Backend
from pytest_e2b_env.targets.tags import created_ids, kill_all, kill_and_confirm, unresolved


class Target:
    """An opened emulator or fault proxy plus the run id stamped on everything.

    ``backend`` is a :class:`~pytest_e2b_env.targets.backend.Backend`; :func:`open_target` makes one.
    """

    def __init__(self, backend: Backend, settings: TargetSettings, closer: Any = None) -> None:
        self.backend = backend
        #: What was asked for (live: the upstream E2B); :attr:`settings` points at the backend.
        self.requested = settings
        self.settings = settings.replace(
            api_key=backend.api_key, api_url=backend.url, sandbox_url=backend.url
        )
        self._closer = closer

    @property
    def mode(self) -> str:
        """``offline`` (the local emulator) or ``live`` (real E2B behind the fault proxy)."""
        return self.settings.mode

    @property
    def run_id(self) -> str:
        """The run id every sandbox of this target is tagged with."""
        return self.settings.run_id

    def describe(self) -> dict[str, Any]:
        """JSON-ready description for manifests and ``metrics.json``; never the key."""
        upstream = self.requested.api_url if self.requested.live else self.endpoint
        return {
            "mode": self.mode,
            "offline": not self.requested.live,
            "run_id": self.run_id,
            "api_url": upstream or self.requested.describe()["api_url"],
            "isolation": self.isolation,
        }

    @property
    def isolation(self) -> str:
        """The emulator's isolation level, or ``"e2b"`` live."""
        return str(self.backend.isolation)

    @property
    def isolation_reason(self) -> str:
        """Why the emulator runs at its level, with the bounds in force ("" live)."""
        return str(getattr(self.backend, "isolation_reason", "") or "")

    @property
    def endpoint(self) -> str:
        """The URL the SDK talks to (never a key)."""
        return str(self.backend.url)

    @property
    def faults(self) -> Any:
        """The wire fault plan: ``add(route=, answer=, times=, ...)`` and ``clear()``."""
        return self.backend.faults

    def sdk_env(self) -> dict[str, str]:
        """The SDK variables that point the real SDK at this target, plus the run id."""
        return {key: value for key, value in self.settings.to_env().items() if value is not None}

    def sdk_opts(self) -> dict[str, Any]:
        """The same as keyword arguments: ``Sandbox.create(**target.sdk_opts())``."""
        return dict(self.backend.sdk_opts())

    @property
    def api_key(self) -> str:
        """The key the SDK must use with this target (a secret: never print it)."""
        return str(self.backend.api_key)

    @property
    def server_pid(self) -> int | None:
        """The process serving the target (the emulator's child; live, this process's proxy), if known."""
        pid = getattr(self.backend, "pid", None)
        return pid if isinstance(pid, int) else None

    @property
    def control_key(self) -> str:
        """The key of the backend's control API, for a case host in another process (a secret)."""
        return str(self.backend.control_key)

    def scoped_env(self) -> contextlib.AbstractContextManager[None]:
        """Point the SDK at the target for the duration of a block only."""
        return scoped_environ(self.sdk_env())

    def sandboxes(self) -> list[dict[str, Any]]:
        """Sandboxes alive right now (on the emulator, or seen alive through the proxy)."""
        return list(self.backend.sandboxes())

    def alive_ids(self) -> set[str]:
        """Ids of the sandboxes alive right now."""
        return {str(s["sandbox_id"]) for s in self.sandboxes()}

    def ledger_mark(self) -> int:
        """A position in the ledger to slice from."""
        return int(self.backend.ledger_mark())

    def ledger(self, since: int = 0) -> list[dict[str, Any]]:
        """Ledger entries since ``since``, oldest first."""
        return list(self.backend.ledger(since=since))

    def wait_for_creates(self, timeout: float) -> int:
        """Wait (at most ``timeout`` s) until no create request is in flight; how many still are.

        A create the subject gave up on (a cancelled call) still makes its sandbox when the
        answer is ready; reading the ledger before that would miss it here and blame it on the
        next case.
        """
        deadline = time.monotonic() + timeout
        while (left := self.backend.creates_in_flight()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return int(left)

    def kill(self, sandbox_id: str) -> bool:
        """Kill one sandbox through the real SDK and confirm it gone (used for leak cleanup)."""
        return kill_and_confirm(sandbox_id, self._kill_opts()).confirmed

    def kill_all(self, ids: list[str]) -> list[str]:
        """Kill and confirm gone each of ``ids``; the ids that would not die."""
        return unresolved(kill_all(ids, self._kill_opts()))

    def _kill_opts(self) -> dict[str, Any]:
        return {**self.sdk_opts(), "request_timeout": 10}

    def created_ids(self, since: int = 0) -> list[str]:
        """Sandboxes this target's ledger recorded as created since ``since``, oldest first."""
        return created_ids(self.ledger(since=since))

    def sweep(self) -> list[str]:
        """Kill every sandbox created through this target that is still alive; the ids that would not die.

        Exactly what this target's ledger saw created, whatever their metadata (code under test may
        tag badly, or not at all): under xdist every worker shares the run id but has a target of
        its own, and live they share one E2B account, so sweeping by ledger keeps one worker from
        killing another worker's sandboxes in the middle of a case.
        """
        alive = self.alive_ids()
        return self.kill_all([sid for sid in self.created_ids() if sid in alive])

    def close(self) -> None:
        """Stop the emulator or proxy (the emulator kills its sandboxes on exit)."""
        if self._closer is not None:
            closer, self._closer = self._closer, None
            closer()

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def open_target(settings: TargetSettings) -> Target:
    """The only way to open a target: the emulator (``mode="offline"``) or the fault proxy before
    real E2B at ``settings.api_url`` (``mode="live"``, e.g. ``TargetSettings.from_env(live=True)``).

    The returned :class:`Target` is a context manager; leaving it (or ``close()``) stops what it
    started.
    """
    if settings.live:
        if not settings.api_key:
            raise ConfigError("--e2b-live needs E2B_API_KEY in the environment; export it or drop --e2b-live")
        try:
            from pytest_e2b_env.proxy import FaultProxy
        except ImportError as exc:
            raise InfrastructureError(f"the live fault proxy is unavailable: {type(exc).__name__}") from None
        proxy = FaultProxy(
            settings.api_url,
            settings.sandbox_url,
            api_key=settings.api_key,
            max_creates=settings.max_sandboxes,
        )
        proxy.__enter__()
        return Target(proxy, settings, closer=proxy.close)
    from pytest_e2b_env.emulator import Emulator

    emulator = Emulator()
    emulator.__enter__()
    return Target(emulator, settings, closer=emulator.close)
