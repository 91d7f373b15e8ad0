"""index.html: the bundle's human summary, one self-contained page (inline CSS and SVG, no script).

A reviewer sees the verdict first, then pass/fail per family with timings, the reward
distributions, every case's expectation beside its observation, and cleanup status. All
inputs are already redacted; everything is escaped here.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

from pytest_e2b_env.evidence.coverage import run_verdict

STATUS_ORDER = ("passed", "relaxed", "failed", "error", "missing", "skipped")
_COLOURS = {
    "passed": "#1a7f37",
    "relaxed": "#bf8700",
    "failed": "#cf222e",
    "error": "#9a3412",
    "missing": "#8250df",
    "skipped": "#6e7781",
}
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
    body = [
        _header(manifest, coverage, problems),
        _families(coverage),
        _rewards(cases),
        _cases(coverage, cases),
        _tasks(tasks) if tasks else "",
        _cleanup(cleanup),
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
            f"<td>{_badge(str(checks[name].get('status')))}</td>" if name in checks else "<td>-</td>"
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


def _badge(status: str) -> str:
    colour = _COLOURS.get(status, "#57606a")
    return f"<span class='badge status-{escape(status)}' style='background:{colour}'>{escape(status)}</span>"


def _header(manifest: Mapping[str, Any], coverage: Mapping[str, Any], problems: Sequence[str]) -> str:
    counts = coverage.get("counts", {})
    verdict = run_verdict(coverage, problems)
    colour = _COLOURS[{"INCOMPLETE": "missing", "PASSED": "passed", "FAILED": "failed"}[verdict]]
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
    totals = ", ".join(f"{counts.get(s, 0)} {s}" for s in STATUS_ORDER)
    out = [
        f"<h1>Evidence for run <code>{escape(str(manifest.get('run_id')))}</code></h1>",
        f"<div class='verdict' id='verdict' style='background:{colour}'>{verdict}</div>",
        f"<p id='totals'>{escape(totals)}</p>",
        "<table class='meta'>"
        + "".join(f"<tr><td>{escape(k)}</td><td>{escape(str(v))}</td></tr>" for k, v in rows)
        + "</table>",
    ]
    if problems:
        items = "".join(f"<li>{escape(p)}</li>" for p in problems)
        out.append(f"<h2>Problems with this run</h2><ul class='problems' id='problems'>{items}</ul>")
    return "\n".join(out)


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
            f"<tr data-family='{escape(name)}'><td>{escape(name)}</td>"
            f"<td>{_badge(_family_result(fam))}</td>{cells}"
            f"<td class='num'>{seconds:.2f}</td><td>{bar}</td></tr>"
        )
    head = "".join(f"<th>{s}</th>" for s in STATUS_ORDER)
    return (
        "<h2>Families</h2><table id='families'><tr><th>family</th><th>result</th>"
        f"{head}<th>seconds</th><th>time</th></tr>{''.join(rows)}</table>"
    )


def _family_result(fam: Mapping[str, Any]) -> str:
    if any(int(fam.get(s, 0)) for s in ("failed", "error", "missing")):
        return "failed"
    return "passed" if int(fam.get("passed", 0)) else "skipped"


def _reward_values(cases: Iterable[Mapping[str, Any]]) -> dict[str, tuple[list[float], int]]:
    """Per subject: the numeric rewards in [0, 1] and how many rewards were anything else."""
    out: dict[str, tuple[list[float], int]] = {}
    for case in cases:
        rewards = case.get("rewards")
        if not isinstance(rewards, list):
            continue
        values, odd = out.get(str(case.get("subject")), ([], 0))
        for r in rewards:
            if isinstance(r, int | float) and not isinstance(r, bool) and math.isfinite(r) and 0 <= r <= 1:
                values.append(float(r))
            else:
                odd += 1
        out[str(case.get("subject"))] = (values, odd)
    return out


def histogram_svg(values: Sequence[float], title: str, bins: int = 10) -> str:
    """An inline SVG histogram of rewards in [0, 1] (the last bin includes 1.0)."""
    counts = [0] * bins
    for v in values:
        counts[min(int(v * bins), bins - 1)] += 1
    width, height, left, bottom = 360, 170, 34, 24
    plot_w, plot_h = width - left - 8, height - bottom - 22
    top = max([*counts, 1])
    bar_w = plot_w / bins
    base = height - bottom
    parts = [
        f"<svg width='{width}' height='{height}' role='img' class='histogram' aria-label='{escape(title)}'>",
        f"<text x='{left}' y='14' font-size='13' font-weight='600'>{escape(title)}</text>",
        f"<line x1='{left}' y1='{base}' x2='{width - 8}' y2='{base}' stroke='#57606a'/>",
        f"<line x1='{left}' y1='22' x2='{left}' y2='{height - bottom}' stroke='#57606a'/>",
        f"<text x='{left - 4}' y='30' font-size='11' text-anchor='end'>{top}</text>",
        f"<text x='{left - 4}' y='{height - bottom}' font-size='11' text-anchor='end'>0</text>",
    ]
    for i, count in enumerate(counts):
        h = plot_h * count / top
        x = left + i * bar_w + 1
        y = height - bottom - h
        lo, hi = i / bins, (i + 1) / bins
        parts.append(
            f"<rect x='{x:.1f}' y='{y:.1f}' width='{bar_w - 2:.1f}' height='{h:.1f}' fill='#0969da'>"
            f"<title>{lo:.1f}-{hi:.1f}: {count}</title></rect>"
        )
    for label in (0.0, 0.5, 1.0):
        x = left + label * plot_w
        parts.append(
            f"<text x='{x:.1f}' y='{height - 8}' font-size='11' text-anchor='middle'>{label:g}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _rewards(cases: Sequence[Mapping[str, Any]]) -> str:
    per_subject = _reward_values(cases)
    if not per_subject:
        return "<h2>Reward distributions</h2><p class='muted'>No case recorded rewards.</p>"
    plots = []
    for subject, (values, odd) in sorted(per_subject.items()):
        mean = f", mean {sum(values) / len(values):.3f}" if values else ""
        note = f"{len(values)} rewards{mean}" + (f"; {odd} outside [0, 1] or not a number" if odd else "")
        plots.append(
            f"<figure>{histogram_svg(values, f'{subject}: rewards')}<figcaption>{escape(note)}</figcaption>"
            "</figure>"
        )
    return f"<h2>Reward distributions</h2><div class='plots' id='rewards'>{''.join(plots)}</div>"


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
        cls = "pass" if c.get("passed") else "fail"
        mark = "&#10003;" if c.get("passed") else "&#10007;"
        detail = f" (expected {c.get('expected')!r}, got {c.get('actual')!r})" if not c.get("passed") else ""
        items.append(f"<li class='{cls}'>{mark} {escape(str(c.get('id')))}{escape(detail)}</li>")
    for e in case.get("exceptions") or []:
        items.append(
            f"<li class='fail'>raised {escape(str(e.get('type')))}: {escape(str(e.get('message')))}</li>"
        )
    return f"<ul class='crit'>{''.join(items)}</ul>" if items else ""


def _cases(coverage: Mapping[str, Any], cases: Sequence[Mapping[str, Any]]) -> str:
    by_id: dict[str, Mapping[str, Any]] = {}
    for case in cases:
        by_id.setdefault(str(case.get("id")), case)
    by_family: dict[str, list[Mapping[str, Any]]] = {}
    for entry in coverage.get("cases", []):
        by_family.setdefault(str(entry.get("family")), []).append(entry)
    out = ["<h2>Cases: expectation vs observation</h2>"]
    for family, entries in sorted(by_family.items()):
        if family == "unknown":
            family = "unknown family (cases that never reported)"
        rows = []
        for entry in entries:
            case = by_id.get(str(entry.get("id")), {})
            seconds = entry.get("seconds")
            reason = entry.get("reason") or ""
            rows.append(
                f"<tr class='case' data-case='{escape(str(entry.get('id')))}' data-status='"
                f"{escape(str(entry.get('status')))}'><td><code>{escape(str(entry.get('id')))}</code><br>"
                f"<span class='muted'>{escape(str(case.get('description') or ''))}</span>{_links(case)}</td>"
                f"<td>{escape(str(entry.get('subject')))}</td><td>{_badge(str(entry.get('status')))}"
                f"<div>{escape(str(reason))}</div>{_criteria(case)}</td>"
                f"<td class='num'>{'' if seconds is None else f'{float(seconds):.2f}'}</td>"
                f"<td>{_json_block(case.get('expected', {}))}</td>"
                f"<td>{_observed(case)}</td></tr>"
            )
        out.append(
            f"<h3>{escape(family)}</h3><table class='cases'>"
            "<colgroup><col class='c1'><col class='c2'><col class='c3'><col class='c4'><col class='c5'>"
            "<col class='c6'></colgroup><tr><th>case</th><th>subject</th><th>verdict</th>"
            f"<th>seconds</th><th>expected</th><th>observed</th></tr>{''.join(rows)}</table>"
        )
    return "\n".join(out)


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
        "confirmed_absent": _COLOURS["passed"],
        "error_confirmed_absent": _COLOURS["error"],
        "error": _COLOURS["failed"],
    }.get(status, _COLOURS["missing"])
    return f"<span class='badge' style='background:{colour}'>{escape(status.replace('_', ' '))}</span>"


def _cleanup(cleanup: Mapping[str, Any]) -> str:
    summary = cleanup.get("summary", {})
    unresolved = summary.get("unresolved") or []
    status = "failed" if unresolved or summary.get("errors") else "passed"
    text = (
        f"{summary.get('sandboxes', 0)} sandboxes created, "
        f"{summary.get('confirmed_absent', 0)} confirmed gone, "
        f"{summary.get('errors', 0)} errors, {len(unresolved)} unresolved"
    )
    rows = "".join(
        f"<tr><td><code>{escape(str(r.get('sandbox_id')))}</code></td><td>{escape(str(r.get('role')))}</td>"
        f"<td>{escape(_when(r.get('created_at')))}</td>"
        f"<td>{escape(_when(r.get('confirmed_absent_at')))}</td>"
        f"<td>{_cleanup_badge(str(r.get('status')))} "
        f"{escape(str(r.get('error') or ''))}</td></tr>"
        for r in cleanup.get("records", [])
    )
    return (
        f"<h2>Cleanup</h2><p id='cleanup-summary'>{_badge(status)} {escape(text)}</p>"
        "<table id='cleanup'><tr><th>sandbox</th><th>role</th><th>created</th><th>confirmed absent</th>"
        f"<th>status</th></tr>{rows}</table>"
    )
