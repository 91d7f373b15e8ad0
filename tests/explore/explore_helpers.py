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
#: each episode defect: the invariant it breaks, the fault kinds its shrunk schedule must hold, and
#: the bound on tool calls before submit (one is enough for both)
EPISODE_DEFECTS = {
    "explore_episode_verifier_retry:VerifierRetryEpisode": (
        "score-committed-after-cleanup",
        {"lost-answer"},
        "1",
    ),
    # a kill that fails (a 500 or a kill that does nothing), then a lookup answering 500
    "explore_episode_lookup_trusted:LookupTrustedEpisode": (
        "score-committed-after-cleanup",
        {"server-error"},
        "1",
    ),
}
#: The fault kinds a defect's search draws (``--faults``), as a user who suspects lost workers or lost
#: answers bounds it: each of these defects needs only those kinds, met several times as often.
#: ``explore_reward_kill_unchecked`` searches every kind: its break is a race between the dropped
#: worker's failing kill and the score, and the whole set met it sooner at these seeds.
FAULTS = {
    "explore_reward_retry_budget:make_reward": "lost-sandbox,server-error,kill-fails",
    "explore_reward_replacement_zero:make_reward": "lost-sandbox,server-error,kill-fails",
    "explore_episode_verifier_retry:VerifierRetryEpisode": "lost-answer,server-error",
    "explore_episode_lookup_trusted:LookupTrustedEpisode": "lost-answer,server-error",
}
#: A search stops at its first break, so the defects get room for a loaded machine (with FAULTS at
#: seeds 4 and 5 each was found after 7 to 93 schedules, in 2.5 to 57 s, 2 cores loaded by a full
#: test run); Hypothesis then shrinks for up to half the budget. The correct subjects search clean
#: for a minute with every kind: 60 to 160 schedules.
FIND_BUDGET = "180"
BUDGET = "60"
SEED = "4"
FIND_SEEDS = (SEED, "5")


def user_project(tmp_path: Path, spec: str, kind: str = "reward") -> Path:
    """A project whose pytest ini names the subject, as a user sets it up for validate."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text(f"[pytest]\npythonpath = {SUBJECTS}\ne2b_{kind}_subject = {spec}\n")
    return project


def explore(project: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_e2b_env.cli", "explore", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )


def broken(spec: str, schedule: Schedule, runs: int = 2) -> set[str]:
    """The invariants ``schedule`` breaks against ``spec`` in ``runs`` runs (their union)."""
    sys.path.insert(0, str(SUBJECTS))  # where the case host imports the sample from
    try:
        with ExploreSession(spec, kind=schedule.subject) as session:
            return {b.invariant for _ in range(runs) for b in session.run(schedule).broken}
    finally:
        sys.path.remove(str(SUBJECTS))


def breaks(spec: str, schedule: Schedule, runs: int = 2) -> bool:
    return bool(broken(spec, schedule, runs))


def each_breaks(spec: str, schedules: list[Schedule], runs: int = 2) -> list[bool]:
    """For each schedule, whether it breaks an invariant in any of ``runs`` runs: one session for all."""
    if not schedules:
        return []
    sys.path.insert(0, str(SUBJECTS))
    try:
        with ExploreSession(spec, kind=schedules[0].subject) as session:
            return [any(session.run(s).broken for _ in range(runs)) for s in schedules]
    finally:
        sys.path.remove(str(SUBJECTS))


def check_found(spec: str, tmp_path: Path) -> None:
    """Within budget and seed the break is found, written, shrunk so each step is needed, and replayed."""
    kind = "episode" if spec in EPISODE_DEFECTS else "reward"
    invariant, kinds, batch = (EPISODE_DEFECTS if kind == "episode" else DEFECTS)[spec]
    project = user_project(tmp_path, spec, kind)
    # A search is a sample: on a loaded runner one seed's budget has gone by without a find (two
    # full runs in 1599 tests, each a different defect); the next seed gets one budget more.
    for seed in FIND_SEEDS:
        out = tmp_path / f"out-{seed}"
        # Each defect needs two faults: the search is bounded to that, as a user bounds it.
        args = ["--subject", kind, "--budget", FIND_BUDGET, "--seed", seed, "--max-completions", batch]
        args += ["--max-steps", "2"] + (["--faults", FAULTS[spec]] if spec in FAULTS else [])
        args += ["--output", str(out), "-q"]
        found = explore(project, *args)
        if found.returncode != 0:
            break
    assert found.returncode == 1, found.stdout + found.stderr
    assert f"explore: BROKEN {invariant}" in found.stdout, found.stdout
    (path,) = out.glob("finding-*.json")
    doc = json.loads(path.read_text())
    assert {"schedule", "invariant", "seed", "replay", "evidence"} <= set(doc)
    assert doc["seed"] == int(seed)
    assert doc["replay"] == f"pytest-e2b-env explore --replay {path}"
    assert invariant in [b["invariant"] for b in doc["invariant"]]
    assert verify_bundle(Path(doc["evidence"])) == []
    schedule = Schedule.from_json(doc["schedule"])
    assert schedule.subject == kind
    assert kinds <= {s.kind for s in schedule.steps}, schedule.words()
    assert all(landed["fired"] > 0 for landed in doc["run"]["landed"]), doc["run"]
    # minimal: without any one of its steps, nothing breaks
    fewer = [
        Schedule(schedule.behaviours, schedule.steps[:i] + schedule.steps[i + 1 :], schedule.subject)
        for i in range(len(schedule.steps))
    ]
    assert not any(each_breaks(spec, fewer)), [s.words() for s in fewer]
    replayed = explore(project, "--replay", str(path))
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert invariant in replayed.stdout


def check_clean(spec: str, tmp_path: Path, kind: str = "reward") -> None:
    """Nothing breaks within the budget and seed: the coverage line is printed, no finding written."""
    project, out = user_project(tmp_path, spec, kind), tmp_path / "out"
    args = ["--subject", kind, "--budget", BUDGET, "--seed", SEED, "--output", str(out), "-q"]
    clean = explore(project, *args)
    assert clean.returncode == 0, clean.stdout[-3000:] + clean.stderr[-2000:]
    assert "explore: no invariant broke" in clean.stdout
    assert "coverage: " in clean.stdout
    assert not list(out.glob("finding-*.json"))
