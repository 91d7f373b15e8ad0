"""Source text for the plugin tests' pytester projects: tiny subjects and a small case file.

The subjects use the real e2b SDK against whatever target the plugin points them at.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

REWARD_MODULE = '''
import base64, json, re
from e2b import AsyncSandbox

FENCE = re.compile(r"```(?:python|py|python3)?\\n(.*?)```", re.S)


async def _score(box, program, cases):
    code = base64.b64encode(program.encode()).decode()
    ok = 0
    for case in cases:
        run = f"echo '{case['input']}' | python3 -c 'import base64;exec(base64.b64decode(\\"{code}\\"))'"
        try:
            res = await box.commands.run(run, timeout=10)
            ok += json.loads(res.stdout) == json.loads(case["output"])
        except Exception:
            pass
    return ok / len(cases)


class Scorer:
    """One sandbox per batch, killed before the call returns."""

    async def __call__(self, completions, test_cases, **kwargs):
        found = [FENCE.search(str(c[-1]["content"])) for c in completions]
        if not any(found):
            return [0.0 for _ in completions]
        box = await AsyncSandbox.create(timeout=60, metadata={"who": "tiny"})
        try:
            return [await _score(box, m.group(1), t) if m else 0.0 for m, t in zip(found, test_cases)]
        finally:
            await box.kill()


def make_reward():
    return Scorer()


def leaky_reward():
    async def reward(completions, test_cases, **kwargs):
        await AsyncSandbox.create(timeout=60)
        return [0.0 for _ in completions]
    return reward


def constant_reward():
    def reward(completions, test_cases, **kwargs):
        return [1.0 for _ in completions]
    return reward
'''

CASES = """
[[case]]
id = "reward-tiny-correct"
subject = "reward"
family = "good"
description = "A correct program scores 1.0 and a wrong one 0.0."
[case.reward]
test_cases = [{input = "[1, 2]", output = "3"}]
completions = [{text = "```python\\nimport json,sys\\nprint(sum(json.load(sys.stdin)))\\n```"},
               {text = "```python\\nprint(4)\\n```"}]
[case.expect]
rewards = [1.0, 0.0]

[[case]]
id = "reward-tiny-no-fence"
subject = "reward"
family = "defect"
description = "A completion without a code fence scores 0 and runs nothing."
[case.reward]
test_cases = [{input = "[1, 2]", output = "3"}]
completions = [{text = "print(3)"}]
[case.expect]
rewards = [0.0]
no_run = true
"""

CASE_IDS = ["reward-tiny-correct", "reward-tiny-no-fence"]


def only_bundle(root: Path) -> Path:
    """The one bundle directory under an evidence root (fails when there are zero or several)."""
    bundles = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(bundles) == 1, bundles
    return bundles[0]


def read_json(path: Path) -> Any:
    """Parse a JSON file."""
    return json.loads(path.read_text(encoding="utf-8"))


def write_project(
    pytester: pytest.Pytester, subject: str = "tinyreward:make_reward", extra: str = ""
) -> None:
    """A user project: its own reward module and case file, ini keys pointing at them."""
    pytester.makepyfile(tinyreward=REWARD_MODULE)
    (pytester.path / "mycases").mkdir(exist_ok=True)
    (pytester.path / "mycases" / "reward.toml").write_text(CASES)
    pytester.makeini(
        textwrap.dedent(
            f"""
            [pytest]
            e2b_reward_subject = {subject}
            e2b_cases = mycases
            pythonpath = .
            asyncio_default_fixture_loop_scope = function
            """
        )
        + extra
    )
