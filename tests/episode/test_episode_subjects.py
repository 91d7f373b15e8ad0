"""The defective sample subjects really have their one bug (the reference passes the same scenario).

Each subject is loaded from ``fixtures/subjects/episode_<bug>.py`` by path, built with zero
arguments as the catalog does, and pointed at the emulator through E2B_* variables.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import shlex
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from episode_helpers import make_row, write_file

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.episode.client import ReportEpisode
from pytest_e2b_env.episode.sandboxes import confirm_gone, sweep
from pytest_e2b_env.episode.server import LoopbackServer
from pytest_e2b_env.episode.task import load_repair
from pytest_e2b_env.errors import E2BEnvError
from pytest_e2b_env.settings import TargetSettings

SUBJECTS = Path(__file__).resolve().parents[2] / "fixtures" / "subjects"
FAMILIES = {
    "good",
    "defect",
    "timeout",
    "lost-worker",
    "cleanup-failure",
    "hostile",
    "lifecycle",
    "isolation",
}
HIDDEN_ANSWER = '{"north": 11, "south": 5}'


def load_subject(name: str) -> ModuleType:
    """Import ``fixtures/subjects/episode_<name>.py`` by path."""
    path = SUBJECTS / f"episode_{name}.py"
    spec = importlib.util.spec_from_file_location(f"episode_subject_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", autouse=True)
def plugin_env(emu: Emulator, target: TargetSettings, server: LoopbackServer) -> Iterator[None]:
    """What the plugin does before building a subject: E2B_* and the run id in the environment."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in emu.sdk_env().items():
            mp.setenv(key, value)
        mp.setenv("PYTEST_E2B_ENV_RUN", target.run_id)
        mp.setenv("PYTEST_E2B_ENV_OPENENV_URL", server.url)
        yield


@pytest.fixture
def subjects() -> Iterator[list[ReportEpisode]]:
    """Instances built in a test; their sessions are closed afterwards."""
    made: list[ReportEpisode] = []
    yield made
    for env in made:
        env._close()


def build(made: list[ReportEpisode], name: str | None) -> ReportEpisode:
    """A zero-argument instance of the named subject (None: the reference ReportEpisode)."""
    factory = ReportEpisode if name is None else load_subject(name).Subject
    env: ReportEpisode = factory()
    made.append(env)
    return env


def reward_or_error(env: ReportEpisode) -> Any:
    """get_reward's value, or the class name of what it raised."""
    try:
        return env.get_reward()
    except E2BEnvError as exc:
        return type(exc).__name__


def test_every_subject_declares_its_bug() -> None:
    """At least eight subjects, each with one-sentence BUG and a catalog family in CAUGHT_BY."""
    names = sorted(p.stem.removeprefix("episode_") for p in SUBJECTS.glob("episode_*.py"))
    assert len(names) >= 8
    for name in names:
        module = load_subject(name)
        assert module.BUG.endswith(".")
        assert module.CAUGHT_BY in FAMILIES
        assert issubclass(module.Subject, ReportEpisode)


