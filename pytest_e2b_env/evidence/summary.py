"""The run's Markdown summary for CI (GitHub Actions' job summary): verdict, families, failures, bundle.

Rendered from the finished bundle's own ``run-manifest.json`` and ``coverage.json``, so it says exactly
what the bundle says and carries only redacted text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_e2b_env.evidence.coverage import run_verdict

_MARK = {"PASSED": "✅", "FAILED": "❌", "INCOMPLETE": "⚠️"}
_COLUMNS = ("passed", "relaxed", "failed", "error", "missing", "skipped")
_BAD = ("failed", "error", "missing")
# A CI page is read, not archived: long reasons are cut (the bundle keeps them whole).
_MAX_REASON = 300
_MAX_LISTED = 50


def _cell(text: Any) -> str:
    """Text safe inside one Markdown table cell."""
    flat = " ".join(str(text).split())
    if len(flat) > _MAX_REASON:
        flat = flat[: _MAX_REASON - 1] + "…"
    return flat.replace("|", "\\|")


def render_summary(
    manifest: Mapping[str, Any], coverage: Mapping[str, Any], bundle: Path, problems: Sequence[str] = ()
) -> str:
    """The Markdown summary of one run."""
    verdict = run_verdict(coverage, problems)
    counts = coverage.get("counts", {})
    subjects = manifest.get("subjects") or {}
    named = ", ".join(f"{kind} `{spec}`" for kind, spec in subjects.items() if spec)
    lines = [
        f"## {_MARK[verdict]} pytest-e2b-env: {verdict}",
        "",
        f"Run `{manifest.get('run_id')}`, {manifest.get('mode')}, isolation level "
        f"`{manifest.get('isolation') or 'n/a'}`; subjects: {named or 'none'}.",
        "",
        ", ".join(f"{counts.get(s, 0)} {s}" for s in _COLUMNS),
        "",
        "| family | " + " | ".join(_COLUMNS) + " | seconds |",
        "| --- | " + " | ".join("---:" for _ in _COLUMNS) + " | ---: |",
    ]
    for name, fam in (coverage.get("families") or {}).items():
        cells = " | ".join(str(int(fam.get(s, 0))) for s in _COLUMNS)
        lines.append(f"| {_cell(name)} | {cells} | {float(fam.get('seconds') or 0.0):.2f} |")
    bad = [e for e in coverage.get("cases", []) if e.get("status") in _BAD]
    if bad:
        lines += [
            "",
            "### Failed cases",
            "",
            "| case | family | status | reason |",
            "| --- | --- | --- | --- |",
        ]
        for entry in bad[:_MAX_LISTED]:
            lines.append(
                f"| `{_cell(entry.get('id'))}` | {_cell(entry.get('family'))} | {entry.get('status')} "
                f"| {_cell(entry.get('reason') or '')} |"
            )
        if len(bad) > _MAX_LISTED:
            lines.append(f"\n{len(bad) - _MAX_LISTED} more in the bundle's coverage.json.")
    relaxed = manifest.get("relaxed_policies") or []
    if relaxed:
        lines += ["", "Relaxed policy criteria (reported as warnings, never passes): " + ", ".join(relaxed)]
    if problems:
        lines += ["", "### Problems with this run", ""] + [f"* {_cell(p)}" for p in problems]
    lines += ["", f"Evidence bundle: `{bundle}` (recheck: `pytest-e2b-env verify-evidence {bundle}`)", ""]
    return "\n".join(lines)


def write_summary(path: Path, bundle: Path, problems: Sequence[str] = ()) -> str:
    """Append the summary of ``bundle`` to ``path`` (GitHub Actions appends step summaries too)."""
    manifest = json.loads((bundle / "run-manifest.json").read_text(encoding="utf-8"))
    coverage = json.loads((bundle / "coverage.json").read_text(encoding="utf-8"))
    text = render_summary(manifest, coverage, bundle, problems)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        out.write(text + "\n")
    return text
