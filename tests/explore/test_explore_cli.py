"""`pytest-e2b-env explore`: usage errors are exit 2 and name the fix; breaks are found, shrunk and replayed.

The slow tests run the real command on the emulator against real subjects (fixtures/subjects):
defective samples whose defect needs a combination of faults, and a correct one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_e2b_env.cli.explore import main
from pytest_e2b_env.evidence import verify_bundle
from pytest_e2b_env.explore.schedule import Schedule
from pytest_e2b_env.explore.session import ExploreSession

SUBJECTS = Path(__file__).resolve().parents[2] / "fixtures" / "subjects"
#: each defect: the invariant it breaks, the fault kinds its shrunk schedule must hold (what the
#: defect needs), and the batch bound of its search (one completion is enough for two of them)
DEFECTS = {
    "explore_reward_kill_unchecked:make_reward": ("kills-confirmed-before-a-score", {"lost-sandbox"}, "1"),
    "explore_reward_retry_budget:make_reward": ("infrastructure-never-a-number", {"lost-sandbox"}, "3"),
    "explore_reward_replacement_zero:make_reward": ("infrastructure-never-a-number", {"lost-sandbox"}, "1"),
}
#: A search stops at its first break, so the defects get room for a loaded machine (each was found
#: in 1.5 to 130 s of search at this seed); the correct pool gets the search time that finds them.
FIND_BUDGET = "300"
BUDGET = "120"
SEED = "4"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--subject", "episode"], "--subject episode is not supported yet"),
        (["--live"], "--live is not supported yet: explore runs offline on the local emulator; drop --live"),
        (["--budget", "0"], "--budget 0: give a positive number of seconds, e.g. --budget 120"),
        (["--replay", "nowhere.json"], "--replay 'nowhere.json': no such file"),
    ],
)
def test_a_usage_error_is_exit_2_and_names_the_fix(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing starts: the message names the bad value and what to do."""
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_a_subject_that_does_not_import_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reward subject named in the ini that cannot be imported stops the run with exit 2, naming it."""
    (tmp_path / "pytest.ini").write_text("[pytest]\ne2b_reward_subject = no_such_module:make\n")
    monkeypatch.chdir(tmp_path)
    assert main(["--budget", "5", "--output", str(tmp_path / "out")]) == 2
    assert "no_such_module" in capsys.readouterr().err


def _project(tmp_path: Path, spec: str) -> Path:
    """A project whose pytest ini names the subject, as a user sets it up for validate."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text(f"[pytest]\npythonpath = {SUBJECTS}\ne2b_reward_subject = {spec}\n")
    return project


def _explore(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_e2b_env.cli", "explore", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _breaks(spec: str, schedule: Schedule, runs: int = 2) -> bool:
    sys.path.insert(0, str(SUBJECTS))  # where the case host imports the sample from
    try:
        with ExploreSession(spec) as session:
            return any(session.run(schedule).broken for _ in range(runs))
    finally:
        sys.path.remove(str(SUBJECTS))


@pytest.mark.slow
@pytest.mark.parametrize("spec", sorted(DEFECTS))
def test_explore_finds_shrinks_and_replays_a_defect_the_catalog_misses(spec: str, tmp_path: Path) -> None:
    """Within budget and seed the break is found, written, shrunk so each step is needed, and replayed."""
    invariant, kinds, batch = DEFECTS[spec]
    project = _project(tmp_path, spec)
    out = tmp_path / "out"
    args = ["--budget", FIND_BUDGET, "--seed", SEED, "--max-completions", batch, "--output", str(out), "-q"]
    found = _explore(project, *args)
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
        assert not _breaks(spec, fewer), fewer.words()
    replayed = _explore(project, "--replay", str(path))
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert invariant in replayed.stdout


@pytest.mark.slow
def test_a_correct_pool_explores_clean_for_the_same_budget(tmp_path: Path) -> None:
    """The baseline the defects derive from breaks nothing in the same budget and seed (no false failure)."""
    project = _project(tmp_path, "baseline_reward_pool:SandboxPool")
    clean = _explore(project, "--budget", BUDGET, "--seed", SEED, "--output", str(tmp_path / "out"), "-q")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "explore: no invariant broke" in clean.stdout
    assert "coverage: " in clean.stdout
    assert not list((tmp_path / "out").glob("finding-*.json"))


@pytest.mark.full
@pytest.mark.parametrize("spec", sorted(DEFECTS))
def test_the_catalog_passes_each_defect_explore_finds(spec: str) -> None:
    """The fault families each defect lives in pass it: the gap the search closes (one validate run each)."""
    from pytest_e2b_env.catalog.catch import Sample, run_sample

    module = spec.partition(":")[0]
    sample = Sample(SUBJECTS / f"{module}.py", spec, "reward")
    outcome = run_sample(sample, families=["lost-worker", "cleanup-failure", "rate-limit", "live-fault"])
    assert outcome.problem is None, outcome.problem
    assert outcome.clean, outcome.reasons
    assert outcome.counts.get("passed", 0) >= 10, outcome.counts


@pytest.mark.full
@pytest.mark.parametrize("times", [1, 4], ids=["kill-fails-once", "kill-keeps-failing"])
def test_the_bundled_reward_confirms_a_dropped_workers_kill_before_its_score(times: int) -> None:
    """The break explore found in the reference pool: a worker lost on its first command whose kill
    answers 500. The pool retries the kill before it scores (once: 1.0 after the kill is confirmed)
    or raises naming the worker (every time), never a score beside a sandbox that may still run."""
    lost = {"kind": "lost-sandbox", "route": "run"}
    steps = [lost, {"kind": "kill-fails", "route": "kill", "times": times}]
    schedule = Schedule.from_json({"behaviours": ["correct"], "steps": steps})
    assert not _breaks("pytest_e2b_env.reward:reward_subject", schedule)
