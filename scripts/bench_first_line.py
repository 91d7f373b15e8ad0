#!/usr/bin/env python3
"""Benchmark: how soon `pytest-e2b-env validate` shows something, in an empty directory. Prints only.

Usage: .venv/bin/python scripts/bench_first_line.py [--rounds N] [--subject reward|episode|all]

Per round, from process start: seconds to the header (`e2b: mode=...`), to the first case's line
(`e2b-catalog::... PASSED`) and to exit; then the median of each. A first run in a directory has
no cached case times (cases start in catalog order), which is what a new user sees.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMAND = [str(Path(sys.executable).with_name("pytest-e2b-env")), "validate"]


def one_run(subject: str) -> dict[str, float]:
    """One validate run in a fresh directory: seconds from start to each milestone."""
    marks: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="pytest-e2b-env-first-line-") as work:
        began = time.monotonic()
        command = [*COMMAND, "--subject", subject]
        out, err = subprocess.PIPE, subprocess.STDOUT
        proc = subprocess.Popen(command, cwd=work, stdout=out, stderr=err, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.monotonic() - began
            if line.startswith("e2b: mode=") and "header" not in marks:
                marks["header"] = now
            if line.startswith("e2b-catalog::") and "first case" not in marks:
                marks["first case"] = now
        proc.wait(timeout=1800)
        marks["exit"] = time.monotonic() - began
    return marks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--subject", choices=("reward", "episode", "all"), default="all")
    args = parser.parse_args()
    runs = []
    for n in range(args.rounds):
        marks = one_run(args.subject)
        runs.append(marks)
        print(f"round {n + 1}: " + ", ".join(f"{k} {v:.1f} s" for k, v in marks.items()), flush=True)
    for key in ("header", "first case", "exit"):
        values = [r[key] for r in runs if key in r]
        if values:
            print(f"median {key}: {statistics.median(values):.1f} s over {len(values)} run(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
