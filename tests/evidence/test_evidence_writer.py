"""BundleWriter: the layout of docs/evidence.md, completeness, bounding and atomic publication."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest
from evidence_helpers import CASES, IDS, case, fill

from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.evidence import BundleWriter, verify_bundle
from pytest_e2b_env.evidence.records import MAX_STRING
from pytest_e2b_env.evidence.writer import MAX_LOG_CHARS

LAYOUT = [
    "run-manifest.json",
    "coverage.json",
    "cases.jsonl",
    "cleanup.json",
    "junit.xml",
    "index.html",
    "SHA256SUMS",
]


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_layout_has_every_file(make_bundle):
    """A finished bundle holds every file of the layout plus one report and trajectory per case."""
    bundle = make_bundle()
    for name in LAYOUT:
        assert (bundle / name).is_file(), name
    for case_id in IDS:
        assert (bundle / "cases" / case_id / "report.json").is_file()
        assert (bundle / "trajectories" / f"{case_id}.jsonl").is_file()
    assert (bundle / "logs" / "emulator.log").read_text() == "started\nsandbox sb-1 created\n"
    writer_log = (bundle / "logs" / "evidence-writer.log").read_text()
    assert writer_log.startswith("run run-1: 5 case record(s), 5 expected\n")
    assert bundle.name == "run-1"
    assert verify_bundle(bundle) == []


def test_manifest_records_run_facts(make_bundle):
    """The manifest holds the caller's facts and the writer's: times, argv, git, platform, versions."""
    manifest = _json(make_bundle() / "run-manifest.json")
    assert manifest["run_id"] == "run-1"
    assert manifest["mode"] == "offline"
    assert manifest["catalog_hash"] == "c0ffee"
    assert manifest["seeds"] == [0]
    assert manifest["isolation"] == "process"
    assert manifest["started_at"].endswith("Z")
    assert manifest["finished_at"] >= manifest["started_at"]
    assert manifest["argv"]
    assert set(manifest["git"]) == {"head", "dirty", "dirty_digest", "repository"}
    assert manifest["platform"]["python"].startswith("3.")
    assert {"e2b", "openenv", "trl", "pytest", "pytest-e2b-env"} <= set(manifest["packages"])
    assert manifest["packages"]["e2b"] == version("e2b")  # the installed one: the range is wide
    assert manifest["family_seconds"] == {"good": 0.5}
    assert manifest["complete"] is True
    assert manifest["problems"] == []


def test_manifest_never_holds_a_key(tmp_path, monkeypatch):
    """A key handed in the manifest or present in the environment is never written."""
    key = "e2b_" + "0123456789abcdef" * 2 + "01234567"
    monkeypatch.setenv("E2B_API_KEY", key)
    writer = BundleWriter(
        tmp_path, "r", {"mode": "live", "live_endpoint": "https://api.e2b.app", "api_key": key}
    )
    fill(writer)
    bundle = writer.finish(IDS, [], {})
    manifest = _json(bundle / "run-manifest.json")
    assert manifest["api_key"] == "[REDACTED]"
    assert manifest["live_endpoint"] == "https://api.e2b.app"
    assert all(key not in p.read_text() for p in bundle.rglob("*") if p.is_file())
    assert verify_bundle(bundle) == []


def test_started_at_from_the_caller(tmp_path):
    """A caller building the writer at session end passes the session start as epoch seconds."""
    writer = BundleWriter(tmp_path, "r", {"mode": "offline", "started_at": 1767225600.5})
    writer.add_case(case("a"))
    manifest = _json(writer.finish(["a"], [], {}) / "run-manifest.json")
    assert manifest["started_at"] == "2026-01-01T00:00:00.500000Z"


def test_coverage_counts_and_families(make_bundle):
    """coverage.json lists every case with its status and counts per status and family."""
    coverage = _json(make_bundle() / "coverage.json")
    assert [c["id"] for c in coverage["cases"]] == IDS
    assert coverage["counts"] == {
        "passed": 2,
        "relaxed": 0,
        "failed": 1,
        "skipped": 1,
        "error": 1,
        "missing": 0,
    }
    assert coverage["complete"] is True
    assert coverage["passed"] is False  # a failed and an errored case
    assert coverage["families"]["good"]["passed"] == 1
    assert coverage["families"]["good"]["seconds"] == 0.5  # the caller's family timing wins
    assert coverage["families"]["defect"]["seconds"] == 0.25  # else the sum of its cases
    skipped = next(c for c in coverage["cases"] if c["status"] == "skipped")
    assert skipped["reason"] == "needs --e2b-live"


def test_missing_case_fails_coverage(make_bundle):
    """An expected case that never reported is status 'missing' and the run is incomplete."""
    bundle = make_bundle(expected=[*IDS, "reward-timeout-infinite-loop"])
    coverage = _json(bundle / "coverage.json")
    missing = [c for c in coverage["cases"] if c["status"] == "missing"]
    assert [c["id"] for c in missing] == ["reward-timeout-infinite-loop"]
    assert coverage["complete"] is False
    assert coverage["passed"] is False
    manifest = _json(bundle / "run-manifest.json")
    assert manifest["complete"] is False
    assert manifest["problems"] == ["1 expected case(s) missing: reward-timeout-infinite-loop"]
    problems = verify_bundle(bundle)
    assert any("reward-timeout-infinite-loop is missing" in p for p in problems)


def test_all_passing_run_passes_coverage(make_bundle):
    """A run where every expected case passed or was skipped with a reason passes coverage."""
    cases = [c for c in CASES if c["status"] in ("passed", "skipped")]
    coverage = _json(make_bundle(cases=cases, expected=[c["id"] for c in cases]) / "coverage.json")
    assert coverage["passed"] is True


def test_cases_jsonl_one_line_per_case(make_bundle):
    """cases.jsonl has one line per case with expected, observed, verdict and seconds."""
    lines = [json.loads(x) for x in (make_bundle() / "cases.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == IDS
    failed = lines[2]
    assert failed["verdict"] == "failed"
    assert failed["expected"] == {"rewards": [1.0, 0.0]}
    assert failed["observed"] == {"rewards": [0.0, 0.0]}
    assert failed["seconds"] == 0.25
    assert failed["family"] == "lost-worker"
    assert failed["subject"] == "reward"


def test_report_is_openenv_style(make_bundle):
    """Each report.json has OpenEnv validate-style criteria and summary plus attempts and exceptions."""
    report = _json(make_bundle() / "cases" / "reward-lost-worker-twice" / "report.json")
    assert report["passed"] is False
    assert report["criteria"][0] == {
        "id": "rewards",
        "description": "rewards equal the expectation",
        "passed": False,
        "required": True,
        "expected": [1.0, 0.0],
        "actual": [0.0, 0.0],
    }
    assert report["summary"] == {
        "passed_count": 0,
        "total_count": 1,
        "failed_criteria": ["rewards"],
        "required_passed_count": 0,
        "required_total_count": 1,
    }
    assert report["exceptions"] == [{"type": "AssertionError", "message": "scored instead of raising"}]
    assert (report["attempts"], report["retries"]) == (1, 0)
    assert report["rewards"] == [0.0, 0.0]
    assert report["run_id"] == "run-1"
    assert report["mode"] == "offline"


def test_trajectory_keeps_every_event(make_bundle):
    """trajectories/<id>.jsonl holds every event given, in order, with timestamps."""
    lines = (make_bundle() / "trajectories" / "reward-good-correct.jsonl").read_text().splitlines()
    events = [json.loads(x) for x in lines]
    assert [e.get("op") or e.get("tool") for e in events] == ["create", "terminal"]
    assert all(e["t"].endswith("Z") for e in events)


def test_cleanup_summary(make_bundle):
    """cleanup.json keeps every sandbox and names the unresolved ones."""
    cleanup = _json(make_bundle() / "cleanup.json")
    assert cleanup["summary"] == {
        "sandboxes": 2,
        "confirmed_absent": 1,
        "errors": 1,
        "error_ids": ["sb-2"],
        "unresolved": ["sb-2"],
    }
    assert [r["status"] for r in cleanup["records"]] == ["confirmed_absent", "error"]


def test_duplicate_case_is_kept_and_flagged(make_bundle):
    """A case recorded twice keeps both records, takes the worse status and marks the run incomplete."""
    cases = [*CASES, case("reward-good-correct", "failed")]
    bundle = make_bundle(cases=cases)
    lines = (bundle / "cases.jsonl").read_text().splitlines()
    assert len(lines) == len(CASES) + 1
    coverage = _json(bundle / "coverage.json")
    entry = next(c for c in coverage["cases"] if c["id"] == "reward-good-correct")
    assert entry["status"] == "failed"
    assert entry["records"] == 2
    assert len(entry["reports"]) == 2
    assert all((bundle / r).is_file() for r in entry["reports"])
    assert "recorded 2 times" in " ".join(_json(bundle / "run-manifest.json")["problems"])


def test_malformed_records_are_kept(tmp_path):
    """Malformed records are kept with defaults, never dropped; the run is marked incomplete."""
    writer = BundleWriter(tmp_path, "r", {"mode": "offline"})
    writer.add_case({"id": "weird", "status": "exploded", "seconds": "slow"})
    writer.add_case({"status": "passed"})
    writer.add_case({"id": "quiet-skip", "status": "skipped"})
    bundle = writer.finish(["weird"], [], {})
    lines = [json.loads(x) for x in (bundle / "cases.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == ["weird", "invalid-id-2", "quiet-skip"]
    assert lines[0]["verdict"] == "error"
    assert "exploded" in lines[0]["reason"]
    problems = _json(bundle / "run-manifest.json")["problems"]
    assert any("'exploded'" in p for p in problems)
    assert any("has id None" in p for p in problems)
    assert any("skipped without a reason" in p for p in problems)
    assert _json(bundle / "coverage.json")["unexpected"] == ["invalid-id-2", "quiet-skip"]


def test_orphan_trajectory_is_kept(tmp_path):
    """A trajectory whose case never reported is still written and flagged."""
    writer = BundleWriter(tmp_path, "r", {"mode": "offline"})
    writer.add_case(case("a"))
    writer.add_trajectory("ghost", [{"op": "create"}])
    bundle = writer.finish(["a"], [], {})
    assert (bundle / "trajectories" / "ghost.jsonl").read_text().strip() == '{"op": "create"}'
    assert _json(bundle / "run-manifest.json")["complete"] is False


def test_payloads_are_bounded(tmp_path):
    """Huge strings in records, events and logs are cut with a visible note."""
    writer = BundleWriter(tmp_path, "r", {"mode": "offline"})
    writer.add_case(case("a", observed={"stdout": "x" * (MAX_STRING * 4)}))
    writer.add_trajectory("a", [{"stdout": "y" * (MAX_STRING * 4)}])
    writer.add_log("big", "z" * (MAX_LOG_CHARS * 3))
    bundle = writer.finish(["a"], [], {})
    stdout = json.loads((bundle / "cases.jsonl").read_text())["observed"]["stdout"]
    assert len(stdout) < MAX_STRING + 200
    assert "characters truncated" in stdout
    event = json.loads((bundle / "trajectories" / "a.jsonl").read_text())
    assert len(event["stdout"]) < MAX_STRING + 200
    log = (bundle / "logs" / "big.log").read_text()
    assert len(log) < MAX_LOG_CHARS + 200
    assert "characters truncated" in log


def test_nan_and_objects_stay_json(tmp_path):
    """NaN rewards and non-JSON objects are written as readable strings, keeping files valid JSON."""
    writer = BundleWriter(tmp_path, "r", {"mode": "offline"})
    writer.add_case(case("a", rewards=[float("nan"), 1.0], observed={"obj": object(), "raw": b"\xff"}))
    bundle = writer.finish(["a"], [], {})
    report = _json(bundle / "cases" / "a" / "report.json")
    assert report["rewards"] == ["nan", 1.0]
    assert report["observed"]["obj"].startswith("<object object")
    assert report["observed"]["raw"] == "\\xff"


def test_odd_case_ids_get_safe_unique_files(tmp_path):
    """Case ids that are not file-safe map to distinct files inside the bundle."""
    writer = BundleWriter(tmp_path, "r", {"mode": "offline"})
    ids = ["../escape", "a/b", "a_b", ".."]
    for case_id in ids:
        writer.add_case(case(case_id))
    bundle = writer.finish(ids, [], {})
    reports = sorted(p.relative_to(bundle).as_posix() for p in (bundle / "cases").rglob("report.json"))
    assert len(reports) == 4
    assert all(".." not in Path(r).parts for r in reports)
    assert verify_bundle(bundle) == []


def test_bad_run_id_is_rejected(tmp_path):
    """A run id that is not a plain directory name is refused with the value and the fix."""
    with pytest.raises(ConfigError, match=r"run_id='\.\./x' is not a safe directory name"):
        BundleWriter(tmp_path, "../x", {})


def test_reserved_manifest_keys_are_rejected(tmp_path):
    """Manifest keys the writer owns cannot be supplied by the caller."""
    with pytest.raises(ConfigError, match=r"\['complete'\] are set by BundleWriter"):
        BundleWriter(tmp_path, "r", {"complete": True})


def test_existing_bundle_is_never_overwritten(tmp_path):
    """A run id whose directory exists is refused up front; one appearing later gets a new name."""
    (tmp_path / "taken").mkdir()
    with pytest.raises(ConfigError, match="already exists"):
        BundleWriter(tmp_path, "taken", {})
    writer = BundleWriter(tmp_path, "late", {"mode": "offline"})
    writer.add_case(case("a"))
    (tmp_path / "late").mkdir()
    bundle = writer.finish(["a"], [], {})
    assert bundle.name == "late-2"
    assert not any((tmp_path / "late").iterdir())
    assert "appeared during the run" in " ".join(_json(bundle / "run-manifest.json")["problems"])


def test_finish_twice_is_an_error(tmp_path):
    """finish() writes one bundle; a second call is refused."""
    writer = BundleWriter(tmp_path, "r", {"mode": "offline"})
    writer.add_case(case("a"))
    writer.finish(["a"], [], {})
    with pytest.raises(ConfigError, match="already called"):
        writer.finish(["a"], [], {})


def _write_with_file_size_limit(tmp_path: Path, crash: bool) -> subprocess.CompletedProcess[str]:
    # RLIMIT_FSIZE makes the kernel refuse the large log mid-write: a real failure of the real
    # writer, no patching. Python ignores SIGXFSZ (the write raises OSError); with the default
    # action restored the kernel kills the process instead.
    script = textwrap.dedent(
        f"""
        import resource, signal, sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from evidence_helpers import case
        from pytest_e2b_env.evidence import BundleWriter
        w = BundleWriter(Path({str(tmp_path)!r}), "limited", {{"mode": "offline"}})
        w.add_case(case("a"))
        w.add_log("big", "x" * 400_000)
        if {crash!r}:
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        print(w.finish(["a"], [], {{}}))
        """
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_crash_mid_write_leaves_no_bundle(tmp_path):
    """A process killed while writing leaves nothing under the final name, only a hidden partial dir."""
    result = _write_with_file_size_limit(tmp_path, crash=True)
    assert result.returncode != 0
    assert not result.stdout
    assert not (tmp_path / "limited").exists()
    leftovers = [p.name for p in tmp_path.iterdir()]
    assert len(leftovers) == 1
    assert leftovers[0].startswith(".limited.partial-")


def test_failed_part_keeps_the_rest(tmp_path):
    """A part that cannot be written is named in the manifest; every other file is still written."""
    result = _write_with_file_size_limit(tmp_path, crash=False)
    assert result.returncode == 0, result.stderr
    bundle = Path(result.stdout.strip())
    assert bundle == tmp_path / "limited"
    manifest = _json(bundle / "run-manifest.json")
    assert manifest["complete"] is False
    assert any(p.startswith("writing logs failed: OSError") for p in manifest["problems"])
    assert (bundle / "cases" / "a" / "report.json").is_file()
    assert (bundle / "junit.xml").is_file()
    assert any("run is marked incomplete" in p for p in verify_bundle(bundle))


def test_secret_in_case_id_is_redacted_everywhere(tmp_path):
    """A caller's secret inside a case id is redacted in file names and contents, trajectory kept."""
    secret = "tenant-secret-1234"
    writer = BundleWriter(tmp_path, "r", {"mode": "offline"})
    writer.add_case(case(f"case-{secret}"))
    writer.add_trajectory(f"case-{secret}", [{"op": "create"}])
    bundle = writer.finish([f"case-{secret}"], [secret], {})
    names = [p.relative_to(bundle).as_posix() for p in bundle.rglob("*")]
    assert all(secret not in n for n in names)
    assert all(secret not in p.read_text() for p in bundle.rglob("*") if p.is_file())
    assert (bundle / "trajectories" / "case-_REDACTED_.jsonl").read_text() == '{"op": "create"}\n'
    assert verify_bundle(bundle, [f"case-{secret}"], secrets=[secret]) == []


