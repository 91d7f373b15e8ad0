#!/usr/bin/env python3
"""Benchmark: CPU and wall of one control-API call, over a kept connection and a fresh one.

Starts one emulator and makes ``--calls`` ledger marks (the catalog's most frequent control
call) per round through the handle's client, alternating rounds where each call keeps its
connection with rounds where each asks the server to close it (``Connection: close``, so every
call opens a new TCP connection, as a client without keep-alive does). Prints per call the wall
time, the CPU of this process and of the emulator, and the ratio of the totals.

    .venv/bin/python scripts/bench_control.py [--calls 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.emulator.control_client import ControlClient
from pytest_e2b_env.wire import CONTROL_HEADER

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _round(emu: Emulator, calls: int, keep: bool) -> tuple[float, float, float]:
    """Per call: wall, this process's CPU, the emulator's CPU (seconds)."""
    assert emu.pid is not None
    client = ControlClient(emu.url)
    headers = {CONTROL_HEADER: emu.control_key}
    if not keep:
        headers["Connection"] = "close"
    client.request("GET", "/_emulator/ledger/mark", None, headers)
    wall0, own0, emu0 = time.perf_counter(), time.process_time(), _cpu_of(emu.pid)
    for _ in range(calls):
        status, _ = client.request("GET", "/_emulator/ledger/mark", None, headers)
        if status != 200:
            raise SystemExit(f"ledger mark answered {status}")
    wall, own, served = time.perf_counter() - wall0, time.process_time() - own0, _cpu_of(emu.pid) - emu0
    client.close()
    return wall / calls, own / calls, served / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls per round (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per setting, interleaved (default 3)")
    args = parser.parse_args()
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    figures: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    with Emulator() as emu:
        for index in range(args.rounds):
            for keep in (False, True):
                wall, own, served = _round(emu, args.calls, keep)
                figures[keep].append((wall, own, served))
                label = "kept " if keep else "fresh"
                print(
                    f"round {index + 1} {label}: {wall * 1e3:.3f} ms wall, client {own * 1e3:.3f} ms,"
                    f" emulator {served * 1e3:.3f} ms CPU per call",
                    flush=True,
                )
    medians = {
        keep: [statistics.median(f[i] for f in rows) for i in range(3)] for keep, rows in figures.items()
    }
    fresh, kept = medians[False], medians[True]
    print(
        f"median per call, fresh -> kept: wall {fresh[0] * 1e3:.3f} -> {kept[0] * 1e3:.3f} ms;"
        f" CPU (client + emulator) {(fresh[1] + fresh[2]) * 1e3:.3f} -> {(kept[1] + kept[2]) * 1e3:.3f} ms"
        f" (ratio {(fresh[1] + fresh[2]) / max(kept[1] + kept[2], 1e-9):.2f}x)"
    )


if __name__ == "__main__":
    main()
