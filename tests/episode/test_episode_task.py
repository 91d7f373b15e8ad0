"""Pure parts: the task schema and its defaults, the bundled tasks, the exact-integer grader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_e2b_env.episode.runtime import format_outcome
from pytest_e2b_env.episode.sandboxes import CommandOutcome
from pytest_e2b_env.episode.task import (
    Limits,
    grade_output,
    load_repair,
    load_task,
    parse_task,
    task_ids,
    task_prompt,
    task_row,
)
from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.settings import TargetSettings

keys = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=8)
answers = st.dictionaries(keys, st.integers(-(10**12), 10**12), min_size=1, max_size=6)


def test_bundled_tasks_are_three_distinct_repairs() -> None:
    """At least three bundled tasks, each with hidden input different from the visible one."""
    ids = task_ids()
    assert {"weekly-sales", "inventory-moves", "service-errors"} <= set(ids)
    for task_id in ids:
        task = parse_task(load_task(task_id))
        assert task.artifact in task.files
        for name, hidden in task.verification.files.items():
            assert task.files[name] != hidden
        assert len(load_repair(task_id)) >= 2


def test_limits_default_to_the_catalog_values() -> None:
    """A task without limits gets command 10 s, policy 120 s, verify 20 s, artifact 64 KiB."""
    data = load_task("weekly-sales")
    del data["limits"]
    assert parse_task(data).limits == Limits(
        command_seconds=10, policy_seconds=120, verify_seconds=20, artifact_bytes=65536
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"artifact": "/etc/passwd"},
            "field 'artifact': Value error, file name '/etc/passwd' must be a relative",
        ),
        ({"workdir": "work"}, "field 'workdir': Value error, workdir 'work' must be an absolute path"),
        (
            {"limits": {"command_seconds": 0}},
            "field 'limits.command_seconds': Input should be greater than 0",
        ),
        ({"verification": {"files": {}, "expected": {"a": True}}}, "expected['a'] = True is not an integer"),
        ({"surprise": 1}, "field 'surprise': Extra inputs are not permitted"),
    ],
)
def test_bad_task_names_field_and_fix(change: dict[str, object], message: str) -> None:
    """A malformed task raises ConfigError naming the task, the field and where the schema lives."""
    data = {**load_task("weekly-sales"), **change}
    with pytest.raises(ConfigError) as raised:
        parse_task(data)
    assert str(raised.value).startswith("task 'weekly-sales': ")
    assert message in str(raised.value)
    assert str(raised.value).endswith("see the repair-task schema (pytest-e2b-env docs catalog)")


def test_task_as_json_text_or_dict() -> None:
    """The row's task may be JSON text or a dict; both parse to the same task."""
    data = load_task("inventory-moves")
    assert parse_task(json.dumps(data)) == parse_task(data)
    with pytest.raises(ConfigError, match="not JSON text or a dict"):
        parse_task("{not json")


def test_prompt_and_row_hide_verification() -> None:
    """The prompt names the visible files and command but nothing of the hidden input or answer."""
    row = task_row("weekly-sales")
    text = row["prompt"][0]["content"]
    assert "report.py" in text
    assert "python3 -B report.py" in text
    assert "north" not in text
    assert "11" not in text
    assert text == task_prompt(parse_task(row["task"]))


@pytest.mark.parametrize("task_id", ["weekly-sales", "inventory-moves", "service-errors"])
def test_starter_is_wrong_and_repair_is_right_on_hidden_input(task_id: str, tmp_path: Path) -> None:
    """Run locally: the starter program fails the hidden input, the scripted repair passes it."""
    task = parse_task(load_task(task_id))
    for name, text in {**task.files, **task.verification.files}.items():
        (tmp_path / name).write_text(text)

    def run() -> str:
        argv = [sys.executable if part == "python3" else part for part in task.command.split()]
        return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    assert grade_output(run(), task.verification.expected) == 0.0
    subprocess.run(
        ["sh", "-c", load_repair(task_id)[2]],
        cwd=tmp_path,
        check=True,
        env={"PATH": Path(sys.executable).parent.as_posix() + ":/usr/bin:/bin"},
    )
    assert grade_output(run(), task.verification.expected) == 1.0


@given(answers)
def test_exact_answer_scores_one(expected: dict[str, int]) -> None:
    """Any JSON rendering of exactly the expected integers scores 1.0."""
    assert grade_output(json.dumps(expected), expected) == 1.0
    assert grade_output(json.dumps(expected, indent=2) + "\n", expected) == 1.0


@given(answers, st.data())
def test_type_confusion_scores_zero(expected: dict[str, int], data: st.DataObject) -> None:
    """An integer rendered as float or bool (even an equal one) scores 0."""
    key = data.draw(st.sampled_from(sorted(expected)))
    for wrong in (float(expected[key]), expected[key] == 1):
        assert grade_output(json.dumps({**expected, key: wrong}), expected) == 0.0


@given(answers, keys)
def test_extra_or_missing_key_scores_zero(expected: dict[str, int], extra: str) -> None:
    """Any key set other than the expected one scores 0."""
    if extra not in expected:
        assert grade_output(json.dumps({**expected, extra: 0}), expected) == 0.0
    missing = dict(list(expected.items())[1:])
    assert grade_output(json.dumps(missing), expected) == 0.0


@given(st.binary(max_size=64) | st.text(max_size=64))
def test_grader_never_raises(output: bytes | str) -> None:
    """Arbitrary output is graded 0 or 1, never an exception."""
    assert grade_output(output, {"a": 1}) in (0.0, 1.0)


@pytest.mark.parametrize(
    "output", ['{"a": 1, "a": 1}', '{"a": NaN}', '{"a": Infinity}', "[1]", '"a"', b'{"a": 1}\xff', "{" * 5000]
)
def test_malformed_json_scores_zero(output: str | bytes) -> None:
    """Duplicate keys, NaN/Infinity, non-objects, invalid UTF-8 and deep nesting score 0."""
    assert grade_output(output, {"a": 1}) == 0.0


def test_outcome_formatting_for_the_policy() -> None:
    """The policy reads output, then truncation, deadline or exit-code notes."""
    assert format_outcome(CommandOutcome(0, "", False, False), 10) == "(no output)"
    assert format_outcome(CommandOutcome(2, "oops\n", False, False), 10) == "oops\n[exit code 2]"
    killed = format_outcome(CommandOutcome(137, "", False, True), 1.5)
    assert killed == "[killed: the command exceeded its 1.5 s deadline; the episode goes on]"


def test_target_reads_env_and_hides_key() -> None:
    """TargetSettings comes from E2B_* and PYTEST_E2B_ENV_RUN; its repr never shows the key."""
    target = TargetSettings.from_env(
        {
            "E2B_API_KEY": "e2b_secret_value",
            "E2B_API_URL": "http://127.0.0.1:1",
            "PYTEST_E2B_ENV_RUN": "run-7",
        }
    )
    assert target.run_id == "run-7"
    assert target.sdk_opts()["api_url"] == "http://127.0.0.1:1"
    assert "sandbox_url" not in target.sdk_opts()
    assert "e2b_secret_value" not in repr(target)
