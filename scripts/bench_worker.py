#!/usr/bin/env python3
"""Benchmark: what one reward worker's life costs the machine, step by step, on the local emulator.

Usage: .venv/bin/python scripts/bench_worker.py [--rounds 8]

Each round creates one worker the way ``RewardPool`` does and times, in the machine's busy CPU
(``/proc/stat``: every process, the kernel's work included) and in wall time:

* ``create``: the sandbox (no internet, tagged);
* ``install and preflight``: the install command (runner upload, the persistent runner and its
  zygote started) answering the isolation preflight;
* ``preflight again``: the same preflight sent to the now warm runner, so the preflight alone;
* ``command``: ``commands.run("true")`` (E2B's shape: ``bash -l``), the floor of any command (the
  mean of 20: ``/proc/stat`` counts in 10 ms ticks);
* ``candidate``: one correct candidate on 3 test inputs;
* ``kill``: the sandbox killed (its namespaces' teardown may land in the next step's figure).

Prints the median of each over the rounds, and the rounds. The catalog starts about 60 workers
(one per reward case, more where a case makes the pool replace or add one), so ``install and
preflight`` plus ``create`` times that count is what its reward workers cost before any candidate.
Run it on a quiet machine: the machine's busy time counts everything that runs meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_catalog import machine_busy  # noqa: E402

from pytest_e2b_env.emulator import Emulator  # noqa: E402
from pytest_e2b_env.reward import RewardPool  # noqa: E402
from pytest_e2b_env.reward.protocol import Payload  # noqa: E402
from pytest_e2b_env.reward.workers import probe_source  # noqa: E402

TASKS = json.loads((ROOT / "fixtures" / "reward" / "tasks.json").read_text())
CASES = TASKS["train"][0]["test_cases"]
PROGRAM = (ROOT / "fixtures" / "reward" / "candidates" / "total_tokens_correct.py").read_bytes()
COMMANDS = 20
STEPS = ("create", "install and preflight", "preflight again", "command", "candidate", "kill")


class Steps:
    """Machine CPU and wall seconds per named step, over every round."""

    def __init__(self) -> None:
        self.cpu: dict[str, list[float]] = {name: [] for name in STEPS}
        self.wall: dict[str, list[float]] = {name: [] for name in STEPS}
        self._name, self.each = "", 1

    def __call__(self, name: str, each: int = 1) -> Steps:
        """Time step ``name``, done ``each`` times in the block (the figures are per time)."""
        self._name, self.each = name, each
        return self

    def __enter__(self) -> None:
        self._busy, self._started = machine_busy(), time.monotonic()

    def __exit__(self, *exc: object) -> None:
        self.cpu[self._name].append((machine_busy() - self._busy) / self.each)
        self.wall[self._name].append((time.monotonic() - self._started) / self.each)


def check(passed: bool, step: str, answer: dict) -> None:
    """A step whose answer is wrong measured something else: stop with what the runner said."""
    if not passed:
        raise SystemExit(f"bench_worker: step {step!r} got an unexpected answer: {json.dumps(answer)[:2000]}")


async def one_life(emu: Emulator, steps: Steps) -> None:
    pool = RewardPool(workers=1, create_interval=0, api_opts=emu.sdk_opts())
    client = pool._client
    with steps("create"):
        worker = await client.create()
    try:
        preflight = Payload("preflight", probe_source(), [], 5.0, pool.limits, pool.isolation)
        with steps("install and preflight"):
            answer = await client.install_and_preflight(worker, preflight)
        check(bool(answer.get("served")) and all(answer["outside"].values()), "install and preflight", answer)
        again = Payload("preflight", probe_source(), [], 5.0, pool.limits, pool.isolation)
        with steps("preflight again"):
            answer = await client.run(worker, again, 30)
        check(all(answer["outside"].values()), "preflight again", answer)
        with steps("command", COMMANDS):
            for _ in range(COMMANDS):
                await worker.sandbox.commands.run("true", user="root")
        candidate = Payload(
            "run", PROGRAM, [c["input"].encode() for c in CASES], 2.0, pool.limits, pool.isolation
        )
        with steps("candidate"):
            answer = await client.run(worker, candidate, 30)
        exits = [case.get("exit_code") for case in answer.get("cases", [])]
        check(exits == [0] * len(CASES), "candidate", answer)
    finally:
        with steps("kill"):
            await client.kill(worker.sandbox_id)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give 1 or more")
    steps = Steps()
    with Emulator() as emu:
        asyncio.run(one_life(emu, Steps()))  # untimed: first imports, the emulator's first sandbox
        for _ in range(args.rounds):
            asyncio.run(one_life(emu, steps))
        isolation = emu.isolation
    print(f"isolation {isolation}, {args.rounds} rounds; machine CPU and wall, median (each round)")
    for name in STEPS:
        cpu, wall = steps.cpu[name], steps.wall[name]
        rounds = " ".join(f"{x * 1000:.0f}" for x in cpu)
        print(
            f"  {name:22s} {statistics.median(cpu) * 1000:5.0f} ms CPU"
            f"  {statistics.median(wall) * 1000:5.0f} ms wall   ({rounds})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
