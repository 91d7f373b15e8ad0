"""The OpenEnv server itself: the openenv validator, the one MCP tool, stateless HTTP routes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.episode.client import ReportEpisode
from pytest_e2b_env.episode.server import LoopbackServer
from pytest_e2b_env.settings import TargetSettings
from pytest_e2b_env.targets.tags import RUN_KEY


@pytest.mark.slow  # a second Python process importing openenv: 5-25 s on a shared 2-core machine
def test_openenv_validate_passes(server: LoopbackServer) -> None:
    """`openenv validate --url` (openenv's own runtime probe) passes every criterion."""
    openenv = Path(sys.executable).with_name("openenv")
    done = subprocess.run(
        [str(openenv), "validate", "--url", server.url], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Verdict: PASS" in done.stdout


def test_only_terminal_is_an_mcp_tool(server: LoopbackServer) -> None:
    """tools/list over /mcp offers exactly one tool, terminal(command: str)."""
    reply = httpx.post(
        f"{server.url}/mcp", json={"jsonrpc": "2.0", "method": "tools/list", "id": 1}, timeout=30
    )
    tools = reply.json()["result"]["tools"]
    assert [t["name"] for t in tools] == ["terminal"]
    schema = tools[0].get("inputSchema") or tools[0].get("input_schema")
    assert schema["required"] == ["command"]


def test_stateless_http_reset_leaves_nothing(
    server: LoopbackServer, emu: Emulator, target: TargetSettings
) -> None:
    """POST /reset and /step build a throwaway environment: no sandbox is created or left behind."""
    mark = emu.ledger_mark()
    assert httpx.post(f"{server.url}/reset", json={}, timeout=30).status_code == 200
    httpx.post(f"{server.url}/step", json={"action": {"type": "submit"}}, timeout=30)
    assert [e for e in emu.ledger(since=mark) if e["op"] == "create"] == []
    assert [s for s in emu.sandboxes() if (s.get("metadata") or {}).get(RUN_KEY) == target.run_id] == []


@pytest.mark.full
def test_zero_argument_episode_follows_the_current_sdk_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """ReportEpisode() after the SDK is pointed at a new emulator uses a server talking to that one."""
    from pytest_e2b_env.episode.task import task_row

    monkeypatch.delenv("PYTEST_E2B_ENV_OPENENV_URL", raising=False)
    for round_ in range(2):
        with Emulator() as emulator:
            for key, value in emulator.sdk_env().items():
                monkeypatch.setenv(key, value)
            monkeypatch.setenv("PYTEST_E2B_ENV_RUN", f"follow-{round_}")
            env = ReportEpisode()
            env.reset(**task_row("weekly-sales"))
            env.submit()
            assert env.get_reward() == 0.0  # the buggy starter program, graded by this emulator's verifier
            created = [e for e in emulator.ledger() if e["op"] == "create"]
            assert len(created) == 2, created  # policy and verifier, both on this round's emulator
