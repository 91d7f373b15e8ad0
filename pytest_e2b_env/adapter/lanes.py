"""Run catalog cases ahead of pytest, several at once: one target and one case host per lane.

Most of a case's time is waiting (deadlines, retries, kill confirmations), so cases overlap well.
Each lane has its own target (emulator or fault proxy) and its own case hosts, so fault plans,
ledgers and leak checks of cases running at the same time never meet: a case's verdict is the
one a serial run gives. pytest still reports items one by one in collection order; an item only
waits for the record its lane produced, so ``-k``, ``--lf`` and reports are unchanged, and ``-x``
(or any stop) drops the cases not yet started. The process's own target stays free for the
session's fixtures. Under xdist (a worker learns its items one at a time) there are no lanes.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_e2b_env.catalog.record import CaseRecord

if TYPE_CHECKING:
    from pytest_e2b_env.adapter.settings import Settings
    from pytest_e2b_env.catalog.contract import Subject
    from pytest_e2b_env.catalog.host import CaseHost
    from pytest_e2b_env.catalog.model import Case
    from pytest_e2b_env.target import Target

#: How long a lane may take to open its target before it is given up (its cases go to the others).
OPEN_TIMEOUT = 120.0


def host_for(target: Target, subject: Subject, kind: str, contract: str | None) -> CaseHost:
    """A case host for one subject kind on ``target`` (started on first use)."""
    from pytest_e2b_env.catalog.host import CaseHost

    return CaseHost(
        {
            "url": target.endpoint,
            "api_key": target.api_key,
            "control_key": target.control_key,
            "mode": target.mode,
            "run_id": target.run_id,
        },
        {"spec": subject.spec, "kind": kind, "contract": contract},
    )


def run_on(
    case: Case, subject: Subject, settings: Settings, target: Target, host: CaseHost | None
) -> CaseRecord:
    """One case on one target: in its case host when there is one, else in this process."""
    from pytest_e2b_env.catalog.runner import run_case

    if host is None:
        return run_case(case, subject, target, extra_tools=settings.episode_tools, relax=settings.relax)
    from pytest_e2b_env.catalog.host import HostDied
    from pytest_e2b_env.catalog.runner import crashed

    mark, started = target.ledger_mark(), time.perf_counter()
    try:
        return host.run(case, settings.episode_tools, settings.relax)
    except HostDied as exc:
        # The subject took its process down: the case fails with why, the run goes on.
        return crashed(case, subject, target, mark, str(exc), time.perf_counter() - started)


@dataclass
class _Outcome:
    done: threading.Event = field(default_factory=threading.Event)
    record: CaseRecord | None = None
    error: BaseException | None = None


class Lanes:
    """``width`` lanes working through ``cases`` (id -> (case, subject)) in order."""

    def __init__(
        self,
        settings: Settings,
        cases: list[tuple[str, Case, Subject]],
        width: int,
        open_target: Any,
    ) -> None:
        self.settings = settings
        self.width = width
        self._open_target = open_target  # () -> Target, the same settings as the process's own
        self._queue = collections.deque(cases)
        self._outcomes = {key: _Outcome() for key, _, _ in cases}
        self._started: set[str] = set()
        self._subjects = {case.subject: subject for _, case, subject in cases}
        self._lock = threading.Lock()
        self._alive = 0
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._closers: list[Any] = []
        #: Why a lane could not work (its target did not open); the reporter lists them.
        self.problems: list[str] = []

    def start(self) -> None:
        """Start the lanes; each opens its target and warms its hosts before its first case."""
        with self._lock:
            self._alive = self.width
        for number in range(self.width):
            thread = threading.Thread(
                target=self._lane, args=(number,), name=f"pytest-e2b-env-lane-{number}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def owns(self, key: str) -> bool:
        """Whether a lane will produce this case's record."""
        return key in self._outcomes

    def result(self, key: str) -> CaseRecord | None:
        """The case's record, waiting for its lane; None when no lane will run it (run it here)."""
        outcome = self._outcomes[key]
        while not outcome.done.wait(0.5):
            with self._lock:
                if key not in self._started and (self._alive == 0 or self._stopping):
                    # every lane is gone (or the run stops): no lane will take it
                    self._queue = collections.deque(c for c in self._queue if c[0] != key)
                    return None
        if outcome.error is not None:
            raise outcome.error
        return outcome.record

    def stop(self) -> None:
        """Start no further case (``-x``, Ctrl-C, a stopped session); running ones finish."""
        with self._lock:
            self._stopping = True
            self._queue.clear()

    def close(self) -> None:
        """Stop, wait for the running cases, then release every lane's hosts and target."""
        self.stop()
        for thread in self._threads:
            thread.join(timeout=900)
        for closer in reversed(self._closers):
            with contextlib.suppress(Exception):
                closer()
        self._closers.clear()

    # ------------------------------------------------------------------ one lane
    def _next(self) -> tuple[str, Case, Subject] | None:
        with self._lock:
            if self._stopping or not self._queue:
                return None
            item = self._queue.popleft()
            self._started.add(item[0])
            return item

    def _lane(self, number: int) -> None:
        try:
            target = self._open_target()
        except Exception as exc:
            with self._lock:
                self._alive -= 1
                self.problems.append(f"lane {number} did not start: {type(exc).__name__}: {str(exc)[:200]}")
            return
        hosts: dict[str, CaseHost] = {}

        def release() -> None:
            for host in hosts.values():  # first, while the target still answers
                host.close()
            with contextlib.suppress(Exception):
                target.sweep()
            target.close()

        with self._lock:
            self._closers.append(release)
        try:
            for kind, subject in sorted(self._subjects.items()):  # imports and warm-ups overlap cases
                hosts[kind] = host_for(target, subject, kind, self.settings.contract_for(kind))
                with contextlib.suppress(Exception):
                    hosts[kind].start(warm_up=subject.contract.warm_up is not None)
            while (item := self._next()) is not None:
                key, case, subject = item
                outcome = self._outcomes[key]
                try:
                    outcome.record = run_on(case, subject, self.settings, target, hosts[case.subject])
                except BaseException as exc:  # handed to the item, which reports it as its own
                    outcome.error = exc
                finally:
                    outcome.done.set()
        finally:
            with self._lock:
                self._alive -= 1
