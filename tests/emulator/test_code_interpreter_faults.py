"""run_code's deadlines, a sandbox dying mid-cell, and wire faults on the code-interpreter port."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from e2b import TimeoutException
from e2b_code_interpreter import Sandbox

from pytest_e2b_env.emulator import Emulator

T = 30
KILLED = "The sandbox was killed while the request was in progress"
SLEEP = "import time\nprint('started', flush=True)\ntime.sleep(60)"


@pytest.fixture
def ci(opts: dict[str, str], run_id: str) -> Iterator[Sandbox]:
    """A code-interpreter sandbox, killed after the test (if still alive)."""
    sandbox = Sandbox.create(timeout=120, metadata={"test_run": run_id}, **opts)
    yield sandbox
    sandbox.kill()


def test_execution_timeout_raises_and_interrupts_the_cell(ci: Sandbox) -> None:
    """timeout= raises the SDK's TimeoutException; E2B's server then interrupts the cell."""
    cell = "import time\ntry:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n    interrupted = True\n"
    with pytest.raises(TimeoutException, match="Execution timed out"):
        ci.run_code(cell, timeout=0.5)
    # the next cell runs once the interrupted one has ended, in the same kernel
    assert ci.run_code("interrupted", timeout=T).text == "True"


def test_an_interrupted_cell_stops_and_so_do_its_children(ci: Sandbox) -> None:
    """The interrupt reaches the kernel's process group: a child process waited on is stopped too."""
    cell = "import subprocess\nsubprocess.run(['sleep', '30'])\nfinished = True"
    with pytest.raises(TimeoutException, match="Execution timed out"):
        ci.run_code(cell, timeout=0.5)
    after = ci.run_code("'finished' in dir()", timeout=T)
    assert after.text == "False"


def test_request_timeout_raises_the_request_error(ci: Sandbox, faults: Any) -> None:
    """A context call slower than request_timeout raises the SDK's request TimeoutException."""
    faults.add(route="POST /contexts", sandbox=ci.sandbox_id, answer={"delay": 3})
    with pytest.raises(TimeoutException, match="Request timed out"):
        ci.create_code_context(request_timeout=0.5)


def test_killing_the_sandbox_ends_a_running_cell(ci: Sandbox, opts: dict[str, str]) -> None:
    """A kill mid-cell cuts the stream; the SDK raises its 'sandbox was killed' TimeoutException."""
    timer = threading.Timer(1.0, lambda: Sandbox.kill(ci.sandbox_id, **opts))
    timer.start()
    try:
        with pytest.raises(TimeoutException, match=KILLED):
            ci.run_code(SLEEP, timeout=T)
    finally:
        timer.cancel()
    assert not ci.is_running()


def test_sandbox_expiry_ends_a_running_cell(opts: dict[str, str], run_id: str) -> None:
    """A sandbox reaching its lifetime mid-cell ends the cell as a kill does."""
    sandbox = Sandbox.create(timeout=2, metadata={"test_run": run_id}, **opts)
    with pytest.raises(TimeoutException, match=KILLED):
        sandbox.run_code(SLEEP, timeout=T)


def test_lose_sandbox_mid_cell(ci: Sandbox, faults: Any, emu: Emulator) -> None:
    """lose_sandbox on POST /execute kills the sandbox once the cell has started; ledger says so."""
    mark = emu.ledger_mark()
    faults.add(route="POST /execute", sandbox=ci.sandbox_id, answer={"lose_sandbox": True})
    with pytest.raises(TimeoutException, match=KILLED):
        ci.run_code(SLEEP, timeout=T)
    entries = [(e["op"], e["detail"]) for e in emu.ledger(since=mark) if e["sandbox_id"] == ci.sandbox_id]
    assert entries[0][0] == "fault"
    assert entries[0][1].endswith(": lose_sandbox")
    assert ("kill", "lost (fault)") in entries


def test_dropped_stream_is_the_sdks_transport_error(ci: Sandbox, faults: Any) -> None:
    """drop_stream on POST /execute cuts the body after the first line; the SDK re-raises httpx's error."""
    faults.add(route="POST /execute", sandbox=ci.sandbox_id, answer={"drop_stream": True})
    with pytest.raises(httpx.RemoteProtocolError):
        ci.run_code("print('x')\n1", timeout=T)
    assert ci.is_running()
    assert ci.run_code("2", timeout=T).text == "2"  # times=1: the kernel is still there


def test_502_is_the_sdks_sandbox_timeout_error(ci: Sandbox, faults: Any) -> None:
    """A 502 on run_code is mapped by the SDK to its TimeoutException about the sandbox timeout."""
    faults.add(route="POST /execute", sandbox=ci.sandbox_id, answer={"status": 502})
    with pytest.raises(TimeoutException, match="sandbox timeout"):
        ci.run_code("1", timeout=T)


def test_delay_passes_through(ci: Sandbox, faults: Any) -> None:
    """A delay fault on run_code only slows it down."""
    faults.add(route="POST /execute", sandbox=ci.sandbox_id, answer={"delay": 0.3})
    assert ci.run_code("5", timeout=T).text == "5"


def test_killed_sandbox_refuses_run_code(ci: Sandbox) -> None:
    """After a kill, run_code gets the edge's 502 and the SDK's TimeoutException."""
    ci.kill()
    with pytest.raises(TimeoutException, match="sandbox timeout"):
        ci.run_code("1", timeout=T)
