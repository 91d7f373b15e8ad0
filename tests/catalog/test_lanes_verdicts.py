"""The whole reference catalog in lanes gives exactly the verdicts of a serial run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def _validate(tmp: Path, lanes: int) -> subprocess.Popen[str]:
    """``validate`` of the reference code in an empty directory, started (not waited for)."""
    tmp.mkdir()
    cmd = [sys.executable, "-m", "pytest_e2b_env.cli", "validate", "-q", "--output", str(tmp / "ev")]
    cmd += ["--", "--e2b-lanes", str(lanes)]
    with open(tmp / "output.txt", "w") as out:  # a file, not a pipe nobody reads meanwhile
        return subprocess.Popen(cmd, cwd=tmp, stdout=out, stderr=subprocess.STDOUT, text=True)


def _verdicts(tmp: Path, run: subprocess.Popen[str]) -> list[tuple[str, str, str | None]]:
    """(id, status, reason) per record, once ``validate`` has finished (at most 20 minutes)."""
    run.wait(timeout=1200)
    assert run.returncode == 0, (tmp / "output.txt").read_text()[-3000:]
    (bundle,) = [p for p in (tmp / "ev").iterdir() if p.is_dir() and not p.name.startswith(".")]
    rows = [json.loads(line) for line in (bundle / "cases.jsonl").read_text().splitlines()]
    return [(r["id"], r["status"], r["reason"]) for r in rows]


@pytest.mark.slow  # two whole-catalog sessions side by side: about 2 minutes
def test_the_catalog_in_lanes_has_the_serial_verdicts(tmp_path: Path) -> None:
    """Same cases, same order, same statuses and reasons with 1 lane and with 4.

    The two sessions run at once (each has its own emulators): the serial one mostly waits on
    deadlines, so side by side they take little more than the serial one alone.
    """
    runs = {"serial": _validate(tmp_path / "serial", 1), "laned": _validate(tmp_path / "laned", 4)}
    try:
        serial = _verdicts(tmp_path / "serial", runs["serial"])
        laned = _verdicts(tmp_path / "laned", runs["laned"])
    finally:  # one failed: the other is not left running
        for run in runs.values():
            if run.poll() is None:
                run.kill()
                run.wait()
    assert [v[0] for v in laned] == [v[0] for v in serial]
    assert laned == serial
