#!/usr/bin/env python3
"""Benchmark: how soon `pytest-e2b-env validate` shows something, in an empty directory. Prints only.

Usage: .venv/bin/python scripts/bench_first_line.py [--rounds N] [--subject reward|episode|all]

Per round, from process start: seconds to the header (`e2b: mode=...`), to the first case's verdict
(`e2b-catalog::... PASSED`, as a terminal shows it) and to exit; then the median of each. A first
run in a directory has no cached case times (cases start in catalog order), which is what a new
user sees.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMAND = [str(Path(sys.executable).with_name("pytest-e2b-env")), "validate"]
#: a case's verdict on its line (``e2b-catalog::<id> PASSED``), whether or not the line has ended
VERDICT = re.compile(r"e2b-catalog::\S+ (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)")


def one_run(subject: str) -> dict[str, float]:
    """One validate run in a fresh directory: seconds from start to each milestone.

    Output is read as it arrives, not by lines: pytest writes a case's verdict after its name and
    flushes, but the newline ending that line comes only with the next case, so a reader waiting
    for whole lines would date each verdict by the next one.
    """
    marks: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="pytest-e2b-env-first-line-") as work:
        began = time.monotonic()
        command = [*COMMAND, "--subject", subject]
        proc = subprocess.Popen(command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        seen = b""
        while chunk := os.read(proc.stdout.fileno(), 65536):
            now = time.monotonic() - began
            seen = (seen + chunk)[-65536:]
            text = seen.decode(errors="replace")
            if "header" not in marks and "e2b: mode=" in text:
                marks["header"] = now
            if "first case" not in marks and VERDICT.search(text):
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
