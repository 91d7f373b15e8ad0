"""index.html's reward plots: one small histogram per family, inline SVG.

Families mean different things (a ``good`` case expects 1.0, a ``defect`` case 0.0, a
``lost-worker`` case a masked batch), so one histogram of every reward of the run says little;
side by side, per family, a reward where it does not belong stands out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any


def reward_values(
    cases: Iterable[Mapping[str, Any]], key: str = "family"
) -> dict[str, tuple[list[float], int]]:
    """Per ``key`` of the case (family by default): rewards in [0, 1], and how many were anything else."""
    out: dict[str, tuple[list[float], int]] = {}
    for case in cases:
        rewards = case.get("rewards")
        if not isinstance(rewards, list):
            continue
        values, odd = out.get(str(case.get(key)), ([], 0))
        for r in rewards:
            if isinstance(r, int | float) and not isinstance(r, bool) and math.isfinite(r) and 0 <= r <= 1:
                values.append(float(r))
            else:
                odd += 1
        out[str(case.get(key))] = (values, odd)
    return out


def histogram_svg(
    values: Sequence[float], title: str, bins: int = 10, width: int = 360, height: int = 170
) -> str:
    """An inline SVG histogram of rewards in [0, 1] (the last bin includes 1.0)."""
    counts = [0] * bins
    for v in values:
        counts[min(int(v * bins), bins - 1)] += 1
    left, bottom = 34, 24
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


def rewards_section(cases: Sequence[Mapping[str, Any]]) -> str:
    """The reward plots: a small histogram per family with rewards, then the families without any."""
    per_family = reward_values(cases)
    if not per_family:
        return "<h2>Reward distributions</h2><p class='muted'>No case recorded rewards.</p>"
    plots = []
    for family, (values, odd) in sorted(per_family.items()):
        mean = f", mean {sum(values) / len(values):.3f}" if values else ""
        note = f"{len(values)} rewards{mean}" + (f"; {odd} outside [0, 1] or not a number" if odd else "")
        plots.append(
            f"<figure data-family='{escape(family)}'>{histogram_svg(values, family, width=250, height=130)}"
            f"<figcaption>{escape(note)}</figcaption></figure>"
        )
    without = sorted({str(c.get("family")) for c in cases} - set(per_family))
    rest = f"<p class='muted'>No rewards recorded: {escape(', '.join(without))}.</p>" if without else ""
    return (
        "<h2>Reward distributions</h2><p class='muted'>Per family: what the subject scored in its cases.</p>"
        f"<div class='plots' id='rewards'>{''.join(plots)}</div>{rest}"
    )
