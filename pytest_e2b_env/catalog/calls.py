"""Where a subject's code runs, seen from the controller: every subject call is one request.

The controller drives a case (``drive_reward``, ``drive_episode``) and judges it; the subject runs
elsewhere, in a case host (:class:`~pytest_e2b_env.catalog.host.CaseHost`), and only carries out
requests: ``call`` (build the subject, enter or leave its context, call the reward function with
a batch, call a method of an environment instance, drop an instance), ``cancel`` a call under
way, ``end`` the case. Each answer is a raw outcome (:class:`Outcome`): what the call returned or
raised, and facts about the subject's objects (whether a reward function is async, an
environment's public methods). Ledger marks, sandbox lists, timings, faults, cleanup and every
verdict are the controller's own. :class:`LocalCalls` runs the same requests in this process
(for tests and library use; it isolates nothing).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from pytest_e2b_env.catalog.contract import Contract, Subject
from pytest_e2b_env.catalog.observe import MESSAGE_LIMIT, scrub
from pytest_e2b_env.catalog.raw import decode

if TYPE_CHECKING:
    from pytest_e2b_env.targets import Target

#: A case (including every retry and deadline inside it) that takes longer than this is stopped.
CASE_TIMEOUT = 900.0


class HostDied(Exception):
    """The process running the subject ended (or stopped answering) in the middle of a case."""


class DriverError(Exception):
    """The case's own inputs could not be built where the subject runs (``info``: the exception)."""

    def __init__(self, info: dict[str, Any]) -> None:
        super().__init__(f"{info.get('type')}: {info.get('message')}")
        self.info = info


def _error_info(raw: Any, secrets: list[str]) -> dict[str, Any]:
    """An exception as the subject's side described it, checked and redacted."""
    data = raw if isinstance(raw, dict) else {}
    hierarchy = data.get("hierarchy")
    return {
        "type": str(data.get("type"))[:200],
        "hierarchy": [str(n)[:200] for n in hierarchy[:64]] if isinstance(hierarchy, list) else [],
        "message": scrub(str(data.get("message", "")), secrets)[:MESSAGE_LIMIT],
    }


@dataclass
class Outcome:
    """What one subject call gave: a value, an exception, or no such method (``missing``)."""

    returned: bool = False
    value: Any = None
    error: dict[str, Any] | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    missing: bool = False

    @classmethod
    def of(cls, reply: dict[str, Any], secrets: list[str]) -> Outcome:
        """Read an answer (anything the subject's process sent is checked here)."""
        if reply.get("missing"):
            return cls(missing=True)
        if reply.get("setup_error") is not None:
            raise DriverError(_error_info(reply["setup_error"], secrets))
        facts = reply.get("facts")
        facts = facts if isinstance(facts, dict) else {}
        if reply.get("returned") is True:
            return cls(returned=True, value=decode(reply.get("value")), facts=facts)
        return cls(error=_error_info(reply.get("error"), secrets), facts=facts)


