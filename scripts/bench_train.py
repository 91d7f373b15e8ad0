"""Benchmark ``train.py --tiny --offline`` in both modes: wall time, peak RSS, reward-stage share.

    .venv/bin/python scripts/bench_train.py [--repeat N] [--max-steps N] [--mode reward|episode|both]
                                        [--num-generations N]

Each run is a fresh subprocess (imports included, as a user pays them). Figures come from the
run's own ``metrics.json`` (peak RSS of the training process, per-step timing) plus the wall
time measured here. Prints one line per run and a summary; timings depend on machine load.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_once(mode: str, max_steps: int, generations: int, out: Path) -> dict[str, float | int | str]:
    env = {k: v for k, v in os.environ.items() if k != "E2B_API_KEY"}
    cmd = [sys.executable, "train.py", "--tiny", "--offline", "--cpu", "--mode", mode]
    cmd += ["--max-steps", str(max_steps), "--num-generations", str(generations)]
    cmd += ["--create-interval", "0", "--output-dir", str(out)]
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        tail = f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        raise SystemExit(f"{mode}: train.py exited {done.returncode}\n{tail}")
    metrics = json.loads((out / "metrics.json").read_text())
    steps = metrics["steps"]
    return {
        "mode": mode,
        "generations": generations,
        "wall_s": round(wall, 1),
        "peak_rss_mb": metrics["timing"]["peak_rss_mb"],
        "step_s_mean": round(statistics.mean(s["seconds"] for s in steps), 3),
        "reward_stage_share": round(metrics["timing"]["reward_share_of_step"], 3),
        "warmup_s": metrics["warmup"]["seconds"],
        "sandboxes": metrics["target"]["sandboxes"]["created"],
        "frac_reward_zero_std": metrics["frac_reward_zero_std"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--max-steps", type=int, default=2)
    parser.add_argument("--mode", choices=("reward", "episode", "both"), default="both")
    parser.add_argument("--num-generations", type=int, default=2)
    args = parser.parse_args()
    modes = ("reward", "episode") if args.mode == "both" else (args.mode,)
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        for mode in modes:
            for i in range(args.repeat):
                row = run_once(mode, args.max_steps, args.num_generations, Path(tmp) / f"{mode}-{i}")
                results.append(row)
                print(json.dumps(row), flush=True)
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"largest child process peak RSS (training or emulator): {children:.0f} MiB")
    for mode in modes:
        rows = [r for r in results if r["mode"] == mode]
        print(
            f"{mode}: wall {statistics.median(float(r['wall_s']) for r in rows):.1f} s, "
            f"peak RSS {max(float(r['peak_rss_mb']) for r in rows):.0f} MiB, "
            f"reward stage {statistics.median(float(r['reward_stage_share']) for r in rows):.0%} of a step "
            f"(median of {len(rows)}; load average now {os.getloadavg()[0]:.1f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
