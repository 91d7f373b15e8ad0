"""Code-interpreter output nobody reads holds the kernel back, not the emulator's memory.

Caps here are small (one message 1 MiB, a cell 1 MiB, a sandbox 2 MiB), so the bounds below
are a few MiB while the cells produce tens of MiB each.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2b_code_interpreter import Sandbox

from pytest_e2b_env.emulator import Emulator

T = 120
LIMITS = {
    "interpreter_message_bytes": 1 << 20,
    "interpreter_output_bytes": 1 << 20,
    "interpreter_sandbox_bytes": 2 << 20,
}
#: what the emulator may hold for one sandbox: the sandbox cap (or one message, if larger), each
#: line at most twice while it is sent (its value and the server's buffer), the kernel frame
#: being parsed, and the allocator's slack
HELD = 2 * max(LIMITS["interpreter_sandbox_bytes"], LIMITS["interpreter_message_bytes"])
BOUND = HELD + 2 * LIMITS["interpreter_message_bytes"] + (24 << 20)

DISPLAYS = 80  # per context: 80 x 600 kB = 48 MB of output each
SIZE = 600_000
CELL = """
import os
class Big:
    def __init__(self, i):
        self.i = i
    def _repr_html_(self):
        return str(self.i % 10) * {size}
for i in range({n}):
    display(Big(i))
    with open({progress!r}, 'w') as f:
        f.write(str(i + 1))
"""


def rss_kib(pid: int | None) -> int:
    """Resident memory of a process, from /proc."""
    text = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("VmRSS:"))


@pytest.fixture(scope="module")
def interp_emu() -> Iterator[Emulator]:
    """An emulator of its own with small code-interpreter output caps."""
    with Emulator(limits=LIMITS) as emulator:
        yield emulator


@pytest.fixture
def ci(interp_emu: Emulator) -> Iterator[Sandbox]:
    """A code-interpreter sandbox on that emulator, killed after the test."""
    sandbox = Sandbox.create(timeout=300, **interp_emu.sdk_opts())
    yield sandbox
    sandbox.kill()


def _progress(ci: Sandbox, path: str) -> int:
    text = ci.files.read(path) if ci.files.exists(path) else ""
    return int(text or 0)


def _open_cell(client: httpx.Client, emu: Emulator, ci: Sandbox, code: str, context_id: str) -> Any:
    """POST /execute as the SDK does, returning the response with its body left unread."""
    headers = {
        "E2b-Sandbox-Id": ci.sandbox_id,
        "E2b-Sandbox-Port": "49999",
        "E2B-Traffic-Access-Token": str(ci.traffic_access_token),
    }
    body = {"code": code, "context_id": context_id}
    request = client.build_request("POST", f"{emu.url}/execute", json=body, headers=headers)
    response = client.send(request, stream=True)
    assert response.status_code == 200
    return response


def test_unread_cells_keep_the_emulator_bounded_and_lose_nothing(interp_emu: Emulator, ci: Sandbox) -> None:
    """Two contexts displaying 48 MB each to clients that do not read: memory stays under the caps'
    bound, the kernels wait, other sandboxes answer; read later, every line arrives in order."""
    contexts = [ci.create_code_context(), ci.create_code_context()]
    ci.run_code("1", context=contexts[0], timeout=T)  # kernels started before the measurement
    ci.run_code("1", context=contexts[1], timeout=T)
    before = rss_kib(interp_emu.pid)
    client = httpx.Client(timeout=T)
    progress = [f"/tmp/progress-{n}" for n in range(2)]
    responses = [
        _open_cell(client, interp_emu, ci, CELL.format(size=SIZE, n=DISPLAYS, progress=p), c.id)
        for c, p in zip(contexts, progress, strict=True)
    ]
    try:
        peak, seen, steady = 0, (-1, -1), 0
        deadline = time.monotonic() + 120  # a bound on the test, not a claim about speed
        while steady < 15 and time.monotonic() < deadline:
            time.sleep(0.2)
            peak = max(peak, rss_kib(interp_emu.pid) - before)
            now = (_progress(ci, progress[0]), _progress(ci, progress[1]))
            steady = steady + 1 if now == seen else 0
            seen = now
        assert peak << 10 < BOUND, f"emulator grew {peak} KiB holding unread output"
        assert all(n < DISPLAYS for n in seen), f"kernels were not held back: {seen}"
        # other sandboxes (and this sandbox's envd) answer meanwhile
        other = Sandbox.create(timeout=120, **interp_emu.sdk_opts())
        try:
            assert other.run_code("6 * 7", timeout=T).text == "42"
            assert other.commands.run("echo ok", timeout=60).stdout == "ok\n"
        finally:
            other.kill()
        assert ci.commands.run("echo ok", timeout=60).stdout == "ok\n"
        # a reader that reads gets every line, whole and in order
        for response in responses:
            lines = [json.loads(line) for line in response.iter_lines() if line]
            results = [line for line in lines if line["type"] == "result"]
            assert [r["html"] for r in results] == [str(i % 10) * SIZE for i in range(DISPLAYS)]
            assert [line["type"] for line in lines if line["type"] not in ("result",)] == [
                "number_of_executions",
                "end_of_execution",
            ]
        assert rss_kib(interp_emu.pid) - before < BOUND >> 10
    finally:
        for response in responses:
            response.close()
        client.close()


def test_a_reader_gets_more_than_the_caps_through_the_sdk(ci: Sandbox) -> None:
    """run_code of 12 displays of 600 kB (7 MB, over every cap) returns each one complete."""
    execution = ci.run_code(CELL.format(size=SIZE, n=12, progress="/tmp/p"), timeout=T)
    assert execution.error is None
    assert [r.html for r in execution.results] == [str(i % 10) * SIZE for i in range(12)]


def test_a_representation_over_the_message_cap_is_dropped_with_a_note(ci: Sandbox) -> None:
    """A 2 MB HTML representation is left out (text/plain stays) and stderr says so."""
    code = "class H:\n    def _repr_html_(self):\n        return 'h' * 2_000_000\ndisplay(H())\n'done'"
    execution = ci.run_code(code, timeout=T)
    display, main = execution.results
    assert display.html is None
    assert display.text.startswith("<__main__.H object at")
    assert main.text == "done"
    assert "display: text/html representation dropped (2000002 bytes, over the limit)" in "".join(
        execution.logs.stderr
    )


def test_an_error_over_the_message_cap_is_cut_not_lost(ci: Sandbox) -> None:
    """An exception whose text takes 6 MB encoded still arrives as the error, its value cut and marked."""
    execution = ci.run_code("raise ValueError('\\u00e9' * 1_000_000)", timeout=T)
    assert execution.error is not None
    assert execution.error.name == "ValueError"
    assert execution.error.value.startswith("\u00e9" * 1000)
    assert execution.error.value.endswith("[... cut: over the kernel's message limit]")


def test_a_frame_over_the_cap_from_the_cell_is_dropped_unread(interp_emu: Emulator, ci: Sandbox) -> None:
    """A cell writing a 64 MiB frame to the kernel's own pipe gets a note, the emulator no memory."""
    before = rss_kib(interp_emu.pid)
    code = (
        "import os\nfd = display.__self__.channel.fd\nblock = b'x' * (1 << 20)\n"
        "os.write(fd, b'%08x' % (64 << 20))\nfor _ in range(64):\n    os.write(fd, block)\n'after'"
    )
    execution = ci.run_code(code, timeout=T)
    assert execution.text == "after"
    assert (
        "[emulator: a kernel message of 67108864 bytes was dropped: over interpreter_message_bytes=1048576"
        in "".join(execution.logs.stderr)
    )
    assert rss_kib(interp_emu.pid) - before < BOUND >> 10


