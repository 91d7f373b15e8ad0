#!/usr/bin/env python3
"""Root against a user who is not root, side by side: the emulator's round trip and the catalog.

As root it makes a fresh account (subordinate ids, the project's wheel in a venv of the
distribution's python3, as tests/meta/test_unprivileged.py does), then alternates root and account:

* create -> commands.run("true") -> kill through the real SDK, ``--cycles`` times per run: p50;
* ``pytest-e2b-env validate`` in an empty directory: wall seconds and the CPU of the whole process
  tree (user + system of the children, from the kernel's accounting).

Pairs run one after the other (root, account, root, account, ...), so a machine whose load drifts
moves both; the ratio column is account / root of the medians. Prints figures, asserts nothing.
Usage: .venv/bin/python scripts/bench_rootless.py [--rounds 3] [--cycles 30] [--no-catalog]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "meta"))

from unprivileged_helpers import Account, fresh_account, missing_prerequisite  # noqa: E402

CYCLE = """
import json, statistics, sys, time
from e2b import Sandbox
from pytest_e2b_env.emulator import Emulator
with Emulator() as emu:
    opts, times = emu.sdk_opts(), []
    for _ in range(int(sys.argv[1])):
        t = time.perf_counter()
        sandbox = Sandbox.create(**opts)
        sandbox.commands.run("true")
        sandbox.kill()
        times.append(time.perf_counter() - t)
    print(json.dumps({"isolation": emu.isolation, "p50": statistics.median(times)}))
"""


def _timed(run: Callable[[], subprocess.CompletedProcess[str]]) -> tuple[float, float, str]:
    """Wall seconds, children's CPU seconds and stdout of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = run()
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        sys.exit(f"a run failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return wall, cpu, done.stdout


def _as_root(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="pairs of runs of each figure (default 3)")
    parser.add_argument("--cycles", type=int, default=30, help="create+run+kill per run (default 30)")
    parser.add_argument("--no-catalog", action="store_true", help="skip the catalog's runs")
    args = parser.parse_args()
    why = missing_prerequisite()
    if why:
        print(f"bench_rootless: {why}", file=sys.stderr)
        return 2
    with fresh_account() as account:
        rows = [_cycle(account, args)]
        if not args.no_catalog:
            rows += _catalog(account, args)
    print(f"\n{'figure':<34} {'root':>10} {'not root':>10} {'ratio':>7}")
    for name, root, user, unit in rows:
        print(f"{name:<34} {root:>8.3f}{unit} {user:>8.3f}{unit} {user / root:>7.2f}")
    return 0


def _cycle(account: Account, args: argparse.Namespace) -> tuple[str, float, float, str]:
    root, user = [], []
    here = Path(tempfile.mkdtemp(prefix="bench-rootless-"))
    work = account.directory("cycle")
    for i in range(args.rounds):
        out = _timed(lambda: _as_root([sys.executable, "-c", CYCLE, str(args.cycles)], here))[2]
        root.append(json.loads(out)["p50"])
        out = _timed(lambda: account.run([account.python, "-c", CYCLE, str(args.cycles)], work))[2]
        user.append(json.loads(out)["p50"])
        print(
            f"round {i + 1}: create+run+kill p50 root {root[-1] * 1000:.1f} ms, "
            f"not root {user[-1] * 1000:.1f} ms"
        )
    return "create+run+kill p50 (ms)", statistics.median(root) * 1000, statistics.median(user) * 1000, "  "


def _catalog(account: Account, args: argparse.Namespace) -> list[tuple[str, float, float, str]]:
    walls: dict[str, list[float]] = {"root": [], "user": []}
    cpus: dict[str, list[float]] = {"root": [], "user": []}
    cli = str(account.python.parent / "pytest-e2b-env")
    for i in range(args.rounds):
        here = Path(tempfile.mkdtemp(prefix="bench-rootless-"))
        wall, cpu, _ = _timed(
            lambda here=here: _as_root([sys.executable, "-m", "pytest_e2b_env.cli", "validate", "-q"], here)
        )
        walls["root"].append(wall)
        cpus["root"].append(cpu)
        project = account.directory(f"catalog-{i}")
        wall, cpu, _ = _timed(
            lambda project=project: account.run([cli, "validate", "-q"], project, timeout=1800)
        )
        walls["user"].append(wall)
        cpus["user"].append(cpu)
        print(
            f"round {i + 1}: catalog wall root {walls['root'][-1]:.1f} s, "
            f"not root {walls['user'][-1]:.1f} s; "
            f"CPU root {cpus['root'][-1]:.1f} s, not root {cpus['user'][-1]:.1f} s"
        )
    return [
        ("catalog wall (s)", statistics.median(walls["root"]), statistics.median(walls["user"]), " s"),
        (
            "catalog CPU, whole tree (s)",
            statistics.median(cpus["root"]),
            statistics.median(cpus["user"]),
            " s",
        ),
    ]


if __name__ == "__main__":
    sys.exit(main())
