"""The OpenEnv server itself: the openenv validator, the one MCP tool, stateless HTTP routes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.episode.sandboxes import RUN_KEY, SandboxTarget
from pytest_e2b_env.episode.server import LoopbackServer


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
    server: LoopbackServer, emu: Emulator, target: SandboxTarget
) -> None:
    """POST /reset and /step build a throwaway environment: no sandbox is created or left behind."""
    mark = emu.ledger_mark()
    assert httpx.post(f"{server.url}/reset", json={}, timeout=30).status_code == 200
    httpx.post(f"{server.url}/step", json={"action": {"type": "submit"}}, timeout=30)
    assert [e for e in emu.ledger(since=mark) if e["op"] == "create"] == []
    assert [s for s in emu.sandboxes() if (s.get("metadata") or {}).get(RUN_KEY) == target.run_id] == []
