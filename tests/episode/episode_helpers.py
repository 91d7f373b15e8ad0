"""Helpers shared by the episode tests (rows, file-writing commands, ledger filters, receipts)."""

from __future__ import annotations

import copy
import json
from typing import Any

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.episode.client import ReportEpisode
from pytest_e2b_env.episode.task import load_task


def make_row(task_id: str = "weekly-sales", **limits: float) -> dict[str, Any]:
    """A TRL dataset row for a bundled task, with optional limit overrides."""
    task = copy.deepcopy(load_task(task_id))
    task["limits"].update(limits)
    return {"prompt": [{"role": "user", "content": "repair it"}], "task": json.dumps(task)}


def write_file(path: str, text: str) -> str:
    """A terminal command that writes ``text`` to ``path`` exactly (heredoc, quoted delimiter)."""
    return f"cat > {path} <<'E2BENV_EOF'\n{text}\nE2BENV_EOF"


def ops(emu: Emulator, mark: int, op: str) -> list[dict[str, Any]]:
    """Ledger entries of one operation kind since ``mark``."""
    return [e for e in emu.ledger(since=mark) if e["op"] == op]


def policy_id(env: ReportEpisode) -> str:
    """The id of the episode's policy sandbox, from the receipt."""
    return next(s["sandbox_id"] for s in env.receipt["sandboxes"] if s["role"] == "policy")
