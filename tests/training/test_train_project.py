"""Train what you validated: a user's project validated by the catalog, then trained 2 tiny steps offline.

Two sample projects, each run once per module as users run them (``pytest-e2b-env train`` as a
subprocess in the project directory, ``--validate-first``): a sync reward function reading a
``verification_info`` column, and a plain-e2b repair episode. Then the gate is asked again after
the subject's source or the task file changed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_e2b_env.catalog.tasks.bundled import episode_tasks, reward_tasks
from pytest_e2b_env.evidence import verify_bundle
from pytest_e2b_env.evidence.runinfo import subject_source

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = Path(__file__).resolve().parent / "projects"
SUBJECTS = ROOT / "fixtures" / "subjects"
pytestmark = pytest.mark.slow
FAST = ("--num-generations", "4", "--create-interval", "0")


def _cli(cwd: Path, *args: str, timeout: float = 900) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if k != "E2B_API_KEY"}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest_e2b_env.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done, time.perf_counter() - started


def _metrics(project: Path) -> dict[str, Any]:
    path = project / "out" / "metrics.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def reward_project(root: Path) -> Path:
    """The sample reward project: its subject, its tasks (another column besides the test cases)."""
    project = root / "reward-project"
    shutil.copytree(PROJECTS / "reward_sync", project)
    with (project / "pytest.ini").open("a") as ini:
        ini.write(f"pythonpath = . {SUBJECTS}\n")
    rows = [{**row, "difficulty": n % 3} for n, row in enumerate(reward_tasks())]
    (project / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return project


def episode_project(root: Path) -> Path:
    """A project training the plain-e2b repair episode on the repair tasks as a JSON file."""
    project = root / "episode-project"
    project.mkdir()
    (project / "pytest.ini").write_text(
        "[pytest]\n"
        f"pythonpath = {SUBJECTS}\n"
        "e2b_episode_subject = baseline_episode_home:RepairEpisode\n"
        "e2b_episode_tasks = tasks.json\n"
    )
    (project / "tasks.json").write_text(json.dumps(episode_tasks(), indent=1))
    return project


@pytest.fixture(scope="module")
def reward_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str], float]:
    project = reward_project(tmp_path_factory.mktemp("user"))
    args = ("--validate-first", "--max-steps", "2", "--output-dir", "out", *FAST)
    done, seconds = _cli(project, "train", "--tiny", "--offline", "--cpu", *args)
    print(f"\nvalidate + 2 tiny steps, reward project: {seconds:.1f} s wall")
    return project, done, seconds


@pytest.fixture(scope="module")
def episode_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str], float]:
    project = episode_project(tmp_path_factory.mktemp("user"))
    args = ("--validate-first", "--max-steps", "2", "--output-dir", "out", *FAST)
    done, seconds = _cli(project, "train", "--tiny", "--offline", "--cpu", *args)
    print(f"\nvalidate + 2 tiny steps, episode project: {seconds:.1f} s wall")
    return project, done, seconds


def _source_now(project: Path, spec: str) -> str | None:
    """The subject's source digest now, found on the project's pythonpath as validate found it."""
    saved = list(sys.path)
    sys.path[:0] = [str(project), str(SUBJECTS)]
    try:
        return subject_source(spec)["sha256"]
    finally:
        sys.path[:] = saved


def _check_run(project: Path, done: subprocess.CompletedProcess[str], kind: str, spec: str) -> dict[str, Any]:
    __tracebackhide__ = True
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    metrics = _metrics(project)
    assert metrics["status"] == "ok", metrics.get("error")
    assert metrics["mode"] == kind
    assert metrics["project"]["subject"] == spec
    assert len(metrics["steps"]) == 2
    assert metrics["weights"]["changed_any"]
    assert metrics["held_out_reward"]["before"] is not None
    assert metrics["held_out_reward"]["after"] is not None
    assert metrics["cleanup"] == {"closed": True, "leaked": [], "errors": []}
    sandboxes = metrics["target"]["sandboxes"]
    assert sandboxes["created"] > 0
    assert sandboxes["alive_at_end"] == []
    assert sandboxes["sandbox_seconds"] > 0
    assert sandboxes["infrastructure_errors"] == 0
    # validated_by: the bundle validate wrote just before, for exactly this code and these tasks.
    validated = metrics["validated_by"]
    bundle = Path(validated["bundle"])
    assert bundle.parent == project / "e2b-evidence"
    assert bundle.name == validated["run_id"]
    assert verify_bundle(bundle) == []
    manifest = json.loads((bundle / "run-manifest.json").read_text())
    assert manifest["coverage"]["passed"]
    assert manifest["tasks"]["passed"]
    assert validated["subject"] == spec
    assert validated["subject_sha256"] == manifest["subject_sources"][kind]["sha256"]
    assert validated["subject_sha256"] == _source_now(project, spec)
    assert validated["contract"] == manifest["contracts"][kind]
    assert validated["catalog_hash"] == manifest["catalog_hash"]
    assert validated["tasks_digest"] == manifest["tasks_digest"]
    # The training run's own bundle verifies and names the validation too.
    (train_bundle,) = [p for p in (project / "out" / "evidence").iterdir() if p.is_dir()]
    assert verify_bundle(train_bundle) == []
    assert json.loads((train_bundle / "run-manifest.json").read_text())["validated_by"] == validated
    return metrics


def test_reward_project_validated_then_trained(reward_run: tuple) -> None:
    """The sync verification_info reward is validated, then trained on its own rows; cleanup proven."""
    project, done, _ = reward_run
    metrics = _check_run(project, done, "reward", "my_reward:make_reward")
    reward = metrics["reward"]
    assert reward["tasks"] == str(project / "tasks.jsonl")
    assert len(reward["eval_tasks"]) == 1
    assert len(reward["train_tasks"]) == 5
    assert reward["calls"] > 0
    assert reward["completions"] > 0
    assert reward["masked"] == 0
    # TRL named the reward column after the user's function.
    assert any("rewards/code_reward/mean" in entry for entry in metrics["history"])


def test_episode_project_validated_then_trained(episode_run: tuple) -> None:
    """The plain-e2b repair episode is validated, preflighted, trained; the model called its tools."""
    project, done, _ = episode_run
    metrics = _check_run(project, done, "episode", "baseline_episode_home:RepairEpisode")
    episode = metrics["episode"]
    assert episode["reward_source"] == "get_reward()"
    assert [e["reward"] for e in metrics["preflight"]["episodes"]][::2] == [1.0, 1.0]
    assert sum(episode["model_calls"].values()) > 0
    assert episode["masking"]["masked"] == 0


def test_no_secret_is_written(reward_run: tuple) -> None:
    """Nothing the run wrote outside the model (metrics, bundles, logs) looks like a credential."""
    from pytest_e2b_env.evidence.redaction import Redactor

    project, _, _ = reward_run
    redactor = Redactor(())
    written = [
        p for p in (project / "out").rglob("*") if p.is_file() and p.suffix in (".json", ".txt", ".log")
    ]
    assert written
    for path in written:
        if "model" not in path.relative_to(project / "out").parts[0]:
            assert redactor.find(path.read_text(errors="replace")) == [], path


def test_changed_subject_source_is_refused_after_validation(reward_run: tuple) -> None:
    """The validated project's subject edited afterwards: train refuses, naming the subject source."""
    project, _, _ = reward_run
    source = project / "my_reward.py"
    original = source.read_text()
    source.write_text(original + "\n# tuned after validation\n")
    try:
        done, _ = _cli(project, "train", "--tiny", "--offline", "--cpu", "--output-dir", "again", timeout=120)
    finally:
        source.write_text(original)
    assert done.returncode == 2
    assert "refused: the newest validation of the reward subject 'my_reward:make_reward'" in done.stderr
    assert "subject source: the reward subject's files under" in done.stderr
    assert not (project / "again").exists()


