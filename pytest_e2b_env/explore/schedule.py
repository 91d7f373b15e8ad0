"""A fault schedule as data: what the search draws, shrinks, prints in words and replays.

A schedule is a batch of completions, each with a candidate behaviour (correct, wrong, hanging,
hostile), and a list of fault steps. A step is one wire fault the catalog knows (``KINDS``) aimed
at one position: the k-th call of a route, the k-th call of a route on the n-th sandbox the run
created, or the requests that carry one completion's program. It compiles to the catalog's own
fault rules (:class:`~pytest_e2b_env.catalog.model.Fault`), so the emulator's fault layer and
ledger do the work; nothing here talks to a target.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.explore.episode import ACTIONS, expected_reward, tool_marker

#: route name -> (the route pattern the fault layer matches, how a sentence names its calls)
ROUTES: dict[str, tuple[str, str]] = {
    "create": ("POST */sandboxes", "create"),
    "kill": ("DELETE /sandboxes/*", "kill"),
    "run": ("POST /process.Process/Start", "command"),
    "write": ("POST /files", "file upload"),
    "set_timeout": ("POST /sandboxes/*/timeout", "lifetime renewal"),
    "run_code": ("POST /execute", "run_code cell"),
    # An episode's own: reading the artifact back, and looking a sandbox up (a kill's confirmation).
    "read": ("GET /files", "file download"),
    "info": ("GET /sandboxes/*", "lookup"),
}

#: fault kind -> (the catalog's fault answer, the routes it is aimed at, how a sentence names it)
KINDS: dict[str, tuple[dict[str, Any], tuple[str, ...], str]] = {
    "rate-limit": ({"status": 429, "retry_after": 0}, ("create",), "429 (Retry-After 0)"),
    "auth": ({"status": 401}, ("create",), "401"),
    "server-error": (
        {"status": 500},
        ("create", "run", "write", "kill", "set_timeout", "run_code", "read", "info"),
        "500",
    ),
    "unavailable": ({"status": 503}, ("create", "set_timeout"), "503"),
    "lost-sandbox": (
        {"lose_sandbox": True},
        ("run", "write", "set_timeout", "run_code", "read"),
        "a lost sandbox (502 'sandbox was not found' after)",
    ),
    "lost-answer": (
        {"drop_stream": True},
        ("create", "kill", "run", "write", "read", "info"),
        "a lost answer (the server acted)",
    ),
    "delay": ({"delay": 1.0}, ("create", "run", "kill"), "a 1 s delay"),
    "kill-fails": ({"kill_fails": True}, ("kill",), "a kill answering 500"),
}

#: statuses the e2b SDK retries by itself on the control plane (3 retries: 4 answers reach a call)
SDK_RETRIED = frozenset({429, 502, 503, 504})
SDK_RETRIES = 3

SUBJECTS = ("reward", "episode")
BEHAVIOURS = ("correct", "wrong", "hanging", "hostile")
#: the score a correct reward gives each behaviour (one test case per completion)
SCORES = {"correct": 1.0, "wrong": 0.0, "hanging": 0.0, "hostile": 0.0}

TEST_INPUT = '["explore", "schedule"]'
TEST_OUTPUT = '"explore+schedule"'


def marker(completion: int) -> str:
    """The comment that makes one completion's program findable in a request body (1-based)."""
    return f"# explore-completion-{completion} #"


def program(behaviour: str, completion: int) -> str:
    """The candidate program of one completion: it reads a JSON list and prints it joined by '+'."""
    head = f"{marker(completion)}\nimport json, sys\n"
    if behaviour == "correct":
        return head + 'print(json.dumps("+".join(json.load(sys.stdin))))\n'
    if behaviour == "wrong":
        return head + 'print(json.dumps("-".join(json.load(sys.stdin))))\n'
    if behaviour == "hanging":
        return head + "import time\nwhile True:\n    time.sleep(1)\n"
    if behaviour == "hostile":  # a pass marker and a clean exit without an answer: scores 0
        return head + 'print("PASSED all tests")\nimport os\nos._exit(0)\n'
    raise ConfigError(f"behaviour {behaviour!r} is not one of {', '.join(BEHAVIOURS)}")


def _ordinal(n: int) -> str:
    return f"{n}{'tsnrhtdd'[(n // 10 % 10 != 1) * (n % 10 < 4) * n % 10 :: 4]}"


