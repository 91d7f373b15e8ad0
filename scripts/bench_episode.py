#!/usr/bin/env python3
"""Episode latencies on the local emulator: reset, one terminal step, submit (p50 / p95).

Usage: .venv/bin/python scripts/bench_episode.py [--episodes 20] [--steps 5] [--json]

Runs the real path: e2b SDK -> emulator, OpenEnv server on loopback, ReportEpisode over its
WebSocket. Targets (issue 5): reset <= 0.5 s, step <= 50 ms, submit <= 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.episode.client import ReportEpisode
from pytest_e2b_env.episode.server import LoopbackServer, create_app
from pytest_e2b_env.episode.task import load_repair, task_row
from pytest_e2b_env.settings import TargetSettings

TARGETS = {"reset": 0.5, "step": 0.05, "submit": 0.5}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--steps", type=int, default=5, help="terminal steps timed per episode")
    parser.add_argument(
        "--parallel", type=int, default=1, help="episodes in flight at once (one client each)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args()
    samples: dict[str, list[float]] = {"reset": [], "step": [], "submit": []}
    rewards: list[float] = []
    with Emulator() as emu:
        target = TargetSettings(
            api_key=emu.api_key,
            api_url=emu.url,
            sandbox_url=emu.url,
            run_id=f"bench-{uuid.uuid4().hex[:8]}",
        )
        with LoopbackServer(create_app(target=target, max_sessions=args.parallel + 1)) as srv:
            row = task_row("weekly-sales")
            repair = load_repair("weekly-sales")
            lock = threading.Lock()

            def lane(episodes: int) -> None:
                env = ReportEpisode(srv.url)
                env.reset(**row)  # warm-up: first sandbox of the lane, first connection
                env.get_reward()
                for _ in range(episodes):
                    t0 = time.perf_counter()
                    env.reset(**row)
                    took = {"reset": [time.perf_counter() - t0], "step": [], "submit": []}
                    for _ in range(args.steps):
                        t0 = time.perf_counter()
                        env.terminal("cat report.py")
                        took["step"].append(time.perf_counter() - t0)
                    for command in repair[2:]:
                        env.terminal(command)
                    t0 = time.perf_counter()
                    env.submit()
                    took["submit"].append(time.perf_counter() - t0)
                    reward = env.get_reward()
                    with lock:
                        for name, values in took.items():
                            samples[name] += values
                        rewards.append(reward)
                env._close()

            lanes = [
                threading.Thread(target=lane, args=(args.episodes // args.parallel,))
                for _ in range(args.parallel)
            ]
            started = time.perf_counter()
            for thread in lanes:
                thread.start()
            for thread in lanes:
                thread.join()
            wall = time.perf_counter() - started
        isolation = emu.isolation
    figures = {
        name: {
            "n": len(values),
            "p50_s": round(statistics.median(values), 4),
            "p95_s": round(percentile(values, 0.95), 4),
            "target_s": TARGETS[name],
        }
        for name, values in samples.items()
    }
    if args.json:
        out = {
            "isolation": isolation,
            "parallel": args.parallel,
            "wall_s": round(wall, 3),
            "figures": figures,
        }
        print(json.dumps({**out, "rewards_ok": set(rewards) == {1.0}}))
        return 0
    print(
        f"episode latencies on the emulator ({isolation} isolation), {len(rewards)} episodes, "
        f"{args.parallel} in parallel, {wall:.1f} s wall"
    )
    print(f"{'operation':<10}{'n':>5}{'p50':>10}{'p95':>10}{'target':>10}")
    for name, fig in figures.items():
        row_text = f"{name:<10}{fig['n']:>5}{fig['p50_s'] * 1000:>8.1f}ms{fig['p95_s'] * 1000:>8.1f}ms"
        print(f"{row_text}{fig['target_s'] * 1000:>8.0f}ms")
    print(f"rewards all 1.0: {set(rewards) == {1.0}}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
