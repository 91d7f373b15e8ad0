"""The whole reference catalog in lanes gives exactly the verdicts of a serial run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_e2b_env.catalog.loader import default_cases_dir
from pytest_e2b_env.cli.validate import REFERENCE


def _verdicts(tmp: Path, lanes: int) -> list[tuple[str, str, str | None]]:
    (tmp / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "pytest", str(tmp), "--rootdir", str(tmp), "-c", str(tmp / "pytest.ini")]
    cmd += ["-q", "-p", "no:cacheprovider", "--e2b-evidence", str(tmp / "ev"), "--e2b-lanes", str(lanes)]
    cmd += ["--e2b-cases", str(default_cases_dir()), "-o", "asyncio_default_fixture_loop_scope=function"]
    cmd += [
        "-o",
        f"e2b_reward_subject={REFERENCE['reward']}",
        "-o",
        f"e2b_episode_subject={REFERENCE['episode']}",
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1200)
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
