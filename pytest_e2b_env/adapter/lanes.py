"""Run catalog cases ahead of pytest, several at once: one target and one case host per lane.

Most of a case's time is waiting (deadlines, retries, kill confirmations), so cases overlap well.
Each lane has its own target (emulator or fault proxy) and its own case hosts, so fault plans,
ledgers and leak checks of cases running at the same time never meet: a case's verdict is the
one a serial run gives. pytest still reports items one by one in collection order; an item only
waits for the record its lane produced, so ``-k``, ``--lf`` and reports are unchanged, and ``-x``
(or any stop) drops the cases not yet started. The process's own target stays free for the
session's fixtures. Under xdist (a worker learns its items one at a time) there are no lanes.
The hosts of one kind are forked from one template that imported the subject (catalog/hostfork.py).
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_e2b_env.catalog.procs import PortWatch
from pytest_e2b_env.catalog.record import CaseRecord
from pytest_e2b_env.evidence.redaction import Redactor

if TYPE_CHECKING:
    from pytest_e2b_env.adapter.settings import Settings
    from pytest_e2b_env.catalog.contract import SubjectInfo
    from pytest_e2b_env.catalog.host import CaseHost
    from pytest_e2b_env.catalog.hostfork import HostTemplate
    from pytest_e2b_env.catalog.model import Case
    from pytest_e2b_env.targets import Target

#: How long a lane may take to open its target before it is given up (its cases go to the others).
OPEN_TIMEOUT = 120.0


def host_for(target: Target, subject: SubjectInfo, template: HostTemplate | None = None) -> CaseHost:
    """A case host for one subject on ``target`` (started on first use; forked from ``template``).

    It gets the SDK's settings for the target and nothing else of it: never the control key.
    """
    from pytest_e2b_env.catalog.host import CaseHost

    return CaseHost(target.sdk_env(), subject, template)


def run_on(case: Case, settings: Settings, target: Target, host: CaseHost) -> CaseRecord:
    """One case on one target, its subject's calls carried out in its case host.

    The record comes back redacted, before any of it is cut into a failure message, a skip
    reason or a warning (or a task check's reason).
    """
    from pytest_e2b_env.adapter.redact import redact_record
    from pytest_e2b_env.catalog.runner import run_case

    try:  # what the host printed before (its import, its warm-up) is shown with its first case
        record = run_case(case, host, target, extra_tools=settings.episode_tools, relax=settings.relax)
    finally:
        said = host.take_output()
    record.subject_output = said or None
    return redact_record(record, [target.api_key])


#: What :meth:`Lanes._next` says when every template a lane could use is still importing.
_WAIT = "wait"


def _quietly(release: Any) -> None:
    with contextlib.suppress(Exception):
        release()


def _all_at_once(releases: list[Any]) -> None:
    """Call each of ``releases`` in its own thread and wait for all: each mostly waits."""
    threads = [threading.Thread(target=_quietly, args=(r,), daemon=True) for r in releases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=900)


class PreOpened:
    """Lane targets opened in background threads at session start, while pytest still collects.

    An emulator takes about half a second to start; opened here, the lanes find theirs ready
    instead of opening them after collection. :meth:`take` hands them out (whichever opened
    first, or the error that stopped one); :meth:`keep` closes those beyond what the lanes use.
    Each opening thread lives until :meth:`close`: an emulator dies with the thread that started
    it (``PR_SET_PDEATHSIG`` follows the parent thread, not the process).
    """

    def __init__(self, open_target: Any, count: int, name: str = "open") -> None:
        self._open = open_target
        self._lock = threading.Lock()
        self._ready: queue.Queue[tuple[Target | None, Exception | None]] = queue.Queue()
        self._first: Target | None = None  # the first to open, for what every target shares
        self._answered = 0  # openers done, opened or not
        self._some = threading.Condition(self._lock)
        self._left = count  # opened or opening, not yet taken
        self._closers: list[threading.Thread] = []
        self._done = threading.Event()
        self._openers = [
            threading.Thread(target=self._one, name=f"pytest-e2b-env-{name}-{number}", daemon=True)
            for number in range(count)
        ]
        for thread in self._openers:
            thread.start()

    def _one(self) -> None:
        target: Target | None = None
        try:
            target = self._open()
            self._ready.put((target, None))
        except Exception as exc:  # handed to the lane that takes it, which reports it
            self._ready.put((None, exc))
        with self._some:
            self._answered += 1
            if self._first is None:
                self._first = target
            self._some.notify_all()
        self._done.wait()  # its emulator lives as long as this thread

    def first(self) -> Target | None:
        """The first target to open (waiting for one), for what all of them share (their isolation),
        whoever takes it; None when none opened. It may be closed by now: read its facts only."""

        def settled() -> bool:
            return self._first is not None or self._answered == len(self._openers)

        with self._some:
            self._some.wait_for(settled, OPEN_TIMEOUT)
            return self._first

    def take(self) -> Target:
        """A pre-opened target (waiting for one still opening), or a new one when none is left."""
        with self._lock:
            if self._left == 0:
                return self._open()
            self._left -= 1
        try:
            target, error = self._ready.get(timeout=OPEN_TIMEOUT)
        except queue.Empty:
            raise TimeoutError(f"no lane target opened within {OPEN_TIMEOUT:.0f} s") from None
        if error is not None:
            raise error
        assert target is not None
        return target

    def keep(self, count: int) -> None:
        """Close, in the background, every target beyond ``count`` not yet taken."""
        with self._lock:
            surplus, self._left = max(0, self._left - count), min(self._left, count)
        if surplus:
            thread = threading.Thread(target=self._close, args=(surplus,), daemon=True)
            self._closers.append(thread)
            thread.start()

    def _close(self, count: int) -> None:
        for _ in range(count):
            try:
                target, _ = self._ready.get(timeout=OPEN_TIMEOUT)
            except queue.Empty:
                return
            if target is not None:
                _quietly(target.close)

    def close(self) -> None:
        """Close whatever no lane took, and wait for it."""
        self.keep(0)
        for thread in self._closers:
            thread.join(timeout=OPEN_TIMEOUT)
        self._closers.clear()
        self._done.set()  # every target is closed: the opening threads may end
        for thread in self._openers:
            thread.join(timeout=OPEN_TIMEOUT)


@dataclass
class _Outcome:
    done: threading.Event = field(default_factory=threading.Event)
    record: CaseRecord | None = None
    error: BaseException | None = None


def share_lanes(counts: dict[str, int], width: int) -> list[str]:
    """The kind each of ``width`` lanes serves: every kind at least one, the rest by case count.

    A lane keeps one case host per kind it serves, and a host's start (imports, a subject's
    warm-up) costs CPU the cases then lack, so lanes are given to kinds rather than all to all.
    """
    kinds = sorted(k for k, n in counts.items() if n)
    if not kinds:
        return []
    width = max(width, len(kinds))
    shares = dict.fromkeys(kinds, 1)
    for _ in range(width - len(kinds)):  # each further lane to the kind with most cases per lane
        kind = max(kinds, key=lambda k: counts[k] / shares[k])
        shares[kind] += 1
    return [kind for kind in kinds for _ in range(shares[kind])]


class Lanes:
    """``width`` lanes working through ``cases`` ((node id, case, subject)), longest first.

    ``seconds`` is how long each case is expected to take: its time last run, else its catalog's
    reference time (:func:`~pytest_e2b_env.adapter.durations.estimates`); cases without one go
    first, in catalog order.

    Each lane serves one subject kind (:func:`share_lanes`); once its kind has nothing left it
    helps the kind with most cases left, when that kind's hosts are forked (cheap to start) or
    all of its lanes are gone (a target that did not start). ``templates`` gives the host
    template of a kind (the runtime's: they outlive the lanes).
    """

    def __init__(
        self,
        settings: Settings,
        cases: list[tuple[str, Case, SubjectInfo]],
        width: int,
        open_target: Any,
        seconds: dict[str, float] | None = None,
        *,
        templates: Any = None,
    ) -> None:
        from pytest_e2b_env.adapter.durations import longest_first

        self.settings = settings
        self._template_of = templates  # (kind) -> the HostTemplate of that kind, shared with the runtime
        self._open_target = open_target  # () -> Target, the same settings as the process's own
        self._queues: dict[str, collections.deque[tuple[str, Case, SubjectInfo]]] = {}
        for item in longest_first(cases, seconds or {}, key=lambda c: c[0]):
            self._queues.setdefault(item[1].subject, collections.deque()).append(item)
        self.kinds = share_lanes({k: len(q) for k, q in self._queues.items()}, width)
        self.width = len(self.kinds)
        self._outcomes = {key: _Outcome() for key, _, _ in cases}
        self._started: set[str] = set()
        self._lock = threading.Lock()
        #: Notified whenever a case is done or a lane ends (:meth:`next_done` waits on it).
        self._changed = threading.Condition(self._lock)
        self._alive: dict[str, int] = dict.fromkeys(self._queues, 0)
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._closers: list[Any] = []
        self._hosts: list[CaseHost] = []  # every lane's, for abort()
        #: kind -> "pending" (its first case not taken), "running" (it runs alone), "done"
        self._probe: dict[str, str] = dict.fromkeys(self._queues, "pending")
        self._prober: dict[str, int] = {}  # kind -> the lane that ran its first case
        #: kind -> why its cases run in one lane (its subject holds machine-wide state)
        self.serial: dict[str, str] = {}
        self._templates: dict[str, HostTemplate] = {}
        #: Why a lane could not work (its target did not open); the reporter lists them.
        self.problems: list[str] = []

    def start(self) -> None:
        """Start the lanes; each opens its target and warms its host before its first case.

        The templates begin their imports at once, not after a lane's target opened.
        """
        with self._lock:
            for kind in self.kinds:
                self._alive[kind] += 1
        for kind in dict.fromkeys(self.kinds):
            self._template(kind).start()
        for number, kind in enumerate(self.kinds):
            thread = threading.Thread(
                target=self._lane, args=(number, kind), name=f"pytest-e2b-env-lane-{number}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def owns(self, key: str) -> bool:
        """Whether a lane will produce this case's record."""
        return key in self._outcomes

    def done(self, key: str) -> bool:
        """Whether a lane has run this case (its record, or the error it met, is in)."""
        outcome = self._outcomes.get(key)
        return outcome is not None and outcome.done.is_set()

    def result(self, key: str) -> CaseRecord | None:
        """The case's record, waiting for its lane; None when no lane will run it (run it here)."""
        outcome = self._outcomes[key]
        while not outcome.done.wait(0.5):
            with self._lock:
                if key not in self._started and (not any(self._alive.values()) or self._stopping):
                    # every lane is gone (or the run stops): no lane will take it
                    for kind, queue in self._queues.items():
                        self._queues[kind] = collections.deque(c for c in queue if c[0] != key)
                    return None
        if outcome.error is not None:
            raise outcome.error
        return outcome.record

    def next_done(self, keys: list[str]) -> str:
        """The first of ``keys`` whose case is done, waiting for one (in ``keys``' order when several are).

        A key no lane will run any more (every lane is gone, or the run stops) counts as done: its
        item learns that from :meth:`result` and runs the case itself.
        """
        with self._changed:
            while True:
                for key in keys:
                    if key not in self._outcomes or self._outcomes[key].done.is_set():
                        return key
                if not any(self._alive.values()) or self._stopping:
                    return next((k for k in keys if k not in self._started), keys[0])
                self._changed.wait(0.5)

    def stop(self) -> None:
        """Start no further case (``-x``, Ctrl-C, a stopped session); running ones finish."""
        with self._changed:
            self._changed.notify_all()
            self._stopping = True
            for queue in self._queues.values():
                queue.clear()

    def abort(self) -> None:
        """Ctrl-C: start no further case and end the running ones now (their hosts are killed).

        A running case then fails at once on its host's death and its lane releases its sandboxes
        and target as always; :meth:`close` waits for that.
        """
        self.stop()
        with self._lock:
            hosts = list(self._hosts)
        for host in hosts:
            host.kill()

    def close(self) -> None:
        """Stop, wait for the running cases, then release every lane's hosts and target.

        The templates the hosts were forked from are the runtime's: it ends them after this.
        """
        self.stop()
        for thread in self._threads:
            thread.join(timeout=900)
        # Each lane releases its own hosts and target, all at once: an episode host's stop closes
        # its OpenEnv server (seconds, its sessions releasing their sandboxes), one per lane.
        _all_at_once(list(self._closers))
        self._closers.clear()

    def _forks(self, kind: str) -> bool:
        """Whether this kind's hosts are being forked from its template (the lock is held)."""
        template = self._templates.get(kind)
        return template is not None and template.forking

    def _template(self, kind: str) -> HostTemplate:
        """The one template this kind's hosts are forked from, in every lane."""
        with self._lock:
            if kind not in self._templates:
                self._templates[kind] = self._template_of(kind)
            return self._templates[kind]

    # ------------------------------------------------------------------ one lane
    def _allowed(self, kind: str, number: int) -> bool:
        """Whether lane ``number`` may take a case of ``kind`` now (the lock is held).

        A kind's first case runs alone (its probe); after it, a kind whose subject holds
        machine-wide state runs in the probe's lane only (:attr:`serial`).
        """
        if self._probe.get(kind) == "running":
            return False
        return kind not in self.serial or self._prober.get(kind) == number

    def _next(self, kind: str, hosted: set[str], number: int) -> tuple[str, Case, SubjectInfo] | str | None:
        with self._lock:
            if self._stopping:
                return None
            probing = [k for k in self._queues if self._queues[k] and self._probe.get(k) == "running"]
            queue = self._queues[kind] if self._allowed(kind, number) else collections.deque()
            template = self._templates.get(kind)
            if queue and kind not in hosted and template is not None and not template.ready():
                # Its kind's template is still importing (openenv takes seconds): meanwhile, help
                # a kind whose hosts already fork, or wait a moment for one that soon will.
                others = [
                    k
                    for k in sorted(self._queues)
                    if k != kind and self._queues[k] and self._allowed(k, number)
                ]
                ready = [k for k in others if self._forks(k)]
                if ready:
                    queue = self._queues[max(ready, key=lambda k: len(self._queues[k]))]
                elif any(k not in self._templates or not self._templates[k].ready() for k in others):
                    return _WAIT  # another kind's imports (or its lane's start) may finish first
            if not queue:
                # Its own kind is done: help the kind with most cases left, where a host costs
                # little (forked from its template, or already running here) or no lane of that
                # kind is left. A spawned host's imports would cost more CPU than they save.
                others = [
                    k
                    for k in sorted(self._queues)
                    if self._queues[k]
                    and self._allowed(k, number)
                    and (k in hosted or not self._alive[k] or self._forks(k))
                ]
                if not others:
                    return _WAIT if probing else None  # a probe's verdict may free its kind
                queue = self._queues[max(others, key=lambda k: len(self._queues[k]))]
            of = queue[0][1].subject
            if self._probe.get(of) == "pending":  # the probe: its lanes wait for it, so the shortest
                item = queue.pop()
                self._probe[of], self._prober[of] = "running", number
            else:
                item = queue.popleft()
            self._started.add(item[0])
            return item

    def _probed(self, kind: str, ports: list[int]) -> None:
        """After a kind's first case: does its subject hold machine-wide state? (serial if so; the
        lane marks the probe done, whatever this met)"""
        if ports:
            shown = ", ".join(str(p) for p in ports)
            with self._lock:
                self.serial[kind] = (
                    f"the {kind} subject's process listens on fixed port {shown}, state every process of "
                    "the machine shares (a case in one lane could reach the server another lane's "
                    "process started): its cases ran in one lane, one after another"
                )

    def _lane(self, number: int, kind: str) -> None:
        try:
            target = self._open_target()
        except Exception as exc:
            with self._lock:
                self._alive[kind] -= 1
                reason = Redactor().text(str(exc))[:200]  # redacted before the cut
                self.problems.append(f"lane {number} did not start: {type(exc).__name__}: {reason}")
            return
        hosts: dict[str, CaseHost] = {}

        def release() -> None:
            for host in hosts.values():  # first, while the target still answers
                host.close()
            with contextlib.suppress(Exception):
                target.sweep()
            target.close()

        def host_of(subject: SubjectInfo, of: str) -> CaseHost:
            if of not in hosts:
                hosts[of] = host_for(target, subject, self._template(of))
                with self._lock:
                    self._hosts.append(hosts[of])
                    stopping = self._stopping
                if stopping:  # aborted while this host was made: it must not run a case
                    hosts[of].kill()
                with contextlib.suppress(Exception):  # imports and warm-up overlap the queue's wait
                    hosts[of].start(warm_up=subject.contract.warm_up is not None)
            return hosts[of]

        with self._lock:
            self._closers.append(release)
        try:
            while (item := self._next(kind, set(hosts), number)) is not None:
                if isinstance(item, str):  # _WAIT
                    time.sleep(0.1)
                    continue
                key, case, subject = item
                outcome = self._outcomes[key]
                probe = self._probe.get(case.subject) == "running"  # this lane runs its kind's probe
                probe = probe and self._prober.get(case.subject) == number
                watch = None
                try:
                    host = host_of(subject, case.subject)
                    pid = host.subject_pid() if probe else None
                    watch = PortWatch(pid) if pid is not None else None
                    outcome.record = run_on(case, self.settings, target, host)
                except BaseException as exc:  # handed to the item, which reports it as its own
                    outcome.error = exc
                finally:
                    if probe:
                        with contextlib.suppress(Exception):
                            self._probed(case.subject, watch.stop() if watch is not None else [])
                        with self._changed:  # whatever the probe met, the kind goes on
                            self._probe[case.subject] = "done"
                            self._changed.notify_all()
                    outcome.done.set()
                    with self._changed:
                        self._changed.notify_all()
        finally:
            with self._changed:
                self._changed.notify_all()
                self._alive[kind] -= 1
                mine = release in self._closers
                if mine:
                    self._closers.remove(release)
            if mine:  # nothing is left for this lane: its hosts and target go now, not at the end
                _quietly(release)
