"""The search's run: one target, one case host for the subject, closed in order.

The host is the catalog's (:class:`~pytest_e2b_env.catalog.host.CaseHost`, forked from a
:class:`~pytest_e2b_env.catalog.hostfork.HostTemplate` that imported the subject once): it holds
the SDK's settings for the target and never the target's control key. Offline the target is a
local emulator; live (``live=True``) it is the fault proxy before real E2B (``E2B_API_KEY``, and
the upstream ``validate --live`` uses), with at most ``max_sandboxes`` creates forwarded.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_e2b_env.catalog.host import CaseHost
    from pytest_e2b_env.targets import Target


class ExploreSession:
    """``with ExploreSession(spec) as s: s.run(schedule)``: a target and the subject's case host."""

    def __init__(
        self,
        spec: str,
        contract_spec: str | None = None,
        run_id: str | None = None,
        *,
        kind: str = "reward",
        extra_tools: list[str] | None = None,
        live: bool = False,
        max_sandboxes: int | None = None,
    ) -> None:
        self.spec = spec
        self.contract_spec = contract_spec
        self.run_id = run_id
        self.kind = kind
        self.extra_tools = list(extra_tools or [])
        self.live = live
        self.max_sandboxes = max_sandboxes
        self.target: Target | None = None
        self.host: CaseHost | None = None
        self._template: Any = None

    def __enter__(self) -> ExploreSession:
        from pytest_e2b_env.catalog import procs
        from pytest_e2b_env.catalog.host import CaseHost
        from pytest_e2b_env.catalog.hostfork import HostTemplate
        from pytest_e2b_env.settings import TargetSettings, new_run_id
        from pytest_e2b_env.targets import open_target

        try:
            spec = {"spec": self.spec, "kind": self.kind, "contract": self.contract_spec}
            self._template = HostTemplate(spec, procs.RUN_TOKEN)
            info = self._template.describe(self.kind, self.spec, self.contract_spec)  # ConfigError: bad spec
            run_id = self.run_id or new_run_id()
            if self.live:
                settings = TargetSettings.from_env(live=True, run_id=run_id)
                settings = settings.replace(max_sandboxes=self.max_sandboxes)
            else:
                settings = TargetSettings(run_id=run_id)
            self.target = open_target(settings)
            self.host = CaseHost(self.target.sdk_env(), info, self._template)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    @property
    def cap(self) -> Any:
        """The live fault proxy's create cap (``forwarded``, ``refused``, ``limit``), else None."""
        return getattr(self.target.backend, "cap", None) if self.target is not None else None

    def run(self, schedule: Any) -> Any:
        """One schedule's :class:`~pytest_e2b_env.explore.run.Attempt`.

        A run during which the cap refused a create is cut short by the target, not by the subject:
        it is marked ``stopped`` and judged by nothing.
        """
        from pytest_e2b_env.explore.run import run_schedule

        if self.host is None or self.target is None:
            raise RuntimeError("use ExploreSession as a context manager: the host and target are not open")
        cap = self.cap
        refused = cap.refused if cap is not None else 0
        attempt = run_schedule(schedule, self.host, self.target, self.extra_tools)
        if cap is not None and cap.refused > refused:
            attempt.stopped, attempt.broken = cap.message(), []
        return attempt

    def __exit__(self, *exc: object) -> None:
        # The host first (its subject's release runs while the target still answers), then the target.
        for closer in (self.host, self.target, self._template):
            if closer is not None:
                with contextlib.suppress(Exception):
                    closer.close()
        self.host = self.target = self._template = None
