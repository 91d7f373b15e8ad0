"""Catalog collection: one item per case, stable ids, malformed cases, selection."""

from __future__ import annotations

import textwrap

import pytest
from plugin_helpers import write_project

BAD_CASE = """
[[case]]
id = "reward-bad-field"
subject = "reward"
family = "good"
description = "A case whose expectation names an unknown predicate."
[case.reward]
test_cases = [{input = "1", output = "1"}]
completions = [{text = "x"}]
[case.expect]
rewardz = [1.0]
"""


def test_items_are_the_case_ids_in_order(project: pytest.Pytester) -> None:
    """Each case of the subject's kind becomes one item named by its id, in file order."""
    result = project.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(
        ["e2b-catalog::reward-tiny-correct", "e2b-catalog::reward-tiny-no-fence", "2 tests collected*"]
    )


def test_user_tests_and_catalog_together(project: pytest.Pytester) -> None:
    """A project's own tests run next to the catalog when no paths are given."""
    project.makepyfile(test_mine="def test_mine():\n    pass\n")
    result = project.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(
        ["test_mine.py::test_mine", "e2b-catalog::reward-tiny-correct", "3 tests collected*"]
    )


def test_explicit_paths_leave_the_catalog_out(project: pytest.Pytester) -> None:
    """`pytest some_file.py` runs only that file; the catalog joins only without paths."""
    project.makepyfile(test_mine="def test_mine():\n    pass\n")
    result = project.runpytest("test_mine.py", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["test_mine.py::test_mine", "1 test collected*"])


def test_keyword_selects_cases(project: pytest.Pytester) -> None:
    """-k selects catalog cases by id or family like any test."""
    result = project.runpytest("--collect-only", "-q", "-k", "defect")
    result.stdout.fnmatch_lines(["e2b-catalog::reward-tiny-no-fence", "1/2 tests collected (1 deselected)*"])


@pytest.mark.full
def test_malformed_case_is_a_collection_error(pytester: pytest.Pytester) -> None:
    """A malformed case fails collection naming the file, the case id and the field."""
    write_project(pytester)
    (pytester.path / "mycases" / "reward.toml").write_text(BAD_CASE)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*mycases/reward.toml: case 'reward-bad-field': field 'expect': "
            "Value error, unknown predicate(s)*rewardz*"
        ]
    )


@pytest.mark.full
def test_invalid_toml_is_a_collection_error(pytester: pytest.Pytester) -> None:
    """A case file that is not TOML fails collection naming the file."""
    write_project(pytester)
    (pytester.path / "mycases" / "reward.toml").write_text("[[case]\nid = 1\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*mycases/reward.toml: not valid TOML*"])


def test_hook_adds_project_cases(project: pytest.Pytester) -> None:
    """A conftest's pytest_e2b_env_cases hook adds its own cases to the catalog."""
    project.makeconftest(
        textwrap.dedent(
            """
            def pytest_e2b_env_cases(config):
                return [{
                    "id": "reward-project-extra",
                    "subject": "reward",
                    "family": "defect",
                    "description": "A project's own case added through the hook.",
                    "reward": {
                        "test_cases": [{"input": "1", "output": "1"}],
                        "completions": [{"text": "none"}],
                    },
                    "expect": {"rewards": [0.0]},
                }]
            """
        )
    )
    result = project.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(["e2b-catalog::reward-project-extra", "3 tests collected*"])


def test_case_catalog_fixture(project: pytest.Pytester) -> None:
    """The case_catalog fixture lists the loaded cases."""
    project.makepyfile(
        test_cat="def test_cat(case_catalog):\n"
        "    assert [c.id for c in case_catalog][:1] == ['reward-tiny-correct']\n"
    )
    result = project.runpytest("test_cat.py")
    result.assert_outcomes(passed=1)


EXTRA_CASE = """
[[case]]
id = "reward-extra-correct"
subject = "reward"
family = "good"
description = "A case from a second case file."
[case.reward]
test_cases = [{input = "[1, 2]", output = "3"}]
completions = [{program = "x.py"}]
[case.expect]
rewards = [1.0]
"""


def test_cases_option_given_twice_takes_both(project: pytest.Pytester) -> None:
    """--e2b-cases twice collects the cases of both paths, not only the last one's."""
    (project.path / "more").mkdir()
    (project.path / "more" / "extra.toml").write_text(EXTRA_CASE)
    result = project.runpytest("--collect-only", "-q", "--e2b-cases", "mycases", "--e2b-cases", "more")
    result.stdout.fnmatch_lines(
        [
            "e2b-catalog::reward-tiny-correct",
            "e2b-catalog::reward-tiny-no-fence",
            "e2b-catalog::reward-extra-correct",
            "3 tests collected*",
        ]
    )
