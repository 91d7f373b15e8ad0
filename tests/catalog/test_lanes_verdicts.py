"""The whole reference catalog in lanes gives exactly the verdicts of a serial run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def _verdicts(tmp: Path, lanes: int) -> list[tuple[str, str, str | None]]:
    """``validate`` of the reference code in an empty directory; (id, status, reason) per record."""
    cmd = [sys.executable, "-m", "pytest_e2b_env.cli", "validate", "-q", "--output", str(tmp / "ev")]
    cmd += ["--", "--e2b-lanes", str(lanes)]
    run = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=False, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:]
    (bundle,) = [p for p in (tmp / "ev").iterdir() if p.is_dir() and not p.name.startswith(".")]
    rows = [json.loads(line) for line in (bundle / "cases.jsonl").read_text().splitlines()]
    return [(r["id"], r["status"], r["reason"]) for r in rows]


@pytest.mark.slow  # two whole-catalog sessions: about 2 minutes
def test_the_catalog_in_lanes_has_the_serial_verdicts(tmp_path: Path) -> None:
    """Same cases, same order, same statuses and reasons with 1 lane and with 4."""
    (tmp_path / "serial").mkdir()
    (tmp_path / "laned").mkdir()
    serial = _verdicts(tmp_path / "serial", 1)
    laned = _verdicts(tmp_path / "laned", 4)
    assert [v[0] for v in laned] == [v[0] for v in serial]
    assert laned == serial
