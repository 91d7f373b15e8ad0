#!/usr/bin/env python3
"""Benchmark: wall time of the offline catalog against the reference code, per family.

Usage: .venv/bin/python scripts/bench_catalog.py [--subject reward|episode|all] [-n N]
Prints the per-family seconds from the bundle manifest, the counts and the total wall time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--subject", default="all", choices=("reward", "episode", "all"))
    parser.add_argument("-n", dest="workers", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-catalog-") as out:
        cmd = [sys.executable, "-m", "pytest_e2b_env.cli", "validate", "--subject", args.subject, "-q"]
        cmd += ["--output", out] + (["-n", args.workers] if args.workers else [])
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.monotonic() - started
        (bundle,) = [p for p in Path(out).iterdir() if p.is_dir() and not p.name.startswith(".")]
        manifest = json.loads((bundle / "run-manifest.json").read_text())
        coverage = json.loads((bundle / "coverage.json").read_text())
    print(f"catalog subject={args.subject} workers={args.workers or 0} exit={proc.returncode}")
    for family, seconds in sorted(manifest["family_seconds"].items()):
        counts = coverage["families"].get(family, {})
        shown = ("passed", "failed", "skipped")
        summary = " ".join(f"{k}={v}" for k, v in counts.items() if k in shown and v)
        print(f"  {family:<16} {seconds:7.2f}s  {summary}")
    print(f"  counts: {coverage['counts']}")
    print(f"  wall time (process start to exit): {wall:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
