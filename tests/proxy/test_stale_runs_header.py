"""A live session names earlier runs whose sandboxes are still alive, with the reap command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from e2b import Sandbox

pytestmark = pytest.mark.full


def test_live_session_header_reports_a_stale_run(upstream: Any, tmp_path: Path) -> None:
    """A sandbox tagged by an earlier run shows up in the live header as a stale run to reap."""
    tags = {"pytest_e2b_env_run": "run-stale-1", "role": "reward-worker"}
    leftover = Sandbox.create(timeout=120, metadata=tags, **upstream.sdk_opts())
    try:
        (tmp_path / "test_nothing.py").write_text("def test_ok():\n    pass\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "PYTEST_"))}
        # The emulator stands in for real E2B, as in the live catalog test.
        env |= {"E2B_API_KEY": upstream.api_key, "PYTEST_E2B_ENV_LIVE_API_URL": upstream.url}
        command = [sys.executable, "-m", "pytest", "--e2b-live", "-p", "no:cacheprovider", "test_nothing.py"]
        command += ["--e2b-evidence", str(tmp_path / "evidence")]
        run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
        assert "e2b: stale run run-stale-1: 1 sandbox(es) alive" in run.stdout, run.stdout[-3000:]
        assert "pytest-e2b-env reap --live --run-id run-stale-1" in run.stdout
        assert upstream.api_key not in run.stdout + run.stderr
    finally:
        leftover.kill()
