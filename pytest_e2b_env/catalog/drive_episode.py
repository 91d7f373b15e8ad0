"""Play TRL's part against an episode subject: ``reset(**row)``, scripted tool calls, ``get_reward()``.

As in TRL's environment loop, a fresh instance comes from the factory, a tool that raises
has its error shown to the model and the episode goes on, ``close()`` is never called, and
every public method other than ``reset`` and ``get_reward`` is a model tool; the reward is
``get_reward()``, or for a class without one ``env.reward`` as TRL's documented reward function
reads it (:mod:`~pytest_e2b_env.catalog.trlshape`). This runs in the controller: each call of the
instance is one request to where the subject runs (:mod:`~pytest_e2b_env.catalog.calls`), which
answers what it returned or raised; the ledger marks, the sandboxes alive and the timings around it
are read here.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import threading
import time
from typing import Any

from pytest_e2b_env.catalog.calls import Outcome, SubjectCalls
from pytest_e2b_env.catalog.contract import LIMIT_KEYS, Contract
from pytest_e2b_env.catalog.loader import resolve_path
from pytest_e2b_env.catalog.model import Case, Step
from pytest_e2b_env.catalog.observe import Call, Observation
from pytest_e2b_env.catalog.procs import Starvation
from pytest_e2b_env.catalog.toolprobe import PROBE_SECONDS, HostProbe, arguments
from pytest_e2b_env.catalog.trlshape import ENV_REWARD, GET_REWARD
from pytest_e2b_env.targets import Target
from pytest_e2b_env.targets.tags import created_ids
from pytest_e2b_env.toolsurface import tool_names

DEFAULT_TOOLS = ("terminal", "submit")
#: A case that waits out a limit never waits longer than this; past it the case is skipped, named.
WAIT_CAP_SECONDS = 30.0
WINDOW_MARGIN = 0.5
#: A command killed at its limit must return within ``limit * FACTOR + SLACK`` seconds.
DEADLINE_FACTOR = 1.5
DEADLINE_SLACK = 2.0
_PLACEHOLDER = re.compile(
    r"\{(workdir|artifact|command_seconds|policy_seconds|verify_seconds|artifact_bytes|past_command_deadline)\}"
)
DEFAULT_PROMPT = [{"role": "user", "content": "Repair the program so it prints the right JSON report."}]


def model_tools(instance: Any) -> list[str]:
    """Every method TRL would expose as a model tool (see :mod:`pytest_e2b_env.toolsurface`)."""
    return tool_names(type(instance))


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def task_of(case: Case, contract: Contract | None = None) -> dict[str, Any]:
    """The task JSON object of an episode case (file or inline, plus overrides).

    A subject that declares fixed limits ignores ``task["limits"]``, so a case's limit override
    is not sent to it: the case then works with the limits the subject declared.
    """
    spec = case.episode
    assert spec is not None
    if spec.task_file is not None:
        task = json.loads(resolve_path(case, spec.task_file).read_text(encoding="utf-8"))
    else:
        task = dict(spec.task or {})
    override = dict(spec.task_override)
    if contract is not None and contract.fixed_limits:
        override.pop("limits", None)
    return _merge(task, override)


def deadline_allowance(limit: float) -> float:
    """How long a command killed at ``limit`` seconds may take to come back (stated tolerance)."""
    return limit * DEADLINE_FACTOR + DEADLINE_SLACK


def placeholders(task: dict[str, Any], contract: Contract) -> dict[str, str]:
    """Values the catalog's scripts may name as ``{workdir}``, ``{artifact}`` or a limit."""
    values = {
        "workdir": str(task.get("workdir", "/home/user")),
        "artifact": str(task.get("artifact", "")),
    }
    for name in LIMIT_KEYS:
        value = contract.limit(name, task)
        values[name] = str(int(value)) if float(value).is_integer() else str(value)
    command = contract.limit("command_seconds", task)
    values["past_command_deadline"] = str(int(deadline_allowance(command) + 3))
    return values


