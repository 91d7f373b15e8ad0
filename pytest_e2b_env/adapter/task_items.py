"""The user's tasks as pytest items: ``e2b-task::<task-id>::oracle`` / ``::floor`` / ``::repeat``.

A :class:`TaskCollector` named ``e2b-task`` holds one :class:`TaskGroup` per task, each holding
its three :class:`TaskItem` checks, so ``-k``, ``-m e2b_task``, ``--lf`` and xdist treat them
like any test. Checks run in this process through the catalog's runner (docs/tasks.md).
:class:`TaskEvidence` gathers their outcomes for the evidence bundle's ``tasks`` section.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_e2b_env.adapter.failures import one_line_repr
from pytest_e2b_env.adapter.keys import runtime_key
from pytest_e2b_env.adapter.settings import Settings
from pytest_e2b_env.errors import ConfigError, InfrastructureError

COLLECTOR_NAME = "e2b-task"
PREFIX = COLLECTOR_NAME + "::"
_tasks_key = pytest.StashKey[dict[str, list[Any]]]()


class TaskFailure(Exception):
    """A task check failed; the message says what was seen (scores, the program that passed)."""


def configured_tasks(config: pytest.Config) -> dict[str, list[Any]]:
    """The tasks of each configured kind, loaded once per process; a bad source is one UsageError."""
    if _tasks_key not in config.stash:
        from pytest_e2b_env.catalog.tasks import load_tasks

        settings: Settings = config.stash[runtime_key].settings
        loaded: dict[str, list[Any]] = {}
        for kind, source in (("reward", settings.reward_tasks), ("episode", settings.episode_tasks)):
            if source:
                try:
                    loaded[kind] = list(load_tasks(source, kind, config.rootpath))
                except ConfigError as exc:  # may quote a row
                    raise pytest.UsageError(config.stash[runtime_key].redactor().text(str(exc))) from None
        config.stash[_tasks_key] = loaded
    return config.stash[_tasks_key]


class TaskItem(pytest.Item):
    """One check of one task, run against the configured subject of the task's kind."""

    def __init__(self, *, task: Any, tasks: list[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.task = task
        self.tasks = tasks
        self.e2b_task: Any = None
        self.extra_keyword_matches.update({task.kind, "e2b-task"})
        self.add_marker(pytest.mark.e2b_task(self.name))

    def runtest(self) -> None:
        """Run the check; fail with what was seen, or skip with the reason."""
        from pytest_e2b_env.catalog.tasks.checks import TaskCheck, run_check

        runtime = self.config.stash[runtime_key]
        settings = runtime.settings
        host = runtime.host(self.task.kind)
        assert host is not None  # items exist only for kinds with a subject
        try:
            target = runtime.target()
        except InfrastructureError as exc:
            self.e2b_task = TaskCheck(self.task.task_id, self.task.kind, self.name, "error", str(exc))
            self.session.shouldstop = "the e2b target is unavailable"
            raise
        from pytest_e2b_env.adapter.lanes import run_on

        result = run_check(
            self.task,
            self.name,
            self.tasks,
            host,
            target,
            repeats=settings.task_repeats,
            extra_tools=settings.episode_tools,
            relax=settings.relax,
            # in the case host, as catalog cases: a crash in subject code fails this check only
            run=lambda case: run_on(case, settings, target, host),
        )
        self.e2b_task = result
        if result.status == "skipped":
            pytest.skip(result.reason or "skipped")
        if result.status != "passed":
            raise TaskFailure(f"task {self.task.task_id} {self.name}: {result.reason}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        """Show what the check saw instead of a traceback into the runner, named once by one line."""
        if isinstance(excinfo.value, TaskFailure | InfrastructureError):
            return one_line_repr(excinfo, f"{type(excinfo.value).__name__}: {excinfo.value}")
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        """Name the task and the check in reports."""
        return self.path, None, f"task {self.task.task_id}: {self.name}"


class TaskGroup(pytest.Collector):
    """The three checks of one task."""

    def __init__(self, *, task: Any, tasks: list[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.task = task
        self.tasks = tasks

    def collect(self) -> list[pytest.Item]:
        """oracle, floor, repeat."""
        from pytest_e2b_env.catalog.tasks.checks import CHECKS

        return [TaskItem.from_parent(self, name=check, task=self.task, tasks=self.tasks) for check in CHECKS]


class TaskCollector(pytest.Collector):
    """The parent of every task check; a bad task source becomes its collection error."""

    def collect(self) -> list[pytest.Collector]:
        """One group per task whose kind has a subject, reward tasks first, in source order."""
        runtime = self.config.stash[runtime_key]
        groups: list[pytest.Collector] = []
        seen: dict[str, str] = {}
        for kind, tasks in configured_tasks(self.config).items():
            if runtime.subject(kind) is None:
                continue
            for task in tasks:
                if task.task_id in seen:
                    raise ConfigError(
                        f"task id {task.task_id!r} names a {seen[task.task_id]} task and a {kind} task; "
                        "rename one (ids name the pytest items)"
                    )
                seen[task.task_id] = kind
                groups.append(TaskGroup.from_parent(self, name=task.task_id, task=task, tasks=tasks))
        return groups

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        """A bad task row is shown as its message (source, row, field), no traceback."""
        if isinstance(excinfo.value, ConfigError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


def add_task_items(session: pytest.Session, items: list[pytest.Item]) -> None:
    """Collect the configured tasks under the session and append their checks."""
    settings = session.config.stash[runtime_key].settings
    if not (settings.reward_tasks or settings.episode_tasks):
        return
    from _pytest.runner import collect_one_node

    for kind, source in (("reward", settings.reward_tasks), ("episode", settings.episode_tasks)):
        if source and settings.subject_for(kind) is None:
            raise pytest.UsageError(
                f"e2b_{kind}_tasks is set but e2b_{kind}_subject is not: the tasks are checked through "
                f"your own {kind} code; set e2b_{kind}_subject (pytest-e2b-env docs tasks)"
            )
    configured_tasks(session.config)  # a bad source: one error, before any item
    collector = TaskCollector.from_parent(session, name=COLLECTOR_NAME, nodeid=COLLECTOR_NAME)
    report = collect_one_node(collector)
    session.ihook.pytest_collectreport(report=report)
    if not report.passed:
        return
    for group in report.result:
        if isinstance(group, pytest.Collector):
            inner = collect_one_node(group)
            session.ihook.pytest_collectreport(report=inner)
            items.extend(node for node in inner.result if isinstance(node, pytest.Item))


class TaskEvidence:
    """Controller plugin: keeps each check's outcome and hands them to the evidence reporter."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.rows: dict[str, dict[str, Any]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Keep the outcome shipped on the report; a check that died without one is an error row."""
        if not report.nodeid.startswith(PREFIX):
            return
        payload = getattr(report, "e2b_task", None)
        if payload:
            self.rows[report.nodeid] = json.loads(payload)
        elif report.failed and report.nodeid not in self.rows:
            task_id, _, check = report.nodeid[len(PREFIX) :].rpartition("::")
            self.rows[report.nodeid] = {
                "task_id": task_id,
                "kind": "unknown",
                "check": check,
                "status": "error",
                "reason": f"no outcome ({report.when}): {str(report.longrepr)[-400:]}",
                "details": {},
                "seconds": float(report.duration),
            }

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Before the bundle is written (the reporter runs last): the rows and the tasks' digest."""
        reporter = self.config.pluginmanager.get_plugin("e2b_env_evidence")
        if reporter is None or not self.rows:
            return
        from pytest_e2b_env.catalog.tasks import tasks_digest

        reporter.info["tasks"] = list(self.rows.values())
        try:
            loaded = configured_tasks(self.config)
            reporter.info["tasks_digest"] = tasks_digest(t for kind in loaded.values() for t in kind)
        except pytest.UsageError as exc:  # informative only; the run already reported the source
            reporter.info["tasks_digest"] = f"unavailable: {str(exc)[:200]}"

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """One line per task: its worst status, the oracle, the floor gap and the repeat spread."""
        if not self.rows:
            return
        from pytest_e2b_env.adapter.report import Redacting
        from pytest_e2b_env.evidence.tasks import tasks_doc

        terminalreporter = Redacting(terminalreporter, self.config.stash[runtime_key].redactor())
        terminalreporter.section("e2b tasks")
        for task in tasks_doc(self.rows.values())["tasks"]:
            gap, spread = task["floor_gap"], task["repeat_spread"]
            terminalreporter.write_line(
                f"{task['task_id']:<28} {task['kind']:<8} {task['status']:<8} oracle {task['oracle']}, "
                f"floor gap {'-' if gap is None else f'{gap:g}'}, "
                f"repeat spread {'-' if spread is None else f'{spread:g}'}"
            )
        reporter = self.config.pluginmanager.get_plugin("e2b_env_evidence")
        if reporter is not None and not reporter.records:  # the catalog's summary names it otherwise
            if reporter.bundle is not None:
                terminalreporter.write_line(f"evidence bundle: {reporter.bundle}")
            for problem in reporter.problems:
                terminalreporter.write_line(f"evidence problem: {problem}", red=True)
