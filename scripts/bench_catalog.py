#!/usr/bin/env python3
"""Benchmark: wall time of the offline catalog against the reference code, serial and in lanes.

Usage: .venv/bin/python scripts/bench_catalog.py [--subject reward|episode|all] [--lanes 1,4]
                                                  [--orders catalog,last] [--rounds N] [-n N] [--cpu]

Each round runs the whole catalog once per lane count, interleaved (so a noisy machine hits every
setting alike), and prints per run the wall time (process start to exit), the summed case time
and the counts; then the best wall per setting and its ratio to the first setting. The verdicts
of every run are compared with the first: a difference is printed and the exit status is 1.

``--orders``: ``catalog`` runs each time in a fresh directory (no pytest cache: lanes take the
cases in catalog order); ``last`` keeps one directory per lane count, primed by an untimed run,
so the lanes start the cases that took longest last time first (adapter/durations.py).

``--cpu`` also prints where each run's CPU went, by process kind: the controller (pytest), the
emulators, the case hosts (subject code, its imports included), and inside the sandboxes the
candidate programs (exec'd ones by themselves; the reward runner's zygote together with every
case forked from it, supervisors included), the reward runner and everything else. The total is
the machine's busy time over the run (less this script's own): the rusage of what validate waited
for, printed beside it, holds neither the kernel's work for the run (namespace teardown) nor what
was reaped uncounted (a sandbox whose init was SIGKILLed: the kernel empties its namespace without
counting). Run it on a quiet machine.
On 2 cores the total over 2 is a floor on the wall time, so this says which part a faster
catalog has to shrink.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
#: (command-line fragment, kind) for processes outside the sandboxes, first match wins
HOST_KINDS = (("pytest_e2b_env.catalog.host", "case hosts"), ("pytest_e2b_env.cli emulator", "emulators"))
#: the same inside a sandbox (a descendant of an emulator)
SANDBOX_KINDS = (
    ("solution.py", "sandbox: candidate programs"),
    # the runner's zygote and every process forked from it: each case's supervisor and program
    ("pytest_e2b_env_zygote", "sandbox: zygote and its cases (programs, supervisors)"),
    ("reward/runner.py", "sandbox: reward runner"),
)


def machine_busy() -> float:
    """CPU seconds the whole machine has been busy since boot (every core, kernel threads too)."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / TICK  # less idle and iowait


