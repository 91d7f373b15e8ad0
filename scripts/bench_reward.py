#!/usr/bin/env python3
"""Benchmark the reward pool on the local emulator against the bare floor and a cookbook-shaped pool.

Each candidate is the correct total-tokens program with 3 test cases. Per worker count, rounds
interleave three measurements under the same load:

* ours: ``RewardPool`` with that many warm workers (cases forked from the runner's zygote), and
  the same pool with ``Isolation(zygote=False)`` (every case execs a fresh interpreter);
* cookbook: ``scripts/cookbook_pool.py``, a pool built as the E2B cookbook's TRL GRPO example
  builds its own (per candidate: renew, two uploads, a supervisor script running each case under
  ``timeout`` + ``unshare`` + a bash isolation script + ``setpriv``), same worker count;
* user pool: ``fixtures/subjects/baseline_reward_pool.py``, a leaner correct pool in that shape
  (one upload, one command, no supervisor script), same worker count;
* floor: the same program run bare in a subprocess 3 times (one per case input), serially.

Prints one JSON object with the medians: candidates/s, ours as a fraction of the floor's
throughput (``of_floor``; the floor has no sandbox, no isolation and no round trip), ours over
the cookbook's design (``over_cookbook``) and over the leaner user pool (``over_user_pool``),
and where our time goes; ``zygote_speedup`` is the exec pool's seconds per candidate over ours.

    .venv/bin/python scripts/bench_reward.py [--candidates 48] [--batch 8] [--workers 1,2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_e2b_env.emulator import Emulator  # noqa: E402
from pytest_e2b_env.environ import scoped_environ  # noqa: E402
from pytest_e2b_env.reward import Isolation, RewardPool  # noqa: E402

sys.path.insert(0, str(ROOT / "fixtures" / "subjects"))
sys.path.insert(0, str(ROOT / "scripts"))
from baseline_reward_pool import SandboxPool  # noqa: E402
from cookbook_pool import CookbookPool  # noqa: E402

TASKS = json.loads((ROOT / "fixtures" / "reward" / "tasks.json").read_text())
CASES = TASKS["train"][0]["test_cases"]
PROGRAM = (ROOT / "fixtures" / "reward" / "candidates" / "total_tokens_correct.py").read_text()
COMPLETION = [{"role": "assistant", "content": f"```python\n{PROGRAM}```"}]


def bare_floor(repeats: int) -> float:
    """Seconds to run the program bare 3 times (once per case), median over ``repeats``."""
    path = ROOT / "fixtures" / "reward" / "candidates" / "total_tokens_correct.py"
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        for case in CASES:
            subprocess.run(
                ["/usr/bin/python3", "-I", "-B", str(path)],
                input=case["input"].encode(),
                capture_output=True,
                check=True,
            )
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


async def sdk_round_trip(pool: RewardPool, repeats: int) -> float:
    """Median seconds of ``commands.run('true')`` on a warm worker: the transport floor."""
    worker = next(iter(pool._owned.values()))
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        await worker.sandbox.commands.run("true", user="root")
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


async def measure(
    emu: Emulator, workers: int, candidates: int, batch: int, zygote: bool = True
) -> dict[str, object]:
    isolation = Isolation(zygote=zygote)
    pool = RewardPool(workers=workers, create_interval=0, api_opts=emu.sdk_opts(), isolation=isolation)
    try:
        warm = await pool.code_reward([COMPLETION] * workers, [CASES] * workers)  # creates every worker
        assert warm == [1.0] * workers, warm
        mark = len(pool.ledger)
        before = dict(pool.metrics)
        commands_before = sum(w.uses for w in pool._owned.values())
        started = time.perf_counter()
        done = 0
        while done < candidates:
            n = min(batch, candidates - done)
            scores = await pool.code_reward([COMPLETION] * n, [CASES] * n)
            assert scores == [1.0] * n, scores
            done += n
        elapsed = time.perf_counter() - started
        after = pool.metrics
        records = pool.ledger[mark:]
        queue = after["queue_seconds"] - before["queue_seconds"]
        execution = after["execution_seconds"] - before["execution_seconds"]
        case_seconds = [c["seconds"] for r in records for c in r["cases"]]
        exec_per = statistics.mean(r["exec_seconds"] for r in records)  # a part's candidates share it
        cases_per = sum(case_seconds) / len(records)
        commands = sum(w.uses for w in pool._owned.values()) - commands_before
        rtt = await sdk_round_trip(pool, 20)
        return {
            "workers": workers,
            "candidates": candidates,
            "seconds": round(elapsed, 3),
            "candidates_per_second": round(candidates / elapsed, 2),
            "seconds_per_candidate": round(elapsed / candidates, 4),
            "queue_share": round(queue / (queue + execution), 3) if queue + execution else 0.0,
            "candidate_exec_seconds_mean": round(exec_per, 4),
            "breakdown_per_candidate": {
                # summed over its cases; side by side they overlap, so this can exceed the wall
                "isolated_cases_seconds": round(cases_per, 4),
                "commands": round(commands / len(records), 3),  # one per batch part
                "sdk_round_trip_seconds": round(rtt, 4),  # per command
            },
            "p50": after["candidate_seconds_p50"],
            "p95": after["candidate_seconds_p95"],
            "retries": after["infrastructure_retries"],
        }
    finally:
        await pool.close()


async def per_candidate(reward: Any, item: Any, warm: int, candidates: int, batch: int) -> float:
    """Seconds per candidate of ``reward(items, cases)`` in batches, after one warm-up batch."""
    assert await reward([item] * warm, [CASES] * warm) == [1.0] * warm
    started = time.perf_counter()
    done = 0
    while done < candidates:
        n = min(batch, candidates - done)
        scores = await reward([item] * n, [CASES] * n)
        assert scores == [1.0] * n, scores
        done += n
    return (time.perf_counter() - started) / candidates


async def measure_cookbook(emu: Emulator, workers: int, candidates: int, batch: int) -> float:
    """Seconds per candidate of the cookbook's design, warm workers, same batches as ours."""
    pool = CookbookPool(workers, emu.sdk_opts())
    try:
        await pool.start()
        return await per_candidate(pool.code_reward, PROGRAM, workers, candidates, batch)
    finally:
        await pool.close()


