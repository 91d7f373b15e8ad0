#!/usr/bin/env python3
"""Benchmark: what the installed plugin costs a pytest run that does not use it.

Usage: .venv/bin/python scripts/bench_plugin_load.py [--rounds N]

In an empty, unrelated project (one trivial test, no e2b_* key), runs ``pytest --co -q`` with the
plugin and with ``-p no:e2b_env``, interleaved, and prints each one's median wall and CPU time
and the median of the paired differences (the plugin's own cost; the order alternates each round),
and whether an ``e2b`` header appeared.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd: list[str], cwd: Path) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child process, its stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    run = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, timeout=120)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, run.stdout


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-plugin-load-") as tmp:
        project = Path(tmp)
        (project / "test_x.py").write_text("def test_x():\n    pass\n")
        base = [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider"]
        timed(base, project)  # warm the file cache once
        runs: dict[str, list[tuple[float, float]]] = {"with": [], "without": []}
        header = False
        for round_no in range(args.rounds):
            # alternate which goes first, so neither always runs on a cache the other warmed
            order = ("with", "without") if round_no % 2 == 0 else ("without", "with")
            for name in order:
                wall, cpu, out = timed(base if name == "with" else [*base, "-p", "no:e2b_env"], project)
                runs[name].append((wall, cpu))
                header = header or (name == "with" and any(x.startswith("e2b") for x in out.splitlines()))
    print(f"rounds: {args.rounds}")
    for index, figure in enumerate(("wall", "cpu")):
        a = [r[index] for r in runs["with"]]
        b = [r[index] for r in runs["without"]]
        diff = statistics.median(x - y for x, y in zip(a, b, strict=True))
        print(
            f"{figure:>4}: with the plugin {statistics.median(a) * 1000:7.1f} ms, -p no:e2b_env "
            f"{statistics.median(b) * 1000:7.1f} ms, paired difference {diff * 1000:+7.1f} ms (medians)"
        )
    print(f"e2b header printed: {header}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
