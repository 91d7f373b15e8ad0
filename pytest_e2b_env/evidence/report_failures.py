"""index.html's first section: every failed, errored or missing case, safety apart from policy.

A reviewer of a failing run needs the failures before anything else, and needs to know at once
which of them no setting can excuse. Each criterion of a record says what it is (``severity``:
``safety``, never relaxable, or ``policy``, a house rule the user may relax by name; catalog
``verdict``), so a failed case is a safety failure when any criterion it failed is safety, and a
policy failure when all of them are policy. A case with no verdict (an error, a case that never
reported) is listed on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from pytest_e2b_env.evidence.html_bits import badge, link

#: (kind, heading, what it means), in the order the table shows them.
KINDS = (
    (
        "safety",
        "Safety",
        "never relaxable: an infrastructure fault scored, a leak, isolation, a deadline, a secret, order",
    ),
    ("policy", "House policy", "only policy criteria failed; e2b_relax may relax them by name"),
    ("error", "No verdict", "the case errored or never reported"),
)
FAILING = ("failed", "error", "missing")
_MAX_TEXT = 200


def failed_criteria(case: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The criteria that failed the case (a relaxed one did not)."""
    return [c for c in case.get("criteria") or [] if not c.get("passed") and not c.get("relaxed")]


def failure_kind(status: str, case: Mapping[str, Any]) -> str:
    """``safety``, ``policy`` or ``error`` for a failing case (one without criteria counts as safety)."""
    if status != "failed":
        return "error"
    failed = failed_criteria(case)
    if failed and all(c.get("severity") == "policy" for c in failed):
        return "policy"
    return "safety"  # what cannot be shown to be policy is never taken for it


def _cut(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= _MAX_TEXT else first[: _MAX_TEXT - 3] + "..."


def _what_failed(entry: Mapping[str, Any], case: Mapping[str, Any], kind: str) -> str:
    """The failed criteria (policy ones with their policy name) and the first exception, short."""
    parts = []
    for criterion in failed_criteria(case):
        name = f"<code>{escape(str(criterion.get('id')))}</code>"
        if criterion.get("severity") == "policy":
            name += f" <span class='muted'>(policy {escape(str(criterion.get('policy')))})</span>"
        parts.append(name)
    text = ", ".join(parts)
    exceptions = case.get("exceptions") or []
    if exceptions:
        first = exceptions[0]
        raised = _cut(f"raised {first.get('type')}: {first.get('message')}")
        text += ("; " if text else "") + escape(raised)
    if kind == "error" or not text:
        text = escape(_cut(str(entry.get("reason") or "no reason recorded"))) + (f"; {text}" if text else "")
    return text


def failures_section(
    coverage: Mapping[str, Any], by_id: Mapping[str, Mapping[str, Any]], ids: dict[str, str]
) -> str:
    """The failure summary: one row per failing case, grouped safety, policy, no verdict, each linked."""
    groups: dict[str, list[str]] = {kind: [] for kind, _, _ in KINDS}
    entries = [e for e in coverage.get("cases", []) if e.get("status") in FAILING]
    for entry in entries:
        case_id = str(entry.get("id"))
        case = by_id.get(case_id, {})
        status = str(entry.get("status"))
        kind = failure_kind(status, case)
        groups[kind].append(
            f"<tr class='failure' data-case='{escape(case_id)}' data-kind='{kind}'>"
            f"<td>{link(case_id, ids)}</td><td>{escape(str(entry.get('family')))}</td>"
            f"<td>{escape(str(entry.get('subject')))}</td><td>{badge(status)}</td>"
            f"<td>{_what_failed(entry, case, kind)}</td></tr>"
        )
    total = len(coverage.get("cases", []))
    if not entries:
        return (
            f"<h2>Failures</h2><p id='failures' class='none'>None of the {total} cases failed or errored.</p>"
        )
    counts = ", ".join(f"{len(groups[kind])} {heading.lower()}" for kind, heading, _ in KINDS if groups[kind])
    bodies = "".join(
        f"<tbody class='kind-{kind}'><tr class='group'><th colspan='5'>{heading} ({len(groups[kind])}): "
        f"<span class='muted'>{escape(meaning)}</span></th></tr>{''.join(groups[kind])}</tbody>"
        for kind, heading, meaning in KINDS
        if groups[kind]
    )
    head = "".join(f"<th>{name}</th>" for name in ("case", "family", "subject", "status", "what failed"))
    columns = "".join(f"<col class='f{n}'>" for n in range(1, 5)) + "<col>"
    return (
        f"<h2>Failures</h2><p class='muted'>{len(entries)} of {total} cases ({escape(counts)}); "
        "each links to its expectation and observation below.</p>"
        f"<table id='failures'><colgroup>{columns}</colgroup><thead><tr>{head}</tr></thead>{bodies}</table>"
    )
