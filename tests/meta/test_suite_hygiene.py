"""The suite's own hygiene (tests/conftest.py): clean garbage between tests, the order on xdist, the tiers."""

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


@pytest.mark.full
def test_a_test_starts_clean_of_the_garbage_of_the_one_before(pytester: pytest.Pytester) -> None:
    """Old cyclic garbage of one test is freed before the next, so its finalizer (a logged
    traceback, whose ``ast.parse`` breaks a parse under way on CPython 3.11) cannot run there."""
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makepyfile(test_two=TWO_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:e2b_env", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


@pytest.mark.full
def test_on_xdist_slow_files_run_first_and_nothing_waits_behind_a_long_test(
    pytester: pytest.Pytester,
) -> None:
    """Files with a slow test are handed out first; each file still runs whole and in order.

    One worker sees the whole order: the slow file, though collected last, starts it, and the
    scheduler still hands on every file (a worker's last queued test needs a successor to run).
    """
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makeini("[pytest]\nmarkers =\n    slow: long")
    pytester.makepyfile(  # xdist alone would run the file with most tests first: b, a, z
        test_a="def test_a1():\n    pass\n\ndef test_a2():\n    pass\n",
        test_b="def test_b1():\n    pass\n\ndef test_b2():\n    pass\n\ndef test_b3():\n    pass\n",
        test_z="import pytest\n\n@pytest.mark.slow\ndef test_z1():\n    pass\n",
    )
    result = pytester.runpytest_subprocess("-p", "no:e2b_env", "-n", "1", "--dist", "loadfile", "-v")
    result.assert_outcomes(passed=6)
    ran = [line.split("::")[1].split()[0] for line in result.outlines if " PASSED " in line and "::" in line]
    assert ran == ["test_z1", "test_a1", "test_a2", "test_b1", "test_b2", "test_b3"], ran


@pytest.mark.full
def test_fast_leaves_out_the_full_tier(pytester: pytest.Pytester) -> None:
    """--fast runs neither the tests marked full or slow nor the catalog's own items; the rest run."""
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makeini("[pytest]\nmarkers =\n    slow: long\n    full: seconds\n    e2b_case(id): a case")
    pytester.makepyfile(
        test_tiers="""
import pytest

def test_quick():
    pass

@pytest.mark.full
def test_full():
    pass

@pytest.mark.slow
def test_slow():
    pass

@pytest.mark.e2b_case("good-1")
def test_case():
    pass
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:e2b_env", "-p", "no:cacheprovider", "--fast", "-v")
    result.assert_outcomes(passed=1, deselected=3)
    result.stdout.fnmatch_lines(["*::test_quick PASSED*"])
    result = pytester.runpytest_subprocess("-p", "no:e2b_env", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)


def test_a_thread_drawing_from_random_fails_no_property_test() -> None:
    """A background thread that uses the global ``random`` (the e2b SDK's retry jitter, in a
    server thread an earlier test left serving) does not make a hypothesis draw fail as flaky."""
    import random
    import threading

    from hypothesis import given, settings
    from hypothesis import strategies as st

    stop = threading.Event()

    def jitter() -> None:
        while not stop.wait(0.0001):
            random.random()

    @settings(max_examples=50, database=None)
    @given(st.text(min_size=4).filter(lambda s: s.strip() == s))
    def draws(text: str) -> None:
        assert text.strip() == text

    thread = threading.Thread(target=jitter, daemon=True)
    thread.start()
    try:
        draws()
    finally:
        stop.set()
        thread.join(timeout=10)
