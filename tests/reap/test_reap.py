"""reap and find_stale_runs find our sandboxes by run-id metadata, kill them and confirm them gone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pytest_e2b_env.targets.reap import RUN_KEY, find_stale_runs, reap


def test_find_stale_runs_groups_by_run(
    alive: Callable[[], dict[str, Any]],
    emulator: Any,
    sdk_opts: dict[str, str],
    make_tagged: Callable[..., list[str]],
    run_id: str,
) -> None:
    """Stale runs are grouped by run id; the current run and untagged sandboxes are left out."""
    old = make_tagged(2, run_id + "-old")
    make_tagged(1, run_id)
    untagged = make_tagged(1, None, owner="someone-else")
    runs = {r["run_id"]: r for r in find_stale_runs(sdk_opts, exclude_run_id=run_id)}
    assert runs[run_id + "-old"]["sandbox_ids"] == sorted(old)
    assert runs[run_id + "-old"]["count"] == 2
    assert runs[run_id + "-old"]["oldest_started_at"].endswith("Z")
    assert run_id not in runs
    assert not set(untagged) & {sid for r in runs.values() for sid in r["sandbox_ids"]}
    reap(run_id + "-old", sdk_opts=sdk_opts)
    reap(run_id, sdk_opts=sdk_opts)
    assert set(untagged) <= set(alive())


def test_reap_by_run_id_kills_only_that_run(
    alive: Callable[[], dict[str, Any]],
    emulator: Any,
    sdk_opts: dict[str, str],
    make_tagged: Callable[..., list[str]],
    run_id: str,
) -> None:
    """reap(run_id) kills and confirms that run's sandboxes and touches nothing else."""
    mine = make_tagged(3, run_id)
    other = make_tagged(1, run_id + "-other")
    untagged = make_tagged(1, None)
    result = reap(run_id, sdk_opts=sdk_opts)
    assert result["matched"] == result["killed"] == result["confirmed"] == sorted(mine)
    assert (result["failed"], result["errors"]) == ([], {})
    now_alive = alive()
    assert not set(mine) & set(now_alive)
    assert set(other + untagged) <= set(now_alive)
    assert reap(run_id + "-other", sdk_opts=sdk_opts)["confirmed"] == other


def test_reap_older_than_uses_start_time(
    alive: Callable[[], dict[str, Any]],
    emulator: Any,
    sdk_opts: dict[str, str],
    make_tagged: Callable[..., list[str]],
    run_id: str,
) -> None:
    """--older-than keeps sandboxes younger than the limit and reaps the older ones."""
    ids = make_tagged(2, run_id)
    assert not set(ids) & set(reap(older_than=3600, sdk_opts=sdk_opts)["matched"])
    assert set(ids) <= set(alive())
    result = reap(older_than=0, sdk_opts=sdk_opts)
    assert set(ids) <= set(result["confirmed"])
    assert not [s for s in emulator.sandboxes() if RUN_KEY in (s["metadata"] or {})]


def test_reap_reports_a_kill_that_fails_then_succeeds_later(
    alive: Callable[[], dict[str, Any]],
    emulator: Any,
    sdk_opts: dict[str, str],
    make_tagged: Callable[..., list[str]],
    run_id: str,
) -> None:
    """A sandbox that refuses to die is reported failed with its error; a later reap removes it."""
    (sid,) = make_tagged(1, run_id)
    emulator.faults.add(route="DELETE /sandboxes/*", answer={"kill_fails": True}, times=None, sandbox=sid)
    try:
        result = reap(run_id, sdk_opts={**sdk_opts, "retries": 0}, confirm_seconds=0.5)
    finally:
        emulator.faults.clear()
    assert result["failed"] == [sid]
    assert result["confirmed"] == []
    assert result["errors"][sid].startswith("kill failed: SandboxException")
    assert sid in alive()
    assert reap(run_id, sdk_opts=sdk_opts)["confirmed"] == [sid]


def test_reap_rejects_conflicting_filters(sdk_opts: dict[str, str]) -> None:
    """run_id and older_than together, or a negative age, are refused."""
    with pytest.raises(ValueError, match="not both"):
        reap("r", 10, sdk_opts=sdk_opts)
    with pytest.raises(ValueError, match=r"older_than=-1 must be >= 0"):
        reap(older_than=-1, sdk_opts=sdk_opts)
