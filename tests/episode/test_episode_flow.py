"""Good and defect episodes through the real OpenEnv server, the real client and the emulator."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from episode_helpers import make_row, ops, write_file

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.episode.client import ReportEpisode
from pytest_e2b_env.episode.task import load_repair, task_ids

Factory = Callable[[], ReportEpisode]
OUT = "/tmp/.pytest_e2b_env_out"  # where the command wrapper collects output inside a sandbox


@pytest.mark.parametrize("task_id", task_ids())
def test_scripted_repair_scores_one(episode: Factory, emu: Emulator, task_id: str) -> None:
    """Inspect, repair, rerun, submit: reward 1.0, committed after both sandboxes are confirmed gone."""
    env = episode()
    prompt = env.reset(**make_row(task_id))
    assert task_id in prompt
    outputs = [env.terminal(command) for command in load_repair(task_id)]
    assert outputs[1] != outputs[3]  # the rerun after the edit prints something else
    assert env.submit() == "Submitted. Reward: 1"
    assert env.get_reward() == 1.0
    receipt = env.receipt
    assert receipt["committed_after_cleanup"] is True
    assert [s["role"] for s in receipt["sandboxes"]] == ["policy", "verifier"]
    assert {c["sandbox_id"] for c in receipt["cleanup"]} == {s["sandbox_id"] for s in receipt["sandboxes"]}


@pytest.mark.parametrize("task_id", task_ids())
def test_buggy_submit_scores_zero(episode: Factory, task_id: str) -> None:
    """Submitting the starter program unchanged scores 0.0 (a candidate outcome, not an error)."""
    env = episode()
    env.reset(**make_row(task_id))
    assert env.submit() == "Submitted. Reward: 0"
    assert env.get_reward() == 0.0


def test_receipt_rewards_zero_then_one(episode: Factory) -> None:
    """The same instance runs the buggy episode then the repaired one: rewards [0.0, 1.0]."""
    env = episode()
    rewards = []
    for repair in (False, True):
        env.reset(**make_row())
        if repair:
            for command in load_repair("weekly-sales"):
                env.terminal(command)
        env.submit()
        rewards.append(env.get_reward())
    assert rewards == [0.0, 1.0]


def test_hardcoded_visible_answer_scores_zero(episode: Factory) -> None:
    """Printing the visible input's answer fails, because the verifier uses a different input."""
    env = episode()
    env.reset(**make_row())
    env.terminal(write_file("report.py", 'print(\'{"east": 15, "west": 7}\')'))
    assert env.terminal("python3 -B report.py") == '{"east": 15, "west": 7}'
    env.submit()
    assert env.get_reward() == 0.0


@pytest.mark.parametrize(
    ("why", "command"),
    [
        pytest.param("missing", "rm report.py", id="missing"),
        pytest.param("oversized", "head -c 70000 /dev/zero | tr '\\0' '#' > report.py", id="oversized"),
        pytest.param("directory", "rm report.py && mkdir report.py", id="directory"),
        pytest.param("fifo", "rm report.py && mkfifo report.py", id="fifo"),
        pytest.param("symlink to a device", "ln -sf /dev/zero report.py", id="symlink to a device"),
    ],
)
def test_unusable_artifact_scores_zero_without_verifier(
    episode: Factory, emu: Emulator, why: str, command: str
) -> None:
    """A missing, oversized or non-file artifact scores 0 and no verifier sandbox is created."""
    env = episode()
    env.reset(**make_row())
    env.terminal(command)
    mark = emu.ledger_mark()
    env.submit()
    assert env.get_reward() == 0.0
    assert ops(emu, mark, "create") == []
    assert env.receipt["notes"] == ["artifact missing or over the size limit: scored 0 without a verifier"]


@pytest.mark.parametrize(
    ("why", "program"),
    [
        pytest.param("exit 1", 'print(\'{"north": 11, "south": 5}\')\nraise SystemExit(1)', id="exit 1"),
        pytest.param("non-JSON", "print('north=11 south=5')", id="non-JSON"),
        pytest.param("extra key", 'print(\'{"north": 11, "south": 5, "east": 0}\')', id="extra key"),
        pytest.param("floats", 'print(\'{"north": 11.0, "south": 5.0}\')', id="floats"),
        pytest.param("bools", 'print(\'{"north": 11, "south": true}\')', id="bools"),
        pytest.param("duplicate key", 'print(\'{"north": 1, "north": 11, "south": 5}\')', id="duplicate key"),
        pytest.param(
            "stderr only", 'import sys\nsys.stderr.write(\'{"north": 11, "south": 5}\')', id="stderr only"
        ),
        pytest.param(
            "kills every process it can",
            "import os, signal\nos.kill(-1, signal.SIGKILL)",
            id="kills every process it can",
        ),
        pytest.param(
            "output file swapped for a FIFO",
            f"import os\nos.remove({OUT!r})\nos.mkfifo({OUT!r})",
            id="output file swapped for a FIFO",
            marks=pytest.mark.full,  # the verifier waits out its deadline on the FIFO
        ),
        pytest.param(
            "output file linked to /dev/zero",
            f"import os\nos.remove({OUT!r})\nos.symlink('/dev/zero', {OUT!r})",
            id="output file linked to /dev/zero",
        ),
    ],
)
def test_defective_output_scores_zero(episode: Factory, why: str, program: str) -> None:
    """Exit 1, non-JSON, extra keys, floats, bools, duplicate keys, stderr only, sabotaged output: all 0."""
    env = episode()
    env.reset(**make_row())
    env.terminal(write_file("report.py", program))
    env.submit()
    assert env.get_reward() == 0.0


def test_hidden_answer_program_scores_one(episode: Factory) -> None:
    """Control for the defect cases: printing the hidden answer exactly scores 1.0."""
    env = episode()
    env.reset(**make_row())
    env.terminal(write_file("report.py", 'print(\'{"north": 11, "south": 5}\')'))
    env.submit()
    assert env.get_reward() == 1.0


def test_no_submission_scores_zero_when_healthy(episode: Factory, emu: Emulator) -> None:
    """get_reward without submit checks the policy sandbox, scores 0.0 and releases it."""
    env = episode()
    env.reset(**make_row())
    env.terminal("ls")
    mark = emu.ledger_mark()
    assert env.get_reward() == 0.0
    assert ops(emu, mark, "kill")
    assert env.receipt["phase"] == "finished"
