"""Commands that refuse stdin or flood stdout never block the event loop or grow the emulator's memory."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from e2b import Sandbox, TimeoutException
from emu_helpers import eventually

from pytest_e2b_env.emulator import Emulator


def rss_kib(pid: int | None) -> int:
    """Resident memory of a process, from /proc."""
    text = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("VmRSS:"))


@pytest.mark.full
def test_stdin_to_a_command_that_never_reads_does_not_stall_other_sandboxes(
    small_emu: Emulator, small_sbx: Any
) -> None:
    """send_stdin of 300 KB to a non-reader times out on its own while another sandbox keeps running."""
    other = Sandbox.create(timeout=300, **small_emu.sdk_opts())
    try:
        handle = small_sbx.commands.run("sleep 120", background=True, stdin=True)
        outcome: list[BaseException | None] = []

        def flood() -> None:
            try:
                small_sbx.commands.send_stdin(handle.pid, b"x" * 300_000, request_timeout=90)
                outcome.append(None)
            except BaseException as exc:  # reported below
                outcome.append(exc)

        writer = threading.Thread(target=flood, daemon=True)
        writer.start()
        # while the write waits, other sandboxes (and this one) are served
        assert other.commands.run("echo ok", timeout=60).stdout == "ok\n"
        assert small_sbx.files.write("probe.txt", "p").path.endswith("probe.txt")
        writer.join(timeout=90)
        assert len(outcome) == 1
        assert isinstance(outcome[0], TimeoutException)
        assert "took only" in str(outcome[0])
        handle.kill()
    finally:
        other.kill()


def test_stdin_is_delivered_in_full_to_a_slow_reader(small_sbx: Any) -> None:
    """Input larger than a pipe reaches a command that reads it, byte for byte."""
    handle = small_sbx.commands.run("sleep 1; wc -c", background=True, stdin=True)
    small_sbx.commands.send_stdin(handle.pid, b"y" * 300_000, request_timeout=60)
    small_sbx.commands.close_stdin(handle.pid)
    assert handle.wait().stdout.strip() == "300000"


@pytest.mark.full
def test_output_nobody_reads_is_bounded(small_emu: Emulator, small_sbx: Any) -> None:
    """96 MiB of unread background output holds the command back, not the emulator's memory."""
    before = rss_kib(small_emu.pid)
    small_sbx.commands.run("rm -f done", timeout=30)
    handle = small_sbx.commands.run("head -c 96M /dev/zero; touch done", background=True)
    try:
        # the writer either finishes (old behaviour: the emulator buffered it all) or blocks on a full pipe
        with pytest.raises(AssertionError):
            eventually(lambda: small_sbx.files.exists("done"), within=10, what="writer finished")
        assert rss_kib(small_emu.pid) - before < 40 << 10
    finally:
        handle.kill()


def test_output_read_late_arrives_complete(small_sbx: Any) -> None:
    """Output beyond the per-stream cap is paused, not lost: a late reader gets every byte."""
    handle = small_sbx.commands.run("head -c 3M /dev/zero | tr '\\0' a", background=True)
    result = handle.wait()
    assert len(result.stdout) == 3 << 20
