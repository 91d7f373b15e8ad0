"""index.html: the bundle's human summary, one self-contained page (inline CSS and SVG, no script).

A reviewer sees the verdict first and, right below it, every failure (safety apart from policy,
each linked to its case), then the run's facts, pass/fail per family with timings, the reward
distributions per family, every case's expectation beside its observation (folded for the cases
that passed), and cleanup status with the case that owned each sandbox. All inputs are already
redacted; everything is escaped here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

from pytest_e2b_env.evidence.coverage import run_verdict
from pytest_e2b_env.evidence.html_bits import COLOURS, STATUS_ORDER, anchors, badge, link
from pytest_e2b_env.evidence.report_failures import failures_section
from pytest_e2b_env.evidence.report_plots import rewards_section

#: Cases whose expectation and observation are folded (the ones a reviewer rarely needs open).
FOLDED = ("passed", "skipped")
# Long expectations/observations are cut on the page; the full text is in report.json.
_MAX_JSON = 4000
_FLAT_LIST = re.compile(r"\[\s*\n([^\[\]{}]*?)\n\s*\]")

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1f2328;background:#fff}
h1{font-size:22px;margin:0 0 6px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;width:100%}
table.cases{table-layout:fixed}table.cases col.c1{width:22%}table.cases col.c2{width:7%}
table.cases col.c3{width:25%}table.cases col.c4{width:6%}table.cases col.c5,table.cases col.c6{width:20%}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-weight:600;font-size:12px}
.verdict{font-size:18px;padding:6px 14px;border-radius:6px;color:#fff;display:inline-block;margin:8px 0}
pre{margin:0;white-space:pre-wrap;word-break:break-word;max-height:220px;overflow:auto;
background:#f6f8fa;padding:4px 6px;font:12px/1.35 ui-monospace,monospace}
.meta td:first-child{width:180px;color:#57606a}.muted{color:#57606a}
.problems li{color:#cf222e}.plots{display:flex;gap:24px;flex-wrap:wrap}
ul.crit{margin:4px 0;padding-left:18px}.links{font-size:12px;margin-top:4px}ul.crit li.fail{color:#cf222e}
ul.crit li.relaxed{color:#9a6700}
table#failures{table-layout:fixed}table#failures col.f1{width:26%}table#failures col.f2{width:9%}
table#failures col.f3{width:7%}table#failures col.f4{width:7%}table#failures td{padding:2px 8px}
table#failures tr.group th{background:#fff;font-weight:600;padding-top:8px}
tbody.kind-safety tr.group th{color:#cf222e}tbody.kind-policy tr.group th{color:#9a6700}
.plots figure{margin:0}.plots figcaption{font-size:12px;color:#57606a}
details.fold summary{cursor:pointer;color:#57606a;font-size:12px}tr.case:target{outline:3px solid #0969da}
td.when{white-space:nowrap;font-variant-numeric:tabular-nums}
"""


def render_index(
    manifest: Mapping[str, Any],
    coverage: Mapping[str, Any],
    cases: Sequence[Mapping[str, Any]],
    cleanup: Mapping[str, Any],
    problems: Sequence[str] = (),
    tasks: Mapping[str, Any] | None = None,
) -> str:
    """Return the whole index.html for a bundle (inputs must already be redacted)."""
    run_id = str(manifest.get("run_id", ""))
    by_id: dict[str, Mapping[str, Any]] = {}
    for case in cases:
        by_id.setdefault(str(case.get("id")), case)
    ids = anchors(str(e.get("id")) for e in coverage.get("cases", []))
    body = [
        _header(manifest, coverage, problems),
        failures_section(coverage, by_id, ids),
        _problems(problems),
        _facts(manifest),
        _families(coverage),
        rewards_section(cases),
        _cases(coverage, by_id, ids),
        _tasks(tasks) if tasks else "",
        _cleanup(cleanup, ids),
    ]
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        # No network: forbid every fetch so the page is provably self-contained.
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'; "
        'img-src data:">'
        f"<title>pytest-e2b-env evidence {escape(run_id)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def _number(value: Any) -> str:
    return "-" if value is None else escape(f"{value:g}" if isinstance(value, float) else str(value))


