"""The fixtures, used from a user's own tests through pytester (real SDK against the emulator)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.full

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"

FIXTURE_TESTS = '''
import json

SEEN = {}


def test_sandboxes_are_tagged(sandbox_factory, policy_sandbox, verifier_sandbox, e2b_target):
    """Fixture sandboxes carry the run id, their role and the network setting."""
    box = sandbox_factory(role="helper")
    alive = {s["sandbox_id"]: s for s in e2b_target.sandboxes()}
    for sandbox, role in ((box, "helper"), (policy_sandbox, "policy"), (verifier_sandbox, "verifier")):
        meta = alive[sandbox.sandbox_id]["metadata"]
        assert meta == {"pytest_e2b_env_run": e2b_target.run_id, "role": role}
    assert alive[verifier_sandbox.sandbox_id]["allow_internet_access"] is False
    assert policy_sandbox.commands.run("echo hi").stdout.strip() == "hi"
    SEEN["ids"] = [box.sandbox_id, policy_sandbox.sandbox_id, verifier_sandbox.sandbox_id]


def test_teardown_killed_them(e2b_target):
    """After the first test's teardown, none of its sandboxes is alive."""
    alive = {s["sandbox_id"] for s in e2b_target.sandboxes()}
    assert SEEN["ids"] and not alive & set(SEEN["ids"])


def test_faults_are_injected_and_cleared(sandbox_factory, e2b_faults, e2b_target):
    """e2b_faults adds wire faults the SDK really sees (a 503 on create is retried)."""
    mark = e2b_target.ledger_mark()
    e2b_faults.add(route="POST /v2/sandboxes", answer={"status": 503}, times=1)
    box = sandbox_factory()
    ops = [e["op"] for e in e2b_target.ledger(since=mark)]
    assert "fault" in ops and "create" in ops
    assert box.sandbox_id


def test_target_env_is_not_leaked(e2b_target):
    """The SDK settings are not left in the process environment."""
    import os
    assert os.environ.get("E2B_API_URL") != e2b_target.sdk_env()["E2B_API_URL"]
'''


def test_fixtures_in_a_users_tests(pytester: pytest.Pytester) -> None:
    """sandbox_factory, policy/verifier sandboxes, e2b_faults and e2b_target work and clean up."""
    pytester.makeini(INI)
    pytester.makepyfile(test_fixtures=FIXTURE_TESTS)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=4)


SUBJECT_TESTS = '''
import asyncio
import json
import os


def test_reward_pool_scores_with_the_configured_subject(reward_pool, e2b_target):
    """reward_pool is what the configured factory returns, with the SDK pointed at the target."""
    assert os.environ["E2B_API_URL"] == e2b_target.sdk_env()["E2B_API_URL"]
    completion = [{"role": "assistant", "content": "```python\\nprint(3)\\n```"}]
    scores = asyncio.run(reward_pool([completion], [[{"input": "[1, 2]", "output": "3"}]]))
    assert scores == [1.0]


def test_episode_factory_makes_fresh_instances(episode_factory):
    """episode_factory makes a new instance per call, as TRL's environment_factory does."""
    first, second = episode_factory(), episode_factory()
    assert first is not second
    task = {"id": "t", "workdir": "/home/user/work", "files": {"report.py": "print(1)"},
            "artifact": "report.py", "command": "python3 report.py",
            "verification": {"files": {}, "expected": 1}}
    assert first.reset(task=json.dumps(task)) == "ready"
    assert first.terminal("python3 report.py").strip() == "1"
    first.submit()
    assert first.get_reward() == 1.0
'''


def test_subject_fixtures_use_the_ini_subjects(pytester: pytest.Pytester) -> None:
    """reward_pool and episode_factory build the subjects named by the ini keys."""
    from pathlib import Path

    from plugin_helpers import REWARD_MODULE

    episode_src = (Path(__file__).resolve().parents[1] / "catalog" / "catalog_subjects.py").read_text()
    pytester.makepyfile(tinyreward=REWARD_MODULE, tinyepisode=episode_src, test_subjects=SUBJECT_TESTS)
    pytester.makeini(
        INI
        + "pythonpath = .\ne2b_reward_subject = tinyreward:make_reward\n"
        + "e2b_episode_subject = tinyepisode:TinyEpisode\n"
    )
    result = pytester.runpytest("test_subjects.py")
    result.assert_outcomes(passed=2)
