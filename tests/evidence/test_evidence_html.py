"""index.html as a reviewer sees it: rendered by headless Chromium, read back from the DOM."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import unescape as html_unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from evidence_helpers import CASES, IDS, case

from pytest_e2b_env.evidence import BundleWriter
from pytest_e2b_env.evidence.html_bits import anchors
from pytest_e2b_env.evidence.records import criterion
from pytest_e2b_env.evidence.report_failures import failure_kind
from pytest_e2b_env.evidence.report_html import render_index
from pytest_e2b_env.evidence.report_plots import histogram_svg

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
    row = re.search(r'<tr class="case" id="[^"]*" data-case="reward-lost-worker-twice".*?</tr>', dom, re.S)
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
    figures = re.findall(r'<figure data-family="([^"]+)">(.*?)</figure>', rewards.group(1), re.S)
    # one histogram per family that recorded rewards; isolation's one case errored without any
    assert [family for family, _ in figures] == ["defect", "good", "lifecycle", "lost-worker"]
    captions = {family: _read(body).text for family, body in figures}
    assert "2 rewards, mean 0.500" in captions["good"]
    assert "2 rewards, mean 0.000" in captions["lost-worker"]
    assert rewards.group(1).count("<rect") == 40
    assert "No rewards recorded: isolation." in text
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


# -- failures first -------------------------------------------------------------------------------

FAMILIES = (
    "good",
    "defect",
    "timeout",
    "lost-worker",
    "cleanup-failure",
    "rate-limit",
    "auth",
    "hostile",
    "lifecycle",
    "isolation",
)
#: case number -> (status, failed criteria as (id, policy or None)): 5 safety, 2 policy, 1 error
FAILURES: dict[int, tuple[str, list[tuple[str, str | None]]]] = {
    3: ("failed", [("rewards", None)]),
    11: ("failed", [("duplicate-keys-scored", "duplicate-keys")]),
    19: ("failed", [("deadline_kept", None), ("no_run", "parse-before-run")]),
    26: ("failed", [("score_or_raise", None)]),
    33: ("failed", [("no-leak", None)]),
    40: ("failed", [("fence", "fence-variants"), ("json", "json-types")]),
    47: ("failed", [("no-secret", None)]),
    55: ("error", []),
}


def _case_id(n: int) -> str:
    return f"{'reward' if n % 3 else 'episode'}-{FAMILIES[n % len(FAMILIES)]}-{n:02d}"


def _catalog_run(count: int = 62) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Records of a whole catalog run the size of the bundled one, 8 of them failing; cleanup per case."""
    cases, cleanup = [], []
    calls = [
        {"name": f"call-{n}", "seconds": 0.01 * n, "args": {"completions": 2}, "error": None}
        for n in range(12)
    ]
    for n in range(count):
        family = FAMILIES[n % len(FAMILIES)]
        case_id = _case_id(n)
        status, failed = FAILURES.get(n, ("passed", []))
        criteria = [
            criterion(cid, f"{cid} holds", False, True, False, policy=policy) for cid, policy in failed
        ]
        criteria += [
            criterion(c, f"{c} holds", True, [], [])
            for c in ("no-leak", "no-secret")
            if c not in dict(failed)
        ]
        reason = None
        if status == "failed":
            reason = "failed criteria: " + ", ".join(cid for cid, _ in failed)
        elif status == "error":
            reason = "subject could not be built: RuntimeError: reward config missing"
        rewards = None if status == "error" else [1.0, 0.0] if n % 2 else [1.0, 1.0]
        cases.append(
            case(
                case_id,
                status,
                family=family,
                subject=case_id.split("-")[0],
                reason=reason,
                criteria=criteria,
                rewards=rewards,
                observed={"calls": calls, "rewards": rewards},
            )
        )
        cleanup.append(
            {
                "sandbox_id": f"sb{n:04d}",
                "role": "subject",
                "created_at": 1767225600.0 + n,
                "confirmed_absent_at": 1767225601.0 + n,
                "error": None,
                "case": case_id,
            }
        )
    return cases, cleanup


