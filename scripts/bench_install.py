#!/usr/bin/env python3
"""Measure the install of the built wheel into a fresh venv: packages, megabytes, seconds. Prints only.

Usage: .venv/bin/python scripts/bench_install.py [--extra episode|train] [--no-cache]

The wheel is built from a copy of the checkout; the venv lives in a temp directory removed at the
end. Size is the venv's growth over a fresh venv (pip itself excluded); time is the one `pip
install` (with pip's download cache unless --no-cache). torch is installed first for --extra train,
as docs/training.md says, and counted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "meta"))

from install_helpers import INSTALL_TIMEOUT, build_wheel, clean_env, dir_size, make_venv, run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", choices=("episode", "train"), default=None)
    parser.add_argument("--no-cache", action="store_true", help="download every package (pip --no-cache-dir)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pytest-e2b-env-bench-install-"))
    try:
        wheel = build_wheel(work / "wheel")
        python = make_venv(work / "venv")
        env = clean_env()
        before_size = dir_size(work / "venv")
        before = {
            p["name"]
            for p in json.loads(run([python, "-m", "pip", "list", "--format=json"], work, env).stdout)
        }
        cache = ["--no-cache-dir"] if args.no_cache else []
        started = time.perf_counter()
        if args.extra == "train":
            done = run(
                [python, "-m", "pip", "install", "-q", *cache, "torch==2.13.0"], work, env, INSTALL_TIMEOUT
            )
            assert done.returncode == 0, done.stderr[-2000:]
        spec = f"{wheel}[{args.extra}]" if args.extra else str(wheel)
        done = run([python, "-m", "pip", "install", "-q", *cache, spec], work, env, INSTALL_TIMEOUT)
        seconds = time.perf_counter() - started
        assert done.returncode == 0, done.stderr[-2000:]
        after = json.loads(run([python, "-m", "pip", "list", "--format=json"], work, env).stdout)
        added = sorted(p["name"] for p in after if p["name"] not in before)
        grown = (dir_size(work / "venv") - before_size) / 1e6
        label = f"pytest-e2b-env[{args.extra}]" if args.extra else "pytest-e2b-env (base)"
        print(
            f"{label}: {len(added)} packages, {grown:.0f} MB, {seconds:.1f} s "
            f"({'no cache' if args.no_cache else 'pip cache'})"
        )
        print("packages: " + ", ".join(added))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
