"""`pytest-e2b-env validate --tasks PATH` runs only the task checks of a dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_e2b_env.catalog.tasks.load import kind_of
from pytest_e2b_env.cli.validate import build_parser, main, pytest_args
from pytest_e2b_env.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
ECHO = ROOT / "fixtures" / "tasks" / "broken_echo_passes.jsonl"


def test_validate_tasks_narrows_the_run_to_the_task_checks(tmp_path: Path) -> None:
    """--tasks is an option of validate's one parser: the run keeps validate's arguments, sets the
    tasks and selects only the task checks."""
    options = build_parser().parse_args(["--tasks", str(ECHO), "--repeats", "4", "--output", str(tmp_path)])
    args = pytest_args(options)
    assert f"e2b_reward_tasks={ECHO}" in args
    assert "e2b_task_repeats=4" in args
    assert options.subject == "reward"  # the rows decide which subject checks them
    assert "--e2b-catalog-only" in args
    assert args[args.index("-m") + 1] == "e2b_task"
    assert build_parser().parse_args(["--tasks=x.json"]).tasks == "x.json"


@pytest.mark.parametrize("given", [["--repeats", "2"], ["--task-kind", "reward"]])
def test_task_options_without_tasks_are_a_usage_error(
    given: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--repeats or --task-kind without --tasks is exit 2 naming the missing option."""
    assert main(given) == 2
    assert f"{given[0]} applies to the task checks only; add --tasks PATH" in capsys.readouterr().err


def test_an_unreadable_task_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A --tasks path that does not exist is exit 2 with the path, before pytest starts."""
    assert main(["--tasks", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err


def test_the_kind_follows_the_rows(tmp_path: Path) -> None:
    """test_cases rows are reward tasks, verification rows repair tasks; others ask for --task-kind."""
    (tmp_path / "repair.json").write_text(json.dumps({"train": [{"id": "a", "verification": {}}]}))
    (tmp_path / "odd.json").write_text(json.dumps([{"id": "a"}]))
    assert kind_of(str(ECHO)) == "reward"
    assert kind_of(str(tmp_path / "repair.json")) == "episode"
    with pytest.raises(ConfigError, match="--task-kind"):
        kind_of(str(tmp_path / "odd.json"))


@pytest.mark.slow
def test_validate_tasks_catches_the_echo_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The echo task fails its floor, passes oracle and repeat; the bundle holds tasks.json."""
    from pytest_e2b_env.cli.validate import main

    monkeypatch.chdir(tmp_path)
    # a project of its own (validate reads the current project's config), quiet about pytest-asyncio
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    assert main(["--tasks", str(ECHO), "--output", str(tmp_path / "ev"), "-q"]) == 1
    (bundle,) = [p for p in (tmp_path / "ev").iterdir() if p.is_dir()]
    doc = json.loads((bundle / "tasks.json").read_text())
    checks = doc["tasks"][0]["checks"]
    assert {name: c["status"] for name, c in checks.items()} == {
        "oracle": "passed",
        "floor": "failed",
        "repeat": "passed",
    }
