"""Timeouts, lost sandboxes and cleanup failures: never a reward, always an error at the boundary."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from episode_helpers import make_row, ops, policy_id

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.episode.client import ReportEpisode
from pytest_e2b_env.episode.task import load_repair
from pytest_e2b_env.errors import CleanupError, InfrastructureError
from pytest_e2b_env.settings import TargetSettings

Factory = Callable[[], ReportEpisode]
VERIFY_COMMAND = "python3 -B report.py"


def test_command_deadline_kills_and_episode_goes_on(episode: Factory) -> None:
    """A command past limits.command_seconds is killed and reported; the next command still runs."""
    env = episode()
    env.reset(**make_row(command_seconds=1))
    out = env.terminal("echo started; sleep 30; echo never")
    assert out == "started\n[killed: the command exceeded its 1 s deadline; the episode goes on]"
    assert env.terminal("echo alive") == "alive"
    for command in load_repair("weekly-sales"):
        env.terminal(command)
    env.submit()
    assert env.get_reward() == 1.0


@pytest.mark.full
def test_command_deadline_kills_background_children(episode: Factory) -> None:
    """Children in the command's process group die with it at the deadline."""
    env = episode()
    env.reset(**make_row(command_seconds=1))
    env.terminal("(sleep 2; echo leaked > late.txt) & sleep 30")
    time.sleep(2.5)  # let the child's sleep run out, had it survived
    assert env.terminal("ls late.txt 2>&1 || true").endswith("No such file or directory")
    assert env.get_reward() == 0.0


def test_command_killing_its_wrapper_is_an_outcome(episode: Factory) -> None:
    """kill -9 -1 from the policy ends its own command, is reported, and the episode goes on."""
    env = episode()
    env.reset(**make_row())
    assert env.terminal("kill -9 -1").startswith("[exit code")
    assert env.terminal("echo alive") == "alive"
    assert env.get_reward() == 0.0


def test_output_is_bounded(episode: Factory) -> None:
    """A command printing 1 MiB returns a bounded excerpt and says how much there was."""
    env = episode()
    env.reset(**make_row())
    out = env.terminal("head -c 1048576 /dev/zero | tr '\\0' 'x'")
    assert out.endswith("[output truncated: first 16384 bytes shown]")
    assert len(out) < 17000
    assert env.get_reward() == 0.0


def test_the_policy_window_runs_on_the_monotonic_clock(episode: Factory) -> None:
    """By default the window is real time: half a second after reset, commands are refused."""
    env = episode()
    env.reset(**make_row(policy_seconds=0.5))
    time.sleep(0.6)
    assert env.terminal("echo hi") == "refused: the policy window expired; the episode scored 0."
    assert env.get_reward() == 0.0


def test_lost_policy_sandbox_raises_at_reward(episode: Factory, emu: Emulator) -> None:
    """Policy sandbox lost mid-command: the tool raises, and get_reward raises again (never 0)."""
    env = episode()
    env.reset(**make_row())
    emu.faults.add(route="POST /process.Process/Start", answer={"lose_sandbox": True}, sandbox=policy_id(env))
    with pytest.raises(InfrastructureError):
        env.terminal("ls")
    with pytest.raises(InfrastructureError):
        env.get_reward()


def test_lost_policy_swallowed_by_tool_loop_still_raises(episode: Factory, emu: Emulator) -> None:
    """Even when TRL's tool loop catches the tool's error, get_reward raises instead of scoring."""
    env = episode()
    env.reset(**make_row())
    emu.faults.add(route="POST /process.Process/Start", answer={"lose_sandbox": True}, sandbox=policy_id(env))
    try:
        env.terminal("ls")
    except InfrastructureError as exc:  # what TRL does: show {"error": ...} to the model, go on
        shown = {"error": str(exc)}
    assert "terminal" in shown["error"]
    with pytest.raises(InfrastructureError):
        env.submit()
    with pytest.raises(InfrastructureError):
        env.get_reward()


def test_policy_gone_before_reward_raises(episode: Factory, target: TargetSettings) -> None:
    """No submission and a dead policy sandbox: get_reward raises instead of accepting 0."""
    import e2b

    env = episode()
    env.reset(**make_row())
    e2b.Sandbox.kill(policy_id(env), **target.sdk_opts())
    with pytest.raises(InfrastructureError):
        env.get_reward()


def test_lost_verifier_raises_at_reward(episode: Factory, emu: Emulator) -> None:
    """Verifier lost while running the artifact: submit and get_reward raise, nothing leaks."""
    env = episode()
    env.reset(**make_row())
    emu.faults.add(
        route="POST /process.Process/Start", answer={"lose_sandbox": True}, contains=VERIFY_COMMAND
    )
    with pytest.raises(InfrastructureError):
        env.submit()
    with pytest.raises(InfrastructureError):
        env.get_reward()
    assert env.receipt["reward"] is None


