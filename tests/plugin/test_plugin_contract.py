"""The subject contract through pytest: relaxed policies warn, broken subjects are one usage error."""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from plugin_helpers import only_bundle, read_json, write_project

POLICY_CASE = """
[[case]]
id = "reward-tiny-unfenced"
subject = "reward"
family = "defect"
description = "An unfenced completion scores 0 and, by house policy, runs nothing."
policy = {no_run = "fence-variants"}
[case.reward]
test_cases = [{input = "[1, 2]", output = "3"}]
completions = [{text = "print(4)"}]
[case.expect]
rewards = [0.0]
no_run = true
"""

RUNS_ANYTHING = """
from e2b import AsyncSandbox


def make_reward():
    async def reward(completions, test_cases, **kwargs):
        box = await AsyncSandbox.create(timeout=60)
        try:
            for c in completions:  # runs the whole message, fence or not
                await box.commands.run("true")
            return [0.0 for _ in completions]
        finally:
            await box.kill()
    return reward
"""


def _project(pytester: pytest.Pytester, relax: str) -> None:
    write_project(pytester, subject="anything:make_reward", extra=f"e2b_relax = {relax}\n" if relax else "")
    pytester.makepyfile(anything=RUNS_ANYTHING)
    (pytester.path / "mycases" / "reward.toml").write_text(POLICY_CASE)


@pytest.mark.full
def test_failed_policy_fails_by_default(pytester: pytest.Pytester) -> None:
    """A policy criterion fails the case unless relaxed; the line names the policy."""
    _project(pytester, relax="")
    result = pytester.runpytest("--e2b-evidence", "ev")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*- no_run [[]policy fence-variants[]]: no command ran in any sandbox"])


@pytest.mark.full
def test_relaxed_policy_is_a_warning_recorded_in_the_bundle(pytester: pytest.Pytester) -> None:
    """Relaxed by name, the same failure is a RelaxedPolicyWarning and status 'relaxed', not a pass."""
    _project(pytester, relax="fence-variants")
    result = pytester.runpytest("--e2b-evidence", "ev", "-W", "default::UserWarning")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*RelaxedPolicyWarning: case reward-tiny-unfenced relaxed*"])
    bundle = only_bundle(pytester.path / "ev")
    coverage = read_json(bundle / "coverage.json")
    assert coverage["counts"]["relaxed"] == 1
    assert coverage["counts"]["passed"] == 0
    manifest = read_json(bundle / "run-manifest.json")
    assert manifest["relaxed_policies"] == ["fence-variants"]
    report = read_json(bundle / "cases" / "reward-tiny-unfenced" / "report.json")
    no_run = next(c for c in report["criteria"] if c["id"] == "no_run")
    assert (no_run["severity"], no_run["policy"], no_run["relaxed"]) == ("policy", "fence-variants", True)
    assert "relaxed policies" in (bundle / "index.html").read_text()


def _testcase(path: Path, name: str) -> ET.Element:
    (testcase,) = [t for t in ET.parse(path).getroot().iter("testcase") if t.get("name") == name]
    return testcase


def _properties(testcase: ET.Element) -> dict[str, str | None]:
    return {p.get("name") or "": p.get("value") for p in testcase.iterfind("properties/property")}


