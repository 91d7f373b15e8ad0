"""Play TRL's part against a reward subject: build it, call it with one batch, close it.

The subject is ``factory()`` returning the reward function or a (sync or async) context
manager yielding it; the reward function may be sync or async. Every call is observed:
value or exception, duration and the ledger positions around it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Callable
from typing import Any

from pytest_e2b_env.catalog.contract import Contract
from pytest_e2b_env.catalog.loader import CaseLoadError, resolve_path
from pytest_e2b_env.catalog.model import Case, Completion
from pytest_e2b_env.catalog.observe import Call, Observation, exception_info
from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.targets import Target
from pytest_e2b_env.targets.tags import created_ids, used_ids

CALL_TIMEOUT = 120.0
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


def columns_for(contract: Contract, tests: list[Any]) -> dict[str, list[Any]]:
    """The dataset columns carrying the test cases, in the shape the subject declared."""
    if callable(contract.columns):
        mapped = contract.columns(tests)
        if not isinstance(mapped, dict) or not all(
            isinstance(v, list) and len(v) == len(tests) for v in mapped.values()
        ):
            raise ConfigError(
                f"{contract.source}: columns function must return a dict of lists, one item per completion"
            )
        return mapped
    if contract.columns == "verification_info":
        return {
            "verification_info": [
                {
                    "language": "python",
                    "test_cases": [{**case, "type": "stdin_stdout"} for case in per_completion],
                }
                for per_completion in tests
            ]
        }
    return {"test_cases": tests}


class _TrainerState:
    """What TRL passes as ``trainer_state`` (a ``transformers.TrainerState``): the fields read most."""

    global_step = 0
    epoch = 0.0
    max_steps = 1
    num_train_epochs = 1


def trl_kwargs(
    completions: list[Any],
    tests: list[Any],
    contract: Contract,
    prompt: list[dict[str, Any]] | None = None,
    columns: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Keyword arguments exactly as TRL 1.16's ``_calculate_rewards`` passes them.

    ``prompts``, ``completions``, ``completion_ids``, every dataset column, then
    ``trainer_state``, ``log_extra`` and ``log_metric``. ``prompt`` and ``columns`` are the
    dataset row's, repeated per completion as for a group of generations of one row.
    """
    prompts = [list(prompt or [{"role": "user", "content": "Solve the task."}]) for _ in completions]
    ids = [list(json.dumps(c, default=str).encode()[:64]) for c in completions]
    return {
        "prompts": prompts,
        "completions": completions,
        "completion_ids": ids,
        **{name: [value for _ in completions] for name, value in (columns or {}).items()},
        **columns_for(contract, tests),
        "trainer_state": _TrainerState(),
        "log_extra": lambda *a, **k: None,
        "log_metric": lambda *a, **k: None,
    }


def is_async_callable(fn: Any) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    call = type(fn).__call__ if not inspect.isfunction(fn) else None
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