def _tasks(tasks: Mapping[str, Any]) -> str:
    """Your tasks: one row per task with its oracle, floor gap and repeat spread, then each failure."""
    rows = []
    for task in tasks.get("tasks", []):
        checks: Mapping[str, Any] = task.get("checks", {})
        reasons = "".join(
            f"<li class='fail'>{escape(str(name))}: {escape(str(c.get('reason') or ''))}</li>"
            for name, c in checks.items()
            if c.get("status") not in ("passed", "skipped")
        )
        cells = "".join(
            f"<td>{badge(str(checks[name].get('status')))}</td>" if name in checks else "<td>-</td>"
            for name in ("oracle", "floor", "repeat")
        )
        name = escape(str(task.get("task_id")))
        rows.append(
            f"<tr data-task='{name}'><td>{name}</td><td>{escape(str(task.get('kind')))}</td>{cells}"
            f"<td class='num'>{_number(task.get('floor_gap'))}</td>"
            f"<td class='num'>{_number(task.get('repeat_spread'))}</td>"
            f"<td>{f'<ul class=crit>{reasons}</ul>' if reasons else ''}</td></tr>"
        )
    digest = escape(str(tasks.get("digest") or "unknown"))
    return (
        f"<h2>Tasks</h2><p class='muted'>Your tasks (digest {digest}): the reference solution at the "
        "maximum (oracle), the best no-op or shortcut program's distance below it (floor gap), and the "
        "oracle's score range over repeated runs (repeat spread).</p><table id='tasks'><tr><th>task</th>"
        "<th>kind</th><th>oracle</th><th>floor</th><th>repeat</th><th>floor gap</th><th>repeat spread</th>"
        f"<th>failures</th></tr>{''.join(rows)}</table>"
    )


def _header(manifest: Mapping[str, Any], coverage: Mapping[str, Any], problems: Sequence[str]) -> str:
    """The run id, the verdict and the counts: what the first glance needs."""
    counts = coverage.get("counts", {})
    verdict = run_verdict(coverage, problems)
    colour = COLOURS[{"INCOMPLETE": "missing", "PASSED": "passed", "FAILED": "failed"}[verdict]]
    totals = ", ".join(f"{counts.get(s, 0)} {s}" for s in STATUS_ORDER)
    return "\n".join(
        [
            f"<h1>Evidence for run <code>{escape(str(manifest.get('run_id')))}</code></h1>",
            f"<div class='verdict' id='verdict' style='background:{colour}'>{verdict}</div>",
            f"<p id='totals'>{escape(totals)}</p>",
        ]
    )


def _problems(problems: Sequence[str]) -> str:
    if not problems:
        return ""
    items = "".join(f"<li>{escape(p)}</li>" for p in problems)
    return f"<h2>Problems with this run</h2><ul class='problems' id='problems'>{items}</ul>"


def _facts(manifest: Mapping[str, Any]) -> str:
    """Mode, target, isolation, subjects and their sources, git, catalog, packages."""
    git = manifest.get("git") or {}
    packages = manifest.get("packages") or {}
    platform = manifest.get("platform") or {}
    rows = [
        ("mode", manifest.get("mode", "n/a")),
        *([("target", manifest["live_endpoint"])] if manifest.get("live_endpoint") else []),
        ("isolation level", manifest.get("isolation") or "n/a"),
        *_subject_rows(manifest),
        ("started / finished (UTC)", f"{manifest.get('started_at')}  /  {manifest.get('finished_at')}"),
        ("git", f"{git.get('head') or 'no commit'}" + (" (dirty)" if git.get("dirty") else "")),
        ("catalog hash", manifest.get("catalog_hash", "n/a")),
        ("relaxed policies", ", ".join(manifest.get("relaxed_policies") or []) or "none"),
        ("seeds", manifest.get("seeds", "n/a")),
        ("argv", " ".join(str(a) for a in manifest.get("argv") or [])),
        ("python / platform", f"{platform.get('python')} on {platform.get('platform')}"),
        ("packages", ", ".join(f"{k} {v}" for k, v in packages.items() if v)),
    ]
    cells = "".join(f"<tr><td>{escape(k)}</td><td>{escape(str(v))}</td></tr>" for k, v in rows)
    return f"<h2>The run</h2><table class='meta' id='facts'>{cells}</table>"


