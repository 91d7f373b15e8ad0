"""Task checks on the real emulator: the bundled tasks pass, each broken sample task is caught.

The subjects are the bundled reference code and the sample defective subject that uploads the
expected outputs; the tasks are the bundled fixtures and ``fixtures/tasks/broken_*``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_e2b_env.catalog.contract import Contract, Subject, load_subject
from pytest_e2b_env.catalog.expected import needles
from pytest_e2b_env.catalog.tasks import load_tasks
from pytest_e2b_env.catalog.tasks.checks import CHECKS, TaskCheck, run_check
from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.targets import Target

ROOT = Path(__file__).resolve().parents[2]
BROKEN = ROOT / "fixtures" / "tasks"
BUNDLED = "pytest_e2b_env.catalog.tasks.bundled"
REFERENCE_REWARD = "pytest_e2b_env.reward:reward_subject"


@pytest.fixture(scope="module")
def reward() -> Subject:
    return load_subject(REFERENCE_REWARD, "reward")


@pytest.fixture(scope="module")
def episode() -> Subject:
    return load_subject("pytest_e2b_env.episode:ReportEpisode", "episode")


@pytest.fixture
def samples_on_path() -> Iterator[None]:
    """The sample subjects import by module name from fixtures/subjects."""
    sys.path.insert(0, str(ROOT / "fixtures" / "subjects"))
    try:
        yield
    finally:
        sys.path.remove(str(ROOT / "fixtures" / "subjects"))


def check(kind_subject: Subject, target: Target, source: str, name: str, **options: int) -> TaskCheck:
    tasks = load_tasks(source, kind_subject.kind, ROOT)
    return run_check(tasks[0], name, tasks, kind_subject, target, **options)  # type: ignore[arg-type]


# -- loading --------------------------------------------------------------------------------


def test_rows_load_from_a_spec_json_and_jsonl(tmp_path: Path) -> None:
    """The same rows load from module:attr (a loader), a JSON document of splits, and JSONL."""
    rows = load_tasks(f"{BUNDLED}:reward_tasks", "reward")
    assert [t.task_id for t in rows][:3] == ["total-tokens", "request-counts", "successful-tokens"]
    assert all(t.solution for t in rows)
    as_rows = [t.as_row() for t in rows]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in as_rows))
    (tmp_path / "tasks.json").write_text(json.dumps({"_about": "notes", "train": as_rows}))
    for name in ("tasks.jsonl", "tasks.json"):
        assert [t.as_row() for t in load_tasks(name, "reward", tmp_path)] == as_rows
    episodes = load_tasks(f"{BUNDLED}:episode_tasks", "episode")
    assert {t.task_id for t in episodes} == {"inventory-moves", "service-errors", "weekly-sales"}
    assert all(t.solution and "solution" not in t.task for t in episodes)


@pytest.mark.parametrize(
    ("row", "named"),
    [
        ({"prompt": "x", "test_cases": [{"input": "1", "output": "1"}]}, "'task_id'=None"),
        ({"task_id": "a b", "test_cases": [{"input": "1", "output": "1"}]}, "'task_id'='a b'"),
        ({"task_id": "a", "test_cases": []}, "'test_cases' must be a non-empty list"),
        ({"task_id": "a", "test_cases": [{"input": 1, "output": "1"}]}, "test_cases[0] must be"),
        ({"task_id": "a", "test_cases": [{"input": "1", "output": "1"}], "solution": 3}, "'solution'"),
        ({"task_id": "a", "test_cases": [{"input": "1", "output": "1"}], "completions": []}, "clash"),
    ],
)
def test_a_bad_row_is_one_error_naming_the_row_and_field(tmp_path: Path, row: dict, named: str) -> None:
    (tmp_path / "t.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(ConfigError) as raised:
        load_tasks("t.jsonl", "reward", tmp_path)
    assert named in str(raised.value)
    assert "t.jsonl" in str(raised.value)


def test_repeated_ids_and_missing_files_are_named(tmp_path: Path) -> None:
    row = {"task_id": "a", "test_cases": [{"input": "1", "output": "1"}]}
    (tmp_path / "t.jsonl").write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(ConfigError, match="repeats row 0"):
        load_tasks("t.jsonl", "reward", tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_tasks("nope.json", "reward", tmp_path)
    (tmp_path / "e.json").write_text(json.dumps([{"id": "x", "workdir": "/w"}]))
    with pytest.raises(ConfigError, match="missing field"):
        load_tasks("e.json", "episode", tmp_path)


def test_short_or_sent_outputs_are_not_proof_of_a_leak() -> None:
    """``{}`` appears in any request; an output equal to an input is sent on purpose."""
    found = needles(['{"acme": 20}', "{}", "[1, 2, 3, 4]"], ["[1, 2, 3, 4]"])
    assert found == [
        '{"acme": 20}',
        '{\\"acme\\": 20}',
        '{\\\\\\"acme\\\\\\": 20}',
        '{"acme":20}',
        '{\\"acme\\":20}',
        '{\\\\\\"acme\\\\\\":20}',
        "{'acme': 20}",
    ]


# -- reward tasks ---------------------------------------------------------------------------


@pytest.mark.full
def test_a_bundled_reward_task_passes_every_check(reward: Subject, target: Target) -> None:
    """Oracle at 1.0 on every case, the best shortcut below it, the same score each run."""
    results = {name: check(reward, target, f"{BUNDLED}:reward_tasks", name) for name in CHECKS}
    assert {name: r.status for name, r in results.items()} == dict.fromkeys(CHECKS, "passed")
    assert results["oracle"].details["scores"] == [1.0, 1.0, 1.0]
    assert results["oracle"].details["expected_outputs_checked"] > 0
    floor = results["floor"].details
    assert floor["gap"] > 0
    assert set(floor["scores"]) >= {
        "empty-output",
        "empty-object",
        "echo-input",
        "exit-zero",
        "other-task-output",
    }
    assert results["repeat"].details == {"scores": [1.0, 1.0, 1.0], "runs": 3, "spread": 0.0}


@pytest.mark.slow
def test_every_bundled_reward_task_passes(reward: Subject, target: Target) -> None:
    tasks = load_tasks(f"{BUNDLED}:reward_tasks", "reward")
    failed = [
        (t.task_id, name, r.reason)
        for t in tasks
        for name in CHECKS
        if (r := run_check(t, name, tasks, reward, target)).status != "passed"
    ]
    assert failed == []


@pytest.mark.full
def test_a_wrong_expected_output_fails_the_oracle(reward: Subject, target: Target) -> None:
    """The reference does not produce case 1's expected output; the floor and repeat still pass."""
    source = str(BROKEN / "broken_wrong_expected.jsonl")
    oracle = check(reward, target, source, "oracle")
    assert oracle.status == "failed"
    assert oracle.details["scores"] == [1.0, 0.0, 1.0]
    assert 'case 1: input [{"customer": "acme"' in str(oracle.reason)
    assert 'expected {"acme": 21, "beta": 3}' in str(oracle.reason)
    assert check(reward, target, source, "floor").status == "passed"


