"""verify_bundle: recheck a bundle from its files alone (``pytest-e2b-env verify-evidence DIR``).

Checks, each finding reported as one problem line: SHA256SUMS against every file; the inventory
(every file of the layout present, parseable and consistent with the others: coverage, cases.jsonl,
per-case reports and trajectories, junit.xml); the expected cases (none missing); a self-contained
index.html; and secrets, both values from the environment or the caller and secret-shaped strings,
in every file and file name.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pytest_e2b_env.evidence.checksums import SUMS_NAME, bundle_files, check_sums
from pytest_e2b_env.evidence.junit import STATUS_PROPERTY, name_text, properties_of
from pytest_e2b_env.evidence.redaction import Redactor

REQUIRED_FILES = (
    "run-manifest.json",
    "coverage.json",
    "cases.jsonl",
    "cleanup.json",
    "junit.xml",
    "index.html",
    SUMS_NAME,
)
REQUIRED_DIRS = ("cases", "trajectories", "logs")
MANIFEST_KEYS = ("run_id", "started_at", "finished_at", "argv", "git", "platform", "packages", "complete")
STATUSES = ("passed", "relaxed", "failed", "skipped", "error", "missing")
# Anything that would make a browser fetch from elsewhere: the page must stand alone. Only
# markup is checked (tags and <style>), since escaped case text may legitimately mention URLs.
_TAG = re.compile(r"<[A-Za-z][^>]*>")
_FETCHING_TAG = re.compile(
    r"(?i)^<(?:script|link|iframe|object|embed|base)\b"
    r"|\b(?:src|href|action|poster|data|srcset|formaction)\s*=\s*[\"']?\s*(?:[a-z][a-z0-9+.-]*:(?<!data:)|//)"
)
_STYLE = re.compile(r"(?is)<style\b[^>]*>(.*?)</style>")
_FETCHING_CSS = re.compile(r"(?i)url\(\s*[\"']?\s*(?!data:)[a-z/]|@import")


def _load_json(root: Path, rel: str, problems: list[str]) -> Any:
    path = root / rel
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        problems.append(f"{rel} is not valid JSON: {exc}")
        return None


def _load_jsonl(root: Path, rel: str, problems: list[str]) -> list[Any]:
    path = root / rel
    if not path.is_file():
        return []
    rows = []
    text = path.read_text(encoding="utf-8", errors="replace")
    # Split on "\n" only: JSON Lines records may contain other characters splitlines() breaks on.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError as exc:
            problems.append(f"{rel} line {number} is not valid JSON: {exc}")
    return rows


def _check_manifest(root: Path, manifest: Any, coverage: Any, problems: list[str]) -> None:
    if not isinstance(manifest, dict):
        return
    for key in MANIFEST_KEYS:
        if key not in manifest:
            problems.append(f"run-manifest.json lacks {key!r}")
    run_id = str(manifest.get("run_id"))
    if root.name != run_id and not root.name.startswith(f"{run_id}-"):
        problems.append(
            f"run-manifest.json run_id {run_id!r} does not match the directory name {root.name!r}"
        )
    if coverage is not None and isinstance(manifest.get("coverage"), dict):
        copy = manifest["coverage"]
        if any(copy.get(k) != coverage.get(k) for k in ("counts", "passed", "complete")):
            problems.append("run-manifest.json coverage summary disagrees with coverage.json")
    if manifest.get("complete") is not True:
        listed = manifest.get("problems") or ["(no reason recorded)"]
        problems.append("run is marked incomplete: " + "; ".join(str(p) for p in listed[:20]))


def _check_tasks(root: Path, manifest: Any, problems: list[str]) -> bool:
    """``tasks.json`` agrees with the manifest's ``tasks`` entry; True when the bundle holds task checks."""
    declared = manifest.get("tasks") if isinstance(manifest, dict) else None
    present = (root / "tasks.json").is_file()
    if declared is None and not present:
        return False
    if not isinstance(declared, dict) or not present:
        problems.append("tasks.json and the manifest's 'tasks' entry must both be present")
        return False
    doc = _load_json(root, "tasks.json", problems)
    if not isinstance(doc, dict) or not isinstance(doc.get("tasks"), list):
        problems.append("tasks.json has no 'tasks' list")
        return False
    if doc.get("digest") != declared.get("digest") or doc.get("counts") != declared.get("counts"):
        problems.append("tasks.json disagrees with the manifest's 'tasks' entry (digest or counts)")
    return bool(doc["tasks"])