def fill(text: str, values: dict[str, str]) -> str:
    """Replace ``{name}`` for the known names only (scripts hold JSON and shell braces too)."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def in_workdir(command: str, values: dict[str, str]) -> str:
    """A scripted command run from the task's workdir whatever the subject's shell starts in.

    Each terminal call starts a fresh shell (in the workdir, the home directory or anywhere), so
    every scripted command carries its own absolute ``cd``.
    """
    return f"cd {shlex.quote(values['workdir'])} && {command}"


def write_command(case: Case, step: Step, values: dict[str, str] | None = None) -> str:
    """The terminal command a 'write' step stands for (the text travels base64-encoded)."""
    assert step.path is not None
    values = values or {"workdir": "."}
    raw = (
        step.content.encode()
        if step.content is not None
        else resolve_path(case, str(step.source)).read_bytes()
    )
    data = base64.b64encode(raw).decode()
    target = fill(step.path, values)
    path = shlex.quote(target if target.startswith("/") else f"{values['workdir']}/{target}")
    if step.mode == "prepend":
        tmp = shlex.quote(f"{values['workdir']}/.pe2b_new")
        return f"{{ printf %s {data} | base64 -d; cat {path}; }} > {tmp} && mv {tmp} {path}"
    if step.mode == "append":
        return f"printf %s {data} | base64 -d >> {path}"
    return f"printf %s {data} | base64 -d > {path}"


def lane_steps(case: Case, lane: int) -> list[Step]:
    """The repair commands (if any) then the lane's script; where the script has ``repair`` steps, there."""
    spec = case.episode
    assert spec is not None
    repair: list[Step] = []
    if spec.repair is not None:
        commands = json.loads(resolve_path(case, spec.repair).read_text(encoding="utf-8"))
        repair = [Step(tool="terminal", args={"command": c}) for c in commands.get("commands", [])]
    script = spec.lanes[lane] if spec.lanes else spec.script
    if not any(step.tool == "repair" for step in script):
        return repair + script
    return [done for step in script for done in (repair if step.tool == "repair" else [step])]


def unmet_window(case: Case, task: dict[str, Any], contract: Contract) -> str | None:
    """Why a case that must wait out a limit cannot run on this subject (named), else None."""
    for lane in range(case.episode.parallel if case.episode else 1):
        for step in lane_steps(case, lane):
            if step.tool == "sleep" and step.until is not None:
                limit = contract.limit(step.until, task)
                if limit + WINDOW_MARGIN > WAIT_CAP_SECONDS:
                    name = step.until.replace("_seconds", " window")
                    return f"{name} {limit:g} s exceeds the {WAIT_CAP_SECONDS:g} s cap (a fixed limit)"
            if step.deadline is not None:
                limit = contract.limit(step.deadline, task)
                if deadline_allowance(limit) + 3 > WAIT_CAP_SECONDS:
                    return f"{step.deadline} {limit:g} s exceeds the {WAIT_CAP_SECONDS:g} s cap"
    return None


def _texts(obs: Observation) -> list[str]:
    """What every call of the case answered, as text (values, and exceptions' messages)."""
    return [
        json.dumps(c.value if c.returned else c.error, default=str)
        for c in obs.calls
        if c.returned or c.error is not None
    ]


