"""Play TRL's part against an episode subject: ``reset(**row)``, scripted tool calls, ``get_reward()``.

As in TRL's environment loop, a fresh instance comes from the factory, a tool that raises
has its error shown to the model and the episode goes on, ``close()`` is never called, and
every public method other than ``reset`` and ``get_reward`` is a model tool.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import inspect
import json
import shlex
import threading
import time
from collections.abc import Callable
from typing import Any

from pytest_e2b_env.catalog.loader import resolve_path
from pytest_e2b_env.catalog.model import Case, Step
from pytest_e2b_env.catalog.observe import Call, Observation, exception_info
from pytest_e2b_env.target import Target
from pytest_e2b_env.target.tags import created_ids

NOT_TOOLS = ("reset", "get_reward")
#: A full collection slower than this means many long-lived objects (openenv imports gradio:
#: ~200k objects, 0.1-0.3 s per collection); they are then moved out of later collections.
SLOW_COLLECT_SECONDS = 0.05
DEFAULT_TOOLS = ("terminal", "submit")
DEFAULT_PROMPT = [{"role": "user", "content": "Repair the program so it prints the right JSON report."}]


def model_tools(instance: Any) -> list[str]:
    """Every public method TRL would expose as a tool (properties are not evaluated)."""
    names = []
    for name, member in inspect.getmembers_static(type(instance)):
        if name.startswith("_") or name in NOT_TOOLS:
            continue
        if isinstance(member, staticmethod | classmethod) or inspect.isfunction(member):
            names.append(name)
    for name, member in vars(instance).items() if hasattr(instance, "__dict__") else ():
        if not name.startswith("_") and name not in NOT_TOOLS and callable(member) and name not in names:
            names.append(name)
    return sorted(names)


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def task_of(case: Case) -> dict[str, Any]:
    """The task JSON object of an episode case (file or inline, plus overrides)."""
    spec = case.episode
    assert spec is not None
    if spec.task_file is not None:
        task = json.loads(resolve_path(case, spec.task_file).read_text(encoding="utf-8"))
    else:
        task = dict(spec.task or {})
    return _merge(task, spec.task_override)


def write_command(case: Case, step: Step) -> str:
    """The terminal command a 'write' step stands for (the text travels base64-encoded)."""
    assert step.path is not None
    raw = (
        step.content.encode()
        if step.content is not None
        else resolve_path(case, str(step.source)).read_bytes()
    )
    data = base64.b64encode(raw).decode()
    path = shlex.quote(step.path)
    if step.mode == "prepend":
        return f"{{ printf %s {data} | base64 -d; cat {path}; }} > .pe2b_new && mv .pe2b_new {path}"
    if step.mode == "append":
        return f"printf %s {data} | base64 -d >> {path}"
    return f"printf %s {data} | base64 -d > {path}"


def lane_steps(case: Case, lane: int) -> list[Step]:
    """The repair commands (if any) then the lane's script."""
    spec = case.episode
    assert spec is not None
    steps: list[Step] = []
    if spec.repair is not None:
        repair = json.loads(resolve_path(case, spec.repair).read_text(encoding="utf-8"))
        steps += [Step(tool="terminal", args={"command": c}) for c in repair.get("commands", [])]
    steps += spec.lanes[lane] if spec.lanes else spec.script
    return steps