def test_verifier_create_failure_raises(episode: Factory, emu: Emulator) -> None:
    """The verifier cannot be created (503 after the SDK's retries): InfrastructureError, no score."""
    env = episode()
    env.reset(**make_row())
    emu.faults.add(route="POST /v2/sandboxes", answer={"status": 500}, times=10)
    with pytest.raises(InfrastructureError):
        env.submit()
    emu.faults.clear()
    with pytest.raises(InfrastructureError):
        env.get_reward()


def test_policy_kill_failure_blocks_score(episode: Factory, emu: Emulator) -> None:
    """Policy kill fails at submit: CleanupError naming it, no verifier, no score; ids stay owned."""
    env = episode()
    env.reset(**make_row())
    pid = policy_id(env)
    emu.faults.add(route="DELETE /sandboxes/*", answer={"kill_fails": True}, times=None)
    mark = emu.ledger_mark()
    with pytest.raises(CleanupError) as raised:
        env.submit()
    assert raised.value.ids == (pid,)
    assert ops(emu, mark, "create") == []
    assert env.receipt["owned"] == [pid]
    with pytest.raises(CleanupError):
        env.get_reward()  # still failing: the error is raised again, the id still owned
    emu.faults.clear()
    with pytest.raises(CleanupError):
        env.get_reward()  # the retry releases it, but the episode stays void
    assert pid not in {s["sandbox_id"] for s in emu.sandboxes()}


def test_verifier_kill_failure_blocks_score(episode: Factory, emu: Emulator) -> None:
    """Verifier kill fails: CleanupError naming the verifier; the repaired program's 1.0 is never returned."""
    env = episode()
    env.reset(**make_row())
    for command in load_repair("weekly-sales"):
        env.terminal(command)
    emu.faults.add(route="DELETE /sandboxes/*", answer={"kill_fails": True}, times=None, after=1)
    with pytest.raises(CleanupError) as raised:
        env.submit()
    verifier = next(s["sandbox_id"] for s in env.receipt["sandboxes"] if s["role"] == "verifier")
    assert raised.value.ids == (verifier,)
    emu.faults.clear()
    with pytest.raises(CleanupError):
        env.get_reward()


def test_transient_kill_failure_is_retried(episode: Factory, emu: Emulator) -> None:
    """One failed kill is retried and confirmed; the score stands."""
    env = episode()
    env.reset(**make_row())
    emu.faults.add(route="DELETE /sandboxes/*", answer={"kill_fails": True}, times=1)
    env.submit()
    assert env.get_reward() == 0.0


def test_lost_reset_response_is_swept(episode: Factory, emu: Emulator) -> None:
    """Create succeeds but its response is lost: reset raises and the run-id sweep kills the orphan."""
    env = episode()
    mark = emu.ledger_mark()
    emu.faults.add(route="POST /v2/sandboxes", answer={"drop_stream": True})
    with pytest.raises(InfrastructureError):
        env.reset(**make_row())
    # the ledger records the faulted create (op "fault") with the id the SDK never saw
    created = [e["sandbox_id"] for e in emu.ledger(since=mark) if e["route"] == "POST /v2/sandboxes"]
    assert created
    assert all(created)
    assert set(created) <= {e["sandbox_id"] for e in ops(emu, mark, "kill")}
    assert not set(created) & {s["sandbox_id"] for s in emu.sandboxes()}
    env.reset(**make_row())  # the same instance recovers on the next episode
    env.submit()
    assert env.get_reward() == 0.0


def test_server_gone_mid_episode_raises_and_releases(target: TargetSettings, emu: Emulator) -> None:
    """The OpenEnv server stops mid-episode: tools and get_reward raise; the session's sandbox is released."""
    from pytest_e2b_env.episode.server import LoopbackServer, create_app

    srv = LoopbackServer(create_app(target=target, max_sessions=1)).start()
    env = ReportEpisode(srv.url)
    try:
        env.reset(**make_row())
        pid = policy_id(env)
        srv.close()
        with pytest.raises(InfrastructureError, match="OpenEnv step failed"):
            env.terminal("ls")
        with pytest.raises(InfrastructureError, match="OpenEnv step failed"):
            env.get_reward()
        assert pid not in {s["sandbox_id"] for s in emu.sandboxes()}
    finally:
        env._close()
        srv.close()


def test_rate_limited_create_waits_and_succeeds(episode: Factory, emu: Emulator) -> None:
    """429 with Retry-After on the policy create: the SDK waits, reset succeeds, the episode scores."""
    env = episode()
    emu.faults.add(route="POST /v2/sandboxes", answer={"status": 429, "retry_after": 1}, times=1)
    env.reset(**make_row())
    env.submit()
    assert env.get_reward() == 0.0


def test_auth_failure_raises_at_once(episode: Factory, emu: Emulator) -> None:
    """401 on create: reset raises InfrastructureError naming the SDK error; get_reward raises too."""
    env = episode()
    emu.faults.add(route="POST /v2/sandboxes", answer={"status": 401}, times=None)
    with pytest.raises(InfrastructureError, match="AuthenticationException"):
        env.reset(**make_row())
    with pytest.raises(InfrastructureError):
        env.get_reward()
