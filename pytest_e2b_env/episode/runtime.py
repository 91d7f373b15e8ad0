"""Per-episode bookkeeping on the server: owned sandboxes, phase, committed reward, fatal error, timings.

No SDK and no openenv here, so the records can be tested (and read by evidence code) cheaply.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_e2b_env.episode.sandboxes import CommandOutcome
from pytest_e2b_env.episode.task import RepairTask
from pytest_e2b_env.errors import CleanupError, E2BEnvError
from pytest_e2b_env.targets.tags import utc_now

#: Phases after which the episode accepts no tool call.
CLOSED = frozenset({"submitted", "expired", "finished", "failed", "verifying"})
#: Refusals (a bad key, argument or template): configuration, which no policy may mask.
REFUSALS = frozenset(
    {"AuthenticationException", "InvalidArgumentException", "TemplateException", "ConfigError"}
)


def _refused(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 8:  # the SDK error may sit under our own wrapper
        if REFUSALS & {cls.__name__ for cls in type(exc).__mro__}:
            return True
        exc, seen = exc.__cause__, seen + 1
    return False


@dataclass(frozen=True)
class Fatal:
    """An infrastructure failure as data: class name, message (types and ids only), unresolved ids.

    ``kind`` is ``"refused"`` for authentication, argument and template refusals (never masked),
    else ``"infrastructure"``.
    """

    type: str
    message: str
    ids: tuple[str, ...]
    kind: str = "infrastructure"

    @classmethod
    def of(cls, exc: BaseException, where: str = "") -> Fatal:
        """Describe ``exc`` without its payload: a sandbox's text never reaches the message."""
        prefix = f"{where}: " if where else ""
        if isinstance(exc, CleanupError):
            return cls("CleanupError", prefix + str(exc).split(" (unresolved")[0], tuple(exc.ids))
        kind = "refused" if _refused(exc) else "infrastructure"
        if isinstance(exc, E2BEnvError):
            return cls("InfrastructureError", prefix + str(exc), (), kind)
        message = f"{prefix}{type(exc).__name__} from the sandbox infrastructure"
        return cls("InfrastructureError", message, (), kind)

    def as_dict(self) -> dict[str, Any]:
        """JSON form carried in observation metadata."""
        return {"type": self.type, "message": self.message, "ids": list(self.ids), "kind": self.kind}


@dataclass
class Episode:
    """State of one episode between reset and the reward boundary.

    ``clock`` (seconds, monotonic) measures the policy window; the environment passes its own.
    """

    task: RepairTask
    tag: str
    phase: str = "starting"
    policy: Any = None
    owned: dict[str, str] = field(default_factory=dict)  # sandbox id -> role
    sandboxes: list[dict[str, Any]] = field(default_factory=list)
    cleanup: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, list[float]] = field(default_factory=dict)
    window_ends: float = float("inf")
    reward: float | None = None
    committed_after_cleanup: bool | None = None
    fatal: Fatal | None = None
    notes: list[str] = field(default_factory=list)
    swept: bool = False  # released and swept at the reward boundary
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    def own(self, sandbox_id: str, role: str) -> None:
        """Record a sandbox the moment its id is known, before anything else can fail."""
        self.owned[sandbox_id] = role
        self.sandboxes.append({"sandbox_id": sandbox_id, "role": role, "created_at": utc_now()})

    def ids(self, role: str) -> list[str]:
        """Ids of every sandbox of ``role`` created in this episode."""
        return [s["sandbox_id"] for s in self.sandboxes if s["role"] == role]

    def timing(self, name: str, started: float) -> None:
        """Append the seconds since ``started`` (monotonic) to the named operation."""
        self.timings.setdefault(name, []).append(round(time.monotonic() - started, 4))

    def open_window(self, seconds: float) -> None:
        """Start the policy window: it ends ``seconds`` from now."""
        self.window_ends = self.clock() + seconds

    def window_left(self) -> float:
        """Seconds left in the policy window."""
        return self.window_ends - self.clock()

    def commit(self, reward: float, phase: str) -> None:
        """Commit the score; the caller has confirmed every sandbox that produced it gone."""
        self.committed_after_cleanup = not self.owned
        self.reward = float(reward)
        self.phase = phase

    def fail(self, fatal: Fatal) -> None:
        """Void the episode: no score is ever committed after this."""
        if self.fatal is None:
            self.fatal = fatal
        self.reward = None
        self.phase = "failed"

    def public(self) -> dict[str, Any]:
        """What observations carry: never the task's hidden files or expected values."""
        return {
            "task_id": self.task.id,
            "phase": self.phase,
            "reward": self.reward,
            "committed_after_cleanup": self.committed_after_cleanup,
            "fatal": self.fatal.as_dict() if self.fatal else None,
            "sandboxes": list(self.sandboxes),
            "owned": sorted(self.owned),
            "cleanup": list(self.cleanup),
            "timings": {k: list(v) for k, v in self.timings.items()},
            "notes": list(self.notes),
        }


def format_outcome(outcome: CommandOutcome, seconds: float) -> str:
    """What the policy reads after a command: output, truncation, exit code, deadline kill."""
    parts = [outcome.output.rstrip("\n")] if outcome.output else []
    if outcome.truncated:
        parts.append(f"[output truncated: first {len(outcome.output.encode())} bytes shown]")
    if outcome.timed_out:
        parts.append(f"[killed: the command exceeded its {seconds:g} s deadline; the episode goes on]")
    elif outcome.exit_code != 0:
        parts.append(f"[exit code {outcome.exit_code}]")
    return "\n".join(parts) if parts else "(no output)"