def _write_run(root: Path) -> Path:
    cases, cleanup = _catalog_run()
    writer = BundleWriter(root, "run-62", {"mode": "offline", "isolation": "namespaces"})
    for record in cases:
        writer.add_case(record)
    writer.add_cleanup(cleanup)
    return writer.finish([c["id"] for c in cases])


def test_failures_come_first_safety_apart_from_policy(tmp_path: Path) -> None:
    """Right below the verdict, every failing case, safety before policy before no verdict, each linked."""
    page = (_write_run(tmp_path) / "index.html").read_text()
    assert page.index("id='verdict'") < page.index("id='failures'") < page.index("id='facts'")
    assert page.index("id='failures'") < page.index("id='families'") < page.index("class='case'")
    rows = re.findall(r"<tr class='failure' data-case='([^']+)' data-kind='(\w+)'>", page)
    assert [kind for _, kind in rows] == ["safety"] * 5 + ["policy"] * 2 + ["error"]
    assert [case_id for case_id, _ in rows] == [_case_id(n) for n in (3, 19, 26, 33, 47, 11, 40, 55)]
    assert re.search(r"<th colspan='5'>Safety \(5\): ", page)
    assert re.search(r"<th colspan='5'>House policy \(2\): ", page)
    assert re.search(r"<th colspan='5'>No verdict \(1\): ", page)
    assert "8 of 62 cases (5 safety, 2 house policy, 1 no verdict)" in page
    # a case failing safety and policy criteria is a safety failure, and says which is which
    mixed = re.search(rf"<tr class='failure' data-case='{_case_id(19)}'.*?</tr>", page)
    assert mixed
    assert "data-kind='safety'" in mixed.group(0)
    assert "<code>no_run</code> <span class='muted'>(policy parse-before-run)</span>" in mixed.group(0)
    error = re.search(rf"<tr class='failure' data-case='{_case_id(55)}'.*?</tr>", page)
    assert error
    assert "subject could not be built: RuntimeError: reward config missing" in error.group(0)
    for case_id, _ in rows:  # every link lands on its case's row
        anchor = re.search(rf"<tr class='failure' data-case='{case_id}'.*?href='#([^']+)'", page)
        assert anchor
        assert f"<tr class='case' id='{anchor.group(1)}' data-case='{case_id}'" in page
    passing = re.search(rf"<tr class='case' id='[^']+' data-case='{_case_id(1)}'.*?</tr>", page, re.S)
    assert passing
    assert passing.group(0).count("<details class='fold'>") == 2  # a pass's expectation and observation fold


def test_a_run_without_failures_says_so(make_bundle) -> None:
    """A run whose cases all passed has one line where the failures would be."""
    cases = [c for c in CASES if c["status"] == "passed"]
    page = (make_bundle(cases=cases, expected=[c["id"] for c in cases]) / "index.html").read_text()
    assert "<p id='failures' class='none'>None of the 2 cases failed or errored.</p>" in page


def test_cleanup_names_the_case_of_each_sandbox(tmp_path: Path) -> None:
    """Each cleanup row names, and links to, the case its sandbox was made in; one without says '-'."""
    page = (_write_run(tmp_path) / "index.html").read_text()
    row = re.search(r"<tr><td><code>sb0003</code></td><td>(.*?)</td>", page)
    assert row
    assert row.group(1) == f"<a href='#case-{_case_id(3)}'><code>{_case_id(3)}</code></a>"
    cleanup = {
        "summary": {},
        "records": [{"sandbox_id": "sb-x", "role": "worker", "status": "confirmed_absent"}],
    }
    bare = render_index({"run_id": "r"}, {"cases": [], "families": {}, "counts": {}}, [], cleanup)
    assert "<tr><td><code>sb-x</code></td><td>-</td><td>worker</td>" in bare


