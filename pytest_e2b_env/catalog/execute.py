"""Carry out a subject's calls where the subject lives, one request per call, and answer raw outcomes.

The controller plays TRL's part (``drive_reward``, ``drive_episode``) and asks for each call of the
subject: build it, enter its context, call the reward function with a batch, call a method of an
environment instance, cancel a call. :class:`Executor` carries the call out and answers with what
it returned or raised (:mod:`~pytest_e2b_env.catalog.raw`). It reads no ledger, holds no key of
the target's control API and judges nothing: whatever subject code changes in this process can
only change what the subject itself returns.

A reward case runs on one event loop in a thread of its own, as TRL runs an async reward function
(a sync one runs in a worker thread of that loop); each episode lane gets a thread with an event
loop of its own for the awaitables its methods return, as TRL's environment loop calls an
environment from its own thread.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from pytest_e2b_env.catalog.contract import Subject
from pytest_e2b_env.catalog.raw import encode, raised
from pytest_e2b_env.catalog.trl import is_async_callable, trl_kwargs
from pytest_e2b_env.catalog.trlshape import (
    ENV_REWARD,
    GET_REWARD,
    documented_reward,
    owns_reward,
    pickle_problem,
    reward_shape,
    tool_params,
)
from pytest_e2b_env.toolsurface import tool_names

#: A reward call (factory, context, batch) that has not returned after this long is cancelled
#: and observed as raising TimeoutError.
CALL_TIMEOUT = 120.0
#: How long the end of a case waits for a worker thread (a sync reward still running) to stop.
CLOSE_TIMEOUT = 60.0

Reply = Callable[[dict[str, Any]], None]


class _Missing(Exception):
    """The environment has no public method of that name: the tool does not exist."""


class _Setup(Exception):
    """Building the call's arguments failed (the subject's ``columns`` function): the driver's error."""


def reward_closer(fn: Any) -> Any:
    """What TRL's caller would close a reward function with when it has no context: ``close``."""
    owner = getattr(fn, "__self__", None)
    close = getattr(fn, "close", None) or getattr(owner, "close", None)
    return close if callable(close) else None


def _reward_facts(fn: Any) -> dict[str, Any]:
    return {"async": is_async_callable(fn), "close": reward_closer(fn) is not None}


def context_kind(made: Any) -> str | None:
    """``async`` or ``sync`` when a reward factory's result is a context manager yielding the function."""
    if hasattr(made, "__aenter__") and hasattr(made, "__aexit__"):
        return "async"
    if hasattr(made, "__enter__") and hasattr(made, "__exit__"):
        return "sync"
    return None


async def _settled(result: Any) -> Any:
    if inspect.isawaitable(result):
        return await asyncio.wait_for(result, CALL_TIMEOUT)
    return result


