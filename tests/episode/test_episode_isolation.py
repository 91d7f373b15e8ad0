"""Isolation and lifecycle: what the model can reach, what the verifier receives, what survives."""

from __future__ import annotations

import inspect
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime

import pytest
from episode_helpers import make_row, ops, write_file

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.episode.client import ReportEpisode
from pytest_e2b_env.episode.server import LoopbackServer, create_app
from pytest_e2b_env.episode.task import load_repair
from pytest_e2b_env.errors import InfrastructureError
from pytest_e2b_env.settings import TargetSettings
from pytest_e2b_env.targets.tags import RUN_KEY

Factory = Callable[[], ReportEpisode]
HIDDEN_ANSWER = '{"north": 11, "south": 5}'


def test_model_tools_are_exactly_terminal_and_submit() -> None:
    """TRL's discovery (public functions minus reset/get_reward) finds exactly terminal and submit."""
    found = [n for n, _ in inspect.getmembers(ReportEpisode, inspect.isfunction) if not n.startswith("_")]
    assert sorted(found) == ["get_reward", "reset", "submit", "terminal"]


@pytest.mark.full
def test_tool_schemas_build_with_transformers() -> None:
    """The tools carry type hints and Args: docstrings, so transformers builds their JSON schema."""
    from transformers.utils import get_json_schema

    env = ReportEpisode()
    terminal = get_json_schema(env.terminal)["function"]
    assert terminal["parameters"]["required"] == ["command"]
    assert terminal["parameters"]["properties"]["command"]["type"] == "string"
    assert get_json_schema(env.submit)["function"]["name"] == "submit"


def test_construction_allocates_nothing() -> None:
    """ReportEpisode() opens no connection, starts no thread and creates no sandbox."""
    before = threading.active_count()
    envs = [ReportEpisode() for _ in range(8)]
    assert threading.active_count() == before
    assert all(env._client is None for env in envs)


def test_sandboxes_are_tagged_offline_and_bounded(
    episode: Factory, emu: Emulator, target: TargetSettings
) -> None:
    """Policy and verifier carry run-id metadata and a role, have no internet and a lifetime."""
    env = episode()
    env.reset(**make_row(policy_seconds=60))
    (policy,) = [s for s in emu.sandboxes() if s["sandbox_id"] == env.receipt["sandboxes"][0]["sandbox_id"]]
    assert policy["metadata"][RUN_KEY] == target.run_id
    assert policy["metadata"]["role"] == "policy"
    assert policy["allow_internet_access"] is False
    lifetime = datetime.fromisoformat(policy["end_at"]) - datetime.fromisoformat(policy["started_at"])
    assert 60 <= lifetime.total_seconds() <= 120
    mark = emu.ledger_mark()
    env.submit()
    env.get_reward()
    (create,) = ops(emu, mark, "create")
    assert create["sandbox_id"] == env.receipt["sandboxes"][1]["sandbox_id"]


def test_tool_calls_after_submit_are_refused(episode: Factory, emu: Emulator) -> None:
    """After submit, terminal and submit are refused and nothing reaches any sandbox."""
    env = episode()
    env.reset(**make_row())
    env.submit()
    mark = emu.ledger_mark()
    assert env.terminal("touch after.txt").startswith("refused:")
    assert env.submit().startswith("refused:")
    assert ops(emu, mark, "run") == []
    assert env.get_reward() == 0.0


def test_hidden_input_never_enters_the_policy_sandbox(episode: Factory) -> None:
    """The policy finds only the visible input: no trace of the hidden rows or answers."""
    env = episode()
    env.reset(**make_row())
    assert env.terminal("ls -A") == "report.py\nsales.csv"
    assert env.terminal("grep -rsl -e north -e south /home/user /tmp || echo clean") == "clean"
    assert env.get_reward() == 0.0


def test_forged_reward_file_is_ignored(episode: Factory) -> None:
    """A reward file the policy writes where OpenEnv Terminus looks for one changes nothing."""
    env = episode()
    env.reset(**make_row())
    env.terminal("mkdir -p /home/user/logs/verifier && echo 1.0 > /home/user/logs/verifier/reward.txt")
    env.submit()
    assert env.get_reward() == 0.0


def test_companion_files_never_reach_the_verifier(episode: Factory) -> None:
    """A program that needs a companion file from the policy sandbox fails in the verifier: 0."""
    env = episode()
    env.reset(**make_row())
    env.terminal(write_file("answer.py", f"TEXT = {HIDDEN_ANSWER!r}"))
    env.terminal(write_file("report.py", "from answer import TEXT\nprint(TEXT)"))
    assert env.terminal("python3 -B report.py") == HIDDEN_ANSWER
    env.submit()
    assert env.get_reward() == 0.0