class RewardDriver:
    """Drives one reward case and fills an :class:`Observation`."""

    def __init__(
        self,
        case: Case,
        factory: Callable[[], Any],
        target: Target,
        secrets: list[str],
        contract: Contract | None = None,
    ):
        self.case = case
        self.contract = contract or Contract(kind="reward")
        self.factory = factory
        self.target = target
        self.secrets = secrets
        self.obs = Observation(subject="reward")
        self._cut_loose: set[asyncio.Task[Any]] = set()

    async def _observe(self, name: str, thunk: Callable[[], Any], args: dict[str, Any] | None = None) -> Any:
        call = Call(name=name, args=args or {}, mark_start=self.target.ledger_mark())
        self.obs.calls.append(call)
        started = time.perf_counter()
        try:
            result = thunk()
            if inspect.isawaitable(result):
                result = await asyncio.wait_for(result, CALL_TIMEOUT)
            call.value, call.returned = result, True
            return result
        except BaseException as exc:  # observed, including cancellation
            call.error = exception_info(exc, self.secrets)
            if isinstance(exc, KeyboardInterrupt):
                raise
            return None
        finally:
            call.seconds = time.perf_counter() - started
            call.mark_end = self.target.ledger_mark()

    def _kwargs(self, completions: list[Any], tests: list[Any]) -> dict[str, Any]:
        spec = self.case.reward
        assert spec is not None
        return trl_kwargs(completions, tests, self.contract, spec.prompt, spec.columns)

    async def _call_reward(self, fn: Callable[..., Any], items: list[Completion], name: str) -> Any:
        completions, tests = batch(self.case, items)
        summary = {"completions": len(completions)}
        kwargs = self._kwargs(completions, tests)
        if is_async_callable(fn):
            return await self._observe(name, lambda: fn(**kwargs), summary)
        # A sync reward function may run its own event loop: give it a thread, as TRL's sync path would.
        return await self._observe(name, lambda: asyncio.to_thread(fn, **kwargs), summary)

    async def _cancelled_batch(self, fn: Callable[..., Any], items: list[Completion]) -> None:
        """Start a batch and cancel it once a command runs in a sandbox (TRL interrupted mid-step)."""
        completions, tests = batch(self.case, items)
        mark = self.target.ledger_mark()
        call = Call(
            name="reward", args={"completions": len(completions), "cancel_on": "run"}, mark_start=mark
        )
        self.obs.calls.append(call)
        started = time.perf_counter()
        task = asyncio.ensure_future(self._as_awaitable(fn, self._kwargs(completions, tests)))
        deadline = time.monotonic() + 60
        while not task.done() and time.monotonic() < deadline:
            # Read off the loop: a blocking read here would hold the subject still, as TRL never does.
            entries = await asyncio.to_thread(self.target.ledger, mark)
            if any(e.get("op") in ("run", "run_code") for e in entries):
                break
            await asyncio.sleep(0.02)
        task.cancel()
        try:
            call.value, call.returned = await task, True
        except BaseException as exc:
            call.error = exception_info(exc, self.secrets)
        call.seconds = time.perf_counter() - started
        call.mark_end = self.target.ledger_mark()
        # ``gather`` without ``return_exceptions`` raises as soon as one child is cancelled, while
        # the others still run their ``finally`` (a kill in flight): the subject's, not kept ones.
        self._cut_loose = {t for t in asyncio.all_tasks() if t.cancelling() and not t.done()}

    async def _settle(self) -> None:
        """Let the tasks the cancellation cut loose end (bounded) before asking what was kept."""
        pending = [t for t in self._cut_loose if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=SETTLE_TIMEOUT)

    def _kept(self, start: int, first_end: int) -> list[str]:
        """Sandboxes the first call created and used that are still alive after the calls.

        Looked at after the second batch and after the tasks the cancellation cut loose have
        ended (:meth:`_settle`), not the moment the first call returns: a cancelled ``gather``
        returns while its other tasks still run their ``finally`` (a kill in flight, slow on a
        loaded machine), and a create the cancellation cut off makes a sandbox the subject never
        heard of. Neither is a sandbox kept across calls.
        """
        entries = self.target.ledger(since=start)
        first = set(created_ids(entries, end=first_end))
        return sorted(first & used_ids(entries) & self.target.alive_ids())

    @staticmethod
    async def _as_awaitable(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        result = fn(**kwargs) if is_async_callable(fn) else await asyncio.to_thread(fn, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result

    async def run(self) -> Observation:
        """Build the subject, run the batch(es), leave its context; never raises."""
        spec = self.case.reward
        assert spec is not None
        mark0 = self.target.ledger_mark()
        made = await self._observe("factory", self.factory)
        if made is None:
            return self.obs
        exit_fn: Callable[[], Any] | None = None
        fn: Any = made
        if hasattr(made, "__aenter__") and hasattr(made, "__aexit__"):
            fn = await self._observe("enter", made.__aenter__)
            exit_fn = lambda: made.__aexit__(None, None, None)  # noqa: E731
        elif hasattr(made, "__enter__") and hasattr(made, "__exit__"):
            fn = await self._observe("enter", made.__enter__)
            exit_fn = lambda: made.__exit__(None, None, None)  # noqa: E731
        if fn is None:
            return self.obs
        self.obs.reward_async = is_async_callable(fn)
        if spec.cancel_on == "run" and not self.obs.reward_async:
            # TRL awaits an async reward and can cancel it; a sync one always runs to its end.
            if exit_fn is not None:
                await self._observe("close", exit_fn)
            return self.obs
        try:
            if spec.cancel_on == "run":
                await self._cancelled_batch(fn, spec.completions)
            else:
                await self._call_reward(fn, spec.completions, "reward")
            first_end = self.target.ledger_mark()
            if spec.second_batch is not None:
                await self._call_reward(fn, spec.second_batch, "second_batch")
            await self._settle()
            self.obs.alive_after_first_call = self._kept(mark0, first_end)
        finally:
            if exit_fn is not None:
                await self._observe("close", exit_fn)
            else:
                owner = getattr(fn, "__self__", None)
                close = getattr(fn, "close", None) or getattr(owner, "close", None)
                if callable(close):
                    await self._observe("close", close)
        return self.obs
