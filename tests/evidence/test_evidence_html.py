"""index.html as a reviewer sees it: rendered by headless Chromium, read back from the DOM."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from evidence_helpers import CASES, IDS, case

from pytest_e2b_env.evidence.report_html import histogram_svg, render_index

INSTALL = "apt-get update && apt-get install -y chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def chromium() -> str:
    """Path of the Chromium binary; a missing browser fails the test (it is a prerequisite, not optional)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(f"headless Chromium is required to check index.html; install it with: {INSTALL}")
    return found


def _run(chromium: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run(
        [chromium, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def dump_dom(chromium: str, page: Path, tmp_path: Path) -> str:
    """The DOM Chromium built from ``page``."""
    dom = _run(chromium, tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


def render(chromium: str, page: Path, tmp_path: Path) -> tuple[str, Path]:
    """The DOM Chromium built from ``page`` and a screenshot of it kept under ``tmp_path``."""
    dom = dump_dom(chromium, page, tmp_path)
    shot = tmp_path / "index.png"
    result = _run(chromium, tmp_path, "--window-size=1280,2000", f"--screenshot={shot}", page.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return dom, shot


class _Text(HTMLParser):
    """Visible text of a DOM, with elements' ids, for asserting what a reviewer reads."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.parts.append(data)

    @property
    def text(self) -> str:
        return re.sub(r"\s+", " ", " ".join(self.parts))


def _read(dom: str) -> _Text:
    parser = _Text()
    parser.feed(dom)
    return parser


def _section(dom: str, element_id: str) -> str:
    match = re.search(rf"<(\w+)[^>]*id=\"{element_id}\"[^>]*>(.*?)</\1>", dom, re.S)
    assert match, f"no element with id {element_id}"
    return _read(match.group(2)).text


@pytest.mark.full
def test_reviewer_sees_verdict_families_cases_rewards_cleanup(make_bundle, chromium, tmp_path):
    """The rendered page shows verdict, families, expectation vs observation per case, rewards, cleanup."""
    bundle = make_bundle(expected=[*IDS, "reward-auth-401"])
    dom, shot = render(chromium, bundle / "index.html", tmp_path)
    text = _read(dom).text
    assert "Evidence for run run-1" in text
    assert _section(dom, "verdict") == "INCOMPLETE"
    assert _section(dom, "totals").strip() == "2 passed, 0 relaxed, 1 failed, 1 error, 1 missing, 1 skipped"
    assert "1 expected case(s) missing: reward-auth-401" in _section(dom, "problems")
    families = _section(dom, "families")
    for family in ("good", "defect", "lost-worker", "isolation", "lifecycle"):
        assert family in families
    row = re.search(r'<tr class="case" data-case="reward-lost-worker-twice".*?</tr>', dom, re.S)
    assert row, "case row missing"
    row_text = _read(row.group(0)).text
    assert "failed" in row_text
    assert "reward-lost-worker-twice did not behave" in row_text
    assert '"rewards": [1.0, 0.0]' in row_text  # expected
    assert '"rewards": [0.0, 0.0]' in row_text  # observed
    assert "raised AssertionError: scored instead of raising" in row_text
    assert 'href="cases/reward-lost-worker-twice/report.json"' in row.group(0)
    assert 'href="trajectories/reward-lost-worker-twice.jsonl"' in row.group(0)
    assert "needs --e2b-live" in text
    rewards = re.search(r'<div class="plots" id="rewards">(.*?)</div>', dom, re.S)
    assert rewards, "reward plots missing"
    plots = _read(rewards.group(1)).text
    assert rewards.group(1).count("<svg") == 2  # one histogram per subject
    assert rewards.group(1).count("<rect") == 20
    assert "reward: rewards" in plots
    assert "6 rewards, mean 0.333" in plots
    assert "episode: rewards" in plots
    assert "2 rewards, mean 0.000" in plots
    cleanup = _section(dom, "cleanup-summary")
    assert "2 sandboxes created, 1 confirmed gone, 1 errors, 1 unresolved" in cleanup
    assert "DELETE answered 500" in _section(dom, "cleanup")
    assert shot.stat().st_size > 10_000


def test_passing_run_says_passed(make_bundle, chromium, tmp_path):
    """A run whose expected cases all passed shows PASSED."""
    cases = [c for c in CASES if c["status"] == "passed"]
    bundle = make_bundle(cases=cases, expected=[c["id"] for c in cases])
    dom = dump_dom(chromium, bundle / "index.html", tmp_path)
    assert _section(dom, "verdict") == "PASSED"


def test_hostile_text_is_shown_not_run(make_bundle, chromium, tmp_path):
    """Markup inside case data is displayed as text; the page has no script, link or external fetch."""
    hostile = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"
    cases = [case("hostile-output", "failed", description=hostile, observed={"stdout": hostile})]
    bundle = make_bundle(cases=cases, expected=["hostile-output"])
    dom = dump_dom(chromium, bundle / "index.html", tmp_path)
    parsed = _read(dom)
    assert "script" not in parsed.tags
    assert "img" not in parsed.tags
    assert hostile in parsed.text
    assert "<title>pytest-e2b-env evidence run-1</title>" in dom
    page = (bundle / "index.html").read_text()
    assert not re.search(r"(?i)(src|href)\s*=\s*[\"']?(https?:|//)", page)


def test_histogram_bins():
    """The reward histogram puts 1.0 in the last bin and scales bars to the tallest."""
    svg = histogram_svg([0.0, 0.05, 1.0, 1.0], "t")
    assert "<title>0.0-0.1: 2</title>" in svg
    assert "<title>0.9-1.0: 2</title>" in svg
    assert svg.count("<rect") == 10


def test_epoch_timestamps_are_shown_as_utc():
    """Cleanup times recorded as epoch seconds are shown as UTC ISO text."""
    cleanup = {
        "summary": {"sandboxes": 1, "confirmed_absent": 1, "errors": 0, "unresolved": []},
        "records": [
            {
                "sandbox_id": "sb",
                "role": "worker",
                "created_at": 1767225600.0,
                "confirmed_absent_at": 1767225601.25,
                "error": None,
                "status": "confirmed_absent",
            }
        ],
    }
    page = render_index({"run_id": "r"}, {"cases": [], "families": {}, "counts": {}}, [], cleanup)
    assert "2026-01-01T00:00:00.000000Z" in page
    assert "2026-01-01T00:00:01.250000Z" in page