def test_a_broken_frame_restarts_the_context(ci: Sandbox) -> None:
    """A cell that breaks the framing of the kernel's pipe ends its kernel, as a crash does."""
    execution = ci.run_code("import os\nos.write(display.__self__.channel.fd, b'not-hex!')\nx = 1", timeout=T)
    assert execution.error is not None
    assert execution.error.name == "ContextRestarting"
    assert ci.run_code("1 + 1", timeout=T).text == "2"


def _until_steady(read: Any, polls: int = 15) -> Any:
    """Poll ``read()`` every 0.2 s until it returns the same value ``polls`` times in a row."""
    seen, steady = None, 0
    deadline = time.monotonic() + 120  # a bound on the test, not a claim about speed
    while steady < polls and time.monotonic() < deadline:
        time.sleep(0.2)
        now = read()
        steady = steady + 1 if now == seen else 0
        seen = now
    return seen


def test_a_context_waiting_for_room_can_be_restarted(interp_emu: Emulator, ci: Sandbox) -> None:
    """With the sandbox's cap held by two unread cells, a third context's waiting cell is ended by
    restart_code_context (UnexpectedEndOfExecution), and the context runs again afterwards."""
    big = 900_000
    unread = [ci.create_code_context(), ci.create_code_context()]
    waiting = ci.create_code_context()
    client = httpx.Client(timeout=T)
    progress = [f"/tmp/held-{n}" for n in range(2)]
    responses = [
        _open_cell(client, interp_emu, ci, CELL.format(size=big, n=40, progress=p), c.id)
        for c, p in zip(unread, progress, strict=True)
    ]
    outcome: list[Any] = []
    try:
        _until_steady(lambda: tuple(_progress(ci, p) for p in progress))
        cell = CELL.format(size=big, n=40, progress="/tmp/waiting")

        def run() -> None:
            try:
                outcome.append(ci.run_code(cell, context=waiting, timeout=T))
            except Exception as exc:  # reported by the assertion below
                outcome.append(exc)

        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        assert _until_steady(lambda: _progress(ci, "/tmp/waiting"), polls=10) < 40
        ci.restart_code_context(waiting)
        runner.join(timeout=T)
        assert len(outcome) == 1
        execution = outcome[0]
        assert execution.error is not None, execution
        assert execution.error.name == "UnexpectedEndOfExecution"
    finally:
        for response in responses:
            response.close()
        client.close()
    assert ci.run_code("2 + 2", context=waiting, timeout=T).text == "4"
