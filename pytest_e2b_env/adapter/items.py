"""Catalog cases as pytest items: one :class:`CaseItem` per case, id = case id, stable order.

Items hang under a :class:`CatalogCollector` named ``e2b-catalog`` (node ids
``e2b-catalog::<case-id>``), so ``-k``, ``-x``, ``--lf`` and xdist treat them like any test.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from typing import Any

import pytest

from pytest_e2b_env.adapter.settings import Settings
from pytest_e2b_env.catalog.loader import CaseLoadError, load_cases
from pytest_e2b_env.catalog.model import Case
from pytest_e2b_env.errors import InfrastructureError
from pytest_e2b_env.target import Target, open_target
from pytest_e2b_env.target.settings import TargetSettings, openenv_url

COLLECTOR_NAME = "e2b-catalog"
REFERENCE_EPISODE = "pytest_e2b_env.episode:ReportEpisode"
settings_key = pytest.StashKey[Settings]()
runtime_key = pytest.StashKey["Runtime"]()


class CaseFailure(Exception):
    """A case's expectations were not met; the message lists each failed criterion."""


class Runtime:
    """Per-process state: the target (opened on first use) and the loaded catalog."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._target: Target | None = None
        self._failure: str | None = None
        self._cases: list[Case] | None = None
        self.stale_runs: list[str] = []  # live only: earlier runs with sandboxes still alive

    def target(self) -> Target:
        """The emulator or live proxy of this process, started on first use."""
        if self._failure is not None:
            raise InfrastructureError(self._failure)
        if self._target is None:
            try:
                wanted = TargetSettings.from_env(live=self.settings.live, run_id=self.settings.run_id)
                self._target = open_target(wanted)
            except Exception as exc:  # remembered: every later case fails fast with the same message
                self._failure = f"the {self.settings.mode} target did not start: {type(exc).__name__}: {exc}"
                raise InfrastructureError(self._failure) from None
        return self._target

    @property
    def target_if_open(self) -> Target | None:
        """The target when already started (the header never starts one)."""
        return self._target

    def cases(self, config: pytest.Config) -> list[Case]:
        """The catalog plus cases added through the ``pytest_e2b_env_cases`` hook."""
        if self._cases is None:
            extra: list[Case] = []
            for result in config.hook.pytest_e2b_env_cases(config=config):
                for raw in result or []:
                    if isinstance(raw, Case):
                        extra.append(raw)
                    else:
                        from pytest_e2b_env.catalog.loader import parse_cases_from_dicts

                        extra.extend(parse_cases_from_dicts([raw], "pytest_e2b_env_cases hook"))
            self._cases = load_cases(self.settings.cases, extra)
        return self._cases

    def warm_up(self, items: list[pytest.Item]) -> None:
        """Start the reference episode's OpenEnv server in the background when its cases run here.

        The server start (openenv imports gradio: 5-8 s) otherwise lands inside the first episode
        case; started now, with the very settings a case scopes in, it overlaps the cases before.
        Only for the bundled reference subject and an already open target; user subjects and
        ``PYTEST_E2B_ENV_OPENENV_URL`` are left alone.
        """
        target = self._target
        if target is None or openenv_url():
            return
        if not any(
            isinstance(item, CaseItem)
            and item.case.subject == "episode"
            and item.subject == REFERENCE_EPISODE
            for item in items
        ):
            return
        # The cases import the SDK anyway; doing it here keeps it out of two threads at once.
        importlib.import_module("e2b")
        from pytest_e2b_env.episode.server import prestart_shared_server

        prestart_shared_server({**os.environ, **target.sdk_env()})

    def close(self) -> None:
        """Stop the reference OpenEnv server, sweep the run's sandboxes and stop the target."""
        if self._target is not None:
            target, self._target = self._target, None
            server = sys.modules.get("pytest_e2b_env.episode.server")
            if server is not None:
                # Sessions kept open over sandboxes that would not die release them on close; done
                # while the target still answers, that takes a request each, not retries against a
                # stopped emulator at interpreter exit (seconds per session).
                with contextlib.suppress(Exception):
                    server.close_shared_servers()
            try:
                target.sweep()
            finally:
                target.close()