def test_secrets_in_every_input_are_redacted(tmp_path, monkeypatch):
    """Secrets given in records, events, cleanup and logs are redacted before anything is written."""
    env_key = "e2b_" + "9" * 40
    caller = "caller-secret-value"
    monkeypatch.setenv("E2B_API_KEY", env_key)
    writer = BundleWriter(tmp_path, "r", {"mode": "offline"})
    leak = f"key={env_key} also {caller} and Bearer abcdef0123456789abcdef"
    writer.add_case(
        case("a", reason=leak, observed={"stdout": leak}, exceptions=[{"type": "E", "message": leak}])
    )
    writer.add_trajectory("a", [{"observation": leak}])
    writer.add_cleanup([{"sandbox_id": "sb", "role": "worker", "error": leak}])
    writer.add_log("sandbox", leak)
    bundle = writer.finish(["a"], [caller], {})
    for path in bundle.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert env_key not in text
            assert caller not in text
            assert "abcdef0123456789abcdef" not in text
    assert (
        bundle / "logs" / "sandbox.log"
    ).read_text() == "key=[REDACTED] also [REDACTED] and Bearer [REDACTED]"
    assert verify_bundle(bundle, ["a"], [caller]) == []


def test_secrets_across_a_bound_leave_no_piece(tmp_path, monkeypatch):
    """A secret across the cut of a bounded string is redacted before the cut: no 12 characters stay."""
    env_secret, key = "tok4" + "9f1c2b7a3e6d8054" * 2 + "q7Zx", "target-key-" + "7c5e" * 8
    monkeypatch.setenv("MY_SERVICE_TOKEN", env_secret)
    writer = BundleWriter(tmp_path, "r", {"mode": "offline"}, secrets=[key])
    keep = MAX_STRING // 2  # the bound keeps the first half: each secret runs across its end
    writer.add_case(case("a", observed={"stdout": "x" * (keep - 15) + env_secret + "y" * MAX_STRING}))
    writer.add_trajectory("a", [{"stdout": "x" * (keep - 13) + key + "y" * MAX_STRING}])
    bundle = writer.finish(["a"], [], {})
    pieces = [s[i : i + 12] for s in (env_secret, key) for i in range(len(s) - 11)]
    holding = [p for p in bundle.rglob("*") if p.is_file() and any(x in p.read_text() for x in pieces)]
    assert holding == []
    assert verify_bundle(bundle, ["a"], [key]) == []


