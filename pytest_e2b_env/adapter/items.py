"""Catalog cases as pytest items: one :class:`CaseItem` per case, id = case id, stable order.

Items hang under a :class:`CatalogCollector` named ``e2b-catalog`` (node ids
``e2b-catalog::<case-id>``), so ``-k``, ``-x``, ``--lf`` and xdist treat them like any test.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import pytest

from pytest_e2b_env.adapter.failures import one_line_repr
from pytest_e2b_env.adapter.keys import runtime_key, settings_key
from pytest_e2b_env.adapter.runtime import Runtime
from pytest_e2b_env.adapter.settings import Settings
from pytest_e2b_env.catalog.contract import SubjectInfo
from pytest_e2b_env.catalog.loader import CaseLoadError
from pytest_e2b_env.catalog.model import Case
from pytest_e2b_env.catalog.record import CaseRecord
from pytest_e2b_env.errors import InfrastructureError
from pytest_e2b_env.evidence.junit import relaxed_properties

COLLECTOR_NAME = "e2b-catalog"


def ensure_runtime(config: pytest.Config) -> Runtime:
    """The process's runtime, made on first use when the plugin started dormant (a fixture asked)."""
    if runtime_key not in config.stash:
        from pytest_e2b_env.adapter.settings import resolve

        settings = resolve(config)
        config.stash[settings_key] = settings
        config.stash[runtime_key] = Runtime(settings)
    return config.stash[runtime_key]


class CaseFailure(Exception):
    """A case's expectations were not met; the message lists each failed criterion.

    ``summary`` is the one line a report names it by (pytest's short summary, JUnit's
    ``<failure message=...>``); the message is the whole account.
    """

    def __init__(self, message: str, summary: str) -> None:
        super().__init__(message)
        self.summary = summary


class RelaxedPolicyWarning(UserWarning):
    """Only house-policy criteria the user relaxed by name failed: a warning, not a pass."""


class CaseItem(pytest.Item):
    """One catalog case run against the configured subject of its kind."""

    def __init__(self, *, case: Case, subject: SubjectInfo, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.subject = subject
        self.e2b_result: CaseRecord | None = None
        self.extra_keyword_matches.update({case.family, case.subject})
        self.add_marker(pytest.mark.e2b_case(case.id))

    def setup(self) -> None:
        """The target, before the case: one that cannot start (or refuses the key) is the run's
        error (pytest's ERROR, the record's ``error``), never the case's failure."""
        runtime = self.config.stash[runtime_key]
        if runtime.settings.mode not in self.case.modes:
            return
        lanes = runtime.lanes
        if lanes is not None and lanes.done(self.nodeid):
            return  # its lane ran it (on a target of its own): nothing runs here
        try:
            runtime.target()
            return
        except InfrastructureError as exc:
            why = str(exc)
        # One clear error (the message, no traceback), then stop: the rest are recorded as not run.
        self.e2b_result = CaseRecord.for_case(self.case, self.subject.spec, "error", why)
        self.session.shouldstop = "the e2b target is unavailable"
        pytest.fail(why, pytrace=False)

    def runtest(self) -> None:
        """Run the case; fail with every unmet criterion, warn on relaxed ones, or skip with the reason."""
        runtime = self.config.stash[runtime_key]
        settings = runtime.settings
        if settings.mode not in self.case.modes:
            reason = f"not runnable {settings.mode}: {self.case.modes_reason}"
            self.e2b_result = CaseRecord.for_case(self.case, self.subject.spec, "skipped", reason)
            pytest.skip(reason)
        lanes = runtime.lanes
        result = lanes.result(self.nodeid) if lanes is not None and lanes.owns(self.nodeid) else None
        if result is None:  # no lane ran it: on this process's target, in this process's case host
            from pytest_e2b_env.adapter.lanes import run_on

            target = runtime.target()  # opened by setup()
            host = runtime.host(self.case.subject)
            assert host is not None  # items exist only for kinds with a subject
            result = run_on(self.case, settings, target, host)
        self.e2b_result = result
        if result.subject_output:  # pytest shows it under the case's failure (and with -rA)
            self.add_report_section("call", "subject output", result.subject_output)
        if result.status == "skipped":
            pytest.skip(result.reason or "skipped")
        if result.status == "relaxed":
            # A pass to pytest, so marked where a pass is written: --junitxml's testcase properties.
            self.user_properties.extend(relaxed_properties(result.to_dict()))
            warnings.warn(RelaxedPolicyWarning(result.failure_message()), stacklevel=1)
        elif result.status != "passed":
            summary = f"case {result.id} {result.status}: {result.reason or 'no reason recorded'}"
            raise CaseFailure(result.failure_message(), summary)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        """Show the failed criteria instead of a traceback into the runner, named once by one line."""
        error = excinfo.value
        if isinstance(error, CaseFailure):
            return one_line_repr(excinfo, error.summary, case_location(self.case), prefix=False)
        if isinstance(error, CaseLoadError | InfrastructureError):
            return one_line_repr(excinfo, f"{type(error).__name__}: {error}", case_location(self.case))
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        """Point reports at the case file."""
        return self.path, None, f"{self.case.family}: {self.case.id}"


def case_location(case: Case) -> tuple[str, int]:
    """The case file and the line of its ``id = "..."`` (1 when the file cannot be read)."""
    path = case.source_file or "<catalog>"
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return path, 1
    pattern = re.compile(rf"""^\s*id\s*=\s*["']{re.escape(case.id)}["']""")
    return path, next((n for n, line in enumerate(lines, 1) if pattern.match(line)), 1)


class CatalogCollector(pytest.Collector):
    """The parent of every catalog item; loading errors become its collection error."""

    def collect(self) -> list[pytest.Item]:
        """One item per case whose subject kind is configured, in catalog order."""
        runtime = self.config.stash[runtime_key]
        items: list[pytest.Item] = []
        for case in runtime.cases(self.config):
            subject = runtime.subject(case.subject)
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


def runnable(items: list[pytest.Item]) -> list[tuple[str, Case, SubjectInfo]]:
    """The catalog cases among collected items: (node id, case, subject), in order."""
    return [(item.nodeid, item.case, item.subject) for item in items if isinstance(item, CaseItem)]


def result_payload(item: CaseItem) -> str | None:
    """The case record (+ trajectory and cleanup) to ship on the report, as JSON text."""
    result = item.e2b_result
    return None if result is None else result.to_json()
