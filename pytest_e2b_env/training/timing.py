"""Timing of the reward stage, without touching what is timed.

The reward function and the episode class that TRL receives are the validated ones; the
wrappers here only add a stopwatch around each call and keep every name, signature,
docstring and sync/async nature, so TRL derives the same tool schemas and reward columns.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any


class StageClock:
    """Seconds spent in the reward stage (sandbox work), summed across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds = 0.0
        self.counts: Counter[str] = Counter()
        self.rewards: list[float] = []

    def add(self, seconds: float, name: str = "call", result: Any = None) -> None:
        """Record one timed call of ``name``; results of ``get_reward`` are kept as rewards."""
        with self._lock:
            self._seconds += seconds
            self.counts[name] += 1
            if name == "get_reward" and isinstance(result, int | float):
                self.rewards.append(float(result))

    def take(self) -> float:
        """Seconds recorded since the previous ``take`` (the step callback reads it once per step)."""
        with self._lock:
            seconds, self._seconds = self._seconds, 0.0
            return seconds


def timed(func: Callable[..., Any], clock: StageClock) -> Callable[..., Any]:
    """``func`` with a stopwatch; coroutine functions stay coroutine functions."""
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            started, result = time.perf_counter(), None
            try:
                result = await func(*args, **kwargs)
                return result
            finally:
                clock.add(time.perf_counter() - started, func.__name__, result)

        return async_wrapper

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started, result = time.perf_counter(), None
        try:
            result = func(*args, **kwargs)
            return result
        finally:
            clock.add(time.perf_counter() - started, func.__name__, result)

    return wrapper


def _checked(func: Callable[..., Any], check: Callable[[str, Any], None]) -> Callable[..., Any]:
    """``func`` whose every result is shown to ``check`` (which may raise) before it is returned."""
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            result = await func(*args, **kwargs)
            check(func.__name__, result)
            return result

        return async_wrapper

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = func(*args, **kwargs)
        check(func.__name__, result)
        return result

    return wrapper


def timed_env_class(
    cls: type,
    clock: StageClock,
    instances: list[Any],
    on_result: Callable[[str, Any], None] | None = None,
) -> type:
    """A subclass of ``cls`` that times ``reset``, ``get_reward`` and every tool, and keeps its instances.

    The subclass has the same ``__name__`` (TRL names the reward column after it) and exposes
    exactly the public methods of ``cls`` (TRL turns those into tools). ``on_result(name, value)``
    sees what each of them returned (the masking budget reads ``get_reward``'s ``None``).
    """
    namespace: dict[str, Any] = {"__doc__": cls.__doc__, "__module__": cls.__module__}
    for name, member in inspect.getmembers(cls, predicate=inspect.isfunction):
        if not name.startswith("_"):
            namespace[name] = timed(_checked(member, on_result) if on_result else member, clock)
    original_init: Callable[..., None] = cls.__init__  # type: ignore[misc]  # a plain class, not a protocol

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        instances.append(self)

    namespace["__init__"] = __init__
    return type(cls.__name__, (cls,), namespace)
