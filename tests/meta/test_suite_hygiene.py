"""The suite's own hygiene (tests/conftest.py): clean garbage between tests, the order on xdist, the tiers."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
SCRIPTS_TEST = Path(__file__).resolve().parents[2] / "scripts" / "test"

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


def _scheduling(workers: str) -> list[str]:
    """The xdist arguments of scripts/test's pytest command, with ``workers`` workers."""
    line = next(line for line in SCRIPTS_TEST.read_text().splitlines() if line.startswith("exec "))
    args = shlex.split(line)
    args = [arg for arg in args[args.index("pytest") + 1 :] if arg != "$@"]
    args[args.index("-n") + 1] = workers
    return args


FILES = {  # xdist alone would run the files with the most tests first: b, then z and a, then y
    "test_a": "def test_a1():\n    pass\n\ndef test_a2():\n    pass\n",
    "test_b": "def test_b1():\n    pass\n\ndef test_b2():\n    pass\n\ndef test_b3():\n    pass\n",
    "test_y": "import pytest\n\n@pytest.mark.full\ndef test_y1():\n    pass\n",
    "test_z": "import pytest\n\ndef test_z0():\n    pass\n\n@pytest.mark.slow\ndef test_z1():\n    pass\n",
}


def _order(pytester: pytest.Pytester, *args: str) -> list[str]:
    """The tests of FILES in the order one xdist worker ran them."""
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makeini("[pytest]\nmarkers =\n    slow: long\n    full: seconds")
    pytester.makepyfile(**FILES)
    result = pytester.runpytest_subprocess("-p", "no:e2b_env", "-p", "no:cacheprovider", *args, "-v")
    result.assert_outcomes(passed=8)
    return [line.split("::")[1].split()[0] for line in result.outlines if " PASSED " in line and "::" in line]


@pytest.mark.full
def test_on_xdist_the_files_of_the_longest_tests_run_first(pytester: pytest.Pytester) -> None:
    """Under scripts/test's flags a slow test's file runs first, then a full test's, each whole, in order."""
    ran = _order(pytester, *_scheduling(workers="1"))
    files_in_order = ["test_z0", "test_z1", "test_y1", "test_a1", "test_a2", "test_b1", "test_b2", "test_b3"]
    assert ran == files_in_order, ran
    # The probe: xdist's own order (the files with most tests first) undoes it, so the order above
    # is this suite's, and scripts/test must keep passing --no-loadscope-reorder.
    ran = _order(pytester, *[arg for arg in _scheduling(workers="1") if arg != "--no-loadscope-reorder"])
    assert ran[:3] == ["test_b1", "test_b2", "test_b3"], ran


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