def _processes() -> dict[int, tuple[int, str, float]]:
    """Every process now: pid -> (parent pid, command line, its own CPU seconds)."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read(400).replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        found[int(name)] = (int(fields[1]), cmd, (int(fields[11]) + int(fields[12])) / TICK)
    return found


class CpuSampler:
    """Polls a process tree (10 Hz) and attributes each process's CPU to a kind, by its ancestry."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, tuple[str, float]] = {}  # pid -> (kind, largest CPU seen)

    def poll(self) -> None:
        procs = _processes()
        kinds: dict[int, str] = {}

        def kind_of(pid: int) -> str | None:
            if pid == self.root:
                return "controller"
            if pid in kinds:
                return kinds[pid]
            chain: list[int] = []
            cur = pid
            while cur in procs and cur not in kinds and cur != self.root and len(chain) < 64:
                chain.append(cur)
                cur = procs[cur][0]
            if cur != self.root and cur not in kinds:
                return None  # not in the tree
            parent_kind = kinds.get(cur, "controller")
            for p in reversed(chain):
                cmd = procs[p][1]
                if parent_kind == "emulators" or parent_kind.startswith("sandbox"):
                    mine = next((k for frag, k in SANDBOX_KINDS if frag in cmd), "sandbox: other processes")
                else:
                    mine = next((k for frag, k in HOST_KINDS if frag in cmd), parent_kind)
                kinds[p] = parent_kind = mine
            return kinds.get(pid)

        for pid, (_, cmd, cpu) in procs.items():
            if not cmd:  # a zombie keeps its CPU but loses its command line
                continue
            kind = kind_of(pid)
            if kind is not None:
                old = self.seen.get(pid, (kind, 0.0))
                self.seen[pid] = (old[0], max(old[1], cpu))

    def report(self, total: float, waited: float) -> list[str]:
        """``total``: the machine's busy CPU over the run; ``waited``: the run's children rusage."""
        by_kind: dict[str, float] = collections.defaultdict(float)
        for kind, cpu in self.seen.values():
            by_kind[kind] += cpu
        lines = [
            f"  CPU {total:6.1f}s in all, the machine's busy time (floor on 2 cores: {total / 2:.1f}s wall);"
            f" {waited:.1f}s of it in processes validate waited for"
        ]
        for kind, cpu in sorted(by_kind.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {cpu:6.1f}s {100 * cpu / max(total, 1e-9):4.0f}%  {kind}")
        rest = total - sum(by_kind.values())
        lines.append(
            f"    {rest:6.1f}s {100 * rest / max(total, 1e-9):4.0f}%  not sampled: processes shorter than"
            " a poll, the kernel's own work (namespace teardown), anything else on the machine"
        )
        return lines


def run_catalog(
    subject: str, lanes: int, workers: str | None, out: Path, cpu: bool = False
) -> tuple[float, dict, dict, list[str]]:
    """One ``validate`` run in an empty directory: wall seconds, coverage.json, {case id: status}
    and (``cpu``) the CPU breakdown lines."""
    cmd = [sys.executable, "-m", "pytest_e2b_env.cli", "validate", "--subject", subject, "-q"]
    cmd += ["--output", str(out / "ev")] + (["-n", workers] if workers else [])
    cmd += ["--", "--e2b-lanes", str(lanes)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy, own = machine_busy(), time.process_time()
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=out, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sampler = CpuSampler(proc.pid)
    while proc.poll() is None and time.monotonic() - started < 1800:
        if cpu:
            sampler.poll()
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    wall = time.monotonic() - started
    lines: list[str] = []
    if cpu:
        # this run's share of our children's rusage: validate and everything it waited for
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        waited = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        # the total: the machine's busy time less this script's own (the sampler's polls)
        lines = sampler.report(machine_busy() - busy - (time.process_time() - own), waited)
    (bundle,) = [p for p in (out / "ev").iterdir() if p.is_dir() and not p.name.startswith(".")]
    coverage = json.loads((bundle / "coverage.json").read_text())
    rows = [json.loads(line) for line in (bundle / "cases.jsonl").read_text().splitlines()]
    return wall, coverage, {r["id"]: r["status"] for r in rows}, lines


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--subject", default="all", choices=("reward", "episode", "all"))
    parser.add_argument("--lanes", default="1,4", help="comma-separated lane counts (default 1,4)")
    parser.add_argument("--orders", default="catalog", help="catalog, last or both (default catalog)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("-n", dest="workers", default=None, help="xdist workers (then lanes are off)")
    parser.add_argument("--cpu", action="store_true", help="where the CPU went, by process kind")
    args = parser.parse_args()
    orders = args.orders.split(",")
    if not set(orders) <= {"catalog", "last"}:
        parser.error(f"--orders {args.orders!r}: use catalog, last or catalog,last")
    settings = [(int(x), order) for x in args.lanes.split(",") for order in orders]
    best: dict[tuple[int, str], float] = {}
    first: dict[str, str] | None = None
    differ = False
    kept = tempfile.TemporaryDirectory(prefix="bench-catalog-last-")
    for lanes, order in settings:  # untimed: leaves each lane count's case times in its cache
        if order == "last":
            run_catalog(args.subject, lanes, args.workers, _fresh(Path(kept.name) / str(lanes)))
    for round_no in range(1, args.rounds + 1):
        for lanes, order in settings:
            with tempfile.TemporaryDirectory(prefix="bench-catalog-") as tmp:
                where = (
                    _fresh(Path(kept.name) / str(lanes), keep_cache=True) if order == "last" else Path(tmp)
                )
                wall, coverage, verdicts, cpu_lines = run_catalog(
                    args.subject, lanes, args.workers, where, cpu=args.cpu
                )
            case_seconds = sum(c.get("seconds") or 0.0 for c in coverage["cases"])
            print(
                f"round {round_no} lanes={lanes} order={order}: wall {wall:6.1f}s  "
                f"case time {case_seconds:6.1f}s  counts {coverage['counts']}"
            )
            for line in cpu_lines:
                print(line)
            best[lanes, order] = min(best.get((lanes, order), wall), wall)
            if first is None:
                first = verdicts
            elif verdicts != first:
                differ = True
                changed = sorted(k for k in first.keys() | verdicts.keys() if first.get(k) != verdicts.get(k))
                print(f"  verdicts differ from the first run: {changed}")
    kept.cleanup()
    base = best[settings[0]]
    for setting in settings:
        ratio = base / best[setting]
        print(
            f"best wall lanes={setting[0]} order={setting[1]}: {best[setting]:.1f}s  "
            f"({ratio:.2f}x of lanes={settings[0][0]} order={settings[0][1]})"
        )
    return 1 if differ else 0


def _fresh(directory: Path, keep_cache: bool = False) -> Path:
    """``directory``, empty but for pytest's cache when ``keep_cache`` (the bundles go)."""
    directory.mkdir(parents=True, exist_ok=True)
    for entry in directory.iterdir():
        if keep_cache and entry.name == ".pytest_cache":
            continue
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return directory


if __name__ == "__main__":
    sys.exit(main())
