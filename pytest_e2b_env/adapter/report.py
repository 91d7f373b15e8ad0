"""The controller-side evidence reporter: gathers case records, writes one bundle per run.

Registered only on the controller (never on an xdist worker). Records reach it on test
reports (``report.e2b_case``), which xdist forwards from workers, so one bundle holds every
case however the run was distributed.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from pytest_e2b_env.adapter.items import COLLECTOR_NAME
from pytest_e2b_env.adapter.keys import runtime_key
from pytest_e2b_env.adapter.settings import Settings
from pytest_e2b_env.catalog.hints import PREFIX as HINT
from pytest_e2b_env.catalog.record import CaseRecord
from pytest_e2b_env.catalog.trlshape import ENV_REWARD
from pytest_e2b_env.evidence.redaction import Redactor

PREFIX = COLLECTOR_NAME + "::"


class Redacting:
    """A terminal reporter's ``section`` and ``write_line`` with every line redacted."""

    def __init__(self, terminalreporter: Any, redactor: Redactor) -> None:
        self._tr = terminalreporter
        self._redactor = redactor

    def section(self, title: str) -> None:
        """A titled separator line."""
        self._tr.section(self._redactor.text(title))

    def write_line(self, line: str, **markup: bool) -> None:
        """One line, redacted."""
        self._tr.write_line(self._redactor.text(line), **markup)


#: The bundle's mark of a run Ctrl-C ended (a problem: what it holds is not the whole catalog).
INTERRUPTED = "the run was interrupted (Ctrl-C)"


def ctrl_c(session: pytest.Session, exitstatus: int) -> bool:
    """Whether the run ended by Ctrl-C (pytest's INTERRUPTED is also a stop the run asked for)."""
    return exitstatus == pytest.ExitCode.INTERRUPTED and not (session.shouldstop or session.shouldfail)


def case_id_of(nodeid: str) -> str | None:
    """The case id of a catalog node id, else None."""
    return nodeid[len(PREFIX) :] if nodeid.startswith(PREFIX) else None


