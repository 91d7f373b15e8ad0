"""The search's run: one target, one case host for the subject, closed in order.

The host is the catalog's (:class:`~pytest_e2b_env.catalog.host.CaseHost`, forked from a
:class:`~pytest_e2b_env.catalog.hostfork.HostTemplate` that imported the subject once): it holds
the SDK's settings for the target and never the target's control key.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_e2b_env.catalog.host import CaseHost
    from pytest_e2b_env.targets import Target


class ExploreSession:
    """``with ExploreSession(spec) as s: s.run(schedule)``: an emulator and the subject's case host."""

    def __init__(self, spec: str, contract_spec: str | None = None, run_id: str | None = None) -> None:
        self.spec = spec
        self.contract_spec = contract_spec
        self.run_id = run_id
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
            spec = {"spec": self.spec, "kind": "reward", "contract": self.contract_spec}
            self._template = HostTemplate(spec, procs.RUN_TOKEN)
            info = self._template.describe("reward", self.spec, self.contract_spec)  # ConfigError: bad spec
            self.target = open_target(TargetSettings(run_id=self.run_id or new_run_id()))
            self.host = CaseHost(self.target.sdk_env(), info, self._template)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def run(self, schedule: Any) -> Any:
        """One schedule's :class:`~pytest_e2b_env.explore.run.Attempt`."""
        from pytest_e2b_env.explore.run import run_schedule

        if self.host is None or self.target is None:
            raise RuntimeError("use ExploreSession as a context manager: the host and target are not open")
        return run_schedule(schedule, self.host, self.target)

    def __exit__(self, *exc: object) -> None:
        # The host first (its subject's release runs while the target still answers), then the target.
        for closer in (self.host, self.target, self._template):
            if closer is not None:
                with contextlib.suppress(Exception):
                    closer.close()
        self.host = self.target = self._template = None
