"""The episode smoke: two episodes, receipt rewards [0.0, 1.0], every sandbox confirmed gone."""

from __future__ import annotations

import json

import pytest

from pytest_e2b_env.episode.smoke import episode_smoke
from pytest_e2b_env.errors import ConfigError


@pytest.mark.full
def test_offline_smoke_receipt() -> None:
    """Offline: its own emulator and server; rewards [0.0, 1.0], ids, timings, confirmed cleanup."""
    receipt = episode_smoke(live=False)
    assert receipt["ok"] is True
    assert receipt["rewards"] == [0.0, 1.0]
    assert receipt["leaked_sandboxes"] == []
    for entry in receipt["episodes"]:
        assert entry["policy_id"]
        assert entry["verifier_id"]
        assert {c["role"] for c in entry["cleanup"]} == {"policy", "verifier"}
        assert all("confirmed_absent_at" in c for c in entry["cleanup"])
        assert "create_verifier" in entry["timings"]
    json.dumps(receipt)  # printable as is


def test_live_smoke_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Live without E2B_API_KEY is a usage error naming the variable, not a silent skip."""
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="E2B_API_KEY"):
        episode_smoke(live=True)
