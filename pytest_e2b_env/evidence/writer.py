"""BundleWriter: collects a run's evidence and writes the bundle atomically.

Everything is kept in memory (bounded) until :meth:`BundleWriter.finish`, which writes the
layout of ``docs/evidence.md`` into a hidden temporary directory beside the target and renames
it to ``<output_root>/<run_id>`` only once every file and SHA256SUMS are on disk. A crash
mid-write therefore never leaves a half bundle under the final name. Each part is written
independently: if one fails, the others are still written and the manifest says the run is
incomplete and why.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.evidence import runinfo
from pytest_e2b_env.evidence.checksums import write_sums
from pytest_e2b_env.evidence.coverage import build_coverage, case_report
from pytest_e2b_env.evidence.junit import build_junit
from pytest_e2b_env.evidence.records import (
    bound,
    bound_text,
    dumps,
    file_stem,
    normalize_case,
    normalize_cleanup,
    pretty,
)
from pytest_e2b_env.evidence.redaction import Redactor
from pytest_e2b_env.evidence.report_html import render_index
from pytest_e2b_env.evidence.tasks import tasks_doc

SCHEMA_VERSION = 1
MAX_LOG_CHARS = 512 * 1024
MAX_LOGS_TOTAL = 8 * 1024 * 1024
MAX_EVENTS = 20_000
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_LOG_NAME = re.compile(r"[^A-Za-z0-9._-]")
# Set by the writer; a caller supplying them would make the manifest contradict the bundle.
_RESERVED = frozenset({"run_id", "complete", "problems", "finished_at", "schema_version"})
# Worse statuses win when one case was recorded more than once.
_SEVERITY = {"passed": 0, "skipped": 1, "relaxed": 2, "failed": 3, "error": 4}


class BundleWriter:
    """Collects one run's evidence; :meth:`finish` writes ``<output_root>/<run_id>``.

    ``manifest`` holds what only the caller knows (``mode``, ``catalog_hash``, ``seeds``,
    ``isolation`` or ``live_endpoint``...); the writer adds UTC start/end, argv, git state,
    python/platform and package versions. ``started_at`` defaults to construction time; pass the
    session's start (``time.time()`` or an ISO string) when the writer is built at the end.
    Never pass a key: values under credential-named keys are replaced, and everything written
    is redacted anyway. ``secrets`` known up front (the target's keys) are redacted as each
    record arrives, before any string of it is cut to its bound; :meth:`finish` may add more.
    """

    def __init__(
        self, output_root: Path, run_id: str, manifest: dict[str, Any], secrets: Iterable[str] = ()
    ) -> None:
        if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
            raise ConfigError(
                f"run_id={run_id!r} is not a safe directory name; use letters, digits, '.', '_' and '-' "
                "(at most 128, not starting with '.'), e.g. 'run-20260101-abc123'"
            )
        clash = _RESERVED & set(manifest)
        if clash:
            raise ConfigError(
                f"manifest keys {sorted(clash)} are set by BundleWriter itself; remove them from the manifest"
            )
        self.output_root = Path(output_root)
        self.run_id = run_id
        self.final_path = self.output_root / run_id
        if self.final_path.exists():
            raise ConfigError(
                f"evidence directory {self.final_path} already exists; choose a new run id or remove it"
            )
        self._lock = threading.Lock()
        self._manifest = {
            "started_at": runinfo.utc_now(),
            "argv": runinfo.safe_argv(list(sys.argv)),
            "git": runinfo.git_state(),
            "platform": runinfo.platform_info(),
            "packages": runinfo.package_versions(),
            "pid": os.getpid(),
        }
        self._manifest.update(bound(dict(manifest)))
        started = manifest.get("started_at")
        if isinstance(started, int | float) and not isinstance(started, bool):
            # A writer built at session end gets the session's start as time.time().
            self._manifest["started_at"] = runinfo.iso_utc(float(started))
        self._cases: list[dict[str, Any]] = []
        self._trajectories: dict[str, list[Any]] = {}
        self._cleanup: list[dict[str, Any]] = []
        self._logs: dict[str, str] = {}
        self._log_chars = 0
        self._problems: list[str] = []
        self._tasks: list[dict[str, Any]] = []
        self._finished = False
        # Redact early with the environment's secrets (and those given) so raw secrets do not sit
        # in memory longer than needed, and before a bound cuts a string; finish() redacts again.
        self._secrets = [s for s in secrets if isinstance(s, str)]
        self._early = Redactor(self._secrets)

    # -- collecting ---------------------------------------------------------------------------

    def add_problem(self, text: str) -> None:
        """Mark the bundle incomplete and say why (e.g. the target never started)."""
        with self._lock:
            self._problems.append(str(text))

    def add_case(self, record: dict[str, Any]) -> None:
        """Record one case's outcome (see the module docs for the fields); never dropped."""
        with self._lock:
            # Redacted before normalize_case bounds its strings: a cut never halves a secret.
            early = self._early
            case, problems = normalize_case(early.data(record), len(self._cases) + 1, early.text)
            self._cases.append(case)
            self._problems.extend(problems)

    def add_trajectory(self, case_id: str, events: list[dict[str, Any]]) -> None:
        """Append tool calls, observations and sandbox operations (with timestamps) to a case."""
        with self._lock:
            stored = self._trajectories.setdefault(self._early.text(str(case_id)), [])
            room = MAX_EVENTS - len(stored)
            items = list(events)
            early = self._early
            kept = [bound(early.data(event), redact=early.text) for event in items[: max(room, 0)]]
            stored.extend(kept)
            if len(items) > len(kept):
                note = {"truncated": True, "events_not_kept": len(items) - len(kept), "limit": MAX_EVENTS}
                stored.append(note)

    def add_cleanup(self, records: list[dict[str, Any]]) -> None:
        """Record sandboxes created by the run and whether each was confirmed gone."""
        with self._lock:
            self._cleanup.extend(self._early.data(normalize_cleanup(r)) for r in records)

    def add_tasks(self, rows: Iterable[dict[str, Any]]) -> None:
        """Record task-check outcomes (``tasks.json`` and the page's Tasks section)."""
        with self._lock:
            self._tasks.extend(bound(self._early.data(dict(row)), redact=self._early.text) for row in rows)

    def add_log(self, name: str, text: str) -> None:
        """Keep a log under ``logs/``: redacted, each capped at 512 KiB, all together at 8 MiB."""
        with self._lock:
            safe = _LOG_NAME.sub("_", self._early.text(str(name))).strip(".")[:80] or "log"
            if not safe.endswith((".log", ".txt")):
                safe += ".log"
            previous = self._logs.get(safe, "")
            # Redact before cutting, so a cut cannot split a secret into unrecognisable halves.
            combined = bound_text(previous + self._early.text(str(text)), MAX_LOG_CHARS)
            room = MAX_LOGS_TOTAL - (self._log_chars - len(previous))
            if len(combined) > room:
                combined = bound_text(combined, max(room, 1024))
                self._problems.append(f"log {safe} cut to fit the {MAX_LOGS_TOTAL}-character total log cap")
            self._log_chars += len(combined) - len(previous)
            self._logs[safe] = combined

    # -- writing ------------------------------------------------------------------------------

    def finish(
        self,
        expected_case_ids: list[str],
        secrets: Iterable[str] = (),
        family_seconds: dict[str, float] | None = None,
    ) -> Path:
        """Write the bundle and return its final path; missing cases are recorded as ``missing``."""
        with self._lock:
            if self._finished:
                raise ConfigError(f"BundleWriter.finish() was already called for run {self.run_id}")
            self._finished = True
            redactor = Redactor([*self._secrets, *secrets])
            self._manifest["finished_at"] = runinfo.utc_now()
            return _Finisher(self, redactor, list(expected_case_ids), family_seconds or {}).run()


class _Finisher:
    """One finish(): builds each part, writes it, keeps going when a part fails."""

    def __init__(
        self, writer: BundleWriter, redactor: Redactor, expected: list[str], family_seconds: dict[str, float]
    ) -> None:
        self.w = writer
        self.r = redactor
        self.expected = list(dict.fromkeys(redactor.text(str(e)) for e in expected))
        self.family_seconds = {str(k): float(v) for k, v in family_seconds.items()}
        self.problems = list(writer._problems)
        self.cases = []
        for case in writer._cases:
            redacted = self.r.data(case)
            # Status and timings are validated fields the layout computes with; a "secret" equal
            # to one (absurd, but possible) must not break the bundle, and verify reports it.
            for key in ("status", "seconds", "attempts", "retries"):
                redacted[key] = case[key]
            self.cases.append(redacted)
        # Case ids were just redacted with the caller's secrets too; key trajectories the same way.
        self.trajectories: dict[str, list[Any]] = {}
        for case_id, events in writer._trajectories.items():
            self.trajectories.setdefault(self.r.text(case_id), []).extend(events)
        self.tmp = writer.output_root / f".{writer.run_id}.partial-{uuid.uuid4().hex[:8]}"

    def run(self) -> Path:
        self.w.output_root.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir()
        (self.tmp / "cases").mkdir()
        (self.tmp / "trajectories").mkdir()
        (self.tmp / "logs").mkdir()
        self._assign_files()
        coverage = self._coverage()
        self._part("cases", self._write_cases)
        self._part("trajectories", self._write_trajectories)
        self._part("logs", self._write_logs)
        self._part("cleanup.json", lambda: self._json("cleanup.json", self._cleanup_doc()))
        if self.w._tasks:
            self._part("tasks.json", lambda: self._json("tasks.json", self._tasks_doc()))
        self._part("coverage.json", lambda: self._json("coverage.json", coverage))
        self._part("junit.xml", lambda: self._junit(coverage))
        self._part("index.html", lambda: self._index(coverage))
        self._part("logs/evidence-writer.log", lambda: self._writer_log(coverage))
        self._scan_written()
        target = self._target()
        self._write_manifest(coverage)
        write_sums(self.tmp)
        os.rename(self.tmp, target)
        return target

    # -- helpers ------------------------------------------------------------------------------

    def _part(self, name: str, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception as exc:  # one broken part must not cost the rest of the evidence
            self.problems.append(
                f"writing {name} failed: {type(exc).__name__}: {self.r.text(str(exc))[:500]}"
            )

    def _text(self, rel: str, text: str, kind: str = "") -> None:
        path = self.tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        redacted = self.r.text(text)
        if kind and redacted != text and not _parses(redacted, kind):
            # The data was redacted already; a secret matching JSON syntax itself would make
            # the text-level pass corrupt the file. Keep it valid; the scan reports the rest.
            self.problems.append(f"{rel}: text-level redaction would break its JSON; data-level kept")
            redacted = text
        # Lone surrogates (undecodable bytes) cannot be UTF-8; keep them visible as \udcXX.
        path.write_text(redacted, encoding="utf-8", errors="backslashreplace")

    def _json(self, rel: str, value: Any) -> None:
        self._text(rel, pretty(self.r.data(value)), "json")

    def _assign_files(self) -> None:
        taken: set[str] = set()
        for case in self.cases:
            stem = file_stem(case["id"], taken)
            case["files"] = {
                "report": f"cases/{stem}/report.json",
                "trajectory": f"trajectories/{stem}.jsonl",
            }

    def _coverage(self) -> dict[str, Any]:
        coverage, problems = build_coverage(
            self.w.run_id, self.cases, self.expected, self.family_seconds, tasks=len(self.w._tasks)
        )
        self.problems.extend(problems)
        return coverage

    def _write_cases(self) -> None:
        lines = []
        for case in self.cases:
            line = {
                k: case[k]
                for k in ("id", "subject", "family", "description", "expected", "observed", "seconds")
            }
            line.update(verdict=case["status"], status=case["status"], reason=case["reason"])
            line["report"] = case["files"]["report"]
            lines.append(dumps(self.r.data(line)) + "\n")
            report = case_report(case, self.w.run_id, self.w._manifest.get("mode"))
            self._json(case["files"]["report"], report)
        self._text("cases.jsonl", "".join(lines), "jsonl")

    def _write_trajectories(self) -> None:
        stems: dict[str, str] = {}
        for case in self.cases:
            stems.setdefault(case["id"], case["files"]["trajectory"])
            # Every recorded case has a trajectory file, empty when nothing was traced.
            rel = case["files"]["trajectory"]
            events = self.trajectories.get(case["id"], []) if stems[case["id"]] == rel else []
            self._text(rel, "".join(dumps(self.r.data(e)) + "\n" for e in events), "jsonl")
        orphans = sorted(set(self.trajectories) - set(stems))
        for case_id in orphans:
            taken = {Path(c["files"]["trajectory"]).stem for c in self.cases}
            rel = f"trajectories/{file_stem(case_id, taken)}.jsonl"
            events = self.trajectories[case_id]
            self._text(rel, "".join(dumps(self.r.data(e)) + "\n" for e in events), "jsonl")
            self.problems.append(f"trajectory for {case_id!r} has no case record; kept as {rel}")

    def _writer_log(self, coverage: dict[str, Any]) -> None:
        # The writer's own account; it also keeps logs/ non-empty, since some CI artifact
        # stores drop empty directories and the layout requires logs/.
        lines = [
            f"run {self.w.run_id}: {len(self.cases)} case record(s), {len(self.expected)} expected",
            "statuses: " + ", ".join(f"{k}={v}" for k, v in coverage["counts"].items()),
            f"trajectories: {len(self.trajectories)}, cleanup records: {len(self.w._cleanup)}",
            f"logs from the caller: {', '.join(sorted(self.w._logs)) or 'none'}",
            *(f"problem: {p}" for p in self.problems),
        ]
        self._text("logs/evidence-writer.log", "\n".join(lines) + "\n")

    def _write_logs(self) -> None:
        written: set[str] = set()
        for name, text in sorted(self.w._logs.items()):
            # Names were only checked against the environment's secrets so far.
            safe = _LOG_NAME.sub("_", self.r.text(name))
            while safe in written:
                safe = "_" + safe
            written.add(safe)
            self._text(f"logs/{safe}", text)

    def _cleanup_doc(self) -> dict[str, Any]:
        records = self.w._cleanup
        return {
            "summary": {
                "sandboxes": len(records),
                # A sandbox can have an error (a leak, a failed kill) and still end confirmed gone.
                "confirmed_absent": sum(1 for r in records if r["confirmed_absent_at"]),
                "errors": sum(1 for r in records if r["error"]),
                "error_ids": [r["sandbox_id"] for r in records if r["error"]],
                "unresolved": [r["sandbox_id"] for r in records if not r["confirmed_absent_at"]],
            },
            "records": records,
        }

    def _junit(self, coverage: dict[str, Any]) -> None:
        by_id = {c["id"]: c for c in self.cases}
        merged = [{**by_id.get(e["id"], {}), **e} for e in coverage["cases"]]
        properties = {
            "run_id": self.w.run_id,
            "mode": self.w._manifest.get("mode"),
            "started_at": self.w._manifest.get("started_at"),
        }
        text = build_junit(self.r.data(merged), self.r.data(properties), str(self.w._manifest["started_at"]))
        self._text("junit.xml", text)

    def _index(self, coverage: dict[str, Any]) -> None:
        manifest = {**self.w._manifest, "run_id": self.w.run_id}
        html = render_index(
            self.r.data(manifest),
            self.r.data(coverage),
            self.cases,
            self.r.data(self._cleanup_doc()),
            problems=list(self.problems),
            tasks=self.r.data(self._tasks_doc()) if self.w._tasks else None,
        )
        self._text("index.html", html)

    def _tasks_doc(self) -> dict[str, Any]:
        digest = self.w._manifest.get("tasks_digest")
        return tasks_doc(self.r.data(self.w._tasks), str(digest) if digest else None)

    def _scan_written(self) -> None:
        for path in sorted(self.tmp.rglob("*")):
            name = path.relative_to(self.tmp).as_posix()
            self.problems.extend(f"file name {name}: {f} survived redaction" for f in self.r.find(name))
            if path.is_file():
                findings = self.r.find(path.read_text(encoding="utf-8", errors="replace"))
                for finding in findings:
                    self.problems.append(
                        f"{path.relative_to(self.tmp).as_posix()}: {finding} survived redaction"
                    )

    def _write_manifest(self, coverage: dict[str, Any]) -> None:
        manifest = dict(self.w._manifest)
        manifest.update(
            run_id=self.w.run_id,
            schema_version=SCHEMA_VERSION,
            family_seconds=self.family_seconds,
            coverage={
                "complete": coverage["complete"],
                "passed": coverage["passed"],
                "counts": coverage["counts"],
            },
            complete=not self.problems,
            problems=self.problems,
        )
        if self.w._tasks:
            doc = self._tasks_doc()
            manifest["tasks"] = {"digest": doc["digest"], "counts": doc["counts"], "passed": doc["passed"]}
        self._json("run-manifest.json", manifest)

    def _target(self) -> Path:
        target = self.w.final_path
        n = 2
        while target.exists():
            # Never overwrite or merge into another bundle; say where this one went instead.
            target = self.w.output_root / f"{self.w.run_id}-{n}"
            n += 1
        if target != self.w.final_path:
            self.problems.append(f"{self.w.final_path} appeared during the run; this bundle is {target.name}")
        return target


def _parses(text: str, kind: str) -> bool:
    try:
        if kind == "json":
            json.loads(text)
        else:
            for line in text.split("\n"):
                if line.strip():
                    json.loads(line)
    except ValueError:
        return False
    return True
