"""`pytest --e2b-live -n 2`: one run id across workers, one bundle, no leak, no double cleanup."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# A user subject that delegates to the reference pool and notes, per call, which process ran it
# and which run id the plugin handed it: the black-box view of what each xdist worker received.
SUBJECT = """
import json, os
from pytest_e2b_env.reward import reward_subject

def make_reward():
    with open(os.environ["SEEN_FILE"], "a") as seen:
        seen.write(json.dumps({"pid": os.getpid(), "run": os.environ.get("PYTEST_E2B_ENV_RUN")}) + "\\n")
    return reward_subject()
"""

INI = """
[pytest]
e2b_reward_subject = seensubject:make_reward
e2b_cases = {cases}
pythonpath = .
"""


@pytest.mark.slow  # a live catalog session with two xdist workers in a child process: ~30 s
def test_xdist_live_run_shares_one_run_id_and_leaves_nothing(upstream: Any, tmp_path: Path) -> None:
    """Both workers stamp the controller's run id; one bundle; every sandbox killed exactly once."""
    cases = Path(__file__).resolve().parents[2] / "cases" / "good.toml"
    (tmp_path / "pytest.ini").write_text(INI.format(cases=cases))
    (tmp_path / "seensubject.py").write_text(SUBJECT)
    seen_file = tmp_path / "seen.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "PYTEST_"))}
    env |= {
        "E2B_API_KEY": upstream.api_key,
        "PYTEST_E2B_ENV_LIVE_API_URL": upstream.url,
        "PYTEST_E2B_ENV_LIVE_SANDBOX_URL": upstream.url,
        "SEEN_FILE": str(seen_file),
    }
    mark = upstream.ledger_mark()
    evidence = tmp_path / "evidence"
    command = [sys.executable, "-m", "pytest", "--e2b-live", "-p", "xdist", "-n", "2"]
    command += ["-p", "no:cacheprovider", "-q", "--e2b-evidence", str(evidence), "-k", "reward"]
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "4 passed" in run.stdout

    (bundle,) = evidence.iterdir()
    run_id = json.loads((bundle / "run-manifest.json").read_text())["run_id"]
    seen = [json.loads(line) for line in seen_file.read_text().splitlines()]
    assert len({s["pid"] for s in seen}) == 2, seen  # the cases really ran on both workers
    assert {s["run"] for s in seen} == {run_id}

    ledger = upstream.ledger(since=mark)
    created = {e["sandbox_id"] for e in ledger if e["op"] == "create" and e["status"] == 201}
    assert created
    kills = collections.Counter(e["sandbox_id"] for e in ledger if e["op"] == "kill")

    assert {sid: kills[sid] for sid in created} == dict.fromkeys(created, 1)  # killed once, no double cleanup
    assert [s for s in upstream.sandboxes() if s["sandbox_id"] in created] == []