def _subject_rows(manifest: Mapping[str, Any]) -> list[tuple[str, str]]:
    """One row per subject under test: its spec, module file and source digest (runinfo.subject_source)."""
    sources: Mapping[str, Any] = manifest.get("subject_sources") or {}
    rows = []
    for kind, spec in (manifest.get("subjects") or {}).items():
        if not spec:
            continue
        source = sources.get(kind) or {}
        if source.get("sha256"):
            pinned = (
                f"{source.get('module_file')}; sha256 {source['sha256']} of {source.get('files')} file(s)"
            )
        else:
            pinned = f"{source.get('module_file') or 'no module file'}; {source.get('error') or 'no digest'}"
        rows.append((f"{kind} subject", f"{spec} ({pinned})"))
    return rows


def _families(coverage: Mapping[str, Any]) -> str:
    families: Mapping[str, Mapping[str, Any]] = coverage.get("families", {})
    slowest = max([float(f.get("seconds") or 0.0) for f in families.values()] + [1e-9])
    rows = []
    for name, fam in families.items():
        seconds = float(fam.get("seconds") or 0.0)
        width = max(1, round(120 * seconds / slowest)) if seconds else 0
        bar = f"<svg width='124' height='10'><rect width='{width}' height='10' fill='#0969da'/></svg>"
        cells = "".join(f"<td class='num'>{int(fam.get(s, 0))}</td>" for s in STATUS_ORDER)
        rows.append(
            f"<tr data-family='{escape(name)}'><td><a href='#{_family_anchor(name)}'>{escape(name)}</a></td>"
            f"<td>{badge(_family_result(fam))}</td>{cells}"
            f"<td class='num'>{seconds:.2f}</td><td>{bar}</td></tr>"
        )
    head = "".join(f"<th>{s}</th>" for s in STATUS_ORDER)
    return (
        "<h2>Families</h2><table id='families'><tr><th>family</th><th>result</th>"
        f"{head}<th>seconds</th><th>time</th></tr>{''.join(rows)}</table>"
    )


def _family_anchor(family: str) -> str:
    return "family-" + re.sub(r"[^A-Za-z0-9_-]", "_", family)


def _family_result(fam: Mapping[str, Any]) -> str:
    if any(int(fam.get(s, 0)) for s in ("failed", "error", "missing")):
        return "failed"
    return "passed" if int(fam.get("passed", 0)) else "skipped"


def _json_block(value: Any) -> str:
    text = json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False, default=str)
    # Lists of plain values (rewards, ids) read better on one line.
    text = _FLAT_LIST.sub(lambda m: "[" + re.sub(r"\s*\n\s*", " ", m.group(1)).strip() + "]", text)
    if len(text) > _MAX_JSON:
        text = text[:_MAX_JSON] + f"\n... ({len(text) - _MAX_JSON} more characters in report.json)"
    return f"<pre>{escape(text)}</pre>"


def _criteria(case: Mapping[str, Any]) -> str:
    items = []
    for c in case.get("criteria") or []:
        cls = "pass" if c.get("passed") else "relaxed" if c.get("relaxed") else "fail"
        mark = "&#10003;" if c.get("passed") else "~" if c.get("relaxed") else "&#10007;"
        detail = f" (expected {c.get('expected')!r}, got {c.get('actual')!r})" if not c.get("passed") else ""
        if c.get("severity") == "policy" and not c.get("passed"):
            detail += f" [policy {c.get('policy')}{', relaxed' if c.get('relaxed') else ''}]"
        items.append(f"<li class='{cls}'>{mark} {escape(str(c.get('id')))}{escape(detail)}</li>")
    for e in case.get("exceptions") or []:
        items.append(
            f"<li class='fail'>raised {escape(str(e.get('type')))}: {escape(str(e.get('message')))}</li>"
        )
    return f"<ul class='crit'>{''.join(items)}</ul>" if items else ""