class CaseItem(pytest.Item):
    """One catalog case run against the configured subject of its kind."""

    def __init__(self, *, case: Case, subject: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.subject = subject
        self.e2b_result: Any = None
        self.extra_keyword_matches.update({case.family, case.subject})
        self.add_marker(pytest.mark.e2b_case(case.id))

    def runtest(self) -> None:
        """Run the case; fail with every unmet criterion, or skip with the reason."""
        from pytest_e2b_env.catalog.runner import CaseResult, run_case

        runtime = self.config.stash[runtime_key]
        settings = runtime.settings
        if settings.mode not in self.case.modes:
            reason = f"not runnable {settings.mode}: {self.case.modes_reason}"
            self.e2b_result = CaseResult("skipped", reason, [], _skip_record(self.case, self.subject, reason))
            pytest.skip(reason)
        result = run_case(self.case, self.subject, runtime.target(), extra_tools=settings.episode_tools)
        self.e2b_result = result
        if result.status == "skipped":
            pytest.skip(result.reason or "skipped")
        if result.status != "passed":
            raise CaseFailure(result.failure_message())

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        """Show the failed criteria instead of a traceback into the runner."""
        if isinstance(excinfo.value, CaseFailure | CaseLoadError | InfrastructureError):
            return f"{type(excinfo.value).__name__}: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        """Point reports at the case file."""
        return self.path, None, f"{self.case.family}: {self.case.id}"


def _skip_record(case: Case, subject: str, reason: str) -> dict[str, Any]:
    return skipped_record(
        case.id,
        reason,
        subject=case.subject,
        family=case.family,
        description=case.description,
        expected=case.expect,
        subject_spec=subject,
    )


def skipped_record(case_id: str, reason: str, **fields: Any) -> dict[str, Any]:
    """An evidence record for a case that did not run; ``fields`` override the blanks."""
    return {
        "id": case_id,
        "subject": case_id.split("-", 1)[0],
        "family": "unknown",
        "description": "",
        "status": "skipped",
        "reason": reason,
        "expected": {},
        "observed": {},
        "criteria": [],
        "seconds": 0.0,
        "rewards": None,
        "exceptions": [],
        "attempts": 0,
        "retries": 0,
    } | fields


class CatalogCollector(pytest.Collector):
    """The parent of every catalog item; loading errors become its collection error."""

    def collect(self) -> list[pytest.Item]:
        """One item per case whose subject kind is configured, in catalog order."""
        runtime = self.config.stash[runtime_key]
        items: list[pytest.Item] = []
        for case in runtime.cases(self.config):
            subject = runtime.settings.subject_for(case.subject)
            if subject is not None:
                items.append(CaseItem.from_parent(self, name=case.id, case=case, subject=subject))
        return items

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        """A malformed case file is shown as its message (file, case id, field), no traceback."""
        if isinstance(excinfo.value, CaseLoadError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


def catalog_wanted(config: pytest.Config, settings: Settings) -> bool:
    """Catalog items join the session when a subject is set and no explicit test paths were given.

    ``pytest`` (or ``pytest -k ...``) in a project that sets the ini keys runs the catalog;
    ``pytest tests/test_x.py`` runs only that file unless ``--e2b-cases`` asks for cases too.
    """
    if not (settings.reward_subject or settings.episode_subject):
        return False
    explicit = config.args_source == pytest.Config.ArgsSource.ARGS
    return not explicit or settings.cases_given


def add_catalog_items(session: pytest.Session, items: list[pytest.Item]) -> None:
    """Collect the catalog under the session and append its items (errors become collect reports)."""
    from _pytest.runner import collect_one_node

    collector = CatalogCollector.from_parent(session, name=COLLECTOR_NAME, nodeid=COLLECTOR_NAME)
    report = collect_one_node(collector)
    session.ihook.pytest_collectreport(report=report)
    if report.passed:
        items.extend(node for node in report.result if isinstance(node, pytest.Item))


def result_payload(item: CaseItem) -> str | None:
    """The case record (+ trajectory and cleanup) to ship on the report, as JSON text."""
    result = item.e2b_result
    if result is None:
        return None
    return json.dumps(
        {"record": result.record, "trajectory": result.trajectory, "cleanup": result.cleanup}, default=str
    )
