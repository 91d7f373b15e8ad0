"""verify_bundle and `pytest-e2b-env verify-evidence`: tampering, inventory, missing cases, secrets."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from evidence_helpers import IDS, case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_e2b_env import cli
from pytest_e2b_env.cli.verify import main
from pytest_e2b_env.evidence import BundleWriter, verify_bundle
from pytest_e2b_env.evidence.checksums import write_sums

# Every file of the layout, one of each kind (case files of a sample case).
LAYOUT_FILES = [
    "run-manifest.json",
    "coverage.json",
    "cases.jsonl",
    "cases/reward-good-correct/report.json",
    "trajectories/reward-good-correct.jsonl",
    "cleanup.json",
    "logs/emulator.log",
    "junit.xml",
    "index.html",
    "SHA256SUMS",
]
E2B_KEY = "e2b_" + "5f3a9c0d1e2b" * 3 + "abcd"
SHAPED = {
    "e2b key": E2B_KEY,
    "hugging face token": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "sk- key": "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2",
    "aws access key id": "AKIA" + "IOSFODNN7EXAMPLE",
    "private key block": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
    "bearer token": "Authorization: Bearer 9f8e7d6c5b4a39281706f5e4",
    "github token": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
}


def _plant(bundle: Path, rel: str, text: str) -> None:
    """Append ``text`` to a file and reseal the checksums, so only the planted text is wrong."""
    path = bundle / rel
    with path.open("a", encoding="utf-8") as handle:
        handle.write(text)
    if rel != "SHA256SUMS":
        write_sums(bundle)


def test_intact_bundle_has_no_problems(make_bundle):
    """A freshly written bundle verifies clean, also against its expected case ids."""
    bundle = make_bundle()
    assert verify_bundle(bundle) == []
    assert verify_bundle(bundle, expected_case_ids=IDS) == []


@pytest.mark.parametrize("rel", [f for f in LAYOUT_FILES if f != "SHA256SUMS"])
def test_tampered_file_is_detected(make_bundle, rel):
    """Changing any file after writing is a checksum problem naming the file."""
    bundle = make_bundle()
    with (bundle / rel).open("a", encoding="utf-8") as handle:
        handle.write("\n")
    assert f"{rel} does not match its SHA-256 in SHA256SUMS (modified after writing)" in verify_bundle(bundle)


def test_added_and_removed_files_are_detected(make_bundle):
    """A file added after writing, or one removed, is reported."""
    bundle = make_bundle()
    (bundle / "logs" / "extra.log").write_text("late")
    (bundle / "cleanup.json").unlink()
    problems = verify_bundle(bundle)
    assert "logs/extra.log is not covered by SHA256SUMS (added after the bundle was written?)" in problems
    assert "cleanup.json is listed in SHA256SUMS but missing from the bundle" in problems
    assert "cleanup.json is missing from the bundle" in problems


def test_missing_checksum_file_is_a_problem(make_bundle):
    """Without SHA256SUMS nothing can be trusted, and verify says so."""
    bundle = make_bundle()
    (bundle / "SHA256SUMS").unlink()
    assert any(p.startswith("SHA256SUMS is missing") for p in verify_bundle(bundle))


def test_symlink_and_escaping_paths_are_problems(make_bundle, tmp_path):
    """A symlinked file or a SHA256SUMS line pointing outside the bundle is reported."""
    bundle = make_bundle()
    (tmp_path / "outside").write_text("x")
    (bundle / "logs" / "link.log").symlink_to(tmp_path / "outside")
    write_sums(bundle)
    with (bundle / "SHA256SUMS").open("a") as handle:
        handle.write(f"{'0' * 64}  ../outside\n")
    problems = verify_bundle(bundle)
    assert "logs/link.log is a symlink; a bundle holds regular files only" in problems
    assert any("names a path outside the bundle: '../outside'" in p for p in problems)


def test_expected_case_absent_from_inventory(make_bundle):
    """A catalog case the bundle never mentions is reported by id."""
    bundle = make_bundle()
    problems = verify_bundle(bundle, expected_case_ids=[*IDS, "episode-good-repair"])
    assert problems == ["expected case episode-good-repair is not in the bundle's inventory"]


def test_inconsistent_inventory_is_detected(make_bundle):
    """A case dropped from cases.jsonl, or a report that does not match, breaks the inventory."""
    bundle = make_bundle()
    lines = (bundle / "cases.jsonl").read_text().splitlines()
    (bundle / "cases.jsonl").write_text("\n".join(lines[1:]) + "\n")
    report = bundle / "cases" / "reward-lost-worker-twice" / "report.json"
    report.write_text(json.dumps({"id": "someone-else", "criteria": []}))
    (bundle / "trajectories" / "reward-good-correct.jsonl").unlink()
    write_sums(bundle)
    problems = verify_bundle(bundle)
    assert "case reward-good-correct: coverage.json says 1 record(s), cases.jsonl has 0" in problems
    assert any(
        p.startswith("case reward-lost-worker-twice: cases/reward-lost-worker-twice/report.json is not")
        for p in problems
    )
    assert any("trajectory file 'trajectories/reward-good-correct.jsonl' is missing" in p for p in problems)


def test_report_and_manifest_must_agree_with_their_sources(make_bundle):
    """A report whose verdict contradicts its criteria, or a manifest summary off coverage, is reported."""
    bundle = make_bundle()
    path = bundle / "cases" / "reward-lost-worker-twice" / "report.json"
    report = json.loads(path.read_text())
    report["passed"] = True
    report["summary"]["failed_criteria"] = []
    path.write_text(json.dumps(report))
    manifest = json.loads((bundle / "run-manifest.json").read_text())
    manifest["coverage"]["counts"]["failed"] = 0
    (bundle / "run-manifest.json").write_text(json.dumps(manifest))
    write_sums(bundle)
    problems = verify_bundle(bundle)
    rel = "cases/reward-lost-worker-twice/report.json"
    assert f"case reward-lost-worker-twice: {rel} summary disagrees with its criteria" in problems
    assert f"case reward-lost-worker-twice: {rel} says passed=True with status failed" in problems
    assert "run-manifest.json coverage summary disagrees with coverage.json" in problems


def test_failure_turned_pass_in_junit_is_detected(make_bundle):
    """A junit.xml whose failing case lost its <failure> element is reported."""
    bundle = make_bundle()
    junit = (bundle / "junit.xml").read_text()
    start = junit.index("<failure")
    end = junit.index("</failure>") + len("</failure>")
    (bundle / "junit.xml").write_text(junit[:start] + junit[end:])
    write_sums(bundle)
    problems = verify_bundle(bundle)
    assert "junit.xml: reward-lost-worker-twice failed in coverage.json but passes in junit.xml" in problems


def test_relaxed_case_unmarked_in_junit_is_detected(make_bundle):
    """A relaxed case whose testcase lost its e2b_status property reads as a plain pass: reported."""
    relaxed = case("reward-relaxed", "relaxed", reason="relaxed policy criteria failed: no_run")
    bundle = make_bundle(cases=[relaxed], expected=["reward-relaxed"])
    assert verify_bundle(bundle) == []
    junit = (bundle / "junit.xml").read_text()
    start = junit.index("<properties>", junit.index('<testcase name="reward-relaxed"'))
    end = junit.index("</properties>", start) + len("</properties>")
    (bundle / "junit.xml").write_text(junit[:start] + junit[end:])
    write_sums(bundle)
    problems = verify_bundle(bundle)
    assert "junit.xml: reward-relaxed relaxed in coverage.json but a plain pass in junit.xml" in problems


@pytest.mark.parametrize(
    "markup",
    [
        "<img src='https://example.com/x.png'>",
        '<script src="x.js"></script>',
        "<link rel=stylesheet href=//cdn.example/x.css>",
        "<style>body{background:url(https://example.com/bg.png)}</style>",
        "<style>@import 'x.css';</style>",
        "<iframe srcdoc=x></iframe>",
    ],
)
def test_index_fetching_from_the_network_is_a_problem(make_bundle, markup):
    """An index.html that would load anything from elsewhere is not self-contained."""
    bundle = make_bundle()
    _plant(bundle, "index.html", markup)
    assert any(p.startswith("index.html is not self-contained") for p in verify_bundle(bundle))


def test_urls_in_case_text_are_not_fetches(make_bundle):
    """Case text that mentions URLs, src= or url(...) is escaped text, not a fetch."""
    text = "curl src=https://x.example url(http://y.example) @import <script src=//z>"
    cases = [case("mentions-urls", description=text, observed={"stdout": text})]
    bundle = make_bundle(cases=cases, expected=["mentions-urls"])
    assert verify_bundle(bundle) == []


@pytest.mark.parametrize("rel", LAYOUT_FILES)
def test_environment_secret_planted_in_any_file_is_found(make_bundle, monkeypatch, rel):
    """A secret environment variable's value in any file is a problem naming the file and the variable."""
    bundle = make_bundle()
    secret = "s3cr3t-value-from-env-0042"
    monkeypatch.setenv("MY_SERVICE_TOKEN", secret)
    _plant(bundle, rel, f"\nleaked {secret}\n")
    problems = verify_bundle(bundle)
    assert any(p.startswith(f"{rel}: value of $MY_SERVICE_TOKEN at offset") for p in problems), problems
    assert all(secret not in p for p in problems)


