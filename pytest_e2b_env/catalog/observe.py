"""What the catalog observes of a subject, from the outside.

A :class:`Call` is one call the driver made (as TRL would) with its value or exception,
its duration and the ledger positions around it; an :class:`Observation` is the whole
case: every call, the target's ledger slice, and the derived sandbox facts the verdicts use.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from pytest_e2b_env.evidence.redaction import Redactor
from pytest_e2b_env.targets.tags import created_ids


def rule_of(entry: dict[str, Any]) -> str | None:
    """The id of the fault rule that answered a ledger entry (its label is ``"<id>: <answer>"``)."""
    label = entry.get("fault")
    return str(label).split(":", 1)[0] if label else None


MESSAGE_LIMIT = 600
VALUE_LIMIT = 2000


def exception_info(exc: BaseException, secrets: list[str]) -> dict[str, Any]:
    """Type, class hierarchy names and the message, redacted as the bundle is, then bounded."""
    # Redacted before the cut: a secret across it would otherwise keep a piece no redactor knows.
    message = Redactor(secrets).text(str(exc))[:MESSAGE_LIMIT]
    chain = [cls.__name__ for cls in type(exc).__mro__ if cls not in (object, BaseException)]
    return {"type": type(exc).__name__, "hierarchy": chain, "message": message}


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` (JSON) with ``secrets``, the environment's and secret-shaped strings redacted.

    The evidence bundle's redaction, applied to the data so the result stays valid JSON.
    """
    redactor = Redactor(secrets)
    try:
        data = json.loads(text)
    except ValueError:
        return redactor.text(text)
    return json.dumps(redactor.data(data))


def summarize(value: Any) -> Any:
    """A JSON-safe, bounded copy of a returned value (a cut never splits a secret)."""
    try:
        text, kept = json.dumps(value), value
    except (TypeError, ValueError):
        text = kept = repr(value)
    if len(text) <= VALUE_LIMIT:
        return kept
    # Not redacted (the no-secret verdict reads the value; the record is redacted after it), so
    # the cut moves before a secret it would halve: no piece of one is left for the record.
    cut = text[: Redactor().cut_point(text, VALUE_LIMIT)]
    return cut if kept is text else cut + "..."


@dataclass
class Call:
    """One call made by a driver."""

    name: str
    lane: int = 0
    args: dict[str, Any] = field(default_factory=dict)
    value: Any = None
    returned: bool = False
    error: dict[str, Any] | None = None
    seconds: float = 0.0
    mark_start: int = 0
    mark_end: int = 0
    after_submit: bool = False
    expect_refused: bool = False
    step: int | None = None
    deadline: dict[str, Any] | None = None
    started_at: float = field(default_factory=time.time)
    #: the type name of what the call returned, as the subject's process saw it
    value_type: str | None = None
    #: the hostile argument set of a probed tool call (``traversal``, ``oversized``...), else None
    probe: str | None = None

    def to_event(self) -> dict[str, Any]:
        """The trajectory event of this call."""
        return {
            "kind": "call",
            "t": self.started_at,
            "lane": self.lane,
            "name": self.name,
            "args": self.args,
            "returned": self.returned,
            "value": summarize(self.value),
            "error": self.error,
            "seconds": round(self.seconds, 4),
            "after_submit": self.after_submit,
            "step": self.step,
            **({"probe": self.probe} if self.probe is not None else {}),
        }


