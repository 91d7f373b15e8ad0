"""The OpenEnv (0.10) repair environment, server side.

One MCP tool reaches the model, ``terminal(command)``; two non-MCP actions close the episode:
``{"type": "submit"}`` (verify the artifact in a fresh offline verifier) and ``{"type": "finish"}``
(the reward boundary: health-check, release and sweep). Reward and done travel on every step result;
infrastructure failures travel as ``metadata["episode"]["fatal"]`` and are never a reward.

Thread model: ``reset`` runs in the session's executor, the tool in anyio's thread pool and the
episode actions in anyio threads; one lock per environment serialises all sandbox work.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal

import anyio.to_thread
from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from pytest_e2b_env.episode.runtime import Episode, Fatal, format_outcome
from pytest_e2b_env.episode.sandboxes import confirm_gone, create_sandbox, run_bounded, sweep
from pytest_e2b_env.episode.task import parse_task, task_prompt
from pytest_e2b_env.episode.verify import Submission
from pytest_e2b_env.errors import CleanupError, ConfigError
from pytest_e2b_env.settings import TargetSettings

#: Bytes of command output the policy sees per terminal call.
OUTPUT_BYTES = 16384
#: Longest command text accepted from the policy.
COMMAND_CHARS = 65536
#: Extra seconds an MCP tool call may take beyond the command deadline (sandbox round trips).
TOOL_SLACK = 30.0
#: anyio's default of 40 worker threads is shared by every session; sandbox calls block threads.
THREAD_LIMIT = 256


class EpisodeAction(Action):
    """Every action the server accepts: the MCP ``call_tool`` / ``list_tools`` (model tool calls) and
    the episode actions ``submit`` (verify the artifact) and ``finish`` (the reward boundary).

    One schema, because openenv 0.10 only routes MCP payloads itself when the action class is
    ``Action`` or an MCP type; ``_to_mcp`` hands tool calls to the MCP machinery unchanged.
    """

    type: Literal["call_tool", "list_tools", "submit", "finish"]
    tool_name: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)

    def _to_mcp(self) -> Action | None:
        if self.type == "call_tool":
            return CallToolAction(tool_name=self.tool_name or "", arguments=self.arguments)
        if self.type == "list_tools":
            return ListToolsAction()
        return None


class EpisodeObservation(Observation):
    """Result of reset, submit and finish: a status word and a message for the policy."""

    status: str = ""
    message: str = ""


class EpisodeState(State):
    """Public, cheap state (read on the event loop): no sandbox calls, no hidden data."""

    task_id: str | None = None
    phase: str = "idle"
    reward: float | None = None


def _refusal(ep: Episode) -> str:
    return f"refused: the episode is {ep.phase}; no further tool calls are accepted."


class RepairEnvironment(Submission, MCPEnvironment):
    """A repair episode: a policy sandbox reached through ``terminal``, a fresh verifier on submit.

    Subclasses may override the ``_verifier_*`` / ``_export`` hooks (the defective sample subjects
    under ``fixtures/subjects`` do exactly that, one bug each). ``clock`` (seconds, monotonic)
    measures each episode's policy window.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self, target: TargetSettings | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._target = target or TargetSettings.from_env()
        self._clock = clock
        self._lock = threading.Lock()
        self._ep: Episode | None = None
        self._state = EpisodeState(episode_id=None)
        mcp = FastMCP("pytest_e2b_env_repair")

        @mcp.tool
        def terminal(command: str) -> str:
            """Run a shell command in the work directory of the policy sandbox.

            Args:
                command: shell command text, run with sh -c; files persist, shell state does not.
            """
            return self._terminal(command)

        super().__init__(mcp)  # last: it validates the tool names and opens the in-memory client

    # ------------------------------------------------------------------ OpenEnv API

    @property
    def state(self) -> EpisodeState:
        """Public episode state."""
        ep = self._ep
        if ep is not None:
            self._state.task_id, self._state.phase, self._state.reward = ep.task.id, ep.phase, ep.reward
        return self._state

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, task: Any = None, **kwargs: Any
    ) -> EpisodeObservation:
        """Replace the whole policy sandbox (confirming the previous one gone) and install the task."""
        with self._lock:
            self._state = EpisodeState(episode_id=episode_id or uuid.uuid4().hex)
            previous, self._ep = self._ep, None
            if previous is not None:
                try:  # an episode that passed its reward boundary was swept there; any other is now
                    self._release(previous, sweep_episode=not previous.swept)
                except Exception as exc:
                    previous.fail(Fatal.of(exc, "releasing the previous episode"))
                    self._ep = previous  # its ids stay owned; the next reset or finish retries them
                    return self._error_obs(previous.fatal, "reset")
            try:
                parsed = parse_task(task)
            except ConfigError as exc:
                return EpisodeObservation(status="config_error", message=str(exc), done=True)
            ep = Episode(task=parsed, tag=uuid.uuid4().hex[:16], clock=self._clock)
            self._ep = ep
            try:
                self._start_policy(ep)
            except Exception as exc:
                ep.fail(Fatal.of(exc, "policy sandbox setup"))
                self._release_quietly(ep)
                return self._error_obs(ep.fatal, "reset")
            return EpisodeObservation(
                status="ready", message=task_prompt(parsed), reward=0.0, metadata={"episode": ep.public()}
            )

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return EpisodeObservation(status="error", message=f"unsupported action {type(action).__name__}")

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        """Sync path (HTTP and in-process use)."""
        self._state.step_count += 1
        if isinstance(action, EpisodeAction) and action._to_mcp() is None:
            return self._decorate(self._episode_action(action.type))
        mcp = action._to_mcp() if isinstance(action, EpisodeAction) else action
        return self._decorate(super().step(mcp, timeout_s=timeout_s or self._tool_budget(), **kwargs))

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        """What ``/ws`` calls: tool calls get a budget above the command deadline, not OpenEnv's 30 s."""
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = max(limiter.total_tokens, THREAD_LIMIT)
        self._state.step_count += 1
        mcp = action._to_mcp() if isinstance(action, EpisodeAction) else action
        if mcp is None:
            kind = action.type if isinstance(action, EpisodeAction) else "finish"
            return self._decorate(await anyio.to_thread.run_sync(self._episode_action, kind))
        budget = timeout_s or self._tool_budget()
        obs = await super().step_async(mcp, timeout_s=budget, **kwargs)
        error = getattr(obs, "error", None)
        ep = self._ep
        timed_out = error is not None and getattr(error.error_type, "value", error.error_type) == "timeout"
        if isinstance(mcp, CallToolAction) and timed_out and ep is not None and ep.fatal is None:
            # The tool thread is still running a command past every deadline we set.
            ep.fail(Fatal("InfrastructureError", f"terminal exceeded its {budget:g} s budget", ()))
        return self._decorate(obs)

    def close(self) -> None:
        """Release every sandbox of the session (WebSocket closed, throwaway HTTP env, shutdown)."""
        ep, self._ep = self._ep, None
        if ep is not None:
            with self._lock:
                self._release_quietly(ep)
        super().close()

    # ------------------------------------------------------------------ policy side

    def _tool_budget(self) -> float:
        ep = self._ep
        return (ep.task.limits.command_seconds if ep else 10.0) + TOOL_SLACK

    def _start_policy(self, ep: Episode) -> None:
        limits = ep.task.limits
        t0 = time.monotonic()
        sbx = create_sandbox(self._target, role="policy", episode=ep.tag, lifetime=limits.policy_seconds)
        ep.own(sbx.sandbox_id, "policy")
        ep.policy = sbx
        ep.timing("create_policy", t0)
        t0 = time.monotonic()
        sbx.files.write_files([{"path": ep.task.path(n), "data": d} for n, d in ep.task.files.items()])
        ep.timing("install", t0)
        ep.open_window(limits.policy_seconds)
        ep.phase = "active"

    def _terminal(self, command: str) -> str:
        with self._lock:
            ep = self._ep
            if ep is None:
                return "Error: environment not reset. Call reset() first."
            if ep.phase != "active" or ep.policy is None:
                return _refusal(ep)
            if not isinstance(command, str) or not command.strip() or len(command) > COMMAND_CHARS:
                return f"refused: command must be non-empty text of at most {COMMAND_CHARS} characters."
            remaining = ep.window_left()
            if remaining <= 0:
                self._expire(ep)
                return "refused: the policy window expired; the episode scored 0."
            seconds = min(ep.task.limits.command_seconds, remaining)
            t0 = time.monotonic()
            try:
                outcome = self._run_policy_command(ep, command, seconds)
            except Exception as exc:
                ep.fail(Fatal.of(exc, "terminal"))
                self._release_quietly(ep)
                return (
                    f"infrastructure error ({ep.fatal.type if ep.fatal else 'unknown'}); the episode is void."
                )
            ep.timing("terminal", t0)
            return format_outcome(outcome, seconds)

    def _run_policy_command(self, ep: Episode, command: str, seconds: float) -> Any:
        return run_bounded(
            ep.policy,
            command,
            cwd=ep.task.workdir,
            seconds=seconds,
            output_bytes=OUTPUT_BYTES,
            merge_stderr=True,
        )

    def _expire(self, ep: Episode) -> None:
        """The window is over: release the policy sandbox, then commit 0."""
        try:
            self._release(ep)
        except CleanupError as exc:
            ep.fail(Fatal.of(exc))
            return
        ep.commit(0.0, "expired")

    # ------------------------------------------------------------------ episode actions

    def _episode_action(self, kind: str) -> EpisodeObservation:
        with self._lock:
            ep = self._ep
            if ep is None:
                return EpisodeObservation(status="error", message="environment not reset", done=True)
            if kind == "submit":
                return self._submit(ep)
            return self._finish(ep)

    def _submit(self, ep: Episode) -> EpisodeObservation:
        if ep.phase != "active":
            return EpisodeObservation(status="refused", message=_refusal(ep))
        if ep.window_left() <= 0:
            self._expire(ep)
            return self._result_obs(ep, "the policy window expired before submit")
        ep.phase = "verifying"
        try:
            reward = self._run_submission(ep)
        except Exception as exc:
            ep.fail(Fatal.of(exc, "submit"))
            self._release_quietly(ep)
            return self._error_obs(ep.fatal, "submit")
        ep.commit(reward, "submitted")
        return self._result_obs(ep, f"submitted {ep.task.artifact}; reward {reward:g}")

    def _finish(self, ep: Episode) -> EpisodeObservation:
        """The reward boundary: a healthy unsubmitted episode scores 0; everything is released and swept."""
        if ep.phase == "active":
            if ep.window_left() <= 0:
                self._expire(ep)
            else:
                try:
                    self._check_healthy(ep)
                except Exception as exc:
                    ep.fail(Fatal.of(exc, "health check"))
        try:
            self._release(ep, sweep_episode=True)
            ep.swept = True
        except Exception as exc:  # cleanup and the sweep's listing alike: never a score
            if ep.fatal is None:
                ep.fail(Fatal.of(exc, "cleanup"))
        if ep.phase == "active" and ep.fatal is None:
            ep.commit(0.0, "finished")
        if ep.fatal is not None:
            return self._error_obs(ep.fatal, "finish")
        return self._result_obs(ep, "finished")

    # ------------------------------------------------------------------ cleanup

    def _release(self, ep: Episode, *, sweep_episode: bool = False) -> None:
        """Kill and confirm every owned sandbox (plus, when asked, anything tagged with the episode)."""
        ids = list(ep.owned)
        if sweep_episode:
            ids += [i for i in self._orphans(ep) if i not in ep.owned]
        if ep.policy is not None:
            ep.policy = None
        if not ids:
            return
        t0 = time.monotonic()
        try:
            records = confirm_gone(self._target, ids)
        except CleanupError as exc:
            ep.cleanup += [
                {"sandbox_id": i, "role": ep.owned.get(i, "orphan"), "error": "unresolved"} for i in exc.ids
            ]
            for sandbox_id in ids:
                if sandbox_id not in exc.ids:
                    ep.owned.pop(sandbox_id, None)
            raise
        for rec in records:
            rec["role"] = ep.owned.pop(rec["sandbox_id"], "orphan")
        ep.cleanup += records
        ep.timing("cleanup", t0)

    def _orphans(self, ep: Episode) -> list[str]:
        """Live sandboxes tagged with this episode: what a lost create response left behind."""
        return sweep(self._target, ep.tag)

    def _release_quietly(self, ep: Episode) -> None:
        try:
            self._release(ep, sweep_episode=True)
        except Exception as exc:
            if ep.fatal is None:
                ep.fail(Fatal.of(exc))
            elif isinstance(exc, CleanupError):
                ep.fatal = Fatal("CleanupError", f"{ep.fatal.message}; cleanup also failed", tuple(exc.ids))

    # ------------------------------------------------------------------ observations

    def _decorate(self, obs: Observation) -> Observation:
        ep = self._ep
        if ep is None:
            return obs
        obs.done = ep.phase in {"submitted", "expired", "finished", "failed"}
        obs.reward = ep.reward if obs.done else 0.0
        obs.metadata = {**obs.metadata, "episode": ep.public()}
        return obs

    def _result_obs(self, ep: Episode, message: str) -> EpisodeObservation:
        return EpisodeObservation(status="scored", message=message, reward=ep.reward, done=True)

    def _error_obs(self, fatal: Fatal | None, where: str) -> EpisodeObservation:
        fatal = fatal or Fatal("InfrastructureError", f"{where} failed", ())
        meta = {"fatal": fatal.as_dict()}
        if self._ep is not None:
            meta = self._ep.public()
        return EpisodeObservation(
            status="infrastructure_error", message=fatal.message, done=True, metadata={"episode": meta}
        )