@pytest.mark.full
def test_a_task_echo_passes_fails_the_floor_naming_the_program(reward: Subject, target: Target) -> None:
    source = str(BROKEN / "broken_echo_passes.jsonl")
    floor = check(reward, target, source, "floor")
    assert floor.status == "failed"
    assert "echo-input (prints its input back)" in str(floor.reason)
    assert floor.details["scores"]["echo-input"] == 1.0
    assert floor.details["gap"] == 0.0
    assert check(reward, target, source, "oracle").status == "passed"


@pytest.mark.full
def test_a_flaky_task_fails_repeat_with_the_scores(reward: Subject, target: Target) -> None:
    """Expected values drawn at random: six runs of 32 coin flips agree only with p ~ 2e-5."""
    result = check(reward, target, str(BROKEN / "broken_flaky.json"), "repeat", repeats=6)
    assert result.status == "failed"
    scores = result.details["scores"]
    assert len(scores) == 6
    assert len(set(scores)) > 1
    assert result.details["spread"] == round(max(scores) - min(scores), 6) > 0
    assert ", ".join(str(s) for s in scores) in str(result.reason)


@pytest.mark.full
def test_expected_outputs_entering_a_sandbox_fail_the_check(
    target: Target, samples_on_path: None, reward: Subject
) -> None:
    """The sample that uploads the test cases is caught from the ledger; the reference is not."""
    leaky = load_subject("reward_uploads_expected:factory", "reward")
    result = check(leaky, target, f"{BUNDLED}:reward_tasks", "oracle")
    assert result.status == "failed"
    assert "an expected output of the task entered a sandbox" in str(result.reason)
    assert "/files" in str(result.reason)
    assert check(reward, target, f"{BUNDLED}:reward_tasks", "oracle").status == "passed"