def test_reset_tool_subject_exposes_a_tool() -> None:
    """episode_reset_tool: TRL would hand the model a reset_sandbox tool."""
    cls = load_subject("reset_tool").Subject
    tools = sorted(n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_"))
    assert "reset_sandbox" in tools


@pytest.mark.parametrize("name", [None, "trusts_reward_file"])
def test_forged_reward_file(subjects: list[ReportEpisode], name: str | None) -> None:
    """episode_trusts_reward_file scores a forged reward file 1.0; the reference scores 0.0."""
    env = build(subjects, name)
    env.reset(**make_row())
    env.terminal("mkdir -p /home/user/logs/verifier && echo 1.0 > /home/user/logs/verifier/reward.txt")
    env.submit()
    assert env.get_reward() == (0.0 if name is None else 1.0)


@pytest.mark.parametrize("name", [None, "copies_workdir"])
def test_companion_file(subjects: list[ReportEpisode], name: str | None) -> None:
    """episode_copies_workdir lets a companion module reach the verifier (1.0); the reference 0.0."""
    env = build(subjects, name)
    env.reset(**make_row())
    env.terminal(write_file("answer.py", f"TEXT = {HIDDEN_ANSWER!r}"))
    env.terminal(write_file("report.py", "from answer import TEXT\nprint(TEXT)"))
    env.submit()
    assert env.get_reward() == (0.0 if name is None else 1.0)


@pytest.mark.parametrize("name", [None, "loose_grading"])
def test_float_answer(subjects: list[ReportEpisode], name: str | None) -> None:
    """episode_loose_grading accepts floats for integers (1.0); the reference scores 0.0."""
    env = build(subjects, name)
    env.reset(**make_row())
    env.terminal(write_file("report.py", 'print(\'{"north": 11.0, "south": 5.0}\')'))
    env.submit()
    assert env.get_reward() == (0.0 if name is None else 1.0)


@pytest.mark.parametrize("name", [None, "tools_after_submit"])
def test_terminal_after_submit(subjects: list[ReportEpisode], name: str | None) -> None:
    """episode_tools_after_submit runs a command after submit; the reference refuses it."""
    env = build(subjects, name)
    env.reset(**make_row())
    env.submit()
    out = env.terminal("echo after")
    assert out.startswith("refused:") if name is None else out == "after"
    assert env.get_reward() == 0.0


@pytest.mark.parametrize("name", [None, "no_command_deadline"])
def test_command_deadline(subjects: list[ReportEpisode], name: str | None) -> None:
    """episode_no_command_deadline lets a command outlive limits.command_seconds; the reference kills it."""
    env = build(subjects, name)
    env.reset(**make_row(command_seconds=1, policy_seconds=30))
    out = env.terminal("sleep 2; echo late")
    assert out.startswith("[killed") if name is None else out == "late"
    assert env.get_reward() == 0.0


@pytest.mark.parametrize("name", [None, "infra_as_zero"])
def test_lost_verifier(subjects: list[ReportEpisode], emu: Emulator, name: str | None) -> None:
    """episode_infra_as_zero turns a lost verifier into reward 0.0; the reference raises."""
    env = build(subjects, name)
    env.reset(**make_row())
    emu.faults.add(route="POST /process.Process/Start", answer={"lose_sandbox": True}, contains="report.py")
    with contextlib.suppress(E2BEnvError):  # TRL shows this to the model and goes on to the reward
        env.submit()
    assert reward_or_error(env) == ("InfrastructureError" if name is None else 0.0)


@pytest.mark.parametrize("name", [None, "commit_before_cleanup"])
def test_verifier_kill_failure(
    subjects: list[ReportEpisode], emu: Emulator, target: TargetSettings, name: str | None
) -> None:
    """episode_commit_before_cleanup returns 1.0 although the verifier survived; the reference raises."""
    env = build(subjects, name)
    env.reset(**make_row())
    for command in load_repair("weekly-sales"):
        env.terminal(command)
    emu.faults.add(route="DELETE /sandboxes/*", answer={"kill_fails": True}, times=None, after=1)
    with contextlib.suppress(E2BEnvError):  # the reference raises here already
        env.submit()
    assert reward_or_error(env) == ("CleanupError" if name is None else 1.0)
    emu.faults.clear()
    reward_or_error(env)  # the reference retries its owned ids now that kills work again
    confirm_gone(target, sweep(target))  # what reap does after the defective subject


@pytest.mark.parametrize("name", [None, "leaks_policy"])
def test_policy_leak(subjects: list[ReportEpisode], target: TargetSettings, name: str | None) -> None:
    """episode_leaks_policy leaves the policy sandbox alive after get_reward; the reference leaves none."""
    env = build(subjects, name)
    env.reset(**make_row())
    env.submit()
    assert env.get_reward() == 0.0
    alive = sweep(target)
    confirm_gone(target, alive)
    assert len(alive) == (0 if name is None else 1)


ROUTE_CHECK = """
import sys as _pe2b_sys

with open("/proc/net/route") as _pe2b_routes:
    if any(line.split()[1] == "00000000" for line in _pe2b_routes.read().splitlines()[1:]):
        _pe2b_sys.exit(3)  # a default route: this verifier could reach the network
"""


@pytest.mark.namespaces
@pytest.mark.parametrize("name", [None, "verifier_network"])
def test_verifier_egress_measured(subjects: list[ReportEpisode], emu: Emulator, name: str | None) -> None:
    """Measured in the verifier's own kernel state: the reference's has no route out, the defect's has one.

    The repaired program exits 3 when its network namespace has a default route, so it earns 1.0
    only where the verifier is offline. Nothing is dialled: no test traffic leaves the machine.
    """
    if emu.isolation != "namespaces":
        pytest.skip(f"emulator isolation is {emu.isolation!r}: sandboxes share the host network")
    env = build(subjects, name)
    env.reset(**make_row())
    for command in load_repair("weekly-sales"):
        env.terminal(command)
    prepend = f"{{ printf %s {shlex.quote(ROUTE_CHECK)}; cat report.py; }} > r && mv r report.py"
    env.terminal(f"cd /home/user/work && {prepend}")
    env.submit()
    assert env.get_reward() == (1.0 if name is None else 0.0)


def test_reference_without_url_starts_its_own_server(
    subjects: list[ReportEpisode], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without PYTEST_E2B_ENV_OPENENV_URL, ReportEpisode() serves itself on loopback from E2B_* settings."""
    from pytest_e2b_env.episode.server import shared_server

    monkeypatch.delenv("PYTEST_E2B_ENV_OPENENV_URL")
    env = build(subjects, None)
    env.reset(**make_row())
    for command in load_repair("weekly-sales"):
        env.terminal(command)
    env.submit()
    assert env.get_reward() == 1.0
    assert shared_server(None).startswith("http://127.0.0.1:")
