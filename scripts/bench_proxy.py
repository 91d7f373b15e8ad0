#!/usr/bin/env python3
"""Benchmark: fault proxy overhead on a ``commands.run("true")`` round trip.

Runs the same command in one sandbox through proxy -> emulator and against the emulator
directly, in alternating rounds (so machine load hits both alike), and prints median and
p90 per call and the ratio (target: median ratio <= 1.3). Also times create+kill and an
8 MiB file write+read.

    .venv/bin/python scripts/bench_proxy.py [--runs 200] [--rounds 5] [--json]

Attach to a running emulator instead of starting one with E2B_API_URL / E2B_API_KEY and
``--attach``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any

from pytest_e2b_env.proxy import FaultProxy


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _run_round(opts: dict[str, Any], runs: int, samples: list[float]) -> None:
    from e2b import AsyncSandbox

    sandbox = await AsyncSandbox.create(timeout=300, metadata={"pytest_e2b_env_run": "bench-proxy"}, **opts)
    try:
        for _ in range(3):  # warm the connection pool
            await sandbox.commands.run("true")
        for _ in range(runs):
            start = time.perf_counter()
            await sandbox.commands.run("true")
            samples.append(time.perf_counter() - start)
    finally:
        await sandbox.kill()


async def _file_round_trip(opts: dict[str, Any], data: bytes, samples: list[float]) -> None:
    from e2b import AsyncSandbox

    sandbox = await AsyncSandbox.create(timeout=300, metadata={"pytest_e2b_env_run": "bench-proxy"}, **opts)
    try:
        start = time.perf_counter()
        await sandbox.files.write("bench.bin", data)
        back = await sandbox.files.read("bench.bin", format="bytes")
        samples.append(time.perf_counter() - start)
        assert bytes(back) == data, "file round trip corrupted the data"
    finally:
        await sandbox.kill()


async def _create_kill(opts: dict[str, Any], samples: list[float]) -> None:
    from e2b import AsyncSandbox

    start = time.perf_counter()
    sandbox = await AsyncSandbox.create(timeout=300, metadata={"pytest_e2b_env_run": "bench-proxy"}, **opts)
    await sandbox.kill()
    samples.append(time.perf_counter() - start)


def _bench(url: str, api_key: str, runs: int, rounds: int) -> dict[str, Any]:
    direct_opts: dict[str, Any] = {"api_key": api_key, "api_url": url, "sandbox_url": url}
    with FaultProxy(url, url, api_key=api_key) as proxy:
        proxy_opts = proxy.sdk_opts()
        direct: list[float] = []
        proxied: list[float] = []
        direct_ck: list[float] = []
        proxied_ck: list[float] = []
        direct_files: list[float] = []
        proxied_files: list[float] = []
        data = os.urandom(8 * 1024 * 1024)

        async def main() -> None:
            for _ in range(rounds):
                await _run_round(direct_opts, runs, direct)
                await _run_round(proxy_opts, runs, proxied)
                await _create_kill(direct_opts, direct_ck)
                await _create_kill(proxy_opts, proxied_ck)
                await _file_round_trip(direct_opts, data, direct_files)
                await _file_round_trip(proxy_opts, data, proxied_files)

        asyncio.run(main())
    d_med, p_med = statistics.median(direct), statistics.median(proxied)
    return {
        "runs_per_target": len(direct),
        "run_true_direct_median_ms": round(d_med * 1000, 2),
        "run_true_direct_p90_ms": round(_quantile(direct, 0.9) * 1000, 2),
        "run_true_proxy_median_ms": round(p_med * 1000, 2),
        "run_true_proxy_p90_ms": round(_quantile(proxied, 0.9) * 1000, 2),
        "run_true_ratio_median": round(p_med / d_med, 3),
        # The added milliseconds are steadier than the ratio on a busy machine.
        "run_true_added_ms": round((p_med - d_med) * 1000, 2),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "create_kill_direct_median_ms": round(statistics.median(direct_ck) * 1000, 2),
        "create_kill_proxy_median_ms": round(statistics.median(proxied_ck) * 1000, 2),
        "file_8mib_write_read_direct_median_ms": round(statistics.median(direct_files) * 1000, 1),
        "file_8mib_write_read_proxy_median_ms": round(statistics.median(proxied_files) * 1000, 1),
        "target_ratio": 1.3,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=100, help="commands per round and target")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument(
        "--attach", action="store_true", help="use the emulator at $E2B_API_URL / $E2B_API_KEY"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.attach:
        url, key = os.environ.get("E2B_API_URL", ""), os.environ.get("E2B_API_KEY", "")
        if not url or not key:
            print("bench_proxy: --attach needs E2B_API_URL and E2B_API_KEY", file=sys.stderr)
            return 2
        figures = _bench(url, key, args.runs, args.rounds)
    else:
        from pytest_e2b_env.emulator import Emulator

        with Emulator() as emu:
            figures = _bench(emu.url, emu.api_key, args.runs, args.rounds)
            figures["isolation"] = emu.isolation
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:32} {value}")
        verdict = "OK" if figures["run_true_ratio_median"] <= 1.3 else "OVER TARGET"
        print(f"{'verdict':32} {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
