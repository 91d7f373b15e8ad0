"""Small helpers shared by the emulator tests."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest


def needs_sdk(has: bool, feature: str, since: str) -> None:
    """Skip a test of an SDK feature the installed e2b predates (the range allows releases before it).

    The skip reason has one shape, ``e2b 2.57.0 has no <feature> (e2b <since>+)``, which
    tests/meta/test_sdk_range.py accepts at the low end of the range and nowhere else.
    """
    if not has:
        from importlib.metadata import version

        pytest.skip(f"e2b {version('e2b')} has no {feature} (e2b {since}+)")


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
