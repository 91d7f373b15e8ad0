"""The reference episode's warm-up imports everything in the caller's thread (no import race)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.full

SCRIPT = r"""
import json, os, sys, time
from pytest_e2b_env.emulator import Emulator

with Emulator() as emu:
    os.environ.update(emu.sdk_env())
    from pytest_e2b_env.episode.client import warm_up

    warm_up()
    before = set(sys.modules)
    from pytest_e2b_env.episode import server

    deadline = time.monotonic() + 120
    while not server._SHARED and time.monotonic() < deadline:
        time.sleep(0.05)
    late = sorted(
        m for m in set(sys.modules) - before
        if m.split(".")[0] in ("openenv", "fastmcp", "gradio", "mcp", "pytest_e2b_env")
    )
    print(json.dumps({"started": bool(server._SHARED), "late": late}))
    server.close_shared_servers()
"""


def test_warm_up_leaves_no_package_for_the_server_thread_to_import() -> None:
    """After warm_up() returns, the background server start imports no openenv/fastmcp/gradio module."""
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["started"], run.stderr[-2000:]
    assert result["late"] == [], result["late"]
