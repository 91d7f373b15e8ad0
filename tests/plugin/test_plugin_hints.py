"""A subject the catalog cannot drive as it is gets one hint per run naming the contract key that fits."""

from __future__ import annotations

import pytest
from plugin_helpers import write_project

OTHER_COLUMN = """
def make_reward():
    def reward(completions, tests, **kwargs):  # reads the test cases from a column named "tests"
        return [0.0 for _ in completions]
    return reward
"""


@pytest.mark.full
def test_a_reward_reading_another_column_is_told_about_columns(pytester: pytest.Pytester) -> None:
    """Both cases fail on the reward's signature; the summary names 'columns' once, not once per case."""
    write_project(pytester, subject="othercolumn:make_reward")
    pytester.makepyfile(othercolumn=OTHER_COLUMN)
    result = pytester.runpytest("--e2b-evidence", "ev", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    hints = [line for line in result.outlines if line.startswith("hint: ")]
    assert len(hints) == 1, result.outlines[-20:]
    assert "missing 1 required positional argument: 'tests'" in hints[0]
    assert "declare the dataset columns it reads with the contract key 'columns'" in hints[0]
    assert hints[0].endswith("(pytest-e2b-env docs catalog)")


def test_hints_name_the_key_for_each_shape() -> None:
    """A reward's signature, reset's keyword, a missing tool, the terminal's argument: each gets its key."""
    from pytest_e2b_env.catalog.contract import Contract
    from pytest_e2b_env.catalog.hints import PREFIX, shape_hints
    from pytest_e2b_env.catalog.observe import Call, Observation

    def failed(name: str, kind: str, message: str) -> Call:
        call = Call(name)
        call.error = {"type": kind, "hierarchy": [kind], "message": message}
        return call

    reward = Observation(
        "reward",
        calls=[failed("reward", "TypeError", "reward() missing 1 required positional argument: 'tests'")] * 2,
    )
    (hint,) = shape_hints(reward, Contract(kind="reward"))
    assert hint.startswith(PREFIX)
    assert "'columns'" in hint
    episode = Observation(
        "episode",
        calls=[
            failed("reset", "TypeError", "reset() got an unexpected keyword argument 'task'"),
            failed("submit", "NoSuchTool", "submit"),
            failed("terminal", "TypeError", "terminal() got an unexpected keyword argument 'command'"),
        ],
    )
    hints = shape_hints(episode, Contract(kind="episode"))
    assert ["'task_arg'" in hints[0], "'tools'" in hints[1], "'command_arg'" in hints[2]] == [True] * 3
    assert "{'submit': 'your_method'}" in hints[1]
    assert (
        shape_hints(
            Observation("reward", calls=[Call("reward", value=[1.0], returned=True)]), Contract(kind="reward")
        )
        == []
    )
