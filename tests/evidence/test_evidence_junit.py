"""junit.xml: one testcase per case, and no failure can silently become a pass."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from evidence_helpers import CASES, IDS, case

from pytest_e2b_env.evidence.junit import build_junit, junit_counts, properties_of, visible


def _parse(bundle):
    return ET.fromstring((bundle / "junit.xml").read_bytes())


def test_one_testcase_per_case(make_bundle):
    """Every catalog case, missing ones included, is exactly one testcase named by its id."""
    root = _parse(make_bundle(expected=[*IDS, "reward-auth-401"]))
    names = [t.get("name") for t in root.iter("testcase")]
    assert names == [*IDS, "reward-auth-401"]
    classes = {t.get("name"): t.get("classname") for t in root.iter("testcase")}
    assert classes["reward-lost-worker-twice"] == "pytest-e2b-env.reward.lost-worker"


def test_failing_case_is_a_failure_with_a_message(make_bundle):
    """A failed case appears as <failure> with a non-empty message naming the reason and criteria."""
    root = _parse(make_bundle())
    testcase = next(t for t in root.iter("testcase") if t.get("name") == "reward-lost-worker-twice")
    failure = testcase.find("failure")
    assert failure is not None
    assert failure.get("message") == "reward-lost-worker-twice did not behave; failed criteria: rewards"
    assert "[FAIL] rewards" in failure.text
    assert "raised AssertionError: scored instead of raising" in failure.text
    suite = root.find("testsuite")
    assert suite is not None
    assert suite.get("failures") == "1"


def test_error_skip_and_missing(make_bundle):
    """Errors and missing cases are <error> elements with messages; skips keep their reason."""
    root = _parse(make_bundle(expected=[*IDS, "reward-auth-401"]))
    by_name = {t.get("name"): t for t in root.iter("testcase")}
    error = by_name["episode-isolation-egress"].find("error")
    assert error is not None
    assert error.get("message") == "episode-isolation-egress did not behave; failed criteria: rewards"
    missing = by_name["reward-auth-401"].find("error")
    assert missing is not None
    assert missing.get("type") == "missing"
    assert missing.get("message").startswith("expected case was never recorded")
    skipped = by_name["episode-live-only"].find("skipped")
    assert skipped is not None
    assert skipped.get("message") == "needs --e2b-live"
    assert by_name["reward-good-correct"].find("failure") is None


def test_failure_without_reason_still_has_a_message():
    """A failure with no reason and no criteria still gets a message, so junit-xml cannot drop it."""
    record = case("bare", "failed", reason=None, criteria=[])
    text = build_junit([record], {}, "2026-01-01T00:00:00Z")
    failure = ET.fromstring(text.encode()).find(".//failure")
    assert failure is not None
    assert failure.get("message") == "case bare failed without a recorded reason"
    assert junit_counts(text) == {"tests": 1, "failures": 1, "errors": 0, "skipped": 0}


def test_control_characters_stay_visible():
    """ANSI escapes and NULs are shown as \\xNN instead of silently deleted."""
    record = case("ansi", "failed", reason="red \x1b[31mtext\x1b[0m and \x00")
    failure = ET.fromstring(build_junit([record], {}, "t").encode()).find(".//failure")
    assert failure is not None
    assert failure.get("message").startswith("red \\x1b[31mtext\\x1b[0m and \\x00")
    assert visible("a\tb\nc") == "a\tb\nc"


def test_suite_properties_hold_run_facts_not_environment(make_bundle):
    """Suite properties carry run id and mode, and nothing from the environment."""
    root = _parse(make_bundle())
    props = {p.get("name"): p.get("value") for p in root.iterfind("testsuite/properties/property")}
    assert props == {"run_id": "run-1", "mode": "offline", "started_at": props["started_at"]}


def test_counts_match_statuses(make_bundle):
    """Suite counts agree with the statuses of the cases."""
    text = (make_bundle() / "junit.xml").read_text()
    statuses = [c["status"] for c in CASES]
    assert junit_counts(text) == {
        "tests": len(CASES),
        "failures": statuses.count("failed"),
        "errors": statuses.count("error"),
        "skipped": statuses.count("skipped"),
    }


def _policy(cid: str, policy: str, passed: bool = False, relaxed: bool = True) -> dict:
    return {
        "id": cid,
        "description": cid,
        "passed": passed,
        "expected": True,
        "actual": False,
        "severity": "policy",
        "policy": policy,
        "relaxed": relaxed,
    }


def test_the_runners_reason_is_not_said_twice():
    """A reason that lists the failed criteria (the catalog's own) is the whole message."""
    record = case("doubled", "failed", reason="failed criteria: rewards")
    failure = ET.fromstring(build_junit([record], {}, "t").encode()).find(".//failure")
    assert failure is not None
    assert failure.get("message") == "failed criteria: rewards"


def test_relaxed_criteria_of_a_failed_case_are_not_its_failures():
    """A failed case's relaxed policy criteria are marked RELAXED, not listed as failed criteria."""
    criteria = [*case("mixed", "failed")["criteria"], _policy("no_run", "fence-variants")]
    record = case("mixed", "failed", reason="failed criteria: rewards", criteria=criteria)
    failure = ET.fromstring(build_junit([record], {}, "t").encode()).find(".//failure")
    assert failure is not None
    assert failure.get("message") == "failed criteria: rewards"
    assert "[FAIL] rewards:" in (failure.text or "")
    assert "[RELAXED] no_run:" in (failure.text or "")


def test_relaxed_case_is_a_pass_marked_with_a_property_and_a_note():
    """A relaxed case counts as a pass but carries e2b_status=relaxed and a note naming the policies."""
    criteria = [
        {**case("r")["criteria"][0]},
        _policy("no_run", "fence-variants"),
        _policy("json_types", "json-types"),
    ]
    record = case(
        "r", "relaxed", reason="relaxed policy criteria failed: no_run, json_types", criteria=criteria
    )
    text = build_junit([record, case("plain")], {"run_id": "r1"}, "t")
    assert junit_counts(text) == {"tests": 2, "failures": 0, "errors": 0, "skipped": 0}
    root = ET.fromstring(text.encode())
    by_name = {t.get("name"): t for t in root.iter("testcase")}
    note = (
        "relaxed, not passed: policy criteria no_run, json_types failed and e2b_relax relaxes "
        "fence-variants, json-types; safety criteria all held"
    )
    assert properties_of(by_name["r"]) == {"e2b_status": "relaxed", "e2b_relaxed": note}
    assert by_name["r"][0].tag == "properties"  # first, as pytest writes a testcase's own
    assert by_name["r"].findtext("system-out") == note
    assert properties_of(by_name["plain"]) == {}
    assert {p.get("name") for p in root.iterfind("testsuite/properties/property")} == {"run_id"}
