"""Redaction of what the plugin hands pytest: case records, reports and warnings of its items.

A case record is redacted as it reaches this process (:func:`redact_record`), before any of it
becomes a failure message, a skip reason or a warning, so no cut ever halves a secret. The
:class:`ReportGuard` then redacts each report and warning of the catalog's and the tasks' items
before pytest's terminal reporter and its ``--junitxml`` writer see them, with the same
redactor as the evidence bundle (docs/evidence.md, "Secrets").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from pytest_e2b_env.catalog.record import CaseRecord
from pytest_e2b_env.evidence.redaction import Redactor

#: The first part of the node ids of the plugin's own items and collectors.
OWN_NODES = ("e2b-catalog", "e2b-task")
#: Record fields the verdict and the bundle's layout compute with: never text.
_KEPT = frozenset({"status", "seconds", "attempts", "retries"})


def redact_record(record: CaseRecord, secrets: Iterable[str] = ()) -> CaseRecord:
    """A copy of ``record`` with every secret redacted (the environment's, ``secrets``, shapes)."""
    redactor = Redactor(secrets)
    changes = {
        f.name: redactor.data(getattr(record, f.name))
        for f in dataclasses.fields(record)
        if f.name not in _KEPT
    }
    return dataclasses.replace(record, **changes)


def own_node(nodeid: str) -> bool:
    """Whether a node id is one of the plugin's items or collectors."""
    return nodeid.split("::", 1)[0] in OWN_NODES


def _text(value: Any, redactor: Redactor) -> Any:
    """``value``, or its redacted text when that holds a secret (a rendered traceback, a property)."""
    text = str(value)
    clean = redactor.text(text)
    return value if clean == text else clean


def redact_report(report: pytest.TestReport | pytest.CollectReport, redactor: Redactor) -> None:
    """Redact, in place, everything pytest shows or writes of a report.

    The failure representation (a traceback holding a secret becomes its redacted text), the skip
    reason, the captured output sections and the JUnit properties.
    """
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        report.longrepr = (longrepr[0], longrepr[1], redactor.text(str(longrepr[2])))
    elif longrepr is not None:
        report.longrepr = _text(longrepr, redactor)
    report.sections = [(title, redactor.text(body)) for title, body in report.sections]
    if isinstance(report, pytest.TestReport):
        report.user_properties = [(name, _text(value, redactor)) for name, value in report.user_properties]
        if hasattr(report, "wasxfail"):
            report.wasxfail = redactor.text(str(report.wasxfail))


class ReportGuard:
    """Plugin object: the last redaction before pytest's reporters, on every process of the run."""

    def __init__(self, redactor: Callable[[], Redactor]) -> None:
        #: The run's redactor of the moment (its keys grow as targets open).
        self._redactor = redactor

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Before the terminal, ``--junitxml`` and xdist see an item's report."""
        if own_node(report.nodeid):
            redact_report(report, self._redactor())

    @pytest.hookimpl(tryfirst=True)
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A collection error of the catalog or the tasks (a case file, a task row)."""
        if own_node(report.nodeid):
            redact_report(report, self._redactor())

    @pytest.hookimpl(tryfirst=True)
    def pytest_warning_recorded(self, warning_message: Any, when: str, nodeid: str, location: Any) -> None:
        """A warning an item raised (a relaxed policy's failures) before the warnings summary."""
        if not own_node(nodeid):
            return
        message = warning_message.message
        clean = _text(message, self._redactor())
        if clean is not message:
            if isinstance(message, Warning):
                message.args = (clean,)  # the class stays: filters and the summary name it
            else:
                warning_message.message = clean