@pytest.mark.parametrize("rel", LAYOUT_FILES)
@pytest.mark.parametrize("kind", sorted(SHAPED))
def test_secret_shaped_string_planted_in_any_file_is_found(make_bundle, rel, kind):
    """A secret-shaped string (keys, tokens, private keys) in any file is a problem naming its kind."""
    bundle = make_bundle()
    _plant(bundle, rel, "\n" + SHAPED[kind] + "\n")
    problems = verify_bundle(bundle)
    assert any(p.startswith(f"{rel}: {kind} at offset") for p in problems), problems


CUT_SECRET = "tok4" + "9f1c2b7a3e6d8054" * 2 + "q7Zx"  # 40 characters: a piece counts from 20


@pytest.mark.parametrize(("kind", "piece"), [("prefix", CUT_SECRET[:20]), ("suffix", CUT_SECRET[-20:])])
@pytest.mark.parametrize("rel", ["cases.jsonl", "junit.xml", "index.html"])
def test_a_piece_of_a_secret_cut_in_two_is_found(make_bundle, monkeypatch, rel, kind, piece):
    """A prefix or suffix of a secret (20 of its 40 characters) is a problem naming the file and which end."""
    bundle = make_bundle()
    monkeypatch.setenv("MY_SERVICE_TOKEN", CUT_SECRET)
    assert verify_bundle(bundle) == []
    path = bundle / rel
    text = path.read_text(encoding="utf-8")
    offset = text.index("did not behave") + len("did not behave: ")  # inside a reason, as a cut leaves it
    path.write_text(text[: offset - 2] + f": {piece}" + text[offset - 2 :], encoding="utf-8")
    write_sums(bundle)
    assert verify_bundle(bundle) == [f"{rel}: a {kind} of value of $MY_SERVICE_TOKEN at offset {offset}"]


