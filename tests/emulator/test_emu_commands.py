"""commands.* through the real sync SDK: output, exit codes, envs/cwd/user, timeouts, background, stdin."""

from __future__ import annotations

from typing import Any

import pytest
from e2b import CommandExitException, InvalidArgumentException, TimeoutException
from emu_helpers import eventually


def test_run_returns_stdout_stderr_and_calls_back(sbx: Any) -> None:
    """run() returns both streams and feeds the on_stdout/on_stderr callbacks."""
    out: list[str] = []
    err: list[str] = []
    result = sbx.commands.run("echo out; echo err >&2", on_stdout=out.append, on_stderr=err.append)
    assert (result.stdout, result.stderr, result.exit_code, result.error) == ("out\n", "err\n", 0, None)
    assert "".join(out) == "out\n"
    assert "".join(err) == "err\n"


def test_nonzero_exit_raises_command_exit_exception(sbx: Any) -> None:
    """A non-zero exit raises CommandExitException carrying code, error text and output."""
    with pytest.raises(CommandExitException) as caught:
        sbx.commands.run("echo partial; echo bad >&2; exit 7")
    assert caught.value.exit_code == 7
    assert caught.value.error == "exit status 7"
    assert caught.value.stdout == "partial\n"
    assert caught.value.stderr == "bad\n"


def test_envs_and_home(sbx: Any) -> None:
    """Per-command envs are set; HOME and USER follow the user (user by default, root when asked)."""
    assert sbx.commands.run("echo $A", envs={"A": "1"}).stdout == "1\n"
    home, user = sbx.commands.run("echo $HOME $USER").stdout.split()
    assert home.endswith("/home/user")
    assert user == "user"
    home, user = sbx.commands.run("echo $HOME $USER", user="root").stdout.split()
    assert home.endswith("/root")
    assert user == "root"


@pytest.mark.namespaces
def test_cwd_and_user_as_on_e2b(sbx: Any, needs_namespaces: None) -> None:
    """Commands run as `user` in /home/user by default, as root when asked, in the cwd given."""
    assert sbx.commands.run("whoami; pwd").stdout == "user\n/home/user\n"
    assert sbx.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sbx.commands.run("whoami; pwd", user="root").stdout == "root\n/root\n"


def test_missing_cwd_is_invalid_argument(sbx: Any) -> None:
    """A cwd that does not exist raises InvalidArgumentException, as envd answers."""
    with pytest.raises(InvalidArgumentException, match="does not exist"):
        sbx.commands.run("true", cwd="/no/such/dir")


def test_timeout_raises_and_kills_the_process(sbx: Any) -> None:
    """timeout=1 on a long command raises TimeoutException and the process is gone afterwards."""
    with pytest.raises(TimeoutException):
        sbx.commands.run("sleep 30", timeout=1)
    # the server's kill and the client's deadline are due at the same instant: allow it to land
    eventually(lambda: [p for p in sbx.commands.list() if "sleep 30" in " ".join(p.args)] == [])


def test_leader_exit_returns_even_if_a_daemon_holds_stdout(sbx: Any) -> None:
    """A command whose leader exits returns at once although a daemon inherited stdout (envd semantics)."""
    result = sbx.commands.run("(sleep 30 &); echo started", timeout=10)
    assert result.stdout == "started\n"


def test_large_output_arrives_whole(sbx: Any) -> None:
    """Output larger than one 32 KiB chunk arrives complete and in order."""
    result = sbx.commands.run("python3 -c \"print('x' * 200000)\"")
    assert result.stdout == "x" * 200000 + "\n"


def test_background_handle_wait_kill_and_list(sbx: Any) -> None:
    """A background command is listed, can be killed (exit -1, 'signal: killed') and disappears from list."""
    handle = sbx.commands.run("sleep 30", background=True)
    assert handle.pid in [p.pid for p in sbx.commands.list()]
    assert handle.kill() is True
    with pytest.raises(CommandExitException) as caught:
        handle.wait()
    assert (caught.value.exit_code, caught.value.error) == (-1, "signal: killed")
    assert handle.pid not in [p.pid for p in sbx.commands.list()]
    assert sbx.commands.kill(handle.pid) is False


def test_background_stdin_round_trip(sbx: Any) -> None:
    """send_stdin reaches a background command's stdin; close_stdin ends it."""
    handle = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.send_stdin(handle.pid, "ping\n")
    sbx.commands.close_stdin(handle.pid)
    assert handle.wait().stdout == "ping\n"


def test_connect_to_running_command(sbx: Any) -> None:
    """commands.connect(pid) follows a running command to its end."""
    handle = sbx.commands.run("sleep 0.5; echo done", background=True)
    again = sbx.commands.connect(handle.pid)
    assert again.wait().exit_code == 0


def test_setsid_daemon_survives_the_command_and_dies_with_the_sandbox(sbx: Any) -> None:
    """A setsid daemon outlives its command (like on E2B) and is visible to later commands."""
    sbx.commands.run("setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo ok")
    assert sbx.commands.run("pgrep -f 'sleep 300' >/dev/null && echo alive").stdout == "alive\n"
