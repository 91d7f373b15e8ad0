"""The emulator as a process: CLI output, signals, misuse, and nothing outliving its owner."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from e2b import Sandbox
from emu_helpers import eventually, host_pids_with

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.errors import EmulatorError

CLI = [sys.executable, "-m", "pytest_e2b_env.cli", "emulator"]


def _marker() -> str:
    """A sleep argument no other process on the machine has."""
    return f"{random.randint(100000, 999999)}.{random.randint(100000, 999999)}"


class _Served:
    def __init__(self, proc: subprocess.Popen[str], lines: list[str]) -> None:
        self.proc = proc
        self.lines = lines
        self.env = dict(line.split("=", 1) for line in lines[:3])
        self.isolation = lines[3].removeprefix("# isolation=").split(":")[0]

    def opts(self) -> dict[str, str]:
        return {
            "api_key": self.env["E2B_API_KEY"],
            "api_url": self.env["E2B_API_URL"],
            "sandbox_url": self.env["E2B_SANDBOX_URL"],
        }


@pytest.fixture
def served() -> Iterator[_Served]:
    """`pytest-e2b-env emulator --port 0` as a subprocess, its announcement read."""
    proc = subprocess.Popen([*CLI, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines = [proc.stdout.readline().rstrip("\n") for _ in range(4)]
    try:
        yield _Served(proc, lines)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _start_sleeper(opts: dict[str, str], command: str) -> Any:
    sbx = Sandbox.create(timeout=300, **opts)
    sbx.commands.run(command, timeout=10)
    return sbx


def test_cli_prints_three_sourceable_lines_first(served: _Served) -> None:
    """The first stdout lines are E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, then the isolation level."""
    assert [line.split("=", 1)[0] for line in served.lines[:3]] == [
        "E2B_API_URL",
        "E2B_SANDBOX_URL",
        "E2B_API_KEY",
    ]
    assert served.env["E2B_API_URL"].startswith("http://127.0.0.1:")
    assert served.env["E2B_SANDBOX_URL"] == served.env["E2B_API_URL"]
    assert served.env["E2B_API_KEY"].startswith("e2b_")
    assert served.isolation in ("namespaces", "process")
    sbx = Sandbox.create(**served.opts())
    assert sbx.commands.run("echo via-cli").stdout == "via-cli\n"


@pytest.mark.full
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_exits_zero_and_kills_every_sandbox(served: _Served, sig: int) -> None:
    """SIGTERM/SIGINT: exit 0, and no process of any sandbox is left on the host."""
    marker = _marker()
    _start_sleeper(served.opts(), f"nohup sleep {marker} >/dev/null 2>&1 &")
    eventually(lambda: bool(host_pids_with(marker)), what="the sandbox's sleeper started")
    served.proc.send_signal(sig)
    assert served.proc.wait(timeout=20) == 0
    eventually(lambda: host_pids_with(marker) == [], what="no sandbox process left")


def test_port_in_use_is_a_one_line_error() -> None:
    """A port already taken gives one line on stderr and exit 2."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run([*CLI, "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().count("\n") == 0
    assert f"port {port} on 127.0.0.1 is in use" in done.stderr


@pytest.mark.parametrize("port", ["70000", "http", "-1"])
def test_bad_port_is_a_one_line_error(port: str) -> None:
    """A port that is not 0-65535 is refused in one line with exit 2."""
    done = subprocess.run([*CLI, "--port", port], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "port" in done.stderr


@pytest.mark.full
def test_exception_in_owner_leaves_nothing() -> None:
    """An exception inside `with Emulator()` still kills every sandbox process."""
    marker = _marker()

    def owner() -> None:
        with Emulator() as emu:
            _start_sleeper(emu.sdk_opts(), f"nohup sleep {marker} >/dev/null 2>&1 &")
            eventually(lambda: bool(host_pids_with(marker)), what="the sandbox's sleeper started")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        owner()
    eventually(lambda: host_pids_with(marker) == [], what="no sandbox process left")


@pytest.mark.full
def test_sigkill_of_the_owner_takes_the_emulator_and_sandboxes_down() -> None:
    """SIGKILL of the process that owns an Emulator: the emulator exits and kills every sandbox."""
    marker = _marker()
    script = textwrap.dedent(
        f"""
        import sys, time
        from e2b import Sandbox
        from pytest_e2b_env.emulator import Emulator
        emu = Emulator().start()
        sbx = Sandbox.create(**emu.sdk_opts())
        sbx.commands.run("nohup sleep {marker} >/dev/null 2>&1 &")
        print(emu.pid, flush=True)
        time.sleep(600)
        """
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    emulator_pid = int(owner.stdout.readline())
    owner.stdout.close()
    eventually(lambda: bool(host_pids_with(marker)), what="the sandbox's sleeper started")
    owner.kill()
    owner.wait(timeout=10)
    eventually(
        lambda: not os.path.exists(f"/proc/{emulator_pid}") or _zombie(emulator_pid), what="emulator gone"
    )
    eventually(lambda: host_pids_with(marker) == [], what="no sandbox process left")


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.full
@pytest.mark.namespaces
def test_sigkill_of_the_emulator_leaves_no_sandbox_process(served: _Served) -> None:
    """SIGKILL of the emulator itself: its sandbox inits die with it, setsid daemons included."""
    if served.isolation != "namespaces":
        pytest.skip(f"emulator isolation is {served.isolation!r}: {served.lines[3]}")
    marker = _marker()
    _start_sleeper(served.opts(), f"setsid sleep {marker} >/dev/null 2>&1 < /dev/null &")
    eventually(lambda: bool(host_pids_with(marker)), what="the sandbox's daemon started")
    served.proc.kill()
    served.proc.wait(timeout=10)
    eventually(lambda: host_pids_with(marker) == [], what="no sandbox process left")


def test_emulator_on_a_busy_port_raises_emulator_error() -> None:
    """Emulator(port=<taken>) raises EmulatorError carrying the server's one-line reason."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(EmulatorError, match=f"port {port} on 127.0.0.1 is in use"):
            Emulator(port=port).start()
