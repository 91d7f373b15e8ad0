"""An episode in TRL's ``env.reward`` shape runs with no declaration, and the run says how it was read."""

from __future__ import annotations

import json
import textwrap

import pytest
from plugin_helpers import only_bundle, read_json

ENV_MODULE = '''
import json
from e2b import Sandbox


class RewardEnv:
    """No get_reward(): TRL's documented reward function reads env.reward after the rollout."""

    def __init__(self):
        self.reward = 0.0
        self._box = None

    def reset(self, **row):
        self.reward = 0.0
        task = json.loads(row["task"])
        self._box = Sandbox.create(timeout=60)
        self._box.kill()  # this episode never runs a command; its reward stays 0.0
        self._box = None
        return "Fix " + task["artifact"]

    def terminal(self, command: str) -> str:
        """Refused: nothing runs.

        Args:
            command: shell command
        """
        return "refused"

    def submit(self) -> str:
        """Submit (scores 0.0)."""
        return "submitted"
'''

TASK = {
    "id": "tiny",
    "workdir": "/home/user/work",
    "files": {"report.py": "print(1)\n"},
    "artifact": "report.py",
    "command": "python3 -B report.py",
    "verification": {"files": {}, "expected": 1},
}

CASES = """
[[case]]
id = "episode-tiny-starter"
subject = "episode"
family = "good"
description = "The starter submitted as is earns 0.0."
[case.episode]
task_file = "task.json"
script = [{tool = "submit"}]
[case.expect]
reward = 0.0
"""


@pytest.mark.full
def test_env_reward_is_detected_and_reported_once(pytester: pytest.Pytester) -> None:
    """The case passes with no contract; report.json and one terminal line say the reward was env.reward."""
    pytester.makepyfile(rewardenv=ENV_MODULE)
    (pytester.path / "mycases").mkdir()
    (pytester.path / "mycases" / "episode.toml").write_text(CASES)
    (pytester.path / "mycases" / "task.json").write_text(json.dumps(TASK))
    pytester.makeini(
        textwrap.dedent(
            """
            [pytest]
            e2b_episode_subject = rewardenv:RewardEnv
            e2b_cases = mycases
            pythonpath = .
            asyncio_default_fixture_loop_scope = function
            """
        )
    )
    result = pytester.runpytest("--e2b-evidence", "ev", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    lines = [line for line in result.outlines if line.startswith("episode reward: ")]
    assert lines == [
        "episode reward: read as env.reward (attribute), as TRL's documented reward function does "
        "(the class has no get_reward(); detected, no declaration needed)"
    ]
    report = read_json(only_bundle(pytester.path / "ev") / "cases" / "episode-tiny-starter" / "report.json")
    assert report["contract"]["reward"] == "env.reward (attribute)"