def test_a_piece_shorter_than_the_threshold_is_not_a_finding(make_bundle, monkeypatch):
    """19 characters of a 40-character secret (under half) are not reported: ordinary text could hold them."""
    bundle = make_bundle()
    monkeypatch.setenv("MY_SERVICE_TOKEN", CUT_SECRET)
    _plant(bundle, "logs/emulator.log", f"\n{CUT_SECRET[:19]} {CUT_SECRET[-19:]}\n")
    assert verify_bundle(bundle) == []


def test_caller_secret_in_escaped_form_is_found(make_bundle):
    """A caller's secret is found even where JSON or HTML escaping changed its characters."""
    bundle = make_bundle()
    secret = 'pa"ss<word>&1'
    _plant(bundle, "coverage.json", json.dumps({"x": secret}))
    _plant(bundle, "index.html", "<p>pa&quot;ss&lt;word&gt;&amp;1</p>")
    problems = verify_bundle(bundle, secrets=[secret])
    assert any(p.startswith("coverage.json: a secret value passed by the caller") for p in problems)
    assert any(p.startswith("index.html: a secret value passed by the caller") for p in problems)


def test_secret_in_a_file_name_is_found(make_bundle):
    """A secret in a file name is found too."""
    bundle = make_bundle()
    (bundle / "logs" / f"{E2B_KEY}.log").write_text("x")
    write_sums(bundle)
    assert any(
        p.startswith(f"file name 'logs/{E2B_KEY}.log'") is False and "file name" in p
        for p in verify_bundle(bundle)
    )


