"""Secrets from a subject's output: never in the terminal, pytest's own JUnit, or the bundle."""

from __future__ import annotations

import html

import pytest
from plugin_helpers import write_project

from pytest_e2b_env.evidence.redaction import MARKER

#: 40 characters, as a CI token would be; only its environment variable's name marks it secret.
TOKEN = "tok4" + "9f1c2b7a3e6d8054" * 2 + "q7Zx"

RAISING = """

def token_in_message():
    import os

    def reward(completions, test_cases, **kwargs):
        raise RuntimeError("upstream refused " + os.environ["MY_SERVICE_TOKEN"])
    return reward


def token_at_the_cut():
    import os

    def reward(completions, test_cases, **kwargs):
        # 561 characters before the token: the 600-character cut falls after its 39th character.
        raise RuntimeError("x" * 561 + os.environ["MY_SERVICE_TOKEN"] + " and more")
    return reward
"""


def _project(pytester: pytest.Pytester, factory: str) -> None:
    write_project(pytester, subject=f"tinyreward:{factory}")
    path = pytester.path / "tinyreward.py"
    path.write_text(path.read_text() + RAISING)


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Run the catalog; every text a user or CI sees, by where it is (the terminal, each file)."""
    monkeypatch.setenv("MY_SERVICE_TOKEN", TOKEN)
    result = pytester.runpytest_subprocess("--e2b-evidence", "ev", "-rA", "--junitxml", "pytest-junit.xml")
    result.assert_outcomes(failed=2)
    seen = {"terminal": "\n".join(result.outlines + result.errlines)}
    seen["--junitxml"] = (pytester.path / "pytest-junit.xml").read_text()
    for path in sorted((pytester.path / "ev").rglob("*")):
        if path.is_file():
            seen[path.relative_to(pytester.path).as_posix()] = path.read_text(errors="replace")
    return seen


def _holding(seen: dict[str, str], pieces: list[str]) -> list[str]:
    """Where any of ``pieces`` is (the places, never the piece: a failure must not print it)."""
    return [where for where, text in seen.items() if any(piece in text for piece in pieces)]


def test_token_in_an_exception_is_redacted_everywhere(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A *_TOKEN value in a subject's exception is in neither the terminal, pytest's JUnit, nor the bundle."""
    _project(pytester, "token_in_message")
    seen = _run(pytester, monkeypatch)
    assert _holding(seen, [TOKEN]) == []
    shown = f"upstream refused {MARKER}"
    assert {"terminal", "--junitxml", "cases.jsonl", "junit.xml", "index.html"} <= {
        where.rpartition("/")[2] for where in _holding(seen, [shown, html.escape(shown)])
    }


def test_token_straddling_the_message_cut_leaves_no_fragment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret across the 600-character cut of a message leaves no 12-character piece anywhere."""
    _project(pytester, "token_at_the_cut")
    seen = _run(pytester, monkeypatch)
    assert _holding(seen, [TOKEN[i : i + 12] for i in range(len(TOKEN) - 11)]) == []
    shown = "x" * 20 + MARKER + " and more"  # the terminal cuts the observation before it
    assert {"cases.jsonl", "report.json", "junit.xml", "index.html"} <= {
        where.rpartition("/")[2] for where in _holding(seen, [shown])
    }


LOUD_CONFTEST = """
import os
import warnings


def pytest_runtest_call(item):
    if item.nodeid.startswith("e2b-catalog::"):
        print("printed " + os.environ["MY_SERVICE_TOKEN"])
        warnings.warn(UserWarning("warned " + os.environ["MY_SERVICE_TOKEN"]))
"""


@pytest.mark.parametrize("xdist", [[], ["-p", "xdist", "-n", "2"]], ids=["serial", "xdist"])
def test_reports_and_warnings_of_catalog_items_are_redacted(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: list[str]
) -> None:
    """Output captured during a catalog item and its warnings reach the terminal and JUnit redacted."""
    project.makeconftest(LOUD_CONFTEST)
    monkeypatch.setenv("MY_SERVICE_TOKEN", TOKEN)
    result = project.runpytest_subprocess(
        "--e2b-evidence", "ev", "-rA", "--junitxml", "pytest-junit.xml", "-o", "junit_logging=all", *xdist
    )
    result.assert_outcomes(passed=2, warnings=2)
    seen = {
        "terminal": "\n".join(result.outlines + result.errlines),
        "--junitxml": (project.path / "pytest-junit.xml").read_text(),
    }
    assert _holding(seen, [TOKEN]) == []
    assert _holding(seen, [f"printed {MARKER}"]) == ["terminal", "--junitxml"]
    assert f"conftest.py:8: UserWarning: warned {MARKER}" in seen["terminal"]