async def measure_user_pool(emu: Emulator, workers: int, candidates: int, batch: int) -> float:
    """Seconds per candidate of the leaner user pool, warm workers, same batches as ours."""
    with scoped_environ(emu.sdk_env()):
        async with SandboxPool(size=workers) as reward:
            return await per_candidate(reward, COMPLETION, workers, candidates, batch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=48)
    parser.add_argument("--batch", type=int, default=8, help="completions per code_reward call (TRL batch)")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per worker count")
    args = parser.parse_args(argv)
    results = []
    with Emulator() as emu:
        for workers in [int(w) for w in args.workers.split(",")]:
            rows, cookbook, user_pool, floors, execs = [], [], [], [], []
            for _ in range(args.rounds):  # the machine is shared: interleave, compare medians
                floors.append(bare_floor(8))
                rows.append(asyncio.run(measure(emu, workers, args.candidates, args.batch)))
                fresh = asyncio.run(measure(emu, workers, args.candidates, args.batch, zygote=False))
                execs.append(float(fresh["seconds_per_candidate"]))  # type: ignore[arg-type]
                cookbook.append(asyncio.run(measure_cookbook(emu, workers, args.candidates, args.batch)))
                user_pool.append(asyncio.run(measure_user_pool(emu, workers, args.candidates, args.batch)))
            ours = statistics.median(float(r["seconds_per_candidate"]) for r in rows)  # type: ignore[arg-type]
            row = min(rows, key=lambda r: abs(float(r["seconds_per_candidate"]) - ours))  # type: ignore[arg-type]
            floor, shape = statistics.median(floors), statistics.median(cookbook)
            lean, fresh_exec = statistics.median(user_pool), statistics.median(execs)
            row.update(
                exec_seconds_per_candidate=round(fresh_exec, 4),
                zygote_speedup=round(fresh_exec / ours, 2),
                seconds_per_candidate=round(ours, 4),
                candidates_per_second=round(1 / ours, 2),
                bare_floor_seconds=round(floor, 4),
                floor_candidates_per_second=round(1 / floor, 2),
                of_floor=round(floor / ours, 2),
                cookbook_seconds_per_candidate=round(shape, 4),
                cookbook_candidates_per_second=round(1 / shape, 2),
                over_cookbook=round(shape / ours, 2),
                user_pool_candidates_per_second=round(1 / lean, 2),
                over_user_pool=round(lean / ours, 2),
                rounds=args.rounds,
            )
            del row["seconds"]
            results.append(row)
        isolation = emu.isolation
    print(json.dumps({"isolation": isolation, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
