"""The user's tasks as pytest items: node ids, outcomes, the bundle's tasks section, bad sources."""

from __future__ import annotations

import json

import pytest
from plugin_helpers import only_bundle, read_json, write_project

from pytest_e2b_env.evidence import verify_bundle

SUM = "import json, sys\nprint(sum(json.load(sys.stdin)))\n"
TASKS = [
    {
        "task_id": "sum-big",
        "prompt": [{"role": "user", "content": "Print the sum of the JSON array of integers."}],
        "test_cases": [
            {"input": "[12345678, 87654321]", "output": "99999999"},
            {"input": "[1, 2]", "output": "3"},
        ],
        "solution": SUM,
        "difficulty": "easy",
    },
    {
        # Broken: the expected output is the input, so a program echoing its input passes.
        "task_id": "echo-passes",
        "prompt": "Print the JSON array of integers as given.",
        "test_cases": [{"input": "[1, 2]", "output": "[1, 2]"}, {"input": "[3]", "output": "[3]"}],
        "solution": "import json, sys\nprint(json.dumps(json.load(sys.stdin)))\n",
    },
]


def write_tasks(pytester: pytest.Pytester, rows: list[dict], name: str = "tasks.jsonl") -> None:
    (pytester.path / "data").mkdir(exist_ok=True)
    (pytester.path / "data" / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_each_task_gets_oracle_floor_and_repeat_items(pytester: pytest.Pytester) -> None:
    write_project(pytester, extra="e2b_reward_tasks = data/tasks.jsonl\n")
    write_tasks(pytester, TASKS)
    result = pytester.runpytest("--collect-only", "-q", "-m", "e2b_task")
    result.stdout.fnmatch_lines(
        [
            f"e2b-task::{task}::{check}"
            for task in ("sum-big", "echo-passes")
            for check in ("oracle", "floor", "repeat")
        ]
    )


@pytest.mark.full
def test_task_checks_run_and_fill_the_bundle(pytester: pytest.Pytester) -> None:
    """A sound task passes all three checks; the echo task fails its floor; the bundle says so."""
    write_project(pytester, extra="e2b_reward_tasks = data/tasks.jsonl\n")
    write_tasks(pytester, TASKS)
    result = pytester.runpytest("--e2b-evidence", "ev", "-m", "e2b_task", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5, failed=1)
    result.stdout.fnmatch_lines(["*TaskFailure: task echo-passes floor: a no-op or shortcut*: echo-input*"])
    result.stdout.fnmatch_lines(
        [
            "*e2b tasks*",
            "sum-big * reward * passed * oracle passed, floor gap 0.5, repeat spread 0",
            "echo-passes * reward * failed * oracle passed, floor gap 0, repeat spread 0",
            "evidence bundle: *",
        ]
    )
    bundle = only_bundle(pytester.path / "ev")
    manifest = read_json(bundle / "run-manifest.json")
    assert manifest["tasks"]["counts"] == {"failed": 1, "passed": 5}
    assert manifest["tasks"]["passed"] is False
    assert len(manifest["tasks_digest"]) == 64
    doc = read_json(bundle / "tasks.json")
    by_id = {t["task_id"]: t for t in doc["tasks"]}
    assert by_id["sum-big"]["status"] == "passed"
    assert by_id["sum-big"]["oracle"] == "passed"
    assert by_id["sum-big"]["floor_gap"] > 0
    assert by_id["sum-big"]["repeat_spread"] == 0.0
    assert by_id["sum-big"]["checks"]["oracle"]["details"]["expected_outputs_checked"] > 0
    assert by_id["echo-passes"]["floor_gap"] == 0.0
    html = (bundle / "index.html").read_text()
    assert "<h2>Tasks</h2>" in html
    assert "data-task='echo-passes'" in html
    assert verify_bundle(bundle) == []


@pytest.mark.full
def test_a_bad_task_row_stops_the_run_naming_it(pytester: pytest.Pytester) -> None:
    write_project(pytester, extra="e2b_reward_tasks = data/tasks.jsonl\n")
    write_tasks(pytester, [{"task_id": "x", "test_cases": [{"input": "1"}]}])
    result = pytester.runpytest("-m", "e2b_task")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*tasks.jsonl task 'x': test_cases?0? must be*"])


@pytest.mark.full
def test_tasks_need_the_subject_of_their_kind(pytester: pytest.Pytester) -> None:
    write_project(pytester, extra="e2b_episode_tasks = data/tasks.json\n")
    write_tasks(pytester, [], name="tasks.json")
    result = pytester.runpytest("-m", "e2b_task")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*e2b_episode_tasks is set but e2b_episode_subject is not*"])


def test_a_missing_task_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    write_project(pytester, extra="e2b_reward_tasks = data/none.jsonl\n")
    result = pytester.runpytest("-m", "e2b_task")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*e2b_reward_tasks='data/none.jsonl': * does not exist*"])


CRASHES_ON_SOLUTION = """
import os, signal


def make_reward():
    def reward(completions, test_cases, **kwargs):
        if "json.load" in str(completions):  # the reference solution: die hard
            os.kill(os.getpid(), signal.SIGSEGV)
        return [0.0 for _ in completions]
    return reward
"""


@pytest.mark.full
def test_a_subject_that_crashes_fails_its_check_and_the_session_goes_on(pytester: pytest.Pytester) -> None:
    """Task checks run in the case host: a segfault fails the oracle, the floor still runs."""
    write_project(pytester, subject="crashy:make_reward", extra="e2b_reward_tasks = data/tasks.jsonl\n")
    pytester.makepyfile(crashy=CRASHES_ON_SOLUTION)
    write_tasks(pytester, TASKS[:1])
    result = pytester.runpytest("--e2b-evidence", "ev", "-m", "e2b_task", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)  # oracle and repeat crash; the floor scores 0s
    result.stdout.fnmatch_lines(["*was killed by signal SIGSEGV*"])
    tasks = read_json(only_bundle(pytester.path / "ev") / "tasks.json")
    assert [t["task_id"] for t in tasks["tasks"]] == ["sum-big"]
