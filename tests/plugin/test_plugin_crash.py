"""A subject that takes its process down fails its case with the reason; the run and the bundle go on."""

from __future__ import annotations

import pytest
from plugin_helpers import CASE_IDS, only_bundle, read_json, write_project

pytestmark = pytest.mark.full

CRASHING = """
import os, signal
from e2b import AsyncSandbox


def make_reward():
    async def reward(completions, test_cases, **kwargs):
        text = str(completions)
        if "print(4)" in text:  # the first case: leave a sandbox behind, then die hard
            await AsyncSandbox.create(timeout=60)
            {crash}
        return [0.0 for _ in completions]
    return reward
"""


@pytest.mark.parametrize(
    ("crash", "said"),
    [
        ("os.kill(os.getpid(), signal.SIGSEGV)", "was killed by signal SIGSEGV"),
        ("os._exit(3)", "exited with status 3"),
    ],
)
@pytest.mark.parametrize("lanes", ["1", "2"])  # a spawned host; hosts forked from a template
def test_crashing_subject_fails_its_case_and_the_bundle_is_complete(
    pytester: pytest.Pytester, crash: str, said: str, lanes: str
) -> None:
    """A segfault or os._exit in subject code is one failed case saying so; later cases still run."""
    write_project(pytester, subject="crashing:make_reward")
    pytester.makepyfile(crashing=CRASHING.replace("{crash}", crash))
    result = pytester.runpytest("--e2b-evidence", "ev", "--e2b-lanes", lanes)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([f"*the case process {said}*"])
    bundle = only_bundle(pytester.path / "ev")
    coverage = read_json(bundle / "coverage.json")
    assert coverage["complete"], coverage
    assert [c["id"] for c in coverage["cases"]] == CASE_IDS
    cleanup = read_json(bundle / "cleanup.json")["records"]
    assert cleanup, "the sandbox the crashed case left must be recorded"
    assert all(r["confirmed_absent_at"] for r in cleanup), cleanup
    assert any("leaked" in str(r.get("error")) for r in cleanup), cleanup


def test_crashing_subject_live_fails_its_case_and_the_bundle_is_complete(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Live too, subject code runs in a case host (reaching the fault proxy's control API)."""
    from pytest_e2b_env.emulator import Emulator

    write_project(pytester, subject="crashing:make_reward")
    pytester.makepyfile(crashing=CRASHING.replace("{crash}", "os.kill(os.getpid(), signal.SIGSEGV)"))
    with Emulator() as upstream:  # stands in for real E2B behind the fault proxy
        monkeypatch.setenv("E2B_API_KEY", upstream.api_key)
        monkeypatch.setenv("PYTEST_E2B_ENV_LIVE_API_URL", upstream.url)
        monkeypatch.setenv("PYTEST_E2B_ENV_LIVE_SANDBOX_URL", upstream.url)
        result = pytester.runpytest("--e2b-live", "--e2b-evidence", "ev")
        left = upstream.sandboxes()
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*the case process was killed by signal SIGSEGV*"])
    bundle = only_bundle(pytester.path / "ev")
    coverage = read_json(bundle / "coverage.json")
    assert coverage["complete"], coverage
    assert read_json(bundle / "run-manifest.json")["mode"] == "live"
    cleanup = read_json(bundle / "cleanup.json")["records"]
    assert any("leaked" in str(r.get("error")) for r in cleanup), cleanup
    assert all(r["confirmed_absent_at"] for r in cleanup), cleanup
    assert left == [], left  # the leaked sandbox was killed upstream through the proxy
