"""What CI reads: the Markdown summary, the subject pinned in the bundle, ini typos, skip locations."""

from __future__ import annotations

import textwrap

import pytest
from plugin_helpers import only_bundle, read_json, write_project


@pytest.mark.full
def test_summary_goes_to_the_step_summary_file(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With $GITHUB_STEP_SUMMARY set the run appends a Markdown verdict, family table and bundle path."""
    step = project.path / "step-summary.md"
    step.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    result = project.runpytest("--e2b-evidence", "ev")
    result.assert_outcomes(passed=2)
    bundle = only_bundle(project.path / "ev")
    text = step.read_text()
    assert text.startswith("earlier step\n## ✅ pytest-e2b-env: PASSED\n")
    assert "| family | passed | relaxed | failed | error | missing | skipped | seconds |" in text
    assert "| defect | 1 | 0 | 0 | 0 | 0 | 0 |" in text
    assert "subjects: reward `tinyreward:make_reward`." in text
    assert f"Evidence bundle: `{bundle}`" in text
    assert "Failed cases" not in text
    result.stdout.fnmatch_lines([f"summary appended to: {step}"])


@pytest.mark.full
def test_summary_option_lists_failed_cases_with_reasons(pytester: pytest.Pytester) -> None:
    """--e2b-summary PATH names every failed case, its family and why, and the verdict FAILED."""
    write_project(pytester, subject="tinyreward:constant_reward")
    result = pytester.runpytest("--e2b-evidence", "ev", "--e2b-summary", "out/summary.md")
    result.assert_outcomes(failed=2)
    text = (pytester.path / "out" / "summary.md").read_text()
    assert text.startswith("## ❌ pytest-e2b-env: FAILED\n")
    assert "| `reward-tiny-correct` | good | failed | failed criteria: rewards |" in text
    assert "| `reward-tiny-no-fence` | defect | failed |" in text


@pytest.mark.full
def test_manifest_and_index_pin_the_subject(project: pytest.Pytester) -> None:
    """The bundle records the subject spec, module file and source digest; index.html shows them."""
    project.runpytest("--e2b-evidence", "ev").assert_outcomes(passed=2)
    bundle = only_bundle(project.path / "ev")
    source = read_json(bundle / "run-manifest.json")["subject_sources"]["reward"]
    assert source["spec"] == "tinyreward:make_reward"
    assert source["module_file"] == str(project.path / "tinyreward.py")
    assert source["files"] == 1
    assert len(source["sha256"]) == 64
    html = (bundle / "index.html").read_text()
    assert "<td>reward subject</td><td>tinyreward:make_reward (" in html
    assert source["sha256"] in html
    assert "<td>isolation level</td>" in html
    assert "<td>target</td>" not in html


@pytest.mark.full
def test_subject_option_overrides_the_ini_key(project: pytest.Pytester) -> None:
    """--e2b-reward-subject wins over e2b_reward_subject (the header and the cases use it)."""
    result = project.runpytest("--e2b-evidence", "ev", "--e2b-reward-subject", "tinyreward:constant_reward")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["e2b subjects: reward=tinyreward:constant_reward"])


def test_misspelled_ini_key_is_a_usage_error_with_the_fix(pytester: pytest.Pytester) -> None:
    """An e2b_* ini key no plugin registered stops the run and suggests the closest key."""
    pytester.makeini("[pytest]\ne2b_reward_subjct = x:y\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: unknown ini key 'e2b_reward_subjct' in {pytester.path / 'tox.ini'}: "
            "did you mean 'e2b_reward_subject'? (pytest-e2b-env docs plugin lists every key)"
        ]
    )


@pytest.mark.full
def test_a_skipped_case_points_at_its_case_file(pytester: pytest.Pytester) -> None:
    """A case skipped offline is reported at its line in the case file, not inside the plugin."""
    write_project(pytester)
    (pytester.path / "mycases" / "live.toml").write_text(
        textwrap.dedent(
            """
            [[case]]
            id = "reward-tiny-live-only"
            subject = "reward"
            family = "auth"
            description = "Runs against real E2B only."
            modes = ["live"]
            modes_reason = "needs real E2B"
            [case.reward]
            test_cases = [{input = "[1, 2]", output = "3"}]
            completions = [{text = "print(3)"}]
            [case.expect]
            rewards = [0.0]
            """
        )
    )
    result = pytester.runpytest("--e2b-evidence", "ev", "-rs", "-k", "live")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [1] mycases/live.toml:3: not runnable offline: needs real E2B"])


def test_collect_only_writes_no_bundle(project: pytest.Pytester) -> None:
    """--collect-only lists the cases (clean ids) and writes nothing under the evidence root."""
    result = project.runpytest("--e2b-evidence", "ev", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["e2b-catalog::reward-tiny-correct", "e2b-catalog::reward-tiny-no-fence"])
    assert not (project.path / "ev").exists()


@pytest.mark.full
def test_catalog_only_collects_no_test_file(project: pytest.Pytester) -> None:
    """--e2b-catalog-only runs the cases and neither collects nor imports the project's test files."""
    project.makepyfile(test_own="raise ImportError('a test file was imported')\n")
    result = project.runpytest("--e2b-evidence", "ev", "--e2b-catalog-only")
    result.assert_outcomes(passed=2)