def _check_coverage(coverage: Any, problems: list[str], tasks: bool = False) -> list[dict[str, Any]]:
    if not isinstance(coverage, dict) or not isinstance(coverage.get("cases"), list):
        if coverage is not None:
            problems.append("coverage.json has no 'cases' list")
        return []
    entries = [e for e in coverage["cases"] if isinstance(e, dict)]
    if not entries and not tasks:  # a run of task checks only records them in tasks.json
        problems.append("coverage.json lists no cases; an empty run proves nothing")
    counts = Counter(str(e.get("status")) for e in entries)
    for entry in entries:
        if entry.get("status") not in STATUSES:
            problems.append(
                f"coverage.json: case {entry.get('id')!r} has unknown status {entry.get('status')!r}"
            )
        elif entry.get("status") == "missing":
            problems.append(f"case {entry.get('id')} is missing: {entry.get('reason') or 'never recorded'}")
        elif entry.get("status") == "skipped" and not entry.get("reason"):
            problems.append(f"case {entry.get('id')} was skipped without a reason")
    recorded = {s: counts.get(s, 0) for s in STATUSES}
    if isinstance(coverage.get("counts"), dict) and coverage["counts"] != recorded:
        problems.append(f"coverage.json counts {coverage['counts']} disagree with its cases {recorded}")
    duplicates = [case_id for case_id, n in Counter(e.get("id") for e in entries).items() if n > 1]
    if duplicates:
        problems.append(f"coverage.json lists cases more than once: {duplicates[:20]}")
    return entries


def _check_cases(root: Path, entries: list[dict[str, Any]], problems: list[str]) -> None:
    lines = _load_jsonl(root, "cases.jsonl", problems)
    by_id = Counter(str(line.get("id")) for line in lines if isinstance(line, dict))
    referenced: set[str] = set()
    for entry in entries:
        case_id = str(entry.get("id"))
        if entry.get("status") == "missing":
            continue
        if by_id.get(case_id, 0) != entry.get("records", 1):
            problems.append(
                f"case {case_id}: coverage.json says {entry.get('records')} record(s), "
                f"cases.jsonl has {by_id.get(case_id, 0)}"
            )
        for rel in entry.get("reports") or []:
            referenced.add(rel)
            report = _load_json(root, rel, problems)
            if report is None:
                problems.append(f"case {case_id}: {rel} is missing")
                continue
            if (
                not isinstance(report, dict)
                or report.get("id") != case_id
                or not isinstance(report.get("criteria"), list)
            ):
                problems.append(f"case {case_id}: {rel} is not this case's report (id or criteria wrong)")
                continue
            _check_report(case_id, rel, report, problems)
            trajectory = (report.get("files") or {}).get("trajectory")
            if not trajectory or not (root / trajectory).is_file():
                problems.append(f"case {case_id}: trajectory file {trajectory!r} is missing")
            else:
                referenced.add(trajectory)
                _load_jsonl(root, trajectory, problems)
    known = {str(e.get("id")) for e in entries}
    for case_id in sorted(set(by_id) - known):
        problems.append(f"cases.jsonl has case {case_id!r} that coverage.json does not list")
    for rel in bundle_files(root):
        if rel.startswith(("cases/", "trajectories/")) and rel not in referenced:
            problems.append(f"{rel} belongs to no case in coverage.json")


def _check_report(case_id: str, rel: str, report: dict[str, Any], problems: list[str]) -> None:
    """A report's verdict and summary must agree with its own criteria and status."""
    criteria = [c for c in report["criteria"] if isinstance(c, dict)]
    failed = [c.get("id") for c in criteria if not c.get("passed")]
    summary = report.get("summary") or {}
    if summary.get("total_count") != len(criteria) or summary.get("failed_criteria") != failed:
        problems.append(f"case {case_id}: {rel} summary disagrees with its criteria")
    if report.get("passed") is not (report.get("status") == "passed"):
        problems.append(
            f"case {case_id}: {rel} says passed={report.get('passed')} with status {report.get('status')}"
        )