class SubjectCalls:
    """The controller's side of where a subject runs: requests out, raw outcomes back.

    ``kind``, ``spec`` and ``contract`` describe the subject (its contract as data). Subclasses
    carry the requests (:meth:`_send`) and feed each answer to :meth:`_deliver`.
    """

    def __init__(self, kind: str, spec: str, contract: Contract) -> None:
        self.kind = kind
        self.spec = spec
        self.contract = contract
        #: values redacted from everything the subject's side says (the target's keys)
        self.secrets: list[str] = []
        self._cond = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self._ids = itertools.count(1)
        self._dead: str | None = None
        self._deadline: float | None = None

    # ------------------------------------------------------------------ transport
    def _send(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    def _deliver(self, message: dict[str, Any]) -> None:
        """An answer arrived (any thread)."""
        call_id = message.get("id")
        if not isinstance(call_id, int):
            return
        with self._cond:
            self._replies[call_id] = message
            self._cond.notify_all()

    def _fail(self, why: str, timed_out: bool) -> NoReturn:
        """The subject's side is gone (``why``) or did not answer in time: raise :class:`HostDied`."""
        raise HostDied(why)

    def environment(self, target: Target) -> contextlib.AbstractContextManager[None]:
        """What must hold in this process while a case runs (nothing: the host has its own)."""
        return contextlib.nullcontext()

    def subject_pid(self) -> int | None:
        """The process subject code runs in, for CPU accounting (None: unknown)."""
        return None

    # ------------------------------------------------------------------ requests
    def request(self, op: str, **fields: Any) -> int:
        """Send one request; its id (its answer comes to :meth:`reply`)."""
        call_id = next(self._ids)
        self._send({"op": op, "id": call_id, **fields})
        return call_id

    def done(self, call_id: int) -> bool:
        """Whether the answer to ``call_id`` is in (or the subject's side is gone)."""
        with self._cond:
            return call_id in self._replies or self._dead is not None

    def reply(self, call_id: int, timeout: float | None = None) -> dict[str, Any]:
        """The answer to ``call_id``, waiting at most ``timeout`` s and never past the case's end."""
        ends = [t for t in (self._deadline, None if timeout is None else time.monotonic() + timeout) if t]
        end = min(ends) if ends else None
        with self._cond:
            while call_id not in self._replies:
                if self._dead is not None:
                    dead = self._dead
                    break
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    dead = ""
                    break
                self._cond.wait(1.0 if left is None else min(left, 1.0))
            else:
                reply = self._replies.pop(call_id)
                if reply.get("error") is not None and "returned" not in reply:
                    dead = f"failed: {str(reply['error'])[:300]}"
                else:
                    return reply
        if not dead:
            self._fail("timeout", timed_out=True)
        self._fail(dead, timed_out=False)

    def submit(self, action: str, *, worker: int = 0, **fields: Any) -> int:
        """Start one subject call without waiting; its id."""
        return self.request("call", action=action, worker=worker, **fields)

    def outcome(self, call_id: int) -> Outcome:
        """Wait for a call started with :meth:`submit` and read its outcome."""
        return Outcome.of(self.reply(call_id), self.secrets)

    def call(self, action: str, *, worker: int = 0, timeout: float | None = None, **fields: Any) -> Outcome:
        """One subject call, waited for (at most ``timeout`` s, and never past the case's end)."""
        return Outcome.of(self.reply(self.submit(action, worker=worker, **fields), timeout), self.secrets)

    def cancel(self, call_id: int, *, worker: int = 0) -> None:
        """Cancel a call under way (as TRL cancels an interrupted step); its answer still comes."""
        self._send({"op": "cancel", "id": 0, "call": call_id, "worker": worker})

    # ------------------------------------------------------------------ cases
    def begin(self, timeout: float = CASE_TIMEOUT) -> None:
        """A case starts: nothing it asks may take longer than ``timeout`` in all."""
        self._deadline = time.monotonic() + timeout

    def end(self) -> None:
        """The case is over: its event loops end and its objects are dropped where it ran."""
        try:
            self.reply(self.request("end"))
        finally:
            self._deadline = None


class LocalCalls(SubjectCalls):
    """A subject loaded in this very process: the same requests, carried out here (no isolation)."""

    def __init__(self, subject: Subject) -> None:
        super().__init__(subject.kind, subject.spec, subject.contract)
        from pytest_e2b_env.catalog.execute import Executor

        self._executor = Executor(subject, self._deliver)

    def _send(self, message: dict[str, Any]) -> None:
        self._executor.handle(message)

    def environment(self, target: Target) -> contextlib.AbstractContextManager[None]:
        """The SDK points at the target while the case runs, then the environment is restored."""
        return target.scoped_env()

    def subject_pid(self) -> int | None:
        """This process."""
        import os

        return os.getpid()