@dataclass
class Observation:
    """Everything seen while a case ran."""

    subject: str
    calls: list[Call] = field(default_factory=list)
    ledger: list[dict[str, Any]] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    allowed_tools: list[str] = field(default_factory=list)
    alive_after_first_call: list[str] = field(default_factory=list)
    alive_at_reward: dict[int, list[str]] = field(default_factory=dict)
    alive_after_close: list[str] = field(default_factory=list)
    alive_after_reset: list[list[str]] = field(default_factory=list)
    leaked: list[str] = field(default_factory=list)
    leaked_after_sweep: list[str] = field(default_factory=list)
    #: left alive, but made by a create the catalog's cancellation cut off: never the subject's to kill
    cut_off: list[str] = field(default_factory=list)
    cleanup: list[dict[str, Any]] = field(default_factory=list)
    create_info: dict[str, dict[str, Any]] = field(default_factory=dict)
    driver_error: dict[str, Any] | None = None
    reward_async: bool | None = None
    mark0: int = 0
    #: ids of the fault rules this case armed (None: not known, every faulted entry counts); a
    #: delayed request of an earlier case may reach the ledger during this one, under its own rule
    fault_rules: list[str] | None = None
    #: ids of the rules watching for expected outputs (catalog/expected.py): never the case's faults
    watch_rules: list[str] = field(default_factory=list)
    #: how many forms of expected outputs those rules look for
    watched_forms: int = 0
    #: where an episode's reward comes from: ``get_reward()``, or ``env.reward`` and its shape
    reward_source: str | None = None
    #: sandboxes of the episode alive at each reward read (lane 0, one episode at a time)
    alive_at_reads: list[list[str]] = field(default_factory=list)
    #: each model tool's parameters, as the subject's process read them
    tool_params: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: the tools the case called with hostile arguments, and what that did to the host
    probe_targets: list[str] = field(default_factory=list)
    host_probe: dict[str, Any] | None = None
    #: "ok", or why AsyncGRPOTrainer could not pickle the factory (None: not observed)
    factory_pickle: str | None = None

    # ---- derived facts -------------------------------------------------------------------
    def calls_named(self, name: str) -> list[Call]:
        """Calls with this name, in order."""
        return [c for c in self.calls if c.name == name]

    def entries(self, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
        """Ledger entries with ``start <= seq < end``."""
        return [e for e in self.ledger if e["seq"] >= start and (end is None or e["seq"] < end)]

    def created(self, start: int = 0, end: int | None = None) -> list[str]:
        """Ids of sandboxes the target created (in order, once each) within the range."""
        return created_ids(self.ledger, start, end)

    def created_before(self, mark: int, target: Any) -> list[str]:
        """Ids created before ledger position ``mark`` (read live from the target)."""
        return created_ids(target.ledger(since=self.mark0), end=mark)

    def ops(self, op: str, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
        """Ledger entries of one operation within the range."""
        return [e for e in self.entries(start, end) if e.get("op") == op]

    def starts(self, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
        """Ledger entries that ran code in a sandbox: a process start or a code-interpreter cell."""
        return [
            e
            for e in self.entries(start, end)
            if (e.get("op") == "run" and str(e.get("route", "")).endswith("/Start"))
            or e.get("op") == "run_code"
        ]

    def faults(self, start: int = 0, end: int | None = None) -> list[dict[str, Any]]:
        """Ledger entries a fault rule of this case answered (including creates whose answer a fault ate).

        The rules watching for expected outputs answer nothing and are never counted here.
        """
        watch = set(self.watch_rules)
        mine = None if self.fault_rules is None else set(self.fault_rules)
        found = []
        for entry in self.entries(start, end):
            if not (entry.get("op") == "fault" or entry.get("fault")):
                continue
            rule = rule_of(entry)
            if rule in watch or (mine is not None and rule not in mine):
                continue
            found.append(entry)
        return found

    def submit_mark(self, lane: int = 0) -> int | None:
        """Ledger position where the first submit() of a lane started."""
        for call in self.calls:
            if call.lane == lane and call.name == "submit":
                return call.mark_start
        return None

    def raised(self, names: tuple[str, ...]) -> list[Call]:
        """Calls among ``names`` that raised."""
        return [c for c in self.calls if c.name in names and c.error is not None]

    def to_dict(self) -> dict[str, Any]:
        """The observed part of a case record (bounded, JSON-safe)."""
        created = self.created()
        return {
            "calls": [c.to_event() for c in self.calls],
            "sandboxes_created": created,
            "create_info": self.create_info,
            "faults_fired": len(self.faults()),
            "kills": [
                {"sandbox_id": e.get("sandbox_id"), "status": e.get("status")} for e in self.ops("kill")
            ],
            "commands_run": len(self.starts()),
            "tools": self.tools,
            "alive_after_first_call": self.alive_after_first_call,
            "alive_at_reward": {str(k): v for k, v in self.alive_at_reward.items()},
            "alive_after_reset": self.alive_after_reset,
            "leaked": self.leaked,
            "leaked_after_sweep": self.leaked_after_sweep,
            "cut_off": self.cut_off,
            "driver_error": self.driver_error,
            **(self._episode_facts() if self.subject == "episode" else {}),
        }

    def _episode_facts(self) -> dict[str, Any]:
        return {
            "reward_source": self.reward_source,
            "alive_at_reads": self.alive_at_reads,
            "factory_pickle": self.factory_pickle,
            **(
                {"probe_targets": self.probe_targets, "host_probe": self.host_probe}
                if self.probe_targets
                else {}
            ),
        }
