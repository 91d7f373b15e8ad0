#!/usr/bin/env python3
"""Benchmark: wall time of the offline catalog against the reference code, serial and in lanes.

Usage: .venv/bin/python scripts/bench_catalog.py [--subject reward|episode|all] [--lanes 1,4]
                                                  [--rounds N] [-n N]

Each round runs the whole catalog once per lane count, interleaved (so a noisy machine hits every
setting alike), and prints per run the wall time (process start to exit), the summed case time
and the counts; then the best wall per setting and its ratio to the first setting. The verdicts
of every run are compared with the first: a difference is printed and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_catalog(subject: str, lanes: int, workers: str | None, out: Path) -> tuple[float, dict, dict]:
    """One ``validate`` run in an empty directory; (wall seconds, coverage.json, {case id: status})."""
    cmd = [sys.executable, "-m", "pytest_e2b_env.cli", "validate", "--subject", subject, "-q"]
    cmd += ["--output", str(out / "ev")] + (["-n", workers] if workers else [])
    cmd += ["--", "--e2b-lanes", str(lanes)]
    started = time.monotonic()
    subprocess.run(cmd, cwd=out, capture_output=True, text=True, check=False, timeout=1800)
    wall = time.monotonic() - started
    (bundle,) = [p for p in (out / "ev").iterdir() if p.is_dir() and not p.name.startswith(".")]
    coverage = json.loads((bundle / "coverage.json").read_text())
    rows = [json.loads(line) for line in (bundle / "cases.jsonl").read_text().splitlines()]
    return wall, coverage, {r["id"]: r["status"] for r in rows}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--subject", default="all", choices=("reward", "episode", "all"))
    parser.add_argument("--lanes", default="1,4", help="comma-separated lane counts (default 1,4)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("-n", dest="workers", default=None, help="xdist workers (then lanes are off)")
    args = parser.parse_args()
    settings = [int(x) for x in args.lanes.split(",")]
    best: dict[int, float] = {}
    first: dict[str, str] | None = None
    differ = False
    for round_no in range(1, args.rounds + 1):
        for lanes in settings:
            with tempfile.TemporaryDirectory(prefix="bench-catalog-") as tmp:
                wall, coverage, verdicts = run_catalog(args.subject, lanes, args.workers, Path(tmp))
            case_seconds = sum(c.get("seconds") or 0.0 for c in coverage["cases"])
            print(
                f"round {round_no} lanes={lanes}: wall {wall:6.1f}s  case time {case_seconds:6.1f}s  "
                f"counts {coverage['counts']}"
            )
            best[lanes] = min(best.get(lanes, wall), wall)
            if first is None:
                first = verdicts
            elif verdicts != first:
                differ = True
                changed = sorted(k for k in first.keys() | verdicts.keys() if first.get(k) != verdicts.get(k))
                print(f"  verdicts differ from the first run: {changed}")
    base = best[settings[0]]
    for lanes in settings:
        ratio = base / best[lanes]
        print(f"best wall lanes={lanes}: {best[lanes]:.1f}s  ({ratio:.2f}x of lanes={settings[0]})")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
