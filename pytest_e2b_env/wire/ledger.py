"""The emulator's ledger: every request and sandbox operation, in order, as black-box evidence.

Later layers (catalog verdicts, evidence bundles) read it to prove what happened on the wire
without trusting the code under test: which sandboxes were created, killed or lost, and what
each request was answered.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

# Routes (templates) -> the operation name the ledger records. Anything unlisted is "other".
ROUTE_OPS: dict[str, str] = {
    "POST /v2/sandboxes": "create",
    "POST /sandboxes": "create",
    "GET /v2/sandboxes": "list",
    "GET /sandboxes": "list",
    "POST /v2/sandboxes/{id}/connect": "connect",
    "POST /sandboxes/{id}/resume": "connect",
    "DELETE /sandboxes/{id}": "kill",
    "POST /sandboxes/{id}/timeout": "set_timeout",
    "GET /sandboxes/{id}": "get_info",
    "GET /health": "health",
    "GET /files": "file_read",
    "POST /files": "file_write",
    # the code interpreter (port 49999)
    "POST /execute": "run_code",
    "POST /contexts": "create_code_context",
    "GET /contexts": "list_code_contexts",
    "POST /contexts/{id}/restart": "restart_code_context",
    "DELETE /contexts/{id}": "remove_code_context",
}


def op_for(route: str) -> str:
    """Name the ledger operation of a route template (``"POST /process.Process/Start"`` -> ``"run"``)."""
    if route in ROUTE_OPS:
        return ROUTE_OPS[route]
    if " /process.Process/" in route:
        return "run"
    if " /filesystem.Filesystem/" in route:
        return "fs"
    return "other"


class Ledger:
    """An append-only, thread-safe list of entries with absolute sequence numbers.

    Entries are dicts ``{"seq", "t", "method", "route", "sandbox_id", "status", "op", "detail"}``;
    an entry whose answer created a sandbox also carries ``"allow_internet_access"`` (bool), the
    setting the sandbox got, so a reader never has to catch a short-lived sandbox alive to learn it,
    and the lifetime its create request asked for (``"lifetime_s"``, ``"auto_pause"``).
    An entry a fault rule answered carries ``"fault"`` (the rule's label); its op is ``"fault"``
    unless the request still created a sandbox (a create whose answer was lost stays a ``create``).
    An entry the target answered with an error of its own making (an emulator bug, a sandbox it
    could not start, a proxy that could not reach its upstream) carries ``"harness_error"``: that
    answer is the harness's failure, never something the code under test did.
    Only the newest ``capacity`` entries are kept; marks stay valid because they are sequence
    numbers, not list indexes.
    """

    def __init__(self, capacity: int = 200_000) -> None:
        self._entries: deque[dict[str, Any]] = deque(maxlen=capacity)
        self._next = 0
        self._creating = 0  # create requests received and not yet answered (their entry is to come)
        self._lock = threading.Lock()

    def record(
        self,
        op: str,
        *,
        method: str = "",
        route: str = "",
        sandbox_id: str | None = None,
        status: int | None = None,
        detail: str = "",
        allow_internet_access: bool | None = None,
        fault: str | None = None,
        metadata_keys: list[str] | None = None,
        harness_error: str | None = None,
        lifetime_s: float | None = None,
        auto_pause: bool | None = None,
    ) -> dict[str, Any]:
        """Append one entry and return it; ``fault`` labels the fault rule that answered it,
        ``harness_error`` the target's own failure that answered it."""
        with self._lock:
            entry: dict[str, Any] = {
                "seq": self._next,
                "t": time.time(),
                "method": method,
                "route": route,
                "sandbox_id": sandbox_id,
                "status": status,
                "op": op,
                "detail": detail,
            }
            if allow_internet_access is not None:
                entry["allow_internet_access"] = allow_internet_access
            if fault is not None:
                entry["fault"] = fault
            if harness_error is not None:
                entry["harness_error"] = harness_error
            if metadata_keys is not None:
                entry["metadata_keys"] = metadata_keys  # which tags a created sandbox carries (advice)
            if lifetime_s is not None:
                entry["lifetime_s"] = lifetime_s  # what the create asked: the sandbox ends by itself then
            if auto_pause is not None:
                entry["auto_pause"] = auto_pause  # paused (kept), not killed, when that lifetime ends
            self._next += 1
            self._entries.append(entry)
            return entry

    def mark(self) -> int:
        """The sequence number the next entry will get; pass it to :meth:`since`."""
        with self._lock:
            return self._next

    def creating(self, change: int = 0) -> int:
        """Create requests in flight (received, entry not yet recorded), after adding ``change``.

        A create whose client went away (a cancelled ``AsyncSandbox.create``) still makes its
        sandbox: until it is recorded, a reader of the ledger cannot know it exists.
        """
        with self._lock:
            self._creating += change
            return self._creating

    def since(self, mark: int = 0) -> list[dict[str, Any]]:
        """Every kept entry with ``seq >= mark``, oldest first."""
        with self._lock:
            return [dict(e) for e in self._entries if e["seq"] >= mark]
