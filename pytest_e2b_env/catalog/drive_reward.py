"""Play TRL's part against a reward subject: build it, call it with one batch, close it.

The subject is ``factory()`` returning the reward function or a (sync or async) context
manager yielding it; the reward function may be sync or async. This runs in the controller: each
subject call is one request to where the subject runs (:mod:`~pytest_e2b_env.catalog.calls`),
and every call is observed from here: value or exception, duration and the ledger positions
around it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pytest_e2b_env.catalog.calls import Outcome, SubjectCalls
from pytest_e2b_env.catalog.contract import Contract
from pytest_e2b_env.catalog.loader import CaseLoadError, resolve_path
from pytest_e2b_env.catalog.model import Case, Completion
from pytest_e2b_env.catalog.observe import Call, Observation
from pytest_e2b_env.targets import Target
from pytest_e2b_env.targets.tags import created_ids, used_ids

#: How long the subject's tasks a cancellation cut loose may take to end (their ``finally`` kills).
SETTLE_TIMEOUT = 30.0


def fence(source: str, info: str = "python") -> str:
    """Wrap a program in a fence (```python by default), as a model's answer would."""
    return f"Here is my solution.\n\n```{info}\n{source.rstrip()}\n```\n"


def generated_source(spec: str) -> str:
    """Pathological sources made on demand: ``unary-minus:N`` or ``plus-chain:N`` (host parser bombs)."""
    kind, _, count = spec.partition(":")
    n = int(count or "3000")
    if kind == "unary-minus":
        return "x = " + "-" * n + "1\nprint(x)"
    if kind == "plus-chain":
        return "x = " + "+".join(["1"] * n) + "\nprint(x)"
    if kind == "big-stdout":
        return "print('x' * " + str(n) + ")"
    raise ValueError(f"unknown generator {spec!r}; use unary-minus:N, plus-chain:N or big-stdout:N")


def completion_messages(case: Case, item: Completion) -> list[dict[str, Any]]:
    """The conversation TRL would pass for one completion item."""
    if item.messages is not None:
        return item.messages
    if item.program is not None:
        content: Any = fence(resolve_path(case, item.program).read_text(encoding="utf-8"), item.fence)
    elif item.generate is not None:
        content = fence(generated_source(item.generate))
    elif item.text is not None:
        content = item.text
    elif item.text_file is not None:
        content = resolve_path(case, item.text_file).read_text(encoding="utf-8")
    else:
        content = item.content
    return [{"role": "assistant", "content": content}]


def task_tests(case: Case) -> list[dict[str, str]]:
    """The test cases of the case's reward task (``task`` in ``tasks_file``), else inline ones."""
    spec = case.reward
    assert spec is not None
    if spec.task is None:
        return spec.test_cases
    data = json.loads(resolve_path(case, spec.tasks_file).read_text(encoding="utf-8"))
    for split in data.values() if isinstance(data, dict) else [data]:
        for task in split if isinstance(split, list) else []:
            if isinstance(task, dict) and spec.task in (task.get("task_id"), task.get("id")):
                return list(task["test_cases"])
    raise CaseLoadError(f"{case.source_file}: case {case.id!r}: field 'reward.task': no task {spec.task!r}")


def batch(case: Case, items: list[Completion]) -> tuple[list[Any], list[Any]]:
    """Completions and per-completion test cases for one batch."""
    completions = [completion_messages(case, item) for item in items]
    shared = task_tests(case)
    tests = [item.test_cases if item.test_cases is not None else shared for item in items]
    return completions, tests


class RewardDriver:
    """Drives one reward case and fills an :class:`Observation`."""

    def __init__(
        self,
        case: Case,
        calls: SubjectCalls,
        target: Target,
        secrets: list[str],
        contract: Contract | None = None,
    ):
        self.case = case
        self.contract = contract or calls.contract
        self.calls = calls
        self.target = target
        self.secrets = secrets
        self.obs = Observation(subject="reward")

    def _observe(self, name: str, action: str, args: dict[str, Any] | None = None, **fields: Any) -> Outcome:
        call = Call(name=name, args=args or {}, mark_start=self.target.ledger_mark())
        self.obs.calls.append(call)
        started = time.perf_counter()
        try:
            outcome = self.calls.call(action, **fields)
            call.returned, call.value, call.error = outcome.returned, outcome.value, outcome.error
            return outcome
        except BaseException:
            self.obs.calls.remove(call)  # the case's inputs failed, or the host died: no call was observed
            raise
        finally:
            call.seconds = time.perf_counter() - started
            call.mark_end = self.target.ledger_mark()

    def _batch(self, items: list[Completion]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The request fields of one batch (TRL's arguments are built where the subject runs)."""
        spec = self.case.reward
        assert spec is not None
        completions, tests = batch(self.case, items)
        fields = {"completions": completions, "tests": tests, "prompt": spec.prompt, "columns": spec.columns}
        return fields, {"completions": len(completions)}

    def _call_reward(self, fn: int, items: list[Completion], name: str) -> Outcome:
        fields, summary = self._batch(items)
        return self._observe(name, "reward", summary, handle=fn, **fields)

    def _cancelled_batch(self, fn: int, items: list[Completion]) -> None:
        """Start a batch and cancel it once a command runs in a sandbox (TRL interrupted mid-step)."""
        fields, summary = self._batch(items)
        mark = self.target.ledger_mark()
        call = Call(name="reward", args={**summary, "cancel_on": "run"}, mark_start=mark)
        self.obs.calls.append(call)
        started = time.perf_counter()
        call_id = self.calls.submit("reward", handle=fn, cancellable=True, **fields)
        deadline = time.monotonic() + 60
        # The subject's loop runs on where the subject runs: reading the ledger here never holds it.
        while not self.calls.done(call_id) and time.monotonic() < deadline:
            entries = self.target.ledger(mark)
            if any(e.get("op") in ("run", "run_code") for e in entries):
                break
            time.sleep(0.02)
        self.calls.cancel(call_id)
        outcome = self.calls.outcome(call_id)
        call.returned, call.value, call.error = outcome.returned, outcome.value, outcome.error
        call.seconds = time.perf_counter() - started
        call.mark_end = self.target.ledger_mark()

    def _kept(self, start: int, first_end: int) -> list[str]:
        """Sandboxes the first call created and used that are still alive after the calls.

        Looked at after the second batch and after the tasks the cancellation cut loose have
        ended (the ``settle`` request), not the moment the first call returns: a cancelled
        ``gather`` returns while its other tasks still run their ``finally`` (a kill in flight,
        slow on a loaded machine), and a create the cancellation cut off makes a sandbox the
        subject never heard of. Neither is a sandbox kept across calls.
        """
        entries = self.target.ledger(since=start)
        first = set(created_ids(entries, end=first_end))
        return sorted(first & used_ids(entries) & self.target.alive_ids())

    def run(self) -> Observation:
        """Build the subject, run the batch(es), leave its context; never raises for the subject."""
        spec = self.case.reward
        assert spec is not None
        mark0 = self.target.ledger_mark()
        made = self._observe("factory", "factory")
        if not made.returned or made.value is None:
            return self.obs
        context = made.facts.get("context")
        fn, facts = int(made.facts.get("handle") or 0), made.facts
        if context is not None:
            entered = self._observe("enter", "enter", handle=made.facts.get("handle"))
            if not entered.returned or entered.value is None:
                return self.obs
            fn, facts = int(entered.facts.get("handle") or 0), entered.facts
        self.obs.reward_async = bool(facts.get("async"))
        if spec.cancel_on == "run" and not self.obs.reward_async:
            # TRL awaits an async reward and can cancel it; a sync one always runs to its end.
            if context is not None:
                self._observe("close", "exit", handle=made.facts.get("handle"))
            return self.obs
        try:
            if spec.cancel_on == "run":
                self._cancelled_batch(fn, spec.completions)
            else:
                self._call_reward(fn, spec.completions, "reward")
            first_end = self.target.ledger_mark()
            if spec.second_batch is not None:
                self._call_reward(fn, spec.second_batch, "second_batch")
            self.calls.call("settle", timeout=SETTLE_TIMEOUT)
            self.obs.alive_after_first_call = self._kept(mark0, first_end)
        finally:
            if context is not None:
                self._observe("close", "exit", handle=made.facts.get("handle"))
            elif facts.get("close"):
                self._observe("close", "close", handle=fn)
        return self.obs