def test_cli_exit_codes_and_output(make_bundle, capsys):
    """verify-evidence prints each problem and exits 1; a clean bundle exits 0; secrets never printed."""
    bundle = make_bundle()
    assert cli.main(["verify-evidence", str(bundle)]) == 0
    assert "is intact" in capsys.readouterr().out
    _plant(bundle, "logs/emulator.log", E2B_KEY)
    assert main([str(bundle)]) == 1
    captured = capsys.readouterr()
    assert "PROBLEM: logs/emulator.log: e2b key at offset" in captured.out
    assert E2B_KEY not in captured.out + captured.err
    assert "1 problem(s)" in captured.err


def test_cli_as_a_process(make_bundle):
    """`python -m pytest_e2b_env verify-evidence DIR` works end to end in a fresh interpreter."""
    bundle = make_bundle(expected=[*IDS, "gone"])
    result = subprocess.run(
        [sys.executable, "-m", "pytest_e2b_env", "verify-evidence", str(bundle)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "PROBLEM: case gone is missing" in result.stdout


def test_cli_bad_catalog_is_a_usage_error(make_bundle, capsys, tmp_path):
    """A --catalog path that does not exist exits 2 with the reason."""
    bundle = make_bundle()
    assert main([str(bundle), "--catalog", str(tmp_path / "nope")]) == 2
    assert "cannot load the catalog" in capsys.readouterr().err


def test_not_a_directory(tmp_path):
    """Pointing verify at something that is not a bundle directory says what to give instead."""
    assert verify_bundle(tmp_path / "absent") == [
        f"{tmp_path / 'absent'} is not a directory; give the bundle directory <output>/<run-id>"
    ]


def test_output_root_instead_of_bundle(make_bundle):
    """Pointing verify at the output root names the bundles inside it."""
    bundle = make_bundle()
    assert verify_bundle(bundle.parent) == [
        f"{bundle.parent} holds bundles, not one bundle; give one of: run-1"
    ]


def test_cli_json_output(make_bundle, capsys):
    """--json prints a machine-readable verdict with the same problems."""
    bundle = make_bundle(expected=[*IDS, "gone"])
    assert main([str(bundle), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False
    assert out["bundle"] == str(bundle)
    assert (
        "case gone is missing: expected case was never recorded (it did not run or its result was lost)"
        in (out["problems"])
    )


def test_cli_checks_against_the_bundled_catalog(make_bundle, capsys):
    """--catalog default requires every case of the bundled catalog, so the sample bundle falls short."""
    bundle = make_bundle()
    assert main([str(bundle), "--catalog", "default", "--subject", "reward"]) == 1
    out = capsys.readouterr().out
    assert "PROBLEM: expected case reward-good-correct is not in the bundle's inventory" not in out
    assert "is not in the bundle's inventory" in out


record_strategy = st.fixed_dictionaries(
    {
        "id": st.text(min_size=1, max_size=20).filter(str.strip),
        "status": st.sampled_from(["passed", "failed", "error", "skipped"]),
        "reason": st.text(min_size=1, max_size=30),
        "subject": st.sampled_from(["reward", "episode"]),
        "family": st.text(min_size=1, max_size=10),
        "observed": st.dictionaries(
            st.text(max_size=5), st.text(max_size=50) | st.floats() | st.none(), max_size=3
        ),
        "rewards": st.lists(st.floats(allow_nan=True) | st.none(), max_size=4),
        "seconds": st.floats(min_value=0, max_value=100),
    }
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(record_strategy, min_size=1, max_size=6, unique_by=lambda r: r["id"]))
def test_any_complete_run_verifies_clean(tmp_path, records):
    """Whatever the case records hold, a complete bundle written by BundleWriter verifies clean."""
    writer = BundleWriter(tmp_path / "out", f"run-{uuid.uuid4().hex[:8]}", {"mode": "offline"})
    for record in records:
        writer.add_case(record)
        writer.add_trajectory(record["id"], [{"echo": record["observed"]}])
    bundle = writer.finish([r["id"] for r in records], [], {})
    assert verify_bundle(bundle, [r["id"] for r in records]) == []


def test_a_bundle_checked_from_inside_it_is_intact(make_bundle, monkeypatch):
    """verify-evidence . run inside the bundle's own directory finds it intact (its name is the run id)."""
    root = make_bundle()
    monkeypatch.chdir(root)
    assert verify_bundle(Path(".")) == []
