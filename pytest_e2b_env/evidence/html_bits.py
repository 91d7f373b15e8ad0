"""What the parts of index.html share: status colours, badges and the anchors that link them."""

from __future__ import annotations

import re
from collections.abc import Iterable
from html import escape

STATUS_ORDER = ("passed", "relaxed", "failed", "error", "missing", "skipped")
COLOURS = {
    "passed": "#1a7f37",
    "relaxed": "#bf8700",
    "failed": "#cf222e",
    "error": "#9a3412",
    "missing": "#8250df",
    "skipped": "#6e7781",
}
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def badge(status: str, colour: str | None = None) -> str:
    """A coloured status label (``status-<name>`` class, so a reader's tooling can find it)."""
    fill = colour or COLOURS.get(status, "#57606a")
    label = escape(status.replace("_", " "))
    return f"<span class='badge status-{escape(status)}' style='background:{fill}'>{label}</span>"


def anchors(case_ids: Iterable[str]) -> dict[str, str]:
    """A unique element id per case, safe in an ``href="#..."`` whatever characters the id holds."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for case_id in case_ids:
        if case_id in out:
            continue
        stem = "case-" + _UNSAFE.sub("_", case_id)[:120]
        anchor, n = stem, 2
        while anchor in taken:
            anchor, n = f"{stem}-{n}", n + 1
        taken.add(anchor)
        out[case_id] = anchor
    return out


def link(case_id: str, ids: dict[str, str]) -> str:
    """The case id as a link to its section (plain code when it has none)."""
    text = f"<code>{escape(case_id)}</code>"
    return f"<a href='#{ids[case_id]}'>{text}</a>" if case_id in ids else text
