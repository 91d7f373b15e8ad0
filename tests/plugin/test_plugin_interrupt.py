"""Ctrl-C mid-run: no traceback, every process and sandbox gone, the bundle written and marked.

The run is a real ``pytest`` in its own session; the interrupt goes to its whole process group,
as a terminal's Ctrl-C does, while one case waits inside a live sandbox.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from plugin_helpers import CASE_IDS, only_bundle, read_json, write_project

#: A reward that sits in a sandbox command for minutes once it has a program to run.
HANGING = """
from pathlib import Path
from e2b import AsyncSandbox


def make_reward():
    async def reward(completions, test_cases, **kwargs):
        if "```" not in str(completions[0][-1]["content"]):
            return [0.0 for _ in completions]
        box = await AsyncSandbox.create(timeout=600)
        Path({started!r}).write_text(box.sandbox_id)
        await box.commands.run("sleep 300", timeout=400)
        return [1.0 for _ in completions]
    return reward
"""


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def _descendants(root: int) -> set[tuple[int, str]]:
    """(pid, start time) of every process under ``root`` now (the start time tells a reused pid)."""
    children: dict[int, list[tuple[int, str]]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := _stat(int(name))) is not None:
            children.setdefault(int(fields[1]), []).append((int(name), fields[19]))
    found: set[tuple[int, str]] = set()
    todo = [root]
    while todo:
        for pid, start in children.get(todo.pop(), []):
            found.add((pid, start))
            todo.append(pid)
    return found


def _alive(procs: set[tuple[int, str]]) -> list[int]:
    return [pid for pid, start in procs if (fields := _stat(pid)) is not None and fields[19] == start]


@pytest.mark.full
def test_ctrl_c_ends_the_run_cleanly_and_marks_the_bundle(pytester: pytest.Pytester) -> None:
    """Ctrl-C while a case waits in a sandbox: exit 2, no traceback, nothing left, bundle marked."""
    started = pytester.path / "started"
    write_project(pytester, subject="hanging:make_reward")
    pytester.makepyfile(hanging=HANGING.replace("{started!r}", repr(str(started))))
    log = pytester.path / "out.txt"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "--e2b-evidence",
                "ev",
                "--e2b-lanes",
                "2",
            ],
            cwd=pytester.path,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group, to interrupt as a terminal would
            # a background shell's children ignore SIGINT; a terminal's foreground job does not
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        deadline = time.monotonic() + 180
        while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert started.exists(), log.read_text()
        time.sleep(1)  # the sandbox's command is under way
        before = _descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
    text = log.read_text()
    assert code == pytest.ExitCode.INTERRUPTED, text
    assert "Traceback" not in text, text
    assert "e2b: the run was interrupted (Ctrl-C) after 1 of 2 cases" in text, text
    bundle = only_bundle(pytester.path / "ev")
    assert f"evidence bundle: {bundle}" in text, text
    manifest = read_json(bundle / "run-manifest.json")
    assert (manifest["interrupted"], manifest["complete"]) == (True, False), manifest
    lines = (bundle / "cases.jsonl").read_text().splitlines()
    records = {r["id"]: r for r in map(json.loads, lines)}
    assert list(records) == CASE_IDS
    assert records["reward-tiny-no-fence"]["status"] == "passed"
    assert records["reward-tiny-correct"]["status"] == "skipped"
    assert "interrupted (Ctrl-C)" in records["reward-tiny-correct"]["reason"]
    # Every process the run started (emulators, sandboxes, case hosts, templates) is gone.
    deadline = time.monotonic() + 15
    while (left := _alive(before)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], [Path(f"/proc/{pid}/cmdline").read_bytes()[:120] for pid in left]
