"""Running the catalog through pytest: outcomes, the evidence bundle, junit, -x, --lf and xdist."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from plugin_helpers import CASE_IDS, only_bundle, read_json, write_project

BUNDLE_FILES = {
    "run-manifest.json",
    "coverage.json",
    "cases.jsonl",
    "cleanup.json",
    "junit.xml",
    "index.html",
    "SHA256SUMS",
    "cases",
    "trajectories",
    "logs",
}


@pytest.mark.full
def test_passing_catalog_writes_a_complete_bundle(project: pytest.Pytester) -> None:
    """A user's subject passing its cases yields one complete, verified bundle with every case."""
    result = project.runpytest("--e2b-evidence", "ev")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*e2b catalog*",
            "defect *s  1 passed",
            "good *s  1 passed",
            "total *s  wall *s  CPU *s",
            "evidence bundle: *",
        ]
    )
    bundle = only_bundle(project.path / "ev")
    assert {p.name for p in bundle.iterdir()} >= BUNDLE_FILES
    manifest = read_json(bundle / "run-manifest.json")
    assert manifest["run_id"] == bundle.name
    assert manifest["mode"] == "offline"
    assert manifest["isolation"] in ("namespaces", "process")
    assert set(manifest["family_seconds"]) == {"good", "defect"}
    coverage = read_json(bundle / "coverage.json")
    assert coverage["complete"]
    assert coverage["passed"]
    assert [c["id"] for c in coverage["cases"]] == CASE_IDS
    lines = (bundle / "cases.jsonl").read_text().splitlines()
    assert len(lines) == 2
    report = read_json(bundle / "cases" / "reward-tiny-correct" / "report.json")
    assert {c["id"] for c in report["criteria"]} >= {"rewards", "no-leak", "no-secret"}
    trajectory = (bundle / "trajectories" / "reward-tiny-correct.jsonl").read_text()
    assert '"op": "create"' in trajectory
    assert '"op": "kill"' in trajectory
    cleanup = read_json(bundle / "cleanup.json")
    assert cleanup["summary"]["sandboxes"] == 1
    assert cleanup["summary"]["confirmed_absent"] == 1
    assert cleanup["records"][0]["case"] == "reward-tiny-correct"  # the case its sandbox was made in
    assert (
        "<a href='#case-reward-tiny-correct'><code>reward-tiny-correct</code></a>"
        in (bundle / "index.html").read_text()
    )


@pytest.mark.full
def test_failing_case_is_a_failure_in_junit(pytester: pytest.Pytester) -> None:
    """A subject scoring everything 1.0 fails both cases; junit.xml has each failure with a message."""
    write_project(pytester, subject="tinyreward:constant_reward")
    result = pytester.runpytest("--e2b-evidence", "ev")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*- rewards: the reward call returned exactly these scores, in completion order",
            '*expected [[]0.0[]], observed {"got": [[]1.0[]], "differs": [[]{"completion": 0, *',
        ]
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    bundle = only_bundle(pytester.path / "ev")
    root = ET.parse(bundle / "junit.xml").getroot()
    failures = root.findall(".//testcase/failure")
    assert len(failures) == 2
    assert all(f.get("message") for f in failures)
    coverage = read_json(bundle / "coverage.json")
    assert coverage["counts"]["failed"] == 2
    assert not coverage["passed"]


@pytest.mark.full
def test_leaked_sandbox_fails_the_case_and_is_killed(pytester: pytest.Pytester) -> None:
    """A subject leaving a sandbox alive fails no-leak; the catalog kills it and records the leak."""
    write_project(pytester, subject="tinyreward:leaky_reward")
    result = pytester.runpytest("--e2b-evidence", "ev", "-k", "correct")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*- no-leak: *", "*expected [[][]], observed [[]*"])
    cleanup = read_json(only_bundle(pytester.path / "ev") / "cleanup.json")
    assert any("leaked" in str(r.get("error")) for r in cleanup["records"])


@pytest.mark.full
def test_stop_early_records_unrun_cases(pytester: pytest.Pytester) -> None:
    """With -x the first failure to arrive stops the run; the cases never run are in the inventory as
    skipped with the reason, not silently gone."""
    write_project(pytester, subject="tinyreward:constant_reward")
    result = pytester.runpytest("--e2b-evidence", "ev", "-x")
    result.assert_outcomes(failed=1)
    coverage = read_json(only_bundle(pytester.path / "ev") / "coverage.json")
    status = {c["id"]: (c["status"], c["reason"]) for c in coverage["cases"]}
    assert sorted(s for s, _ in status.values()) == ["failed", "skipped"]
    (unrun,) = [reason for s, reason in status.values() if s == "skipped"]
    assert "stopped early" in unrun


@pytest.mark.full
def test_last_failed_reruns_only_failed_cases(pytester: pytest.Pytester) -> None:
    """--lf reruns exactly the catalog cases that failed last time."""
    write_project(pytester)
    cases = pytester.path / "mycases" / "reward.toml"
    cases.write_text(cases.read_text().replace("rewards = [0.0]\nno_run", "rewards = [1.0]\nno_run"))
    first = pytester.runpytest("--e2b-evidence", "ev1")
    first.assert_outcomes(passed=1, failed=1)
    again = pytester.runpytest("--e2b-evidence", "ev2", "--lf")
    again.assert_outcomes(failed=1)
    again.stdout.fnmatch_lines(["*FAILED e2b-catalog::reward-tiny-no-fence*"])


@pytest.mark.slow
def test_xdist_writes_exactly_one_complete_bundle(project: pytest.Pytester) -> None:
    """With -p xdist -n 2, workers ship their records to the controller, which writes one bundle."""
    result = project.runpytest_subprocess("-p", "xdist", "-n", "2", "--e2b-evidence", "ev")
    result.assert_outcomes(passed=2)
    bundle = only_bundle(project.path / "ev")
    coverage = read_json(bundle / "coverage.json")
    assert coverage["complete"]
    assert coverage["passed"]
    assert sorted(c["id"] for c in coverage["cases"]) == sorted(CASE_IDS)
    manifest = read_json(bundle / "run-manifest.json")
    assert manifest["run_id"] == bundle.name


@pytest.mark.full
def test_live_mode_runs_through_the_fault_proxy(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--e2b-live runs the catalog through the fault proxy (here in front of a stand-in emulator)."""
    from pytest_e2b_env.emulator import Emulator

    with Emulator() as upstream:
        monkeypatch.setenv("PYTEST_E2B_ENV_LIVE_API_URL", upstream.url)
        monkeypatch.setenv("PYTEST_E2B_ENV_LIVE_SANDBOX_URL", upstream.url)
        monkeypatch.setenv("E2B_API_KEY", upstream.api_key)
        result = project.runpytest("--e2b-live", "--e2b-evidence", "ev")
        result.assert_outcomes(passed=2)
        result.stdout.fnmatch_lines(["e2b: mode=live run_id=run-* isolation=e2b (live)"])
        assert upstream.sandboxes() == []
    manifest = read_json(only_bundle(project.path / "ev") / "run-manifest.json")
    assert manifest["mode"] == "live"
    assert upstream.api_key not in (only_bundle(project.path / "ev") / "run-manifest.json").read_text()
