"""Where each sandbox's ids come from: a whole range of the host's, or three of the emulator's own.

* **Host root** (this process is in the host's user namespace): a sandbox maps its ids
  0..65535 to a range of 65536 unused host ids (``UID_BASE`` + 65536 * slot), so every account
  of every sandbox is a host id of its own.
* **Inside a user namespace** (the emulator of a user who is not root entered one, see
  ``rootless``): the ids this namespace maps besides its root are the user's subordinate ids,
  usually 65536 of them. A sandbox takes three, for its root, ``user`` (1000) and ``nobody``
  (65534): its other ids do not exist (the host's files owned by them appear as ``nobody``).

Either way a sandbox's root is never the emulator's own id, and within one emulator no two
sandboxes share an id, so the kernel's per-user process counts stay per sandbox.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import deque
from pathlib import Path

from pytest_e2b_env.standalone.linux import NOBODY
from pytest_e2b_env.standalone.upper_layer import USER_UID

#: Host sandbox uid ranges start here, 65536 ids each, above the usual /etc/subuid ranges.
UID_BASE = 0x100000
UID_SLOTS = 32000
#: The sandbox ids a nested sandbox has, in the order they take the slot's ids.
NESTED_IDS = (0, USER_UID, NOBODY)
_FULL = (0, 0, 4294967295)


def read_map(path: Path) -> list[tuple[int, int, int]]:
    """``/proc/<pid>/uid_map`` lines as (inside, outside, count)."""
    rows = []
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) == 3 and all(f.isdigit() for f in fields):
            rows.append((int(fields[0]), int(fields[1]), int(fields[2])))
    return rows


def _usable(rows: list[tuple[int, int, int]]) -> set[tuple[int, int]]:
    """Ranges (first, end) of inside ids mapped by ``rows``, id 0 (this namespace's root) left out."""
    out = set()
    for inside, _outside, count in rows:
        first, end = max(inside, 1), inside + count
        if end > first:
            out.add((first, end))
    return out


class Ids:
    """Hands out each sandbox's ids and takes them back when it is gone (thread-safe)."""

    def __init__(self, proc: Path = Path("/proc/self")) -> None:
        uid_rows, gid_rows = read_map(proc / "uid_map"), read_map(proc / "gid_map")
        #: True inside a user namespace of the emulator's own (not the host's).
        self.nested = uid_rows != [_FULL]
        #: The host uid this namespace's root stands for (the invoking user), when nested.
        self.outside_uid = next((o for i, o, _ in uid_rows if i == 0), None) if self.nested else 0
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._free: deque[int] = deque()
        if self.nested:
            ranges = sorted(_usable(uid_rows) & _usable(gid_rows))
            slots = [
                first for lo, hi in ranges for first in range(lo, hi - len(NESTED_IDS) + 1, len(NESTED_IDS))
            ]
            # Start each emulator at its own place, so that two emulators of one user (lanes)
            # seldom give their sandboxes the same host ids.
            shift = (os.getpid() * 211) % len(slots) if slots else 0
            self._free.extend(slots[shift:] + slots[:shift])
        #: How many sandboxes can hold ids at once.
        self.capacity = len(self._free) if self.nested else UID_SLOTS

    def take(self) -> tuple[int, list[list[int]] | None]:
        """(the id of the sandbox's root outside it, its ``idmap`` lines or None for a full range)."""
        if not self.nested:
            slot = (os.getpid() * 211 + next(self._counter)) % UID_SLOTS
            return UID_BASE + 0x10000 * slot, None
        with self._lock:
            if not self._free:
                raise OSError(f"all {self.capacity} id slots of the emulator's user namespace are in use")
            base = self._free.popleft()
        return base, [[inside, base + k, 1] for k, inside in enumerate(NESTED_IDS)]

    def give_back(self, base: int) -> None:
        """The sandbox whose root was ``base`` is gone: its ids may be given again (nested only)."""
        if self.nested:
            with self._lock:
                self._free.append(base)

    def describe(self) -> str:
        """For the level's reason."""
        if not self.nested:
            return "per-sandbox user namespace (a range of 65536 host ids each)"
        return (
            f"rootless: host uid {self.outside_uid} is root of the emulator's own user namespace; "
            f"per-sandbox user namespace with 3 subordinate ids each (root, user, nobody; "
            f"{self.capacity} sandboxes at most)"
        )