def test_anchors_are_unique_and_safe_in_a_link() -> None:
    """Ids with characters a fragment cannot hold, or that collide once made safe, get distinct anchors."""
    ids = anchors(["a/b", "a_b", "a b", "x'y", "a/b"])
    assert ids == {"a/b": "case-a_b", "a_b": "case-a_b-2", "a b": "case-a_b-3", "x'y": "case-x_y"}


def test_failure_kinds() -> None:
    """Any failed safety criterion makes a safety failure; only policy ones a policy failure; errors none."""
    safety = criterion("no-leak", "", False, [], ["sb"])
    policy = criterion("no_run", "", False, True, False, policy="fence-variants")
    relaxed = criterion("json", "", False, 1, 1.0, policy="json-types", relaxed=True)
    assert failure_kind("failed", {"criteria": [safety, policy]}) == "safety"
    assert failure_kind("failed", {"criteria": [policy, relaxed]}) == "policy"
    assert failure_kind("failed", {"criteria": [{"id": "old-record", "passed": False}]}) == "safety"
    assert failure_kind("failed", {"criteria": []}) == "safety"
    assert failure_kind("error", {"criteria": [policy]}) == "error"
    assert failure_kind("missing", {}) == "error"


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


#: Written into a copy of the page (whose CSP forbids scripts): where each part lands in the window.
MEASURE = """<script>
const out = {viewport: [innerWidth, innerHeight], page: document.documentElement.scrollHeight, rows: []};
for (const id of ["verdict", "failures", "facts", "families", "rewards", "cleanup"]) {
  const box = document.getElementById(id).getBoundingClientRect();
  out[id] = [box.top, box.bottom];
}
for (const row of document.querySelectorAll("tr.failure")) {
  const target = document.getElementById(row.querySelector("a").hash.slice(1));
  out.rows.push([row.dataset.case, row.getBoundingClientRect().bottom, target.getBoundingClientRect().top]);
}
const pre = document.createElement("pre");
pre.id = "positions";
pre.textContent = JSON.stringify(out);
document.body.append(pre);
</script>"""


def test_failure_summary_is_above_the_fold_in_chromium(chromium, tmp_path: Path) -> None:
    """At 1400x900 a 62-case run with 8 failures shows every failure, linked, without scrolling."""
    page = _write_run(tmp_path / "evidence") / "index.html"
    shot = tmp_path / "fold.png"
    taken = _run(
        chromium,
        tmp_path,
        "--window-size=1400,900",
        "--hide-scrollbars",
        f"--screenshot={shot}",
        page.as_uri(),
    )
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert _png_size(shot) == (1400, 900)
    assert shot.stat().st_size > 20_000  # text and tables, not a blank window

    probe = tmp_path / "measured.html"
    html = re.sub(r"<meta http-equiv='Content-Security-Policy'[^>]*>", "", page.read_text())
    probe.write_text(html.replace("</body>", MEASURE + "</body>"))
    dom = _run(chromium, tmp_path, "--window-size=1400,900", "--dump-dom", probe.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="positions">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stdout[-2000:]
    at = json.loads(html_unescape(found.group(1)))
    width, fold = at["viewport"]
    assert width == 1400
    assert 600 <= fold <= 900  # the window less what the browser keeps for itself (it varies)
    assert at["verdict"][1] < at["failures"][0] < at["failures"][1] <= fold  # the whole summary, unscrolled
    assert at["failures"][1] < at["facts"][0] < at["families"][0] < at["rewards"][0] < at["cleanup"][0]
    assert [case_id for case_id, _, _ in at["rows"]] == [_case_id(n) for n in (3, 19, 26, 33, 47, 11, 40, 55)]
    assert all(bottom <= fold for _, bottom, _ in at["rows"])
    assert all(target > fold for _, _, target in at["rows"])  # without the links: a scroll to each
    assert at["page"] > 5 * fold
