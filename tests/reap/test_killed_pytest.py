"""A pytest run SIGKILLed mid-case leaves tagged sandboxes behind; `reap` removes every one."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_e2b_env.targets.reap import RUN_KEY

HANGING_TEST = """
import time


def test_hangs_mid_case(sandbox_factory):
    sandbox_factory(role="worker")
    sandbox_factory(role="worker")
    print("SANDBOXES-UP", flush=True)
    time.sleep(600)
"""


@pytest.mark.slow  # a whole pytest run in a child: ~10 s
def test_reap_after_a_sigkilled_pytest_run(
    emulator: Any, alive: Callable[[], dict[str, Any]], tmp_path: Path
) -> None:
    """pytest --e2b-live (through the fault proxy) is SIGKILLed mid-case; reap leaves nothing."""
    (tmp_path / "test_hang.py").write_text(HANGING_TEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "PYTEST_"))}
    # The emulator stands in for real E2B and outlives the killed run, as E2B would.
    env |= {
        "E2B_API_KEY": emulator.api_key,
        "PYTEST_E2B_ENV_LIVE_API_URL": emulator.url,
        "PYTEST_E2B_ENV_LIVE_SANDBOX_URL": emulator.url,
    }
    command = [sys.executable, "-m", "pytest", "-s", "-p", "no:cacheprovider", "--e2b-live", "test_hang.py"]
    child = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    watchdog = threading.Timer(120, child.kill)  # bounds the test if the child never gets there
    watchdog.start()
    lines: list[str] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            lines.append(line)
            if "SANDBOXES-UP" in line:
                break
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        watchdog.cancel()
        if child.poll() is None:
            child.kill()
            child.wait(30)
        if child.stdout is not None:
            child.stdout.close()
    output = "".join(lines)
    assert "SANDBOXES-UP" in output, output[-3000:]
    assert child.returncode == -signal.SIGKILL
    found = re.search(r"run_id=(\S+)", output)
    assert found, output[-3000:]
    run_id = found.group(1)
    leaked = [sid for sid, s in alive().items() if (s["metadata"] or {}).get(RUN_KEY) == run_id]
    assert len(leaked) == 2

    reap_env = {**env, "E2B_API_URL": emulator.url}
    reaped = subprocess.run(
        [sys.executable, "-m", "pytest_e2b_env", "reap", "--run-id", run_id],
        env=reap_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert reaped.returncode == 0, reaped.stderr
    assert reaped.stdout.splitlines()[-1] == f"2 matched, 2 confirmed gone, 0 failed ({emulator.url})"
    assert not [s for s in alive().values() if (s["metadata"] or {}).get(RUN_KEY) == run_id]