class EvidenceReporter:
    """Plugin object: collects records from reports and writes the bundle at session end."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.records: dict[str, dict[str, Any]] = {}
        self.trajectories: dict[str, list[dict[str, Any]]] = {}
        self.cleanup: list[dict[str, Any]] = []
        self.expected: list[str] = []
        self.durations: dict[str, float] = defaultdict(float)
        self.family_of: dict[str, str] = {}
        self.bundle: Path | None = None
        self.problems: list[str] = []
        self.started = time.time()
        self.info: dict[str, Any] = {}

    # -- collection ------------------------------------------------------------------------
    def _expect(self, nodeids: list[str]) -> None:
        for nodeid in nodeids:
            case_id = case_id_of(nodeid)
            if case_id is not None and case_id not in self.expected:
                self.expected.append(case_id)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Without xdist the controller collected the items itself."""
        if hasattr(session, "items"):
            self._expect([item.nodeid for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """With xdist each worker reports its collection (they are identical)."""
        self._expect(list(ids))

    # -- results ---------------------------------------------------------------------------
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Keep each case's record; a crashed or errored case without one gets an error record."""
        case_id = case_id_of(report.nodeid)
        if case_id is None:
            return
        payload = getattr(report, "e2b_case", None)
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.durations[case_id] += float(report.duration)
        if payload:
            data = json.loads(payload)
            record = data["record"]
            self.records[case_id] = record
            self.family_of[case_id] = record["family"]
            self.trajectories[case_id] = data.get("trajectory") or []
            # Each sandbox keeps the case it was made in: cleanup.json and index.html name it.
            self.cleanup.extend({**c, "case": case_id} for c in data.get("cleanup") or [])
        elif report.failed and case_id not in self.records:
            # The item died before producing a record (worker crash, setup error): never lose it.
            self.records[case_id] = {
                "id": case_id,
                "subject": case_id.split("-", 1)[0],
                "family": "unknown",
                "description": "",
                "status": "error",
                "reason": f"no record ({report.when}): {str(report.longrepr)[-400:]}",
                "expected": {},
                "observed": {},
                "criteria": [],
                "seconds": float(report.duration),
                "rewards": None,
                "exceptions": [],
                "attempts": 1,
                "retries": 0,
            }

    # -- writing ---------------------------------------------------------------------------
    def family_seconds(self) -> dict[str, float]:
        """Time per family: the sum of its cases' own run times, rounded.

        A case's own time is its record's (how long the case ran, wherever it ran); the item's
        duration only stands in for a case without a record: with lanes an item mostly waits for
        a case that ran beside others, and the first item waited for them all.
        """
        out: dict[str, float] = defaultdict(float)
        for case_id in sorted(set(self.durations) | set(self.records)):
            record = self.records.get(case_id) or {}
            family = self.family_of.get(case_id) or record.get("family", "unknown")
            own = record.get("seconds")
            out[family] += float(own) if isinstance(own, int | float) else self.durations.get(case_id, 0.0)
        return {k: round(v, 3) for k, v in sorted(out.items())}

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Write the bundle once (controller) and fail the run when it is incomplete."""
        if (not self.expected and not self.records and not self.info.get("tasks")) or (
            self.config.option.collectonly
        ):
            return  # nothing ran: a bundle of "missing" cases would only be noise
        from pytest_e2b_env.evidence import BundleWriter, verify_bundle
        from pytest_e2b_env.evidence.runinfo import subject_source

        interrupted = ctrl_c(session, exitstatus)
        stopped = bool(session.shouldstop or session.shouldfail) or interrupted
        why = "the run was interrupted (Ctrl-C)" if interrupted else session.shouldstop or session.shouldfail
        ran = sum(1 for case_id in self.expected if case_id in self.records)
        known = {c.id: c for c in (self.config.stash[runtime_key].loaded_cases or [])}
        for case_id in self.expected:
            if case_id not in self.records and stopped:
                reason = f"not run: the session stopped early ({why})"
                case = known.get(case_id)
                fields = (
                    {"subject": case.subject, "family": case.family, "description": case.description}
                    if case is not None
                    else {}
                )
                self.records[case_id] = CaseRecord.not_run(case_id, reason, **fields).to_dict()
        # Items report as their cases finish (lanes); the bundle keeps the catalog's order.
        place = {case_id: n for n, case_id in enumerate(self.expected)}
        self.records = dict(sorted(self.records.items(), key=lambda kv: place.get(kv[0], len(place))))
        if not self.info.get("catalog_hash"):
            try:
                from pytest_e2b_env.catalog.loader import catalog_hash

                self.info["catalog_hash"] = catalog_hash(self.config.stash[runtime_key].cases(self.config))
            except Exception as exc:  # the hash is informative; its failure is recorded, not fatal
                self.info["catalog_hash"] = f"unavailable: {type(exc).__name__}"
        manifest = {
            "mode": self.settings.mode,
            "started_at": self.started,  # the writer is built at session end: pass the real start
            "catalog_hash": self.info.get("catalog_hash"),
            "seeds": {"catalog": 0},
            "isolation": self.info.get("isolation"),
            "isolation_reason": self.info.get("isolation_reason"),
            "subjects": {
                "reward": self.settings.reward_subject,
                "episode": self.settings.episode_subject,
            },
            # Without git nothing else pins the code under test: its module file and a source digest.
            "subject_sources": {
                kind: subject_source(spec)
                for kind, spec in (
                    ("reward", self.settings.reward_subject),
                    ("episode", self.settings.episode_subject),
                )
                if spec
            },
            "workers": self.info.get("workers", 0),
            # Cases run at once in this process, its lanes (1: one after another): for the timings.
            "lanes": self.info.get("lanes", 1),
            # Policy criteria relaxed by name (e2b_relax): every relaxed failure stays a warning.
            "relaxed_policies": sorted(self.settings.relax),
            "contracts": self.info.get("contracts", {}),
        }
        if self.info.get("serial_kinds"):
            manifest["serial_kinds"] = self.info["serial_kinds"]
        if interrupted:
            manifest["interrupted"] = True
        if self.info.get("tasks_digest"):
            manifest["tasks_digest"] = self.info["tasks_digest"]
        if self.settings.live:
            manifest["live_endpoint"] = "E2B (through the fault proxy)"
        runtime = self.config.stash[runtime_key]
        # The targets' keys (this process's and its lanes'); the environment's are always known.
        secrets = [s for s in [*self.info.get("secrets", []), *runtime.keys] if s]
        try:
            writer = BundleWriter(self.settings.evidence, self.settings.run_id, manifest, secrets=secrets)

            if interrupted:
                writer.add_problem(f"{INTERRUPTED} after {ran} of {len(self.expected)} cases")
            for problem in runtime.problems:
                writer.add_problem(problem)
            for record in self.records.values():
                writer.add_case(record)
            for case_id, events in self.trajectories.items():
                writer.add_trajectory(case_id, events)
            writer.add_cleanup(self.cleanup)
            writer.add_tasks(self.info.get("tasks") or [])
            summary = "\n".join(
                f"{r['id']}: {r['status']} {r.get('reason') or ''}".rstrip() for r in self.records.values()
            )
            writer.add_log("summary", summary + "\n")
            self.bundle = writer.finish(self.expected, secrets=secrets, family_seconds=self.family_seconds())
            self.problems = list(verify_bundle(self.bundle, self.expected, secrets))
        except Exception as exc:  # the bundle failing must fail the run, loudly
            self.problems.append(f"evidence bundle not written: {type(exc).__name__}: {exc}")
        coverage = self._coverage()
        if coverage is not None and not coverage.get("complete", False):
            self.problems.append("coverage.json is incomplete (a case is missing)")
        # Printed and summarised: an exception's text in them is redacted like the bundle.
        self.problems = [runtime.redactor().text(p) for p in self.problems]
        if self.settings.summary is not None and self.bundle is not None:
            from pytest_e2b_env.evidence.summary import write_summary

            try:
                write_summary(self.settings.summary, self.bundle, self.problems)
            except (OSError, ValueError) as exc:
                self.problems.append(
                    f"summary {self.settings.summary} not written: {type(exc).__name__}: {exc}"
                )
        if self.problems and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _coverage(self) -> dict[str, Any] | None:
        if self.bundle is None:
            return None
        try:
            data: dict[str, Any] = json.loads((self.bundle / "coverage.json").read_text())
        except (OSError, ValueError):
            return None
        return data

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Per-family wall time, the bundle path and any bundle problem."""
        if not self.records:
            return
        tr = Redacting(terminalreporter, self.config.stash[runtime_key].redactor())
        tr.section("e2b catalog")
        for line, markup in failure_lines(self.records.values()):
            tr.write_line(line, **markup)
        counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for record in self.records.values():
            counts[record["family"]][record["status"]] += 1
        seconds = self.family_seconds()
        for family in sorted(counts):
            parts = ", ".join(f"{n} {status}" for status, n in sorted(counts[family].items()))
            tr.write_line(f"{family:<16} {seconds.get(family, 0.0):7.2f}s  {parts}")
        wall, cpu = time.time() - self.started, _cpu_seconds()
        tr.write_line(f"{'total':<16} {sum(seconds.values()):7.2f}s  wall {wall:.2f}s  CPU {cpu:.2f}s")
        hints = dict.fromkeys(
            line[len(HINT) :]
            for record in self.records.values()
            for line in record.get("advice") or ()
            if isinstance(line, str) and line.startswith(HINT)
        )
        for why in (self.info.get("serial_kinds") or {}).values():
            tr.write_line(f"e2b: {why}", yellow=True)
        for hint in hints:  # once per run, however many cases the shape failed
            tr.write_line(f"hint: {hint}", yellow=True)
        for source in _detected_rewards(self.records.values()):
            tr.write_line(
                f"episode reward: read as {source}, as TRL's documented reward function does "
                "(the class has no get_reward(); detected, no declaration needed)"
            )
        if self.bundle is not None:
            tr.write_line(f"evidence bundle: {self.bundle}")
        if self.settings.summary is not None and self.bundle is not None:
            tr.write_line(f"summary appended to: {self.settings.summary}")
        for problem in self.problems:
            if INTERRUPTED in problem and problem.startswith("run is marked incomplete"):
                tr.write_line(f"e2b: {problem[problem.index(INTERRUPTED) :].split(';')[0]}", yellow=True)
            else:
                tr.write_line(f"evidence problem: {problem}", red=True)


#: How much of a criterion's expectation and observation a summary line shows.
_SHOWN = 160


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def failure_lines(records: Iterable[dict[str, Any]]) -> list[tuple[str, dict[str, bool]]]:
    """The failing cases first, safety before policy before no verdict: each with its first failed
    criterion (what was expected and seen) and what would fix it, as terminal lines and markup."""
    from pytest_e2b_env.evidence.report_failures import KINDS, failed_criteria, failure_kind

    failing = [r for r in records if r.get("status") in ("failed", "error")]
    order = {kind: n for n, (kind, _, _) in enumerate(KINDS)}
    failing.sort(key=lambda r: order[failure_kind(str(r["status"]), r)])
    lines: list[tuple[str, dict[str, bool]]] = []
    for record in failing:
        kind = failure_kind(str(record["status"]), record)
        criteria = failed_criteria(record)
        head = f"{record['status'].upper()} [{kind}] {record['id']}"
        if criteria:
            first = criteria[0]
            more = f" (+{len(criteria) - 1} more)" if len(criteria) > 1 else ""
            lines.append((f"{head}: {first.get('id')}: {first.get('description')}{more}", {"red": True}))
            seen = f"expected {_short(first.get('expected'))}, observed {_short(first.get('actual'))}"
            lines.append((f"    {seen}", {}))
        else:
            reason = str(record.get("reason") or "no reason recorded")[:_SHOWN]
            lines.append((f"{head}: {reason}", {"red": True}))
        fixes = [str(a) for a in record.get("advice") or () if isinstance(a, str)]
        policies = sorted({str(c.get("policy")) for c in criteria if c.get("severity") == "policy"})
        if kind == "policy" and policies:
            fixes.append(f"a house policy: fix it, or relax it by name (e2b_relax = {', '.join(policies)})")
        if fixes:
            lines.append((f"    fix: {fixes[0][: _SHOWN * 2]}", {"yellow": True}))
    return lines


def _detected_rewards(records: Any) -> list[str]:
    """How the cases read an episode's reward when it is not ``get_reward()`` (``env.reward (property)``)."""
    found = (str((record.get("contract") or {}).get("reward") or "") for record in records)
    return list(dict.fromkeys(source for source in found if source.startswith(ENV_REWARD)))


def _cpu_seconds() -> float:
    """CPU this process and the children it has reaped used so far (user + system): the run's cost."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