@dataclass(frozen=True)
class FaultStep:
    """One wire fault at one position.

    ``nth`` is which matching call the fault first answers (1-based); ``sandbox`` pins it to the
    n-th sandbox the run created; ``completion`` aims it at the requests carrying that
    completion's program. ``times`` is how many matching calls it answers in a row: a status the
    SDK retries needs more than its retries to reach the subject.
    """

    kind: str
    route: str
    nth: int = 1
    times: int = 1
    sandbox: int | None = None
    completion: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"fault kind {self.kind!r} is unknown; choose one of {', '.join(KINDS)}")
        if self.route not in KINDS[self.kind][1]:
            raise ConfigError(
                f"fault kind {self.kind!r} is not aimed at route {self.route!r}; "
                f"use one of {', '.join(KINDS[self.kind][1])}"
            )
        if self.nth < 1 or self.times < 1:
            raise ConfigError(f"nth and times start at 1, got nth={self.nth}, times={self.times}")

    def fault(self, subject: str = "reward") -> dict[str, Any]:
        """The catalog fault rule (``[[case.faults]]``) of this step (an episode's: a tool call's marker)."""
        rule: dict[str, Any] = {
            "route": ROUTES[self.route][0],
            "answer": dict(KINDS[self.kind][0]),
            "times": self.times,
            "after": self.nth - 1,
        }
        if self.sandbox is not None:
            rule["sandbox_nth"] = self.sandbox
        if self.completion is not None:
            rule["contains"] = (
                tool_marker(self.completion) if subject == "episode" else marker(self.completion)
            )
        return rule

    def retried_by_sdk(self) -> bool:
        """Whether the SDK retries this answer by itself (so fewer repeats never reach the subject)."""
        status = KINDS[self.kind][0].get("status")
        return status in SDK_RETRIED and self.route == "create"

    def words(self, carrier: str = "completion") -> str:
        """``429 (Retry-After 0) x4 on the 2nd create of sandbox 1``."""
        what = KINDS[self.kind][2] + (f" x{self.times}" if self.times > 1 else "")
        call = ROUTES[self.route][1]
        where = f"the {_ordinal(self.nth)} {call}"
        if self.completion is not None:
            where = f"the {_ordinal(self.nth)} {call} carrying {carrier} {self.completion}"
        if self.sandbox is not None:
            where += f" of sandbox {self.sandbox}"
        return f"{what} on {where}"

    def size(self) -> tuple[int, ...]:
        """How far from the simplest step this is (what 'minimal' compares)."""
        return (self.nth, self.times, self.sandbox or 0, self.completion or 0)


@dataclass(frozen=True)
class Schedule:
    """A batch of candidate behaviours (an episode: its tool calls) and the fault steps of one run.

    ``subject`` is ``reward`` (``behaviours``: one candidate program per completion) or ``episode``
    (``behaviours``: the model's tool calls before it submits, ``explore.episode.ACTIONS``; a step's
    ``completion`` is then a tool call).
    """

    behaviours: tuple[str, ...]
    steps: tuple[FaultStep, ...] = field(default_factory=tuple)
    subject: str = "reward"

    def __post_init__(self) -> None:
        if self.subject not in SUBJECTS:
            raise ConfigError(f"subject {self.subject!r} is not one of {', '.join(SUBJECTS)}")
        allowed = BEHAVIOURS if self.subject == "reward" else tuple(ACTIONS)
        if not self.behaviours:
            raise ConfigError(f"a schedule needs at least one {self.carrier} behaviour")
        for behaviour in self.behaviours:
            if behaviour not in allowed:
                raise ConfigError(f"behaviour {behaviour!r} is not one of {', '.join(allowed)}")
        for step in self.steps:
            if step.completion is not None and not 1 <= step.completion <= len(self.behaviours):
                raise ConfigError(
                    f"a step aims at {self.carrier} {step.completion}, but the schedule has "
                    f"{len(self.behaviours)}"
                )

    @property
    def carrier(self) -> str:
        """What a step's ``completion`` counts: completions of a batch, or an episode's tool calls."""
        return "completion" if self.subject == "reward" else "tool call"

    def expected_scores(self) -> list[float]:
        """What a correct subject returns: per completion in order (reward), or the one episode reward."""
        if self.subject == "episode":
            return [expected_reward(self.behaviours)]
        return [SCORES[b] for b in self.behaviours]

    def words(self) -> str:
        """The schedule in one sentence (faults in order, then the batch or the tool calls)."""
        if self.subject == "episode":
            calls = ", ".join(f"{i}: {b}" for i, b in enumerate(self.behaviours, 1))
            batch = f"tool calls {calls}, then submit"
        else:
            batch = "completions " + ", ".join(f"{i}: {b}" for i, b in enumerate(self.behaviours, 1))
        if not self.steps:
            return f"no fault; {batch}"
        faults = ", then ".join(step.words(self.carrier) for step in self.steps)
        return f"{faults[0].upper()}{faults[1:]}; {batch}"

    def size(self) -> tuple[Any, ...]:
        """Fewer steps, then simpler steps, then a smaller batch of more correct programs."""
        nonzero = sum(b not in ("correct", "repair") for b in self.behaviours)
        return (len(self.steps), sorted(s.size() for s in self.steps), len(self.behaviours), nonzero)

    def to_json(self) -> dict[str, Any]:
        """The schedule as JSON data (what a finding file holds and ``--replay`` reads)."""
        out: dict[str, Any] = {"behaviours": list(self.behaviours), "steps": [asdict(s) for s in self.steps]}
        if self.subject != "reward":  # a reward schedule's file reads as it always did
            out["subject"] = self.subject
        return out

    @classmethod
    def from_json(cls, data: Any) -> Schedule:
        """Read :meth:`to_json`'s shape; a bad value is a :class:`ConfigError` naming it."""
        if not isinstance(data, dict) or not isinstance(data.get("behaviours"), list):
            raise ConfigError(
                f"a schedule is {{'behaviours': [...], 'steps': [...]}}, got {json.dumps(data)[:120]}"
            )
        steps = []
        for raw in data.get("steps") or []:
            if not isinstance(raw, dict):
                raise ConfigError(f"a schedule step is an object, got {raw!r}")
            try:
                steps.append(FaultStep(**raw))
            except TypeError as exc:
                raise ConfigError(f"schedule step {raw!r}: {exc}") from None
        subject = str(data.get("subject") or "reward")
        return cls(tuple(str(b) for b in data["behaviours"]), tuple(steps), subject)
