"""`explore --live`: the same search through the fault proxy, with a hard cap on sandboxes created.

This machine cannot reach E2B, so the emulator stands in for it as the upstream live mode names
(``PYTEST_E2B_ENV_LIVE_API_URL``, docs/live.md): the command runs its live path unchanged, the
proxy in front injecting every fault and counting every create.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from explore_helpers import SEED, explore, user_project

from pytest_e2b_env.explore.schedule import Schedule


@pytest.fixture
def upstream() -> Iterator[Any]:
    """The local emulator, standing in for real E2B behind the proxy."""
    from pytest_e2b_env.emulator import Emulator

    with Emulator() as emu:
        yield emu


def live_env(upstream: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "PYTEST_"))}
    return env | {
        "E2B_API_KEY": upstream.api_key,
        "PYTEST_E2B_ENV_LIVE_API_URL": upstream.url,
        "PYTEST_E2B_ENV_LIVE_SANDBOX_URL": upstream.url,
    }


def created(upstream: Any) -> list[str]:
    """Sandboxes the upstream made (its own ledger: what the proxy forwarded and it carried out)."""
    return [e["sandbox_id"] for e in upstream.ledger() if e.get("op") == "create" and e.get("sandbox_id")]


@pytest.mark.slow
def test_live_explore_finds_a_defect_through_the_proxy(upstream: Any, tmp_path: Path) -> None:
    """A reward defect is found live, its finding and bundle say live, no file or output holds the key,
    and nothing of the run is left upstream, and uvicorn's line for each cut answer stays off stderr.

    The defect is one a single fault shows (an infrastructure error scored 0.0), found within the first
    schedules: what this test proves is the live path, and the defects that need a combination are the
    offline finds' work (a live search draws differently as the calls race, so it is no place for them).
    """
    spec, invariant = "reward_infra_as_zero:factory", "infrastructure-never-a-number"
    project, out = user_project(tmp_path, spec), tmp_path / "out"
    args = ["--live", "--max-sandboxes", "300", "--budget", "240", "--seed", "3"]
    args += ["--max-completions", "2", "--max-steps", "2", "--output", str(out), "-q"]
    run = explore(project, *args, env=live_env(upstream))
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-2000:]
    assert "live through the fault proxy, at most 300 sandboxes" in run.stdout
    assert f"explore: BROKEN {invariant}" in run.stdout
    assert "without completing response" not in run.stderr
    (path,) = out.glob("finding-*.json")
    doc = json.loads(path.read_text())
    assert doc["mode"] == "live"
    assert Schedule.from_json(doc["schedule"]).steps, doc["schedule"]
    manifest = json.loads((Path(doc["evidence"]) / "run-manifest.json").read_text())
    assert manifest["mode"] == "live"
    for file in out.rglob("*"):
        if file.is_file():
            assert upstream.api_key not in file.read_text(errors="replace"), file
    assert upstream.api_key not in run.stdout + run.stderr
    assert len(created(upstream)) <= 300
    assert not upstream.sandboxes()


@pytest.mark.slow
def test_the_cap_stops_creates_and_the_search(upstream: Any, tmp_path: Path) -> None:
    """With a cap of 3 the proxy refuses the 4th create: the run ends with exit 4 saying so, reports the
    coverage so far, and the upstream made exactly 3 sandboxes, none left alive."""
    project = user_project(tmp_path, "baseline_episode_home:RepairEpisode", "episode")
    args = ["--live", "--max-sandboxes", "3", "--subject", "episode", "--budget", "60", "--seed", SEED]
    run = explore(project, *args, "--output", str(tmp_path / "out"), "-q", env=live_env(upstream))
    assert run.returncode == 4, run.stdout[-3000:] + run.stderr[-2000:]
    assert (
        "nothing broke before: the sandbox cap of this run (3 created) is reached: "
        "the fault proxy refused a create"
    ) in run.stdout
    assert "coverage: " in run.stdout
    assert "(3 sandbox creates forwarded)" in run.stdout
    assert len(created(upstream)) == 3
    assert not upstream.sandboxes()
    assert not list((tmp_path / "out").glob("finding-*.json"))
