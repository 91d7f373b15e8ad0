"""`pytest-e2b-env explore`: usage errors are exit 2 and name the fix; breaks are found, shrunk and replayed.

The slow tests run the real command on the emulator against real subjects (fixtures/subjects):
defective samples whose defect needs a combination of faults, and a correct one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from explore_helpers import (
    DEFECTS,
    EPISODE_DEFECTS,
    SEED,
    SUBJECTS,
    breaks,
    broken,
    check_clean,
    explore,
    user_project,
)

from pytest_e2b_env.cli.explore import main
from pytest_e2b_env.explore.schedule import Schedule


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--budget", "0"], "--budget 0: give a positive number of seconds, e.g. --budget 120"),
        (["--replay", "nowhere.json"], "--replay 'nowhere.json': no such file"),
        (["--max-sandboxes", "5"], "--max-sandboxes 5 caps a live search only; add --live or drop it"),
        (["--live", "--max-sandboxes", "0"], "--max-sandboxes 0: give 1 or more, e.g. --max-sandboxes 50"),
        (
            ["--faults", "lost-sandbox,lost-worker"],
            "--faults: lost-worker is not a fault kind; name one or more of rate-limit, auth, "
            "server-error, unavailable, lost-sandbox, lost-answer, delay, kill-fails, "
            "e.g. --faults lost-sandbox,server-error",
        ),
        (["--faults", ","], "--faults: ',' is not a fault kind"),
        (["--faults", "delay", "--replay", "f.json"], "--faults bounds a search; a replay runs the"),
    ],
)
def test_a_usage_error_is_exit_2_and_names_the_fix(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing starts: the message names the bad value and what to do."""
    monkeypatch.setenv("E2B_API_KEY", "e2b_" + "0" * 40)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_live_without_a_key_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--live with no E2B_API_KEY stops at once with exit 2, naming the variable and the offline way."""
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    assert main(["--live", "--subject", "episode"]) == 2
    assert (
        "--live needs E2B_API_KEY in the environment (the key of the E2B team to search on); "
        "export it, or drop --live to search on the local emulator"
    ) in capsys.readouterr().err


def test_a_subject_that_does_not_import_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reward subject named in the ini that cannot be imported stops the run with exit 2, naming it."""
    (tmp_path / "pytest.ini").write_text("[pytest]\ne2b_reward_subject = no_such_module:make\n")
    monkeypatch.chdir(tmp_path)
    assert main(["--budget", "5", "--output", str(tmp_path / "out")]) == 2
    assert "no_such_module" in capsys.readouterr().err


@pytest.mark.slow
def test_faults_bounds_the_kinds_drawn(tmp_path: Path) -> None:
    """With --faults only those kinds are drawn: the header names them and every landed pair is one."""
    project = user_project(tmp_path, "baseline_reward_pool:SandboxPool")
    args = ["--faults", "lost-sandbox,kill-fails", "--budget", "10", "--seed", SEED, "-q"]
    run = explore(project, *args, "--output", str(tmp_path / "out"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert ", faults lost-sandbox,kill-fails; routes a clean run used: " in run.stdout
    coverage = next(line for line in run.stdout.splitlines() if line.startswith("coverage: "))
    pairs = re.findall(r"([a-z-]+)@[a-z_]+/[a-z]+ x\d+", coverage)
    assert pairs, coverage
    assert set(pairs) <= {"lost-sandbox", "kill-fails"}, coverage


@pytest.mark.slow
def test_a_correct_pool_explores_clean_for_a_minute(tmp_path: Path) -> None:
    """The baseline the defects derive from breaks nothing in a minute of search over every fault kind,
    longer than each defect's search took at these seeds (no false failure)."""
    check_clean("baseline_reward_pool:SandboxPool", tmp_path)


@pytest.mark.full
@pytest.mark.parametrize("spec", sorted(EPISODE_DEFECTS))
def test_the_catalog_passes_each_episode_defect_explore_finds(spec: str) -> None:
    """The episode families each defect lives in pass it: the gap the search closes (one validate each)."""
    from pytest_e2b_env.catalog.catch import Sample, run_sample

    module = spec.partition(":")[0]
    sample = Sample(SUBJECTS / f"{module}.py", spec, "episode")
    families = ["lost-worker", "cleanup-failure", "rate-limit", "auth", "live-fault", "lifecycle"]
    outcome = run_sample(sample, families=families)
    assert outcome.problem is None, outcome.problem
    assert outcome.clean, outcome.reasons
    assert outcome.counts.get("passed", 0) >= 10, outcome.counts


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
    assert not breaks("pytest_e2b_env.reward:reward_subject", schedule)


@pytest.mark.full
@pytest.mark.parametrize(
    "spec",
    ["episode_copies_workdir:Subject", "baseline_episode_home_verifier_online:OnlineVerifierEpisode"],
    ids=["companion-file-in-verifier", "verifier-online"],
)
def test_a_verifier_that_is_not_fresh_and_offline_breaks_it(spec: str) -> None:
    """With no fault at all, a verifier that receives the policy's other files, or has the internet,
    breaks verifier-fresh-and-offline; the correct episode on the same schedule breaks nothing."""
    schedule = Schedule(("repair",), subject="episode")
    assert "verifier-fresh-and-offline" in broken(spec, schedule, runs=1)
    assert not broken("baseline_episode_home:RepairEpisode", schedule, runs=1)
