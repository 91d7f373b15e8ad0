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
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_catalog import machine_busy  # noqa: E402

from pytest_e2b_env.emulator import Emulator  # noqa: E402
from pytest_e2b_env.reward import RewardPool  # noqa: E402

TASKS = json.loads((ROOT / "fixtures" / "reward" / "tasks.json").read_text())
#: (input, expected output) as the pool holds them; the expected outputs stay on this side
CASES = [(case["input"].encode(), case["output"]) for case in TASKS["train"][0]["test_cases"]]
PROGRAM = (ROOT / "fixtures" / "reward" / "candidates" / "total_tokens_correct.py").read_text()
COMMANDS = 20
STEPS = ("create", "install and preflight", "preflight again", "command", "candidate", "kill")
#: step -> (machine CPU seconds, wall seconds) of each round
Figures = dict[str, list[tuple[float, float]]]


@contextlib.contextmanager
def timed(figures: Figures, step: str, each: int = 1) -> Iterator[None]:
    """Record the machine's CPU and the wall time of the block, per one of its ``each`` repeats."""
    busy, started = machine_busy(), time.monotonic()
    yield
    figures.setdefault(step, []).append(((machine_busy() - busy) / each, (time.monotonic() - started) / each))


def check(passed: bool, step: str, answer: object) -> None:
    """A step whose answer is wrong measured something else: stop with what the runner said."""
    if not passed:
        raise SystemExit(f"bench_worker: step {step!r} got an unexpected answer: {json.dumps(answer)[:2000]}")


async def one_life(emu: Emulator, figures: Figures) -> None:
    """One worker through the pool's own calls: its preflight (checked as the pool checks it), the
    preflight again on the warm runner, commands, one candidate, the kill."""
    pool = RewardPool(workers=1, create_interval=0, api_opts=emu.sdk_opts())
    client = pool._client
    with timed(figures, "create"):
        worker = await client.create()
    try:
        with timed(figures, "install and preflight"):
            await pool._preflight(worker)  # raises PreflightError unless every check passed
        with timed(figures, "preflight again"):
            answer = await client.run(worker, pool._preflight_payload(), 30)
        check(all(answer["outside"].values()), "preflight again", answer)
        with timed(figures, "command", COMMANDS):
            for _ in range(COMMANDS):
                await worker.sandbox.commands.run("true", user="root")
        with timed(figures, "candidate"):
            answer = await client.run(worker, pool._payload(PROGRAM, CASES), 30)
        exits = [case.get("exit_code") for case in answer.get("cases", [])]
        check(exits == [0] * len(CASES), "candidate", answer)
    finally:
        with timed(figures, "kill"):
            await client.kill(worker.sandbox_id)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give 1 or more")
    figures: Figures = {}
    with Emulator() as emu:
        asyncio.run(one_life(emu, {}))  # untimed: first imports, the emulator's first sandbox
        for _ in range(args.rounds):
            asyncio.run(one_life(emu, figures))
        isolation = emu.isolation
    print(f"isolation {isolation}, {args.rounds} rounds; machine CPU and wall, median (each round)")
    for name in STEPS:
        cpu, wall = (list(column) for column in zip(*figures[name], strict=True))
        rounds = " ".join(f"{x * 1000:.0f}" for x in cpu)
        print(
            f"  {name:22s} {statistics.median(cpu) * 1000:5.0f} ms CPU"
            f"  {statistics.median(wall) * 1000:5.0f} ms wall   ({rounds})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
