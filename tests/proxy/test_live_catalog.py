"""`pytest --e2b-live` runs the catalog's fault cases through the fault proxy, as against real E2B."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

INI = """
[pytest]
e2b_reward_subject = pytest_e2b_env.reward:reward_subject
e2b_cases = {cases}
"""


@pytest.mark.slow  # a whole catalog session in a child process: ~25 s
def test_reward_fault_cases_pass_live_through_the_proxy(upstream: Any, tmp_path: Path) -> None:
    """Rate-limit, auth, lost-worker (masking) and cleanup cases pass live, leave nothing, leak no key."""
    cases = Path(__file__).resolve().parents[2] / "cases"
    (tmp_path / "pytest.ini").write_text(INI.format(cases=cases))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "PYTEST_"))}
    # The emulator stands in for real E2B: live mode puts the fault proxy in front of it.
    env |= {
        "E2B_API_KEY": upstream.api_key,
        "PYTEST_E2B_ENV_LIVE_API_URL": upstream.url,
        "PYTEST_E2B_ENV_LIVE_SANDBOX_URL": upstream.url,
    }
    evidence = tmp_path / "evidence"
    command = [sys.executable, "-m", "pytest", "--e2b-live", "-p", "no:cacheprovider", "-q"]
    command += ["--e2b-evidence", str(evidence), "-k", "reward and (lost or rate or cleanup or auth)"]
    run = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "8 passed" in run.stdout  # auth, cleanup, rate-limit, lost-worker (masking too)
    (bundle,) = evidence.iterdir()
    manifest = json.loads((bundle / "run-manifest.json").read_text())
    assert manifest["mode"] == "live"
    run_id = manifest["run_id"]
    assert not [s for s in upstream.sandboxes() if (s["metadata"] or {}).get("pytest_e2b_env_run") == run_id]
    for path in bundle.rglob("*"):
        if path.is_file():
            assert upstream.api_key not in path.read_text(errors="replace"), path


def _live_run_stopping_at_first_case(tmp_path: Path, url: str) -> tuple[str, str, dict[str, Any]]:
    """A live run of two cases against ``url`` with a key it does not know: (output, error line, manifest)."""
    cases = Path(__file__).resolve().parents[2] / "cases"
    (tmp_path / "pytest.ini").write_text(INI.format(cases=cases))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "PYTEST_"))}
    env |= {"E2B_API_KEY": "e2b_" + "0" * 40, "PYTEST_E2B_ENV_LIVE_API_URL": url}
    env["PYTEST_E2B_ENV_LIVE_SANDBOX_URL"] = url
    evidence = tmp_path / "evidence"
    command = [sys.executable, "-m", "pytest", "--e2b-live", "-p", "no:cacheprovider", "-q"]
    command += ["--e2b-evidence", str(evidence), "-k", "reward-auth or reward-good"]
    run = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    out = run.stdout + run.stderr
    assert run.returncode == 2, out[-3000:]  # pytest's "interrupted": the run stopped at the first case
    assert "Traceback" not in out, out[-3000:]
    # an error of the run (pytest's ERROR at setup), not a failure of the case; said once
    assert "1 error" in run.stdout, run.stdout[-2000:]
    assert "failed" not in run.stdout.splitlines()[-1], run.stdout[-2000:]
    assert "the run was interrupted (Ctrl-C)" not in out, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("the live E2B API")]
    assert len(errors) == 1, out[-3000:]
    (bundle,) = evidence.iterdir()
    manifest = json.loads((bundle / "run-manifest.json").read_text())
    assert manifest["complete"] is False
    assert "interrupted" not in manifest
    return out, errors[0], manifest


@pytest.mark.full
def test_unreachable_live_api_is_one_clear_error_and_an_incomplete_bundle(tmp_path: Path) -> None:
    """An E2B API nobody answers stops the run after one clear error; the bundle says incomplete."""
    import socket

    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    _, error, manifest = _live_run_stopping_at_first_case(tmp_path, dead)
    # named by its upstream address; the local fault proxy it was asked through is named as such
    assert f"the live E2B API at {dead} did not answer (asked through the local fault proxy at http" in error
    assert any("did not answer" in p for p in manifest["problems"]), manifest["problems"]


@pytest.mark.full
def test_a_refused_live_key_is_one_clear_error_naming_the_key(upstream: Any, tmp_path: Path) -> None:
    """An E2B API that answers 401 to the key: one error saying the key was refused and how to fix
    it (not "did not answer", not a failure of reward-auth-401), and the run stops."""
    _, error, manifest = _live_run_stopping_at_first_case(tmp_path, upstream.url)
    assert f"the live E2B API at {upstream.url} refused E2B_API_KEY (asked through" in error, error
    assert "set E2B_API_KEY to a key of your E2B team" in error, error
    assert any("refused E2B_API_KEY" in p for p in manifest["problems"]), manifest["problems"]