@pytest.mark.parametrize("xdist", [[], ["-p", "xdist", "-n", "2"]], ids=["serial", "xdist"])
def test_a_failed_case_is_said_once_in_either_junit(pytester: pytest.Pytester, xdist: list[str]) -> None:
    """pytest's --junitxml and the bundle's junit.xml name a failure in one line, the account once."""
    _project(pytester, relax="")
    args = ["--e2b-evidence", "ev", "--junitxml", "out.xml", "-ra", *xdist]
    result = pytester.runpytest_subprocess(*args) if xdist else pytester.runpytest(*args)
    result.assert_outcomes(failed=1)
    summary = "case reward-tiny-unfenced failed: failed criteria: no_run"
    # -ra names it by the same line (cut to the terminal's width)
    result.stdout.fnmatch_lines(
        ["FAILED e2b-catalog::reward-tiny-unfenced - case reward-tiny-unfenced fail*"]
    )
    failure = _testcase(pytester.path / "out.xml", "reward-tiny-unfenced").find("failure")
    assert failure is not None
    assert failure.get("message") == summary
    assert failure.text is not None
    assert failure.text.startswith("case reward-tiny-unfenced failed: An unfenced completion scores 0")
    assert "- no_run [policy fence-variants]: no command ran in any sandbox" in failure.text
    assert "failed criteria" not in failure.text  # the message's line is not said again

    bundle = only_bundle(pytester.path / "ev")
    failure = _testcase(bundle / "junit.xml", "reward-tiny-unfenced").find("failure")
    assert failure is not None
    assert (
        failure.get("message") == "failed criteria: no_run"
    )  # was "failed criteria: no_run; failed criteria: no_run"
    assert failure.text is not None
    assert "[FAIL] no_run:" in failure.text


def test_a_relaxed_case_is_marked_in_either_junit(pytester: pytest.Pytester) -> None:
    """A relaxed case passes in JUnit with an e2b_status property and a note naming the policy."""
    _project(pytester, relax="fence-variants")
    result = pytester.runpytest("--e2b-evidence", "ev", "--junitxml", "out.xml", "-W", "default::UserWarning")
    result.assert_outcomes(passed=1, warnings=1)
    note = (
        "relaxed, not passed: policy criteria no_run failed and e2b_relax relaxes fence-variants; "
        "safety criteria all held"
    )
    own = _testcase(pytester.path / "out.xml", "reward-tiny-unfenced")
    assert own.find("failure") is None
    assert _properties(own) == {"e2b_status": "relaxed", "e2b_relaxed": note}
    bundle = only_bundle(pytester.path / "ev")
    written = _testcase(bundle / "junit.xml", "reward-tiny-unfenced")
    assert written.find("failure") is None
    assert _properties(written) == {"e2b_status": "relaxed", "e2b_relaxed": note}
    assert written.findtext("system-out") == note


def test_unknown_relax_name_is_a_usage_error(pytester: pytest.Pytester) -> None:
    """A misspelt policy name stops the run naming it and the known names."""
    _project(pytester, relax="fence-variant")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*e2b_relax: unknown policy name(s) [[]'fence-variant'[]]; relaxable: fence-variants*"]
    )


@pytest.mark.full
@pytest.mark.parametrize(
    ("module", "message"),
    [
        ("def make_reward(:\n", "importing module 'broken' failed: SyntaxError"),
        ("import not_installed_anywhere_xyz\n", "importing module 'broken' failed: ModuleNotFoundError"),
        ("x = 1\n", "module 'broken' has no attribute 'make_reward'"),
    ],
)
def test_unimportable_subject_is_one_usage_error(
    pytester: pytest.Pytester, module: str, message: str
) -> None:
    """A subject spec that cannot be imported stops the run with one error, no traceback per case."""
    write_project(pytester, subject="broken:make_reward")
    pytester.makepyfile(broken=module)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str()
    assert text.count(message) == 1, text
    assert "e2b_reward_subject='broken:make_reward'" in text
    assert "Traceback" not in text + result.stdout.str()


@pytest.mark.full
def test_contract_ini_key_names_a_dict(pytester: pytest.Pytester) -> None:
    """e2b_reward_contract points at a declaration dict for code the user cannot edit."""
    write_project(
        pytester,
        subject="tinyreward:make_reward",
        extra=textwrap.dedent(
            """
            e2b_reward_contract = contracts:REWARD
            """
        ),
    )
    pytester.makepyfile(contracts="REWARD = {'columns': 'nonsense'}\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*columns='nonsense' is not valid; use one of test_cases, verification_info*"]
    )
