"""The case model: one catalog case as validated data.

A case says what to feed a subject (a batch of completions, or a task row and a script of
tool calls), which wire faults to inject, in which modes it can run and what must be
observed. Everything here is pure data; the drivers and verdicts give it meaning.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

FAMILIES: tuple[str, ...] = (
    "good",
    "defect",
    "timeout",
    "lost-worker",
    "cleanup-failure",
    "rate-limit",
    "auth",
    "hostile",
    "lifecycle",
    "isolation",
    "live-fault",
)
MODES: tuple[str, ...] = ("offline", "live")
_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")

# Every predicate an ``expect`` table may use, with a one-line meaning (docs/catalog.md lists them).
PREDICATES: dict[str, str] = {
    "rewards": "the reward call returned exactly these scores, in completion order",
    "score_or_raise": "the reward call raised, or returned exactly these scores (an infrastructure fault "
    "never becomes a number)",
    "deadline_kept": "every call marked with a deadline came back within the limit in force plus the "
    "stated tolerance (limit x 1.5 + 2 s)",
    "reward": "get_reward() returned exactly this value",
    "raises": "a call raised; value 'any' or a class name found in the exception's class hierarchy",
    "raises_names_ids": "the exception message names every sandbox whose kill failed",
    "no_score": "no score was produced (the scoring call raised, or its value was discarded)",
    "leaked_sandboxes": "sandboxes created during the case still alive at its end",
    "leaked_after_sweep": "sandboxes of the case still alive after the run-id sweep (reap) ran",
    "sandboxes_created_min": "at least this many sandboxes were created",
    "sandboxes_created_max": "at most this many sandboxes were created",
    "no_sandbox": "no sandbox was created at all",
    "no_run": "no command ran in any sandbox",
    "replacement_created": "a sandbox was created after a sandbox was lost",
    "faults_fired_min": "at least this many fault rules fired",
    "faults_fired_max": "at most this many fault rules fired (an abort happened at once)",
    "kill_failed_seen": "the ledger shows a kill answered with an error",
    "verifier_created": "a sandbox was created once submit() started",
    "verifier_offline": "every sandbox created once submit() started had internet access off",
    "score_committed_after_cleanup": "no sandbox of the episode was alive when get_reward() returned",
    "tool_refused": "every tool call after submit() was refused (no command ran)",
    "tools_exclude": "these names are not model tools (public methods)",
    "tools_allowed_only": "every model tool is one the task allows",
    "observations_contain": "some tool observation contains each of these substrings",
    "observations_exclude": "no tool observation contains any of these substrings",
    "second_batch_rewards": "a second batch on the same reward function returned these scores",
    "second_batch_raises": "a second batch on the same reward function raised",
    "pool_cleanup": "leaving the subject's context left no sandbox of the case alive",
    "parallel_isolated": "parallel episodes got exactly these rewards (any order)",
    "reset_replaces": "a second reset() left no sandbox of the first episode alive",
    "tolerate_raises": "the case accepts a raise anywhere (only its other predicates judge it)",
    "score_mask_or_raise": "an injected fault never changes a number: the scoring call raised, or returned "
    "exactly these scores where it returned numbers, and None (unscorable) elsewhere; a masked episode had "
    "every sandbox gone when get_reward() returned",
    "faulted_sandbox_released": "every sandbox a fault hit while it stayed alive was then killed (the kill "
    "answered, or a lookup said gone) or used again, and none of them was left alive: a sandbox the subject "
    "stops using but leaves alive is a leak",
    "masked_or_raise": "an infrastructure fault is unscorable, never a number: the scoring call raised, "
    "or returned None (TRL's unscorable) exactly where the case says 'masked' and these scores elsewhere; "
    "a masked episode had every sandbox gone when get_reward() returned",
    "reward_reads": "the reward, read as TRL reads it after each rollout of one reused instance, "
    "was exactly these values in order",
    "released_at_reads": "no sandbox of the episode was alive at any reward read (TRL pools instances "
    "and never closes them)",
    "tools_probed": "every model tool besides the terminal and submit was called with each set of hostile "
    "arguments and answered each (a value or an exception)",
    "host_untouched": "no hostile tool argument made the episode write into, change or read the host "
    "directory its paths named",
    "factory_picklable": "the factory pickles, as AsyncGRPOTrainer needs to hand it to its spawned rollout "
    "worker",
}

# Which subject each predicate makes sense for (both when absent).
_REWARD_ONLY = {
    "rewards",
    "score_or_raise",
    "second_batch_rewards",
    "second_batch_raises",
    "pool_cleanup",
    "replacement_created",
}
_EPISODE_ONLY = {
    "reward",
    "deadline_kept",
    "verifier_created",
    "verifier_offline",
    "score_committed_after_cleanup",
    "tool_refused",
    "tools_exclude",
    "tools_allowed_only",
    "observations_contain",
    "observations_exclude",
    "parallel_isolated",
    "reset_replaces",
    "reward_reads",
    "released_at_reads",
    "tools_probed",
    "host_untouched",
    "factory_picklable",
}


class Fault(BaseModel):
    """One wire fault rule, handed to the target's ``faults.add``.

    ``sandbox_nth`` defers the rule until the case's n-th sandbox is created, then pins it to
    that sandbox (e.g. 2: an episode's verifier, created after its policy sandbox).
    """

    model_config = ConfigDict(extra="forbid")

    route: str
    answer: dict[str, Any]
    times: int = 1
    contains: str | None = None
    after: int = 0
    sandbox_nth: int | None = Field(default=None, ge=1)

    def add_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``faults.add`` (``sandbox_nth`` is resolved by the runner)."""
        return self.model_dump(exclude_none=True, exclude={"sandbox_nth"})


class Completion(BaseModel):
    """One completion of a reward batch; exactly one of the content fields is set.

    ``program`` names a candidate file (wrapped in a ```python fence), ``text`` is the raw
    assistant message, ``content`` is any JSON value used as the message content as-is
    (for non-string content), ``messages`` is a whole conversation.
    """

    model_config = ConfigDict(extra="forbid")

    program: str | None = None
    fence: str = "python"
    text: str | None = None
    text_file: str | None = None
    content: Any = None
    messages: list[dict[str, Any]] | None = None
    test_cases: list[dict[str, str]] | None = None
    generate: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Completion:
        given = [
            n
            for n in ("program", "text", "text_file", "content", "messages", "generate")
            if getattr(self, n) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of program/text/text_file/content/messages/generate, got {given or 'none'}"
            )
        return self


class RewardInput(BaseModel):
    """A reward batch: completions plus the test cases each is scored against."""

    model_config = ConfigDict(extra="forbid")

    completions: list[Completion] = Field(min_length=1)
    task: str | None = None
    tasks_file: str = "fixtures/reward/tasks.json"
    test_cases: list[dict[str, str]] = Field(default_factory=list)
    second_batch: list[Completion] | None = None
    cancel_on: Literal["run"] | None = None
    #: The dataset row's prompt, passed as ``prompts`` (default: one generic user message).
    prompt: list[dict[str, Any]] | None = None
    #: The row's other dataset columns, passed as TRL passes columns: one value per completion.
    columns: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _tests(self) -> RewardInput:
        if self.task is None and not self.test_cases:
            missing = [i for i, c in enumerate(self.completions) if c.test_cases is None]
            if missing:
                raise ValueError("give task (a task_id of tasks_file) or test_cases for every completion")
        return self


class Step(BaseModel):
    """One scripted step of an episode: a tool call, a file write (sugar), a pause or a re-reset.

    ``write`` puts ``source`` (a file) or ``content`` (inline text) at ``path`` through the
    ``terminal`` tool, replacing the file or prepending to it (``mode``). ``refuse`` marks a call
    that must be refused (no command may run while it is served). Commands and paths may name
    ``{workdir}``, ``{artifact}`` and the limits in force (``{command_seconds}``...). A ``sleep``
    waits ``seconds`` or ``until`` a limit in force has passed; ``deadline`` marks a call that must
    come back within that limit (plus the stated tolerance). A ``vanish`` step is the backend's, not
    a call: every sandbox of the episode alive at that point is killed through the target's API
    while no call is in flight (what an expired lifetime or an operator's kill does to it). ``repair``
    runs the case's repair commands at that point (instead of first), ``reward`` reads the reward
    as TRL does after a rollout (the instance stays, as in TRL's pool), and ``probe-tools`` calls
    every model tool besides the terminal and submit with hostile arguments.
    """

    model_config = ConfigDict(extra="forbid")

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    path: str | None = None
    source: str | None = None
    content: str | None = None
    mode: Literal["replace", "prepend", "append"] = "replace"
    seconds: float | None = None
    until: Literal["policy_seconds", "command_seconds"] | None = None
    deadline: Literal["command_seconds"] | None = None
    refuse: bool = False

    @model_validator(mode="after")
    def _shape(self) -> Step:
        if self.tool == "write" and (self.path is None or (self.source is None) == (self.content is None)):
            raise ValueError("a 'write' step needs path and exactly one of source or content")
        if self.tool == "sleep" and (self.seconds is None) == (self.until is None):
            raise ValueError("a 'sleep' step needs seconds or until (a limit to wait out), not both")
        if self.tool == "terminal" and "command" not in self.args:
            raise ValueError("a 'terminal' step needs args.command")
        return self


class EpisodeInput(BaseModel):
    """An episode: the task (inline or a file), the prompt and the scripted tool calls.

    ``repair`` names a file with ``{"commands": [...]}`` run as ``terminal`` calls before
    ``script``. ``lanes`` runs several episodes at once, one script each (after ``repair``).
    """

    model_config = ConfigDict(extra="forbid")

    task: dict[str, Any] | None = None
    task_file: str | None = None
    task_override: dict[str, Any] = Field(default_factory=dict)
    prompt: list[dict[str, Any]] | None = None
    repair: str | None = None
    script: list[Step] = Field(default_factory=list)
    lanes: list[list[Step]] | None = Field(default=None, min_length=2, max_length=4)

    @property
    def parallel(self) -> int:
        """How many episodes run at once."""
        return len(self.lanes) if self.lanes else 1

    @model_validator(mode="after")
    def _task(self) -> EpisodeInput:
        if (self.task is None) == (self.task_file is None):
            raise ValueError("give exactly one of task or task_file")
        if self.lanes and self.script:
            raise ValueError("give script (one episode) or lanes (parallel episodes), not both")
        steps = [step for lane in (self.lanes or [self.script]) for step in lane]
        if self.repair is None and any(step.tool == "repair" for step in steps):
            raise ValueError("a 'repair' step needs the episode's repair file (repair = ...)")
        return self


class Case(BaseModel):
    """One catalog case: id, subject, family, input, faults, modes and expectations."""

    model_config = ConfigDict(extra="forbid")

    id: str
    subject: Literal["reward", "episode"]
    family: str
    description: str = Field(min_length=10)
    modes: list[Literal["offline", "live"]] = Field(default_factory=lambda: ["offline", "live"])  # type: ignore[arg-type]
    modes_reason: str | None = None
    faults: list[Fault] = Field(default_factory=list)
    needs: Literal["keeps_sandboxes", "renews_lifetime", "extra_tools"] | None = None
    #: House policy instead of safety: one policy name for the whole case, or predicate -> name.
    policy: str | dict[str, str] | None = None
    reward: RewardInput | None = None
    episode: EpisodeInput | None = None
    expect: dict[str, Any] = Field(min_length=1)
    #: Texts no request may carry into a sandbox (each already a form to look for, see
    #: ``catalog/expected.py``); a reward case also watches for the forms of its expected outputs.
    never_in_sandbox: list[str] = Field(default_factory=list)
    source_file: str = ""

    @field_validator("id")
    @classmethod
    def _kebab(cls, value: str) -> str:
        if not _ID.match(value):
            raise ValueError(f"{value!r} is not kebab-case (example: reward-timeout-infinite-loop)")
        return value

    @field_validator("family")
    @classmethod
    def _family(cls, value: str) -> str:
        if value not in FAMILIES:
            raise ValueError(f"unknown family {value!r}; choose one of {', '.join(FAMILIES)}")
        return value

    @field_validator("expect")
    @classmethod
    def _predicates(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - set(PREDICATES))
        if unknown:
            raise ValueError(f"unknown predicate(s) {unknown}; known: {', '.join(sorted(PREDICATES))}")
        return value

    @field_validator("policy")
    @classmethod
    def _policy(cls, value: str | dict[str, str] | None) -> str | dict[str, str] | None:
        from pytest_e2b_env.catalog.contract import POLICIES

        names = [value] if isinstance(value, str) else list((value or {}).values())
        unknown = sorted(n for n in names if n not in POLICIES)
        if unknown:
            raise ValueError(f"unknown policy name(s) {unknown}; known: {', '.join(POLICIES)}")
        return value

    def policy_of(self, predicate: str) -> str | None:
        """The policy name a predicate of this case is judged under, or None (safety)."""
        if isinstance(self.policy, str):
            return self.policy
        return (self.policy or {}).get(predicate)

    @model_validator(mode="after")
    def _input_matches_subject(self) -> Case:
        if self.subject == "reward" and (self.reward is None or self.episode is not None):
            raise ValueError("a reward case needs a [case.reward] table and no [case.episode]")
        if self.subject == "episode" and (self.episode is None or self.reward is not None):
            raise ValueError("an episode case needs a [case.episode] table and no [case.reward]")
        wrong = _EPISODE_ONLY if self.subject == "reward" else _REWARD_ONLY
        if isinstance(self.policy, dict):
            stray = sorted(set(self.policy) - set(self.expect))
            if stray:
                raise ValueError(f"policy names predicate(s) {stray} that the case does not expect")
        misplaced = sorted(set(self.expect) & wrong)
        if misplaced:
            raise ValueError(f"predicate(s) {misplaced} do not apply to {self.subject} cases")
        if not self.modes:
            raise ValueError("modes is empty; give at least one of offline, live")
        if len(self.modes) < len(MODES) and not self.modes_reason:
            raise ValueError("a case limited to some modes needs modes_reason (shown in the skip)")
        return self
