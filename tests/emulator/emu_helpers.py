"""Small helpers shared by the emulator tests."""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def eventually(check: Callable[[], bool], within: float = 10.0, what: str = "condition") -> None:
    """Poll ``check`` until it holds; fail after ``within`` seconds (a bound, not a timing claim)."""
    __tracebackhide__ = True
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {within:g}s")
        time.sleep(0.05)


def host_pids_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker`` (sees into every pid namespace)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(name))
        except OSError:
            continue
    return [p for p in found if p != os.getpid()]


def children_named(parent: int, name: str) -> list[int]:
    """Pids of ``parent``'s children whose command is ``name``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                comm, rest = f.read().rsplit(")", 1)
        except OSError:
            continue
        fields = rest.split()
        if comm.split("(", 1)[1] == name and int(fields[1]) == parent and fields[0] != "Z":
            found.append(int(entry))
    return found