def _check_junit(root: Path, entries: list[dict[str, Any]], problems: list[str]) -> None:
    path = root / "junit.xml"
    if not path.is_file():
        return
    try:
        tree = ET.fromstring(path.read_bytes())
    except ET.ParseError as exc:
        problems.append(f"junit.xml does not parse: {exc}")
        return
    testcases = list(tree.iter("testcase"))
    names = Counter(t.get("name") for t in testcases)
    for entry in entries:
        # junit.xml shows control characters, tabs and newlines in names escaped.
        found = names.get(name_text(str(entry.get("id"))), 0)
        if found != 1:
            problems.append(f"junit.xml has {found} testcases for {entry.get('id')}; expected exactly 1")
    bad_status = {
        name_text(str(e.get("id"))) for e in entries if e.get("status") in ("failed", "error", "missing")
    }
    relaxed = {name_text(str(e.get("id"))) for e in entries if e.get("status") == "relaxed"}
    for testcase in testcases:
        marked = properties_of(testcase).get(STATUS_PROPERTY) == "relaxed"
        if testcase.get("name") in relaxed and not marked:
            problems.append(
                f"junit.xml: {testcase.get('name')} relaxed in coverage.json but a plain pass in junit.xml"
            )
        outcome = testcase.find("failure")
        if outcome is None:
            outcome = testcase.find("error")
        if outcome is not None and not (outcome.get("message") or "").strip():
            problems.append(f"junit.xml: {testcase.get('name')} fails without a message")
        if testcase.get("name") in bad_status and outcome is None:
            problems.append(
                f"junit.xml: {testcase.get('name')} failed in coverage.json but passes in junit.xml"
            )


def _check_index(root: Path, problems: list[str]) -> None:
    path = root / "index.html"
    if path.is_file():
        page = path.read_text(encoding="utf-8", errors="replace")
        found = [t for t in _TAG.findall(page) if _FETCHING_TAG.search(t)]
        found += [m.group(0) for css in _STYLE.findall(page) for m in _FETCHING_CSS.finditer(css)]
        if found:
            problems.append(f"index.html is not self-contained: it references {found[0][:200]!r}")


def _check_secrets(root: Path, redactor: Redactor, problems: list[str]) -> None:
    for rel in [*bundle_files(root), SUMS_NAME]:
        path = root / rel
        # The path itself may hold the secret; findings show it redacted.
        shown = redactor.text(rel)
        for finding in redactor.find(rel):
            problems.append(f"file name {shown!r}: {finding}")
        if path.is_file() and not path.is_symlink():
            for finding in redactor.find(path.read_text(encoding="utf-8", errors="replace")):
                problems.append(f"{shown}: {finding}")


def verify_bundle(
    path: Path, expected_case_ids: Iterable[str] | None = None, secrets: Iterable[str] | None = None
) -> list[str]:
    """Every problem found in the bundle at ``path``; an empty list means it checks out."""
    root = Path(path).resolve()  # "." inside a bundle has a name once resolved (the run id)
    if not root.is_dir():
        return [f"{root} is not a directory; give the bundle directory <output>/<run-id>"]
    if not (root / "run-manifest.json").exists() and not (root / SUMS_NAME).exists():
        runs = sorted(p.name for p in root.iterdir() if (p / "run-manifest.json").is_file())
        if runs:
            # Pointed at the output root rather than at one run's bundle.
            return [f"{root} holds bundles, not one bundle; give one of: {', '.join(runs[:10])}"]
    problems = check_sums(root)
    for rel in REQUIRED_FILES:
        if not (root / rel).is_file():
            problems.append(f"{rel} is missing from the bundle")
    for rel in REQUIRED_DIRS:
        if not (root / rel).is_dir():
            problems.append(f"{rel}/ is missing from the bundle")
    coverage = _load_json(root, "coverage.json", problems)
    manifest = _load_json(root, "run-manifest.json", problems)
    _check_manifest(root, manifest, coverage, problems)
    entries = _check_coverage(coverage, problems, _check_tasks(root, manifest, problems))
    _check_cases(root, entries, problems)
    _check_junit(root, entries, problems)
    _check_index(root, problems)
    cleanup = _load_json(root, "cleanup.json", problems)
    if cleanup is not None and not (isinstance(cleanup, dict) and isinstance(cleanup.get("records"), list)):
        problems.append("cleanup.json has no 'records' list")
    redactor = Redactor(secrets or ())
    if expected_case_ids is not None:
        present = {str(e.get("id")): e.get("status") for e in entries}
        # The writer redacted ids holding a secret; compare in the same form.
        for case_id in dict.fromkeys(redactor.text(str(c)) for c in expected_case_ids):
            if case_id not in present:
                problems.append(f"expected case {case_id} is not in the bundle's inventory")
    _check_secrets(root, redactor, problems)
    # Problems quote names and lines from the bundle; they are printed, so they are redacted too.
    return [redactor.text(p) for p in problems]
