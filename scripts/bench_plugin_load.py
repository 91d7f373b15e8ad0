#!/usr/bin/env python3
"""Benchmark: what the installed plugin costs a pytest run that does not use it.

Usage: .venv/bin/python scripts/bench_plugin_load.py [--rounds N]

In an empty, unrelated project (one trivial test, no e2b_* key), runs ``pytest --co -q`` with the
plugin and with ``-p no:e2b_env``, interleaved, and prints each one's median wall time and the
median of the paired differences (the plugin's own cost), and whether an ``e2b`` header appeared.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    run = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, timeout=120)
    return time.perf_counter() - started, run.stdout


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-plugin-load-") as tmp:
        project = Path(tmp)
        (project / "test_x.py").write_text("def test_x():\n    pass\n")
        base = [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider"]
        timed(base, project)  # warm the file cache once
        with_plugin, without, diffs, header = [], [], [], False
        for _ in range(args.rounds):
            a, out = timed(base, project)
            b, _ = timed([*base, "-p", "no:e2b_env"], project)
            with_plugin.append(a)
            without.append(b)
            diffs.append(a - b)
            header = header or any(line.startswith("e2b") for line in out.splitlines())
    print(f"rounds: {args.rounds}")
    print(f"with the plugin:     median {statistics.median(with_plugin) * 1000:7.1f} ms")
    print(f"-p no:e2b_env:       median {statistics.median(without) * 1000:7.1f} ms")
    print(f"paired difference:   median {statistics.median(diffs) * 1000:+7.1f} ms")
    print(f"e2b header printed:  {header}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
