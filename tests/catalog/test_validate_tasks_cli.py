"""`pytest-e2b-env validate --tasks PATH` runs only the task checks of a dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_e2b_env.cli.validate_tasks import build_parser, pytest_args, task_kind, wants_tasks
from pytest_e2b_env.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
ECHO = ROOT / "fixtures" / "tasks" / "broken_echo_passes.jsonl"


def test_validate_tasks_narrows_the_run_to_the_task_checks(tmp_path: Path) -> None:
    options = build_parser().parse_args(["--tasks", str(ECHO), "--repeats", "4", "--output", str(tmp_path)])
    args = pytest_args(options)
    assert f"e2b_reward_tasks={ECHO}" in args
    assert "e2b_task_repeats=4" in args
    assert options.subject == "reward"  # the rows decide which subject checks them
    assert "--e2b-catalog-only" in args
    assert args[args.index("-m") + 1] == "e2b_task"
    assert wants_tasks(["--tasks=x.json"])
    assert not wants_tasks(["--subject", "reward"])


def test_the_kind_follows_the_rows(tmp_path: Path) -> None:
    (tmp_path / "repair.json").write_text(json.dumps({"train": [{"id": "a", "verification": {}}]}))
    (tmp_path / "odd.json").write_text(json.dumps([{"id": "a"}]))
    assert task_kind(str(ECHO)) == "reward"
    assert task_kind(str(tmp_path / "repair.json")) == "episode"
    with pytest.raises(ConfigError, match="--task-kind"):
        task_kind(str(tmp_path / "odd.json"))


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