def test_verifier_sees_only_artifact_and_hidden_input(episode: Factory) -> None:
    """Measured from inside: the verifier's workdir holds report.py and the hidden sales.csv only."""
    probe = (
        "import os\n"
        "names = sorted(os.listdir('.'))\n"
        "data = open('sales.csv').read()\n"
        "ok = names == ['report.py', 'sales.csv'] and 'north' in data and 'east' not in data\n"
        f"print({HIDDEN_ANSWER!r} if ok else '{{}}')"
    )
    env = episode()
    env.reset(**make_row())
    env.terminal("echo junk > notes.txt; mkdir -p cache; echo x > cache/x")
    env.terminal(write_file("report.py", probe))
    env.submit()
    assert env.get_reward() == 1.0


def test_policy_background_process_does_not_outlive_submit(episode: Factory, emu: Emulator) -> None:
    """A setsid daemon started by the policy dies with the policy sandbox before verification."""
    env = episode()
    env.reset(**make_row())
    env.terminal("setsid sh -c 'sleep 600' >/dev/null 2>&1 < /dev/null &")
    pid = env.receipt["sandboxes"][0]["sandbox_id"]
    env.submit()
    assert env.get_reward() == 0.0
    assert pid not in {s["sandbox_id"] for s in emu.sandboxes()}


def test_reset_replaces_and_confirms_previous_sandbox(episode: Factory, emu: Emulator) -> None:
    """A second reset kills the first policy sandbox and confirms it gone before creating the next."""
    env = episode()
    env.reset(**make_row())
    env.terminal("echo first > mark.txt")
    first = env.receipt["sandboxes"][0]["sandbox_id"]
    mark = emu.ledger_mark()
    env.reset(**make_row())
    entries = emu.ledger(since=mark)
    kinds = [
        (e["op"], e["sandbox_id"], e["status"]) for e in entries if e["op"] in {"kill", "get_info", "create"}
    ]
    assert kinds[:2] == [("kill", first, 204), ("get_info", first, 404)]
    assert kinds[-1][0] == "create"
    assert env.terminal("cat mark.txt 2>&1 || true").endswith("No such file or directory")
    assert env.get_reward() == 0.0


def test_parallel_episodes_stay_isolated(episode: Factory) -> None:
    """Two concurrent episodes: neither sees the other's files; repaired scores 1.0, buggy 0.0."""
    envs = [episode(), episode()]
    results: dict[int, object] = {}

    def run(i: int) -> None:
        try:
            env = envs[i]
            env.reset(**make_row())
            env.terminal(f"echo lane{i} > lane.txt")
            time.sleep(0.2)  # overlap the two episodes
            seen = env.terminal("cat lane.txt")
            if i == 0:
                for command in load_repair("weekly-sales"):
                    env.terminal(command)
            env.submit()
            results[i] = (seen, env.get_reward())
        except Exception as exc:  # reported by the assertion below
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert results == {0: ("lane0", 1.0), 1: ("lane1", 0.0)}
    ids = [s["sandbox_id"] for env in envs for s in env.receipt["sandboxes"]]
    assert len(set(ids)) == 4


def test_sessions_are_bounded(target: TargetSettings) -> None:
    """A server for one session refuses a second concurrent episode with CAPACITY_REACHED."""
    with LoopbackServer(create_app(target=target, max_sessions=1)) as srv:
        first, second = ReportEpisode(srv.url), ReportEpisode(srv.url)
        try:
            first.reset(**make_row())
            with pytest.raises(InfrastructureError, match="CAPACITY_REACHED"):
                second.reset(**make_row())
            assert first.get_reward() == 0.0
        finally:
            first._close()
            second._close()


@pytest.mark.namespaces
def test_verifier_egress_is_blocked(episode: Factory, emu: Emulator) -> None:
    """Measured: a verifier program connecting to a host listener never arrives, and scores 0."""
    if emu.isolation != "namespaces":
        pytest.skip(f"emulator isolation is {emu.isolation!r}: sandboxes share the host network")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    probe = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2).close()\n"
        f"    print({HIDDEN_ANSWER!r})\n"
        "except OSError:\n"
        "    raise SystemExit(3)\n"
    )
    try:
        env = episode()
        env.reset(**make_row())
        env.terminal(write_file("report.py", probe))
        env.submit()
        assert env.get_reward() == 0.0
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()


@pytest.mark.slow
def test_tool_call_may_exceed_openenv_30s_cap(episode: Factory) -> None:
    """A 32 s command under a 40 s deadline completes: the step budget is not OpenEnv's 30 s."""
    env = episode()
    env.reset(**make_row(command_seconds=40))
    assert env.terminal("sleep 32; echo done") == "done"
    assert env.get_reward() == 0.0