def _cases(coverage: Mapping[str, Any], by_id: Mapping[str, Mapping[str, Any]], ids: dict[str, str]) -> str:
    by_family: dict[str, list[Mapping[str, Any]]] = {}
    for entry in coverage.get("cases", []):
        by_family.setdefault(str(entry.get("family")), []).append(entry)
    out = ["<h2>Cases: expectation vs observation</h2>"]
    for family, entries in sorted(by_family.items()):
        title = "unknown family (cases that never reported)" if family == "unknown" else family
        rows = []
        for entry in entries:
            case_id = str(entry.get("id"))
            case = by_id.get(case_id, {})
            seconds = entry.get("seconds")
            reason = entry.get("reason") or ""
            status = str(entry.get("status"))
            expected, observed = _json_block(case.get("expected", {})), _observed(case)
            if status in FOLDED:
                expected, observed = _fold("expected", expected), _fold("observed", observed)
            rows.append(
                f"<tr class='case' id='{ids.get(case_id, '')}' data-case='{escape(case_id)}' data-status='"
                f"{escape(status)}'><td><code>{escape(case_id)}</code><br>"
                f"<span class='muted'>{escape(str(case.get('description') or ''))}</span>{_links(case)}</td>"
                f"<td>{escape(str(entry.get('subject')))}</td><td>{badge(status)}"
                f"<div>{escape(str(reason))}</div>{_criteria(case)}</td>"
                f"<td class='num'>{'' if seconds is None else f'{float(seconds):.2f}'}</td>"
                f"<td>{expected}</td><td>{observed}</td></tr>"
            )
        out.append(
            f"<h3 id='{_family_anchor(family)}'>{escape(title)}</h3><table class='cases'>"
            "<colgroup><col class='c1'><col class='c2'><col class='c3'><col class='c4'><col class='c5'>"
            "<col class='c6'></colgroup><tr><th>case</th><th>subject</th><th>verdict</th>"
            f"<th>seconds</th><th>expected</th><th>observed</th></tr>{''.join(rows)}</table>"
        )
    return "\n".join(out)


def _fold(label: str, block: str) -> str:
    """A passing case's expectation or observation, one click away instead of a screenful."""
    return f"<details class='fold'><summary>{label}</summary>{block}</details>"


def _links(case: Mapping[str, Any]) -> str:
    """Relative links to the case's report and trajectory inside the bundle (no network)."""
    files = case.get("files") or {}
    links = [
        f"<a href='{escape(str(files[k]), quote=True)}'>{k}</a>"
        for k in ("report", "trajectory")
        if files.get(k)
    ]
    return f"<div class='links'>{' · '.join(links)}</div>" if links else ""


def _observed(case: Mapping[str, Any]) -> str:
    """What was observed for each expectation (criteria actuals), then the full observation folded."""
    criteria = case.get("criteria") or []
    observed = case.get("observed", {})
    if not criteria:
        return _json_block(observed)
    actual = {str(c.get("id")): c.get("actual") for c in criteria}
    return (
        f"{_json_block(actual)}<details><summary>full observation</summary>{_json_block(observed)}</details>"
    )


def _when(value: Any) -> str:
    """Timestamps as UTC ISO text whether recorded as epoch seconds or already as text."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1e11:
        return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return "" if value is None else str(value)


def _cleanup_badge(status: str) -> str:
    colour = {
        "confirmed_absent": COLOURS["passed"],
        "error_confirmed_absent": COLOURS["error"],
        "error": COLOURS["failed"],
    }.get(status, COLOURS["missing"])
    return badge(status, colour)


def _cleanup(cleanup: Mapping[str, Any], ids: dict[str, str]) -> str:
    summary = cleanup.get("summary", {})
    unresolved = summary.get("unresolved") or []
    status = "failed" if unresolved or summary.get("errors") else "passed"
    text = (
        f"{summary.get('sandboxes', 0)} sandboxes created, "
        f"{summary.get('confirmed_absent', 0)} confirmed gone, "
        f"{summary.get('errors', 0)} errors, {len(unresolved)} unresolved"
    )
    rows = "".join(
        f"<tr><td><code>{escape(str(r.get('sandbox_id')))}</code></td>"
        f"<td>{link(str(r['case']), ids) if r.get('case') else '-'}</td><td>{escape(str(r.get('role')))}</td>"
        f"<td class='when'>{escape(_when(r.get('created_at')))}</td>"
        f"<td class='when'>{escape(_when(r.get('confirmed_absent_at')))}</td>"
        f"<td>{_cleanup_badge(str(r.get('status')))} "
        f"{escape(str(r.get('error') or ''))}</td></tr>"
        for r in cleanup.get("records", [])
    )
    return (
        f"<h2>Cleanup</h2><p id='cleanup-summary'>{badge(status)} {escape(text)}</p>"
        "<table id='cleanup'><tr><th>sandbox</th><th>case</th><th>role</th><th>created</th>"
        f"<th>confirmed absent</th><th>status</th></tr>{rows}</table>"
    )
