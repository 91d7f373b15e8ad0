"""The episode smoke: two real episodes through the OpenEnv server, as a JSON-ready receipt.

Offline it opens the emulator, live the fault proxy before real E2B (``open_target``). Either way it
serves the repair environment on loopback and drives it with the real ``ReportEpisode``:
episode 1 submits the buggy starter (0.0), episode 2 inspects, repairs, reruns and submits (1.0).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

from pytest_e2b_env.episode.client import ReportEpisode
from pytest_e2b_env.episode.sandboxes import sweep
from pytest_e2b_env.episode.server import LoopbackServer, create_app
from pytest_e2b_env.episode.task import load_repair, task_row
from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.settings import TargetSettings, env_run_id
from pytest_e2b_env.targets import open_target

TASK = "weekly-sales"


@contextlib.contextmanager
def _target(live: bool, run_id: str) -> Iterator[tuple[TargetSettings, str]]:
    wanted = TargetSettings.from_env(live=live, run_id=run_id)
    if live and not wanted.api_key:
        raise ConfigError("smoke episode --live needs E2B_API_KEY in the environment; export it and rerun")
    with open_target(wanted) as target:
        yield target.settings, "live" if live else f"offline ({target.isolation})"


def _summary(receipt: dict[str, Any]) -> dict[str, Any]:
    by_role = {s["role"]: s["sandbox_id"] for s in receipt.get("sandboxes", [])}
    return {
        "policy_id": by_role.get("policy"),
        "verifier_id": by_role.get("verifier"),
        "reward": receipt.get("reward"),
        "committed_after_cleanup": receipt.get("committed_after_cleanup"),
        "timings": receipt.get("timings", {}),
        "cleanup": receipt.get("cleanup", []),
    }


def episode_smoke(live: bool) -> dict[str, Any]:
    """Run the two smoke episodes; returns the receipt (``ok`` is True when rewards are [0.0, 1.0]
    and every sandbox was confirmed gone). Raises on infrastructure failure, never scores it."""
    run_id = env_run_id() or f"smoke-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    with (
        _target(live, run_id) as (target, mode),
        LoopbackServer(create_app(target=target, max_sessions=2)) as srv,
    ):
        env = ReportEpisode(srv.url)
        episodes: list[dict[str, Any]] = []
        try:
            for repair in (False, True):
                t0 = time.monotonic()
                env.reset(**task_row(TASK))
                reset_s = time.monotonic() - t0
                if repair:
                    for command in load_repair(TASK):
                        env.terminal(command)
                t0 = time.monotonic()
                env.submit()
                submit_s = time.monotonic() - t0
                reward = env.get_reward()
                entry = _summary(env.receipt)
                entry.update(
                    reward=reward, reset_seconds=round(reset_s, 4), submit_seconds=round(submit_s, 4)
                )
                episodes.append(entry)
        finally:
            env._close()
        leaked = sweep(target)
    rewards = [e["reward"] for e in episodes]
    confirmed = not leaked and all(e["committed_after_cleanup"] for e in episodes)
    return {
        "ok": rewards == [0.0, 1.0] and confirmed,
        "mode": mode,
        "run_id": run_id,
        "task": TASK,
        "rewards": rewards,
        "confirmed_cleanup": confirmed,
        "leaked_sandboxes": leaked,
        "episodes": episodes,
        "seconds": round(time.monotonic() - started, 3),
    }
