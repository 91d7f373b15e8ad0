"""Garbage one part of a run leaves for the collector cannot break a later part.

A failed task nobody awaited, in a reference cycle (what a cancelled SDK stream leaves), logs its
traceback when the collector frees it; on CPython 3.11 that formatting's ``ast.parse``, nested in
a parse under way, makes the outer parse raise SystemError.
"""

from __future__ import annotations

import pytest
from plugin_helpers import only_bundle, read_json, write_project

pytestmark = pytest.mark.full

# The first case leaves what a cancelled batch of a pooled reward leaves: a task that failed,
# its exception never retrieved, held in a reference cycle. The second case parses its
# candidate with ``ast.parse`` (as most reward code does) while the collector runs at every
# allocation, as it may at any moment on a busy process.
LEAVES_CYCLES = """
import ast, asyncio, gc


class _Holder:
    pass


async def _lost_stream():
    raise ConnectionError("stream cut by the cancellation")


def make_reward():
    async def reward(completions, test_cases, **kwargs):
        text = str(completions)
        if "print(4)" in text:  # the first case
            task = asyncio.ensure_future(_lost_stream())
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            holder = _Holder()
            holder.self, holder.task = holder, task
            return [1.0, 0.0]
        gc.set_threshold(1)
        try:
            ast.parse("print(3)")
        finally:
            gc.set_threshold(700, 10, 10)
        return [0.0 for _ in completions]
    return reward
"""


def test_an_earlier_cases_garbage_is_freed_before_the_next_case(pytester: pytest.Pytester) -> None:
    """Cyclic garbage of one case is collected before the next runs in the same host.

    Freed during the next case instead, the failed task's finalizer logs a traceback inside that
    case's ``ast.parse`` and CPython 3.11 raises SystemError there: a false failure.
    """
    write_project(pytester, subject="leaves_cycles:make_reward")
    pytester.makepyfile(leaves_cycles=LEAVES_CYCLES)
    result = pytester.runpytest("--e2b-evidence", "ev", "--e2b-lanes", "1")
    coverage = read_json(only_bundle(pytester.path / "ev") / "coverage.json")
    status = {c["id"]: (c["status"], c.get("reason")) for c in coverage["cases"]}
    assert status == {"reward-tiny-correct": ("passed", None), "reward-tiny-no-fence": ("passed", None)}
    result.assert_outcomes(passed=2)
