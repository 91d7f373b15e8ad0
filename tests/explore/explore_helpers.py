"""What the explore tests share: the samples, budgets and seed, and the command run as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pytest_e2b_env.evidence import verify_bundle
from pytest_e2b_env.explore.schedule import Schedule
from pytest_e2b_env.explore.session import ExploreSession

SUBJECTS = Path(__file__).resolve().parents[2] / "fixtures" / "subjects"
#: each defect: the invariant it breaks, the fault kinds its shrunk schedule must hold (what the
#: defect needs), and the batch bound of its search (one completion is enough for two of them)
DEFECTS = {
    "explore_reward_kill_unchecked:make_reward": ("kills-confirmed-before-a-score", {"lost-sandbox"}, "1"),
    "explore_reward_retry_budget:make_reward": ("infrastructure-never-a-number", {"lost-sandbox"}, "2"),
    "explore_reward_replacement_zero:make_reward": ("infrastructure-never-a-number", {"lost-sandbox"}, "1"),
}
#: A search stops at its first break, so the defects get room for a loaded machine (each was found
#: in 1.5 to 130 s of search at this seed); the correct pool gets the search time that finds them.
FIND_BUDGET = "300"
BUDGET = "120"
SEED = "4"


def user_project(tmp_path: Path, spec: str) -> Path:
    """A project whose pytest ini names the subject, as a user sets it up for validate."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text(f"[pytest]\npythonpath = {SUBJECTS}\ne2b_reward_subject = {spec}\n")
    return project


def explore(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_e2b_env.cli", "explore", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def breaks(spec: str, schedule: Schedule, runs: int = 2) -> bool:
    sys.path.insert(0, str(SUBJECTS))  # where the case host imports the sample from
    try:
        with ExploreSession(spec) as session:
            return any(session.run(schedule).broken for _ in range(runs))
    finally:
        sys.path.remove(str(SUBJECTS))


def check_found(spec: str, tmp_path: Path) -> None:
    """Within budget and seed the break is found, written, shrunk so each step is needed, and replayed."""
    invariant, kinds, batch = DEFECTS[spec]
    project = user_project(tmp_path, spec)
    out = tmp_path / "out"
    # Each defect needs two faults: the search is bounded to that (as a user bounds it with these options).
    args = ["--budget", FIND_BUDGET, "--seed", SEED, "--max-completions", batch, "--max-steps", "2"]
    args += ["--output", str(out), "-q"]
    found = explore(project, *args)
    assert found.returncode == 1, found.stdout + found.stderr
    assert f"explore: BROKEN {invariant}" in found.stdout, found.stdout
    (path,) = out.glob("finding-*.json")
    doc = json.loads(path.read_text())
    assert {"schedule", "invariant", "seed", "replay", "evidence"} <= set(doc)
    assert doc["seed"] == int(SEED)
    assert doc["replay"] == f"pytest-e2b-env explore --replay {path}"
    assert invariant in [b["invariant"] for b in doc["invariant"]]
    assert verify_bundle(Path(doc["evidence"])) == []
    schedule = Schedule.from_json(doc["schedule"])
    assert kinds <= {s.kind for s in schedule.steps}, schedule.words()
    assert all(landed["fired"] > 0 for landed in doc["run"]["landed"]), doc["run"]
    for i in range(len(schedule.steps)):  # minimal: without any one of its steps, nothing breaks
        fewer = Schedule(schedule.behaviours, schedule.steps[:i] + schedule.steps[i + 1 :])
        assert not breaks(spec, fewer), fewer.words()
    replayed = explore(project, "--replay", str(path))
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert invariant in replayed.stdout