def test_changed_task_file_is_refused_after_validation(reward_run: tuple) -> None:
    """A task row edited after validation: train refuses, naming the tasks."""
    project, _, _ = reward_run
    tasks = project / "tasks.jsonl"
    original = tasks.read_text()
    tasks.write_text(original.replace('"difficulty": 0', '"difficulty": 9', 1))
    try:
        done, _ = _cli(project, "train", "--tiny", "--offline", "--cpu", "--output-dir", "again", timeout=120)
    finally:
        tasks.write_text(original)
    assert done.returncode == 2
    assert "tasks: the task rows changed since validation" in done.stderr


def test_unchanged_project_passes_the_gate_again(reward_run: tuple) -> None:
    """Untouched since validation, the same project passes the gate without --validate-first."""
    project, _, _ = reward_run
    done, _ = _cli(
        project, "train", "--tiny", "--offline", "--cpu", "--baseline-only", "--output-dir", "again"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((project / "again" / "metrics.json").read_text())
    assert metrics["validated_by"]["run_id"] == _metrics(project)["validated_by"]["run_id"]


def test_validate_first_that_fails_trains_nothing(tmp_path: Path) -> None:
    """--validate-first on code the catalog catches: validate fails, train refuses, nothing trains."""
    project = tmp_path / "leaky"
    project.mkdir()
    (project / "pytest.ini").write_text(
        f"[pytest]\npythonpath = {SUBJECTS}\ne2b_reward_subject = reward_leaks_worker:LeaksWorker\n"
    )
    args = ("--validate-first", "--max-steps", "2", "--output-dir", "out", *FAST)
    done, _ = _cli(project, "train", "--tiny", "--offline", "--cpu", *args)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "refused: --validate-first: validate exited 1 (run validate-" in done.stderr
    assert "the catalog did not pass ({'failed':" in done.stderr
    assert not (project / "out").exists()
    (bundle,) = (project / "e2b-evidence").iterdir()
    assert verify_bundle(bundle) == []
