#!/usr/bin/env python3
"""Score a correct program on the emulator while the host stalls page-ins; count the false zeros.

The stall is what a loaded machine does to a sandbox: two writers fill and fsync a file each
(``--writers``), and every ``--drop-every`` seconds the clean page cache is dropped, so the next
interpreter start pages its files in again behind the writers' queue (uninterruptible sleep).
Each round scores ``--batch`` copies of the correct total-tokens program with 3 test cases on a
2-worker ``RewardPool``. Prints one JSON object: rounds, candidates, how many scored below 1.0
(a false zero: the program is correct), the longest stall a case was seen in and the I/O
pressure the host reported. Needs root (``/proc/sys/vm/drop_caches``); the writers use a
temporary directory and everything stops after ``--seconds``.

    .venv/bin/python scripts/bench_reward_stall.py [--seconds 120] [--drop-every 4] [--writers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
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


def io_pressure() -> str:
    try:
        return Path("/proc/pressure/io").read_text().splitlines()[0]
    except OSError:
        return "unavailable"


def start_writers(count: int, directory: str, seconds: float) -> list[subprocess.Popen[bytes]]:
    """Writers that each rewrite a 1 GiB file with fsync until ``seconds`` pass (``timeout`` ends them)."""
    loop = 'while :; do dd if=/dev/zero of="$0" bs=1M count=1024 conv=fsync 2>/dev/null; rm -f "$0"; done'
    return [
        subprocess.Popen(["timeout", str(seconds), "sh", "-c", loop, os.path.join(directory, f"w{i}")])
        for i in range(count)
    ]


async def drop_caches(every: float, until: float) -> None:
    while time.monotonic() < until:
        await asyncio.sleep(every)
        await asyncio.to_thread(Path("/proc/sys/vm/drop_caches").write_text, "1\n")


async def score(seconds: float, batch: int, drop_every: float) -> dict[str, object]:
    until = time.monotonic() + seconds
    rounds = candidates = false = 0
    longest = 0.0
    with Emulator() as emu:
        pool = RewardPool(workers=2, create_interval=0, api_opts=emu.sdk_opts())
        dropper = asyncio.create_task(drop_caches(drop_every, until))
        try:
            while time.monotonic() < until:
                scores = await pool.code_reward([COMPLETION] * batch, [CASES] * batch)
                rounds += 1
                candidates += len(scores)
                false += sum(s != 1.0 for s in scores)
                for record in pool.ledger[-batch:]:
                    for case in record["cases"]:
                        longest = max(longest, (case.get("timing") or {}).get("blocked", 0.0))
        finally:
            dropper.cancel()
            await pool.close()
    return {"rounds": rounds, "candidates": candidates, "false_zeros": false, "longest_stall_s": longest}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--drop-every", type=float, default=4.0)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("dropping the page cache needs root")
    with tempfile.TemporaryDirectory(prefix="pe2b-stall-") as scratch:
        writers = start_writers(args.writers, scratch, args.seconds + 30)
        try:
            result = asyncio.run(score(args.seconds, args.batch, args.drop_every))
        finally:
            for writer in writers:
                writer.terminate()
                writer.wait()
    print(json.dumps({**result, "io_pressure": io_pressure(), **vars(args)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
