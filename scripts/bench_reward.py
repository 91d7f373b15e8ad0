#!/usr/bin/env python3
"""Benchmark the reward pool on the local emulator: candidates/s with 1, 2 and 4 warm workers.

Each candidate is the correct total-tokens program with 3 test cases. The floor is running the
same program bare in a subprocess 3 times (one per case input). Prints one JSON object:
throughput, time per candidate vs the floor (ratio), queue-wait share, and where the time goes
(SDK round trip of an empty command, runner overhead, per-case isolated runs).

    .venv/bin/python scripts/bench_reward.py [--candidates 60] [--batch 8] [--workers 1,2,4]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_e2b_env.emulator import Emulator  # noqa: E402
from pytest_e2b_env.reward import RewardPool  # noqa: E402

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


async def measure(emu: Emulator, workers: int, candidates: int, batch: int) -> dict[str, object]:
    pool = RewardPool(workers=workers, create_interval=0, api_opts=emu.sdk_opts())
    try:
        warm = await pool.code_reward([COMPLETION] * workers, [CASES] * workers)  # creates every worker
        assert warm == [1.0] * workers, warm
        mark = len(pool.ledger)
        before = dict(pool.metrics)
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
        exec_per = statistics.mean(r["exec_seconds"] for r in records)
        cases_per = sum(case_seconds) / len(records)
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
                "isolated_cases_seconds": round(cases_per, 4),
                "sdk_round_trip_seconds": round(rtt, 4),
                "runner_and_rest_seconds": round(max(exec_per - cases_per - rtt, 0.0), 4),
            },
            "p50": after["candidate_seconds_p50"],
            "p95": after["candidate_seconds_p95"],
            "retries": after["infrastructure_retries"],
        }
    finally:
        await pool.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=60)
    parser.add_argument("--batch", type=int, default=8, help="completions per code_reward call (TRL batch)")
    parser.add_argument("--workers", default="1,2,4")
    args = parser.parse_args(argv)
    results = []
    with Emulator() as emu:
        for workers in [int(w) for w in args.workers.split(",")]:
            # The machine is shared: measure the floor right before and after, under the same load.
            before = bare_floor(8)
            row = asyncio.run(measure(emu, workers, args.candidates, args.batch))
            floor = (before + bare_floor(8)) / 2
            row["bare_floor_seconds"] = round(floor, 4)
            row["ratio_to_floor"] = round(float(row["seconds_per_candidate"]) / floor, 2)  # type: ignore[arg-type]
            results.append(row)
        isolation = emu.isolation
    print(json.dumps({"isolation": isolation, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