class EpisodeDriver:
    """Drives one episode case (one or more parallel lanes) and fills an :class:`Observation`."""

    def __init__(
        self,
        case: Case,
        factory: Callable[[], Any],
        target: Target,
        secrets: list[str],
        extra_tools: list[str],
    ) -> None:
        self.case = case
        self.factory = factory
        self.target = target
        self.secrets = secrets
        self.obs = Observation(subject="episode", allowed_tools=sorted({*DEFAULT_TOOLS, *extra_tools}))
        self._lock = threading.Lock()
        self._collect_seconds = 0.0

    def _observe(
        self,
        lane: int,
        name: str,
        thunk: Callable[[], Any],
        loop: asyncio.AbstractEventLoop,
        args: dict[str, Any] | None = None,
        after_submit: bool = False,
    ) -> Call:
        call = Call(name=name, lane=lane, args=args or {}, after_submit=after_submit)
        call.mark_start = self.target.ledger_mark()
        started = time.perf_counter()
        try:
            result = thunk()
            if inspect.isawaitable(result):
                result = loop.run_until_complete(result)
            call.value, call.returned = result, True
        except Exception as exc:  # TRL shows a tool's error to the model and goes on
            call.error = exception_info(exc, self.secrets)
        finally:
            call.seconds = time.perf_counter() - started
            call.mark_end = self.target.ledger_mark()
            with self._lock:
                self.obs.calls.append(call)
        return call

    def _lane(self, lane: int) -> None:
        spec = self.case.episode
        assert spec is not None
        loop = asyncio.new_event_loop()
        try:
            mark0 = self.target.ledger_mark()
            made = self._observe(lane, "factory", self.factory, loop)
            if not made.returned:
                return
            env = made.value
            made.value = type(env).__name__
            if lane == 0:
                self.obs.tools = model_tools(env)
            row = {"prompt": spec.prompt or DEFAULT_PROMPT, "task": json.dumps(task_of(self.case))}
            self._observe(lane, "reset", lambda: env.reset(**row), loop, {"task": "<task json>"})
            submitted = False
            for step in lane_steps(self.case, lane):
                submitted = self._step(lane, env, step, row, loop, submitted)
            self._observe(lane, "get_reward", env.get_reward, loop, after_submit=submitted)
            if spec.parallel == 1:
                self.obs.alive_at_reward[lane] = sorted(self._created_since(mark0) & self.target.alive_ids())
            # TRL drops an environment instance when its trainer ends; the instance dies here too.
            env = None
            started = time.perf_counter()
            gc.collect()
            with self._lock:
                self._collect_seconds = max(self._collect_seconds, time.perf_counter() - started)
        finally:
            loop.close()

    def _created_since(self, mark: int) -> set[str]:
        return set(created_ids(self.target.ledger(since=mark)))

    def _step(
        self,
        lane: int,
        env: Any,
        step: Step,
        row: dict[str, Any],
        loop: asyncio.AbstractEventLoop,
        submitted: bool,
    ) -> bool:
        """Run one scripted step; return whether the episode has been submitted."""
        if step.tool == "sleep":
            time.sleep(step.seconds or 0)
            return submitted
        if step.tool == "reset":
            mark = self.target.ledger_mark()
            self._observe(lane, "reset", lambda: env.reset(**row), loop, {"again": True})
            alive = self.target.alive_ids()
            earlier = [sid for sid in self.obs.created_before(mark, self.target) if sid in alive]
            self.obs.alive_after_reset.append(earlier)
            return False
        tool, args = step.tool, dict(step.args)
        if tool == "write":
            tool, args = "terminal", {"command": write_command(self.case, step)}
        shown: dict[str, Any] = {"write": step.path} if step.tool == "write" else args
        method = getattr(env, tool, None)
        if tool.startswith("_") or not callable(method):
            call = Call(name=tool, lane=lane, args=shown, after_submit=submitted, expect_refused=step.refuse)
            call.error = {"type": "NoSuchTool", "hierarchy": ["NoSuchTool"], "message": tool}
            with self._lock:
                self.obs.calls.append(call)
            return submitted
        made = self._observe(lane, tool, lambda: method(**args), loop, shown, submitted)
        made.expect_refused = step.refuse
        return submitted or tool == "submit"

    def run(self) -> Observation:
        """Run every lane (in threads when parallel); never raises."""
        spec = self.case.episode
        assert spec is not None
        self.obs.mark0 = self.target.ledger_mark()
        lanes: list[threading.Thread] = []
        if spec.parallel == 1:
            self._lane(0)
        else:
            lanes = [
                threading.Thread(target=self._lane, args=(i,), daemon=True) for i in range(spec.parallel)
            ]
            for thread in lanes:
                thread.start()
            for thread in lanes:
                thread.join(timeout=300)
        self._freeze_survivors(lanes_done=not any(t.is_alive() for t in lanes))
        return self.obs

    def _freeze_survivors(self, lanes_done: bool) -> None:
        """Keep the per-lane collection cheap once the subject's stack is imported.

        When a lane's full collection was slow, every object that survives one more collection
        (imports, the subject's server) goes to the permanent generation. Objects made later,
        such as the next cases' environment instances, are still collected at their lane's end,
        so what a lane's collection finds is unchanged. Never while a lane still runs: its
        instance would be frozen and escape its own lane's collection.
        """
        if lanes_done and self._collect_seconds > SLOW_COLLECT_SECONDS:
            gc.collect()
            gc.freeze()