def test_total_log_cap(tmp_path, monkeypatch):
    """Logs beyond the total cap are cut and the cut is reported, not hidden."""
    monkeypatch.setattr("pytest_e2b_env.evidence.writer.MAX_LOGS_TOTAL", 3000)
    writer = BundleWriter(tmp_path, "r", {"mode": "offline"})
    writer.add_case(case("a"))
    writer.add_log("one", "a" * 2500)
    writer.add_log("two", "b" * 2500)
    bundle = writer.finish(["a"], [], {})
    assert len((bundle / "logs" / "two.log").read_text()) < 1200
    problems = _json(bundle / "run-manifest.json")["problems"]
    assert problems == ["log two.log cut to fit the 3000-character total log cap"]


def test_numeric_secret_never_corrupts_json(tmp_path):
    """A numeric secret found inside a number redacts that number and every file stays valid JSON."""
    writer = BundleWriter(tmp_path, "r", {"mode": "offline"})
    writer.add_case(case("a", observed={"account": 900012345678, "ratio": 5000000.0}))
    bundle = writer.finish(["a"], ["12345678", "000000"], {})
    observed = json.loads((bundle / "cases.jsonl").read_text())["observed"]
    assert observed == {"account": "[REDACTED]", "ratio": "[REDACTED]"}
    assert verify_bundle(bundle, ["a"], ["12345678", "000000"]) == []


def test_schema_word_as_secret_still_writes_a_bundle(tmp_path):
    """Even an absurd secret that is part of the schema ('passed') yields a bundle, and verify says why."""
    writer = BundleWriter(tmp_path, "r", {"mode": "offline"})
    writer.add_case(case("a"))
    bundle = writer.finish(["a"], ["passed"], {})
    assert (bundle / "SHA256SUMS").is_file()
    assert _json(bundle / "run-manifest.json")["complete"] is False
    assert verify_bundle(bundle, ["a"], ["passed"])
