"""The fixtures, used from a user's own tests through pytester (real SDK against the emulator)."""

from __future__ import annotations

import pytest

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
