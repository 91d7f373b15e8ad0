#!/usr/bin/env python3
"""Print the isolation backend's costs on this machine: start, command round trip, file op, kill.

Usage: python scripts/bench_isolation.py [--level namespaces|process] [-n 30]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from pytest_e2b_env.emulator.isolation import Box, select_backend


def figures(name: str, samples: list[float]) -> None:
    """One line: p50 and p95 in milliseconds."""
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    print(f"{name:<34} p50 {statistics.median(ordered) * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms")


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    """Run the measurements and print them."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--level", choices=["namespaces", "process"], default=None)
    parser.add_argument("-n", type=int, default=30)
    args = parser.parse_args()
    t0 = time.perf_counter()
    backend = select_backend(root=Path("/var/tmp/pytest-e2b-env/bench"), force=args.level)
    print(f"level: {backend.level} ({backend.reason})")
    print(f"select_backend (incl. probe sandbox) {(time.perf_counter() - t0) * 1000:.1f} ms")
    starts, runs, kills, totals, fs_ops, host, online = [], [], [], [], [], [], []

    def run(box: Box, cmd: str = "true") -> None:
        proc = box.spawn(cmd, {}, "/home/user", "user", False)
        proc.communicate()

    try:
        for i in range(args.n):
            t = time.perf_counter()
            box = backend.start(f"bench{i}", internet=False, envs={})
            starts.append(time.perf_counter() - t)
            runs.append(timed(functools.partial(run, box)))
            fs_ops.append(timed(functools.partial(box.fs.write, "/home/user/x.txt", b"x")))
            t2 = time.perf_counter()
            box.kill()
            kills.append(time.perf_counter() - t2)
            totals.append(time.perf_counter() - t)
            host.append(timed(functools.partial(subprocess.run, ["/bin/bash", "-c", "true"], check=True)))
            t = time.perf_counter()
            backend.start(f"bench-net{i}", internet=True, envs={}).kill()
            online.append(time.perf_counter() - t)
        box = backend.start("bench-warm", internet=False, envs={})
        warm = [timed(lambda: run(box)) for _ in range(args.n)]
        box.kill()
    finally:
        backend.close()
    figures("start()", starts)
    figures("spawn+wait 'true' (first)", runs)
    figures("spawn+wait 'true' (warm box)", warm)
    figures("host subprocess bash -c true", host)
    figures("fs.write small file", fs_ops)
    figures("kill() (confirmed, files removed)", kills)
    figures("start+run+kill", totals)
    figures("start+kill, internet (own network)", online)
    print(f"warm run / host run ratio: {statistics.median(warm) / statistics.median(host):.2f}")


if __name__ == "__main__":
    main()
