#!/usr/bin/env python3
"""Benchmark the evidence bundle: write, verify and redaction throughput. Prints figures only.

Usage: .venv/bin/python scripts/bench_evidence.py [--cases N] [--events N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from pytest_e2b_env.evidence import BundleWriter, redact, verify_bundle


def _case(i: int) -> dict:
    status = ("passed", "failed", "skipped", "error")[i % 4]
    return {
        "id": f"bench-case-{i:04d}",
        "subject": ("reward", "episode")[i % 2],
        "family": ("good", "defect", "timeout", "hostile", "lost-worker")[i % 5],
        "description": "benchmark case",
        "status": status,
        "reason": None if status == "passed" else "benchmark reason",
        "expected": {"rewards": [1.0, 0.0]},
        "observed": {"rewards": [1.0, 0.0], "stdout": "x" * 2000},
        "criteria": [
            {"id": "rewards", "description": "d", "passed": status == "passed", "expected": 1, "actual": 1}
        ],
        "seconds": 0.1,
        "rewards": [1.0, 0.5, 0.0],
        "exceptions": [],
        "attempts": 1,
        "retries": 0,
    }


def bench_bundle(root: Path, cases: int, events: int) -> tuple[float, float, int]:
    writer = BundleWriter(root, f"bench-{cases}-{events}-{time.monotonic_ns()}", {"mode": "offline"})
    started = time.perf_counter()
    for i in range(cases):
        record = _case(i)
        writer.add_case(record)
        writer.add_trajectory(
            record["id"],
            [{"t": "2026-01-01T00:00:00Z", "op": "run", "detail": "y" * 200} for _ in range(events)],
        )
    writer.add_log("bench", "log line\n" * 10_000)
    path = writer.finish([f"bench-case-{i:04d}" for i in range(cases)], ["bench-secret-value"], {})
    write_s = time.perf_counter() - started
    started = time.perf_counter()
    problems = verify_bundle(path)
    verify_s = time.perf_counter() - started
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    assert problems == [], problems[:5]
    return write_s, verify_s, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-evidence-"))
    try:
        writes, verifies, size = [], [], 0
        for _ in range(args.repeat):
            w, v, size = bench_bundle(root, args.cases, args.events)
            writes.append(w)
            verifies.append(v)
        print(f"bundle: {args.cases} cases x {args.events} events, {size / 1e6:.1f} MB on disk")
        print(f"write (add_* + finish): median {statistics.median(writes):.2f} s over {args.repeat} runs")
        print(f"verify_bundle:          median {statistics.median(verifies):.2f} s over {args.repeat} runs")
        text = ("INFO sandbox started id=abc123 user=user pid=42 " * 20 + "\n") * 2000
        started = time.perf_counter()
        for _ in range(args.repeat):
            redact(text, ["bench-secret-value", "another-secret-1"])
        per_mb = (time.perf_counter() - started) / args.repeat / (len(text) / 1e6)
        print(f"redact: {1 / per_mb:.1f} MB/s on log-like text ({len(text) / 1e6:.1f} MB)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