def test_a_task_without_solution_is_skipped_by_oracle_and_repeat(
    reward: Subject, target: Target, tmp_path: Path
) -> None:
    cases = [{"input": "[1, 2]", "output": "3"}, {"input": "[2, 5]", "output": "7"}]
    row = {"task_id": "no-solution", "test_cases": cases}
    (tmp_path / "t.jsonl").write_text(json.dumps(row) + "\n")
    tasks = load_tasks("t.jsonl", "reward", tmp_path)
    for name in ("oracle", "repeat"):
        result = run_check(tasks[0], name, tasks, reward, target)
        assert (result.status, "no 'solution'" in str(result.reason)) == ("skipped", True)
    assert run_check(tasks[0], "floor", tasks, reward, target).status == "passed"


# -- episode tasks --------------------------------------------------------------------------


@pytest.mark.full
def test_a_bundled_repair_task_passes_every_check(episode: Subject, target: Target) -> None:
    tasks = load_tasks(f"{BUNDLED}:episode_tasks", "episode")
    task = next(t for t in tasks if t.task_id == "weekly-sales")
    results = {name: run_check(task, name, tasks, episode, target) for name in CHECKS}
    assert {name: r.status for name, r in results.items()} == dict.fromkeys(CHECKS, "passed"), results
    assert results["oracle"].details["scores"] == [1.0]
    assert results["floor"].details["scores"]["unchanged"] == 0.0
    assert results["floor"].details["gap"] == 1.0
    assert results["repeat"].details["spread"] == 0.0


def test_a_repair_task_whose_expected_is_wrong_fails_the_oracle(
    episode: Subject, target: Target, tmp_path: Path
) -> None:
    tasks = load_tasks(f"{BUNDLED}:episode_tasks", "episode")
    row = next(t for t in tasks if t.task_id == "weekly-sales").as_row()
    row["verification"]["expected"] = {"north": 12, "south": 5}
    (tmp_path / "t.json").write_text(json.dumps([row]))
    result = check(episode, target, str(tmp_path / "t.json"), "oracle")
    assert result.status == "failed"
    assert "the repair scores 0.0, not 1.0" in str(result.reason)


@pytest.mark.full
def test_a_repair_task_the_unchanged_artifact_passes_fails_the_floor(
    episode: Subject, target: Target, tmp_path: Path
) -> None:
    """Expected equal to what the shipped (broken) artifact prints: submitting nothing scores 1.0."""
    tasks = load_tasks(f"{BUNDLED}:episode_tasks", "episode")
    row = next(t for t in tasks if t.task_id == "weekly-sales").as_row()
    row["verification"]["expected"] = {"north": 8, "south": 1}  # the last value wins, as the bug does
    (tmp_path / "t.json").write_text(json.dumps([row]))
    result = check(episode, target, str(tmp_path / "t.json"), "floor")
    assert result.status == "failed"
    assert "unchanged (submits the artifact as the task ships it" in str(result.reason)


@pytest.mark.slow
def test_every_bundled_repair_task_passes(episode: Subject, target: Target) -> None:
    tasks = load_tasks(f"{BUNDLED}:episode_tasks", "episode")
    failed = [
        (t.task_id, name, r.reason)
        for t in tasks
        for name in CHECKS
        if (r := run_check(t, name, tasks, episode, target)).status != "passed"
    ]
    assert failed == []


@pytest.mark.full
def test_an_episode_sending_the_expected_value_fails_the_check(target: Target) -> None:
    """A verifier that gets the expected value as a file is caught; the same code without it is not."""
    from catalog_subjects import TinyEpisode

    class ShipsExpected(TinyEpisode):
        def submit(self) -> str:
            """Submit the artifact for grading (with the answer key beside it)."""
            expected = json.dumps(self._task["verification"]["expected"])
            self._task["verification"]["files"] = {
                **self._task["verification"]["files"],
                "key.json": expected,
            }
            return super().submit()

    tasks = load_tasks(f"{BUNDLED}:episode_tasks", "episode")
    task = next(t for t in tasks if t.task_id == "weekly-sales")
    results = {}
    for factory in (TinyEpisode, ShipsExpected):
        subject = Subject(
            kind="episode", spec=factory.__name__, factory=factory, contract=Contract(kind="episode")
        )
        results[factory.__name__] = run_check(task, "oracle", tasks, subject, target)
    assert results["TinyEpisode"].status == "passed"
    assert results["TinyEpisode"].details["expected_outputs_checked"] > 0
    assert results["ShipsExpected"].status == "failed"
    assert "an expected output of the task entered a sandbox" in str(results["ShipsExpected"].reason)
