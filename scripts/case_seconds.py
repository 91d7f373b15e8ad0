#!/usr/bin/env python3
"""Measure the bundled catalog's case times and write them to ``cases/seconds.json``.

Usage: .venv/bin/python scripts/case_seconds.py [--runs N] [--check]

Runs the offline catalog against the reference subjects ``--runs`` times (default 3), each in a
fresh directory, and keeps each case's median ``seconds`` from the evidence bundles. The lanes
read the file when pytest's cache has no times of its own (a fresh checkout, every CI run), so
the cases that wait longest start first (pytest_e2b_env/adapter/durations.py). The times choose
an order, never a verdict: rerun this after adding or changing cases (a test names this script
when the file and the catalog disagree). ``--check`` only says whether the file covers the
catalog's cases, without running anything.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "cases" / "seconds.json"


def bundled_ids() -> set[str]:
    from pytest_e2b_env.catalog.loader import load_cases

    return {case.id for case in load_cases([ROOT / "cases"])}


def one_run(where: Path) -> dict[str, float]:
    """One ``validate --subject all`` run in ``where``: case id -> seconds."""
    cmd = [sys.executable, "-m", "pytest_e2b_env.cli", "validate", "--subject", "all", "-q"]
    cmd += ["--output", str(where / "ev")]
    proc = subprocess.run(cmd, cwd=where, capture_output=True, text=True, timeout=900, check=False)
    bundles = [p for p in (where / "ev").glob("run-*") if p.is_dir()]
    if proc.returncode != 0 or len(bundles) != 1:
        tail = proc.stdout[-2000:] + proc.stderr[-2000:]
        sys.exit(f"validate exited {proc.returncode}; its output ends:\n{tail}")
    rows = [json.loads(line) for line in (bundles[0] / "cases.jsonl").read_text().splitlines() if line]
    return {row["id"]: float(row["seconds"]) for row in rows if isinstance(row.get("seconds"), int | float)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="catalog runs to take the median of (default 3)")
    parser.add_argument("--check", action="store_true", help="only compare the file's ids with the catalog's")
    args = parser.parse_args()
    ids = bundled_ids()
    if args.check:
        known = set(json.loads(TARGET.read_text())["seconds"]) if TARGET.exists() else set()
        missing, stale = sorted(ids - known), sorted(known - ids)
        name = TARGET.relative_to(ROOT)
        print(f"{name}: {len(known)} cases; missing {missing or 'none'}; stale {stale or 'none'}")
        return 1 if missing or stale else 0
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: must be at least 1, e.g. 3")
    samples: dict[str, list[float]] = {}
    for n in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="case-seconds-") as tmp:
            for case_id, seconds in one_run(Path(tmp)).items():
                samples.setdefault(case_id, []).append(seconds)
        print(f"run {n}/{args.runs}: {len(samples)} cases timed", flush=True)
    unknown = sorted(set(samples) - ids)
    if unknown or ids - set(samples):
        untimed = sorted(ids - set(samples))
        sys.exit(f"the runs' cases differ from cases/: not timed {untimed}, unknown {unknown}")
    medians = {case_id: round(statistics.median(values), 2) for case_id, values in sorted(samples.items())}
    data = {"measured_by": "scripts/case_seconds.py", "runs": args.runs, "seconds": medians}
    TARGET.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}: {len(medians)} cases, {sum(medians.values()):.1f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
