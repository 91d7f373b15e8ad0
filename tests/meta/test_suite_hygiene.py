"""The suite's own hygiene (tests/conftest.py): a test starts clean of the garbage of the one before."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

TWO_TESTS = """
import gc

FREED = []


class _Cycle:
    def __init__(self):
        self.me = self

    def __del__(self):
        FREED.append("cycle")


def test_leaves_old_cyclic_garbage():
    cycle = _Cycle()
    gc.collect()  # alive now: moved to the oldest generation, which young collections skip
    del cycle
    assert FREED == []


def test_finds_it_freed():
    assert FREED == ["cycle"]
"""


def test_a_test_starts_clean_of_the_garbage_of_the_one_before(pytester: pytest.Pytester) -> None:
    """Old cyclic garbage of one test is freed before the next, so its finalizer (a logged
    traceback, whose ``ast.parse`` breaks a parse under way on CPython 3.11) cannot run there."""
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makepyfile(test_two=TWO_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:e2b_env", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
