#!/usr/bin/env python3
"""Benchmark the local E2B emulator with the real SDK and print the figures.

* create -> commands.run("true") -> kill latency (p50, p95)
* commands.run("true") round trip next to a bare subprocess.run of the same command (ratio)
* 16 concurrent sandboxes each running 10 commands (errors must be 0)
* code interpreter: run_code("1+1") round trip (p50, p95) and the first cell (kernel start)
* N (default 300) sandboxes alive at once, each created, running one command, then killed:
  p50/p95 of each step, errors, peak alive

Targets: create+run+kill p50 <= 100 ms, run round trip p50 <= 15 ms.
Usage: .venv/bin/python scripts/bench_emulator.py [--cycles 40] [--runs 200] [--alive 300]
       [--isolation process|namespaces]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2b import AsyncSandbox, Sandbox

from pytest_e2b_env.emulator import Emulator


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def bench_cycle(opts: dict[str, str], cycles: int) -> list[float]:
    """create -> run('true') -> kill, timed end to end."""
    times = []
    for _ in range(cycles):
        t0 = time.perf_counter()
        sbx = Sandbox.create(**opts)
        sbx.commands.run("true")
        sbx.kill()
        times.append(time.perf_counter() - t0)
    return times


def bench_run(opts: dict[str, str], runs: int) -> tuple[list[float], list[float]]:
    """run('true') round trips in one sandbox, and bare subprocess.run of the same command."""
    sbx = Sandbox.create(**opts)
    try:
        sbx.commands.run("true")  # warm the connection
        rpc = []
        for _ in range(runs):
            t0 = time.perf_counter()
            sbx.commands.run("true")
            rpc.append(time.perf_counter() - t0)
    finally:
        sbx.kill()
    bare = []
    with tempfile.TemporaryDirectory() as home:
        # envd's environment with an empty home, as in a fresh sandbox (the host's own login
        # profile would measure the host's dotfiles instead of the command)
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": home}
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run(["/bin/bash", "-l", "-c", "true"], check=True, env=env, cwd=home)
            bare.append(time.perf_counter() - t0)
    return rpc, bare


def bench_run_code(opts: dict[str, str], runs: int) -> tuple[float, list[float]]:
    """The first run_code of a sandbox (starts its kernel), then run_code("1+1") round trips."""
    from e2b_code_interpreter import Sandbox as CodeSandbox

    sbx = CodeSandbox.create(**opts)
    try:
        t0 = time.perf_counter()
        sbx.run_code("1+1")
        first = time.perf_counter() - t0
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            if sbx.run_code("1+1").text != "2":
                raise SystemExit("run_code('1+1') did not give 2")
            times.append(time.perf_counter() - t0)
    finally:
        sbx.kill()
    return first, times


async def bench_concurrent(opts: dict[str, str], sandboxes: int, commands: int) -> tuple[int, int, float]:
    """`sandboxes` concurrent AsyncSandboxes each running `commands` commands; (ok, errors, seconds)."""
    errors = 0
    ok = 0

    async def one(index: int) -> None:
        nonlocal errors, ok
        try:
            sbx = await AsyncSandbox.create(**opts)
        except Exception as exc:
            errors += commands
            print(f"  sandbox {index}: create failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return
        try:
            for i in range(commands):
                try:
                    result = await sbx.commands.run(f"echo {index}-{i}")
                    if result.stdout == f"{index}-{i}\n":
                        ok += 1
                    else:
                        errors += 1
                except Exception as exc:
                    errors += 1
                    print(f"  sandbox {index} command {i}: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            await sbx.kill()

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(sandboxes)))
    return ok, errors, time.perf_counter() - t0


@dataclass
class Alive:
    """Figures of :func:`bench_alive`: seconds per step, errors, most sandboxes seen alive, wall time."""

    create: list[float] = field(default_factory=list)
    run: list[float] = field(default_factory=list)
    kill: list[float] = field(default_factory=list)
    errors: int = 0
    peak: int = 0
    wall: float = 0.0


async def bench_alive(emu: Emulator, count: int) -> Alive:
    """``count`` sandboxes created concurrently, all alive together, each runs a command, then killed."""
    opts = emu.sdk_opts()
    figures = Alive()
    sandboxes: list[tuple[int, AsyncSandbox]] = []

    async def step(name: str, index: int, call: Any) -> Any:
        t0 = time.perf_counter()
        try:
            result = await call
        except Exception as exc:
            figures.errors += 1
            print(f"  sandbox {index}: {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return None
        getattr(figures, name).append(time.perf_counter() - t0)
        return result

    async def make(index: int) -> None:
        sbx = await step("create", index, AsyncSandbox.create(timeout=600, **opts))
        if sbx is not None:
            sandboxes.append((index, sbx))

    async def use(index: int, sbx: AsyncSandbox) -> None:
        result = await step("run", index, sbx.commands.run(f"echo {index}", timeout=300))
        if result is not None and result.stdout != f"{index}\n":
            figures.errors += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(make(i) for i in range(count)))
    figures.peak = len(emu.sandboxes())
    await asyncio.gather(*(use(i, s) for i, s in sandboxes))
    await asyncio.gather(*(step("kill", i, s.kill()) for i, s in sandboxes))
    figures.wall = time.perf_counter() - t0
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=40, help="create+run+kill cycles (default 40)")
    parser.add_argument("--runs", type=int, default=200, help="run('true') round trips (default 200)")
    parser.add_argument("--alive", type=int, default=300, help="sandboxes alive at once (default 300)")
    parser.add_argument("--isolation", choices=("namespaces", "process"), default=None)
    args = parser.parse_args(argv)
    with Emulator(isolation=args.isolation) as emu:
        opts = emu.sdk_opts()
        print(f"emulator isolation: {emu.isolation} ({emu.isolation_reason})")
        print(f"machine: {os.cpu_count()} cpus, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        bench_cycle(opts, 3)  # warm-up
        cycle = bench_cycle(opts, args.cycles)
        print(
            f"create+run+kill   p50 {_ms(statistics.median(cycle))}  p95 {_ms(_pct(cycle, 0.95))}"
            f"  (n={len(cycle)}, target p50 <= 100 ms)"
        )
        rpc, bare = bench_run(opts, args.runs)
        ratio = statistics.median(rpc) / statistics.median(bare)
        print(
            f"run('true')       p50 {_ms(statistics.median(rpc))}  p95 {_ms(_pct(rpc, 0.95))}"
            f"  (n={len(rpc)}, target p50 <= 15 ms)"
        )
        print(
            f"bare bash -l -c   p50 {_ms(statistics.median(bare))}  p95 {_ms(_pct(bare, 0.95))}"
            f"  ratio emulator/bare p50 {ratio:.2f}x"
        )
        first, cells = bench_run_code(opts, args.runs)
        print(
            f"run_code('1+1')   p50 {_ms(statistics.median(cells))}  p95 {_ms(_pct(cells, 0.95))}"
            f"  (n={len(cells)}; first cell, starting the kernel: {_ms(first)})"
        )
        ok, errors, took = asyncio.run(bench_concurrent(opts, 16, 10))
        print(f"16 sandboxes x 10 commands: ok {ok}, errors {errors}, wall {took:.2f} s")
        alive = asyncio.run(bench_alive(emu, args.alive))
        print(
            f"{args.alive} sandboxes alive at once: peak {alive.peak}, errors {alive.errors},"
            f" wall {alive.wall:.1f} s"
        )
        for name, times in (("create", alive.create), ("run", alive.run), ("kill", alive.kill)):
            if times:
                p50, p95 = _ms(statistics.median(times)), _ms(_pct(times, 0.95))
                print(f"  {name:<7} p50 {p50}  p95 {p95}  (n={len(times)})")
        errors += alive.errors
        leaked = emu.sandboxes()
        print(f"sandboxes left after the benchmark: {len(leaked)}")
    return 0 if errors == 0 and not leaked else 1


if __name__ == "__main__":
    sys.exit(main())