class EpisodeDriver:
    """Drives one episode case (one or more parallel lanes) and fills an :class:`Observation`."""

    def __init__(
        self,
        case: Case,
        calls: SubjectCalls,
        target: Target,
        secrets: list[str],
        extra_tools: list[str],
        contract: Contract | None = None,
    ) -> None:
        self.case = case
        self.calls = calls
        self.target = target
        self.secrets = secrets
        self.contract = contract or calls.contract
        self.task = task_of(case, self.contract)
        self.values = placeholders(self.task, self.contract)
        extra = [*extra_tools, *self.contract.extra_tools]
        roles = {*DEFAULT_TOOLS, *extra}
        self.obs = Observation(
            subject="episode", allowed_tools=sorted({self.contract.tool(r) for r in roles} | set(extra))
        )
        self._lock = threading.Lock()
        self._failures: list[BaseException] = []
        self._marks: dict[int, int] = {}  # where each lane's episode began in the ledger
        self._host = HostProbe()

    def _observe(
        self,
        lane: int,
        name: str,
        action: str,
        args: dict[str, Any] | None = None,
        after_submit: bool = False,
        step: int | None = None,
        **fields: Any,
    ) -> tuple[Call, Outcome]:
        call = Call(name=name, lane=lane, args=args or {}, after_submit=after_submit, step=step)
        call.mark_start = self.target.ledger_mark()
        started = time.perf_counter()
        try:
            outcome = self.calls.call(action, worker=lane, **fields)
        finally:
            call.seconds = time.perf_counter() - started
            call.mark_end = self.target.ledger_mark()
        call.returned, call.value, call.error = outcome.returned, outcome.value, outcome.error
        call.value_type = outcome.facts.get("type")
        if not outcome.missing:
            with self._lock:
                self.obs.calls.append(call)
        return call, outcome

    def _method(
        self, lane: int, env: int, name: str, method: str, args: dict[str, Any] | None = None, **fields: Any
    ) -> tuple[Call, Outcome]:
        return self._observe(lane, name, "method", args, handle=env, method=method, **fields)

    def _row(self) -> dict[str, Any]:
        """The dataset row TRL passes as ``reset(**row)``, shaped as the subject declared."""
        spec = self.case.episode
        assert spec is not None
        task: Any = self.task if self.contract.task == "dict" else json.dumps(self.task)
        return {"prompt": spec.prompt or DEFAULT_PROMPT, self.contract.task_arg: task}

    def _lane(self, lane: int) -> None:
        try:
            self._run_lane(lane)
        except BaseException as exc:  # the host died or the inputs failed: the runner says so
            with self._lock:
                self._failures.append(exc)

    def _run_lane(self, lane: int) -> None:
        spec = self.case.episode
        assert spec is not None
        self._marks[lane] = self.target.ledger_mark()  # where this lane's episode began in the ledger
        _, made = self._observe(lane, "factory", "factory")
        if not made.returned:
            return
        env = int(made.facts.get("handle") or 0)
        if lane == 0:
            self.obs.tools = [str(t) for t in made.facts.get("tools") or []]
            params = made.facts.get("params")
            self.obs.tool_params = params if isinstance(params, dict) else {}
            self.obs.factory_pickle = str(made.facts.get("pickle") or "") or None
            self.obs.reward_source = GET_REWARD if made.facts.get("owns_reward") else ENV_REWARD
        row = self._row()
        self._method(lane, env, "reset", "reset", {"task": "<task>"}, kwargs=row)
        submitted = False
        for index, step in enumerate(lane_steps(self.case, lane)):
            submitted = self._step(lane, env, step, row, submitted, index)
        self._read_reward(lane, env, submitted)
        if spec.parallel == 1:
            self.obs.alive_at_reward[lane] = self.obs.alive_at_reads[-1]
        # TRL drops an environment instance when its trainer ends; the instance dies here too.
        self.calls.call("drop", worker=lane, handle=env)

    def _created_since(self, mark: int) -> set[str]:
        return set(created_ids(self.target.ledger(since=mark)))

    def _read_reward(self, lane: int, env: int, submitted: bool, step: int | None = None) -> None:
        """Read the reward as TRL does after a rollout; the instance stays (TRL pools it)."""
        call, outcome = self._observe(
            lane, "get_reward", "reward", after_submit=submitted, step=step, handle=env
        )
        via = outcome.facts.get("via")
        if isinstance(via, str):
            call.args["via"] = via
            if lane == 0:
                self.obs.reward_source = via
        if self.case.episode is not None and self.case.episode.parallel == 1:
            alive = self._created_since(self._marks[lane]) & self.target.alive_ids()
            self.obs.alive_at_reads.append(sorted(alive))

    def _probe_tools(self, lane: int, env: int, index: int, submitted: bool) -> None:
        """Call every model tool besides the terminal and submit with each set of hostile arguments."""
        skip = {self.contract.tool("terminal"), self.contract.tool("submit")}
        targets = [tool for tool in self.obs.tools if tool not in skip]
        if lane == 0:
            self.obs.probe_targets = targets
        if targets and not self._host.dir:
            self._host.open()
        for tool in targets:
            for label, kwargs in arguments(tool, self.obs.tool_params.get(tool, []), self._host.dir):
                call, _ = self._method(
                    lane,
                    env,
                    tool,
                    tool,
                    {"probe": label},
                    after_submit=submitted,
                    step=index,
                    kwargs=kwargs,
                    tool=True,
                    timeout=PROBE_SECONDS,
                )
                call.probe = label

    def _step(
        self,
        lane: int,
        env: int,
        step: Step,
        row: dict[str, Any],
        submitted: bool,
        index: int,
    ) -> bool:
        """Run one scripted step; return whether the episode has been submitted."""
        if step.tool == "sleep":
            seconds = step.seconds or 0
            if step.until is not None:
                seconds = self.contract.limit(step.until, self.task) + WINDOW_MARGIN
            time.sleep(seconds)
            return submitted
        if step.tool == "vanish":
            self._vanish(lane, index)
            return submitted
        if step.tool == "reward":
            self._read_reward(lane, env, submitted, step=index)
            return submitted
        if step.tool == "probe-tools":
            self._probe_tools(lane, env, index, submitted)
            return submitted
        if step.tool == "reset":
            mark = self.target.ledger_mark()
            self._method(lane, env, "reset", "reset", {"again": True}, step=index, kwargs=row)
            alive = self.target.alive_ids()
            earlier = [sid for sid in self.obs.created_before(mark, self.target) if sid in alive]
            self.obs.alive_after_reset.append(earlier)
            return False
        role, args = (
            step.tool,
            {k: fill(v, self.values) if isinstance(v, str) else v for k, v in step.args.items()},
        )
        if role == "write":
            role, args = "terminal", {"command": write_command(self.case, step, self.values)}
        elif role == "terminal":
            args = {"command": in_workdir(str(args["command"]), self.values)}
        shown: dict[str, Any] = {"write": step.path} if step.tool == "write" else dict(args)
        if role == "terminal":
            args = {self.contract.command_arg: args["command"]}
        tool = self.contract.tool(role)
        watch = Starvation([self.target.server_pid or 0], self.calls.subject_pid()) if step.deadline else None
        made, outcome = self._method(
            lane, env, role, tool, shown, after_submit=submitted, step=index, kwargs=args, tool=True
        )
        if outcome.missing:  # no such public method: the model's call fails, nothing ran
            made = Call(name=role, lane=lane, args=shown, after_submit=submitted, step=index)
            made.error = {"type": "NoSuchTool", "hierarchy": ["NoSuchTool"], "message": tool}
            with self._lock:
                self.obs.calls.append(made)
        made.expect_refused = step.refuse
        if step.deadline is not None:
            limit = self.contract.limit(step.deadline, self.task)
            made.deadline = {"limit": limit, "allowed": deadline_allowance(limit), "name": step.deadline}
            if watch is not None:
                made.deadline |= watch.measure()
        return submitted or role == "submit"

    def _vanish(self, lane: int, index: int) -> None:
        """The backend ends every sandbox of the lane's episode alive now, while no call is in flight.

        Killed through the target's API, as an expired lifetime or an operator's kill ends one: the
        subject learns it only from its next request. Recorded as the harness's step, not a call.
        """
        call = Call(name="vanish", lane=lane, step=index, mark_start=self.target.ledger_mark())
        alive = self.target.alive_ids()
        ended = sorted(sid for sid in self._created_since(self._marks.get(lane, 0)) if sid in alive)
        for sandbox_id in ended:
            self.target.kill(sandbox_id)
        call.args, call.returned, call.value = {"sandboxes": ended}, True, ended
        call.mark_end = self.target.ledger_mark()
        with self._lock:
            self.obs.calls.append(call)

    def run(self) -> Observation:
        """Run every lane (in threads when parallel); raises only what the runner must handle."""
        spec = self.case.episode
        assert spec is not None
        self.obs.mark0 = self.target.ledger_mark()
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
        if self._host.dir:  # a lane records what it raised instead of raising: this always runs
            self.obs.host_probe = self._host.inspect(_texts(self.obs))
            self._host.close()
        if self._failures:
            raise self._failures[0]
        return self.obs