async def _as_awaitable(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    result = fn(**kwargs) if is_async_callable(fn) else await asyncio.to_thread(fn, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result


class _RewardLoop:
    """One event loop running in a thread of its own for one reward case (``asyncio.run`` semantics)."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.cancellable: dict[int, asyncio.Future[Any]] = {}
        self.cancel_asked: set[int] = set()
        #: the subject's tasks a cancelled call left running their ``finally`` (a kill in flight)
        self.cut_loose: set[asyncio.Task[Any]] = set()
        self._stop: asyncio.Event | None = None
        self._running: set[asyncio.Task[Any]] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="e2b-case-loop", daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.run(self._main())  # its end cancels what is left and shuts the executor down

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        await self._stop.wait()

    def submit(self, work: Callable[[], Any]) -> None:
        loop = self.loop
        assert loop is not None

        def start() -> None:
            task = loop.create_task(work())
            self._running.add(task)  # the loop holds tasks weakly: one must not vanish mid-call
            task.add_done_callback(self._running.discard)

        loop.call_soon_threadsafe(start)

    def register(self, call_id: int, task: asyncio.Future[Any]) -> None:
        """A cancellable call's task (on the loop); a cancel that came first lands at once."""
        self.cancellable[call_id] = task
        if call_id in self.cancel_asked:
            task.cancel()

    def cancel(self, call_id: int) -> None:
        def cancel() -> None:
            self.cancel_asked.add(call_id)
            task = self.cancellable.get(call_id)
            if task is not None:
                task.cancel()

        if self.loop is not None:
            self.loop.call_soon_threadsafe(cancel)

    def close(self) -> None:
        if self.loop is not None and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=CLOSE_TIMEOUT)


class _Lane:
    """A thread of its own for one episode lane; its calls run in order, awaitables on its own loop."""

    def __init__(self) -> None:
        self._work: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="e2b-case-lane", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        try:
            while (work := self._work.get()) is not None:
                work()
        finally:
            self.loop.close()

    def settle(self, result: Any) -> Any:
        if inspect.isawaitable(result):
            assert self.loop is not None
            return self.loop.run_until_complete(result)
        return result

    def submit(self, work: Callable[[], None]) -> None:
        self._work.put(work)

    def close(self) -> None:
        self._work.put(None)
        self._thread.join(timeout=CLOSE_TIMEOUT)


class Executor:
    """Holds the subject's objects of the case under way and carries out the controller's requests.

    ``reply`` receives each answer, from whichever thread the call ended in.
    """

    def __init__(self, subject: Subject, reply: Reply) -> None:
        self.subject = subject
        self._reply = reply
        self._objects: dict[int, Any] = {}
        self._handles = itertools.count(1)
        self._workers: dict[int, _RewardLoop | _Lane] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ requests
    def handle(self, request: dict[str, Any]) -> None:
        """One request: ``call`` and ``cancel`` start work and return; ``end`` finishes the case."""
        op, call_id = request.get("op"), int(request.get("id") or 0)
        if op == "call":
            self._call(call_id, request)
        elif op == "cancel":
            worker = self._workers.get(int(request.get("worker") or 0))
            if isinstance(worker, _RewardLoop):
                worker.cancel(int(request["call"]))
        elif op == "end":
            self.end()
            self._reply({"id": call_id, "ok": True})
        else:
            self._reply({"id": call_id, "error": f"unknown request {op!r}"})

    def end(self) -> None:
        """The case is over: its loops end (``asyncio.run``'s end for a reward), its objects go."""
        workers, self._workers = list(self._workers.values()), {}
        for worker in workers:
            worker.close()
        with self._lock:
            self._objects.clear()

    def _worker(self, number: int) -> _RewardLoop | _Lane:
        if number not in self._workers:
            self._workers[number] = _RewardLoop() if self.subject.kind == "reward" else _Lane()
        return self._workers[number]

    def _keep(self, obj: Any) -> int:
        with self._lock:
            handle = next(self._handles)
            self._objects[handle] = obj
            return handle

    def _object(self, request: dict[str, Any]) -> Any:
        with self._lock:
            return self._objects[int(request["handle"])]

    def _answer(self, call_id: int, produce: Callable[[], tuple[Any, dict[str, Any]]]) -> None:
        try:
            value, facts = produce()
        except _Missing:
            self._reply({"id": call_id, "missing": True})
        except _Setup as exc:
            self._reply({"id": call_id, "setup_error": raised(exc.__cause__ or exc)})
        except BaseException as exc:  # what the subject raised, cancellation included, is observed
            self._reply({"id": call_id, "returned": False, "error": raised(exc)})
        else:
            self._reply({"id": call_id, "returned": True, "value": encode(value), "facts": facts})

    def _call(self, call_id: int, request: dict[str, Any]) -> None:
        worker = self._worker(int(request.get("worker") or 0))
        action = str(request.get("action"))
        if isinstance(worker, _RewardLoop):
            work = getattr(self, f"_reward_{action}", None)
            if work is None:
                self._reply({"id": call_id, "error": f"no reward action {action!r}"})
                return

            async def run() -> None:
                outcome: list[tuple[Any, dict[str, Any]]] = []
                error: BaseException | None = None
                try:
                    outcome.append(await work(request, worker, call_id))
                except BaseException as exc:  # observed, not raised on the loop
                    error = exc

                def produce() -> tuple[Any, dict[str, Any]]:
                    if error is not None:
                        raise error
                    return outcome[0]

                self._answer(call_id, produce)

            worker.submit(run)
            return
        lane_work = getattr(self, f"_episode_{action}", None)
        if lane_work is None:
            self._reply({"id": call_id, "error": f"no episode action {action!r}"})
            return
        lane = worker
        worker.submit(lambda: self._answer(call_id, lambda: lane_work(request, lane)))

    # ------------------------------------------------------------------ reward actions
    async def _reward_factory(
        self, request: dict[str, Any], loop: _RewardLoop, call_id: int
    ) -> tuple[Any, dict[str, Any]]:
        made = await _settled(self.subject.factory())
        context = context_kind(made)
        facts: dict[str, Any] = {"handle": self._keep(made), "context": context}
        if context is None:
            facts |= _reward_facts(made)
        return made, facts

    async def _reward_enter(
        self, request: dict[str, Any], loop: _RewardLoop, call_id: int
    ) -> tuple[Any, dict[str, Any]]:
        made = self._object(request)
        fn = await _settled(made.__aenter__() if context_kind(made) == "async" else made.__enter__())
        return fn, {"handle": self._keep(fn), **_reward_facts(fn)}

    async def _reward_exit(
        self, request: dict[str, Any], loop: _RewardLoop, call_id: int
    ) -> tuple[Any, dict[str, Any]]:
        made = self._object(request)
        leave = made.__aexit__ if context_kind(made) == "async" else made.__exit__
        return await _settled(leave(None, None, None)), {}

    async def _reward_close(
        self, request: dict[str, Any], loop: _RewardLoop, call_id: int
    ) -> tuple[Any, dict[str, Any]]:
        close = reward_closer(self._object(request))
        if close is None:
            raise _Missing
        return await _settled(close()), {}

    async def _reward_reward(
        self, request: dict[str, Any], loop: _RewardLoop, call_id: int
    ) -> tuple[Any, dict[str, Any]]:
        fn = self._object(request)
        try:
            kwargs = trl_kwargs(
                request["completions"],
                request["tests"],
                self.subject.contract,
                request.get("prompt"),
                request.get("columns"),
            )
        except Exception as exc:
            raise _Setup from exc
        if not request.get("cancellable"):
            result = fn(**kwargs) if is_async_callable(fn) else asyncio.to_thread(fn, **kwargs)
            return await _settled(result), {}
        task = asyncio.ensure_future(_as_awaitable(fn, kwargs))
        loop.register(call_id, task)
        try:
            return await task, {}
        finally:
            # ``gather`` without ``return_exceptions`` raises as soon as one child is cancelled,
            # while the others still run their ``finally`` (a kill in flight): the subject's.
            loop.cut_loose = {t for t in asyncio.all_tasks() if t.cancelling() and not t.done()}
            loop.cancellable.pop(call_id, None)

    async def _reward_settle(
        self, request: dict[str, Any], loop: _RewardLoop, call_id: int
    ) -> tuple[Any, dict[str, Any]]:
        pending = [t for t in loop.cut_loose if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=float(request.get("timeout") or 30.0))
        return None, {"pending": sum(1 for t in pending if not t.done())}

    # ------------------------------------------------------------------ episode actions
    def _episode_factory(self, request: dict[str, Any], lane: _Lane) -> tuple[Any, dict[str, Any]]:
        env = lane.settle(self.subject.factory())
        cls = type(env)
        facts = {
            "handle": self._keep(env),
            "tools": tool_names(cls),
            "params": tool_params(cls),
            "owns_reward": owns_reward(cls),
            "pickle": pickle_problem(self.subject.factory) or "ok",
        }
        return cls.__name__, facts

    def _episode_method(self, request: dict[str, Any], lane: _Lane) -> tuple[Any, dict[str, Any]]:
        env, name = self._object(request), str(request["method"])
        if request.get("tool"):  # a model tool: TRL lists the class's public functions only
            method = getattr(env, name, None)
            if name.startswith("_") or not callable(method):
                raise _Missing
        else:
            method = getattr(env, name)
        value = lane.settle(method(**(request.get("kwargs") or {})))
        return value, {"type": type(value).__name__}

    def _episode_reward(self, request: dict[str, Any], lane: _Lane) -> tuple[Any, dict[str, Any]]:
        """The reward as TRL reads it: ``get_reward()``, else its documented function's ``env.reward``."""
        env = self._object(request)
        if owns_reward(type(env)):
            value = lane.settle(env.get_reward())
            return value, {"via": GET_REWARD, "type": type(value).__name__}
        shape = reward_shape(env)
        (value,) = documented_reward([env])
        return value, {"via": f"{ENV_REWARD} ({shape})", "type": type(value).__name__}

    def _episode_drop(self, request: dict[str, Any], lane: _Lane) -> tuple[Any, dict[str, Any]]:
        """TRL drops an environment instance when its trainer ends: the instance dies here too."""
        with self._lock:
            self._objects.pop(int(request["handle"]), None)
        started = time.perf_counter()
        gc.collect()
        return None, {"collect_seconds": time.perf_counter() - started}
