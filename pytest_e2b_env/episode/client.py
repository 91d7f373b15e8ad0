"""``ReportEpisode``: the TRL ``environment_factory`` class, client side of the repair environment.

TRL exposes every public method except ``reset`` and ``get_reward`` as a model tool, so the public
methods are exactly ``reset``, ``terminal``, ``submit`` and ``get_reward``; everything else is
private. Construction allocates nothing; ``reset`` connects (one OpenEnv WebSocket session per
episode) and ``get_reward`` disconnects once every sandbox is confirmed gone, because TRL keeps
every instance and never calls ``close``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, NoReturn

from pytest_e2b_env.errors import CleanupError, ConfigError, E2BEnvError, InfrastructureError
from pytest_e2b_env.masking import DEFAULT_MASK_BUDGET, DEFAULT_MASK_CONSECUTIVE, MaskBudget, check_policy
from pytest_e2b_env.settings import openenv_url

#: Seconds the client waits for any one server reply; the server enforces the task deadlines.
MESSAGE_TIMEOUT = 900.0
#: What the policy reads when a masked episode could not start (it is never scored).
UNAVAILABLE = (
    "The environment could not start this episode (an infrastructure failure); it will not be scored."
)


def _raise(fatal: dict[str, Any]) -> NoReturn:
    message = str(fatal.get("message") or "episode infrastructure failed")
    if fatal.get("type") == "CleanupError":
        raise CleanupError(message, fatal.get("ids") or ())
    raise InfrastructureError(message)


@contextlib.contextmanager
def _missing(name: str) -> Iterator[None]:
    """While inside, ``import name`` fails as if it were not installed (unless it is imported already)."""
    if name in sys.modules:
        yield
        return
    # None is the import system's own "not importable": import raises ModuleNotFoundError
    sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if name in sys.modules and sys.modules[name] is None:
            del sys.modules[name]


@functools.cache
def preload() -> None:
    """Import everything the reference server and its episodes use, and start nothing.

    The catalog runs this once where it forks its case hosts from (``preload`` in the contract),
    so each host skips openenv's import. Nothing here starts a thread, a socket or a sandbox.

    openenv's package imports its optional Gradio web UI unless gradio is missing (it catches
    the ``ModuleNotFoundError``): gradio, pandas and pyarrow, about 2.3 s of the 3.7 s of CPU,
    and pyarrow's native threads. The reference server never serves that UI (openenv builds it
    only under ``ENABLE_WEB_INTERFACE`` and then imports it itself), so gradio counts as
    missing while openenv's package imports here; a later ``import gradio`` imports it as usual.
    Only the catalog's processes run this: a training process imports openenv whole.
    """
    import e2b  # noqa: F401  (the cases import the SDK anyway; once, here, in one thread)

    with _missing("gradio"):
        import openenv.core.env_server.http_server  # noqa: F401
    import uvicorn  # noqa: F401

    from pytest_e2b_env.episode import environment  # noqa: F401
    from pytest_e2b_env.episode.server import create_app

    create_app()  # builds (and discards) the app: every import the server thread needs happens here


def warm_up() -> None:
    """Start the reference OpenEnv server in the background for the SDK settings now in force.

    Importing openenv (fastmcp and the rest) happens here (:func:`preload`), in the
    caller's thread: a second thread importing the same packages while tests import them hands
    one of the two a partially initialised module (``cannot import name 'Client' from
    'fastmcp'``). Only the server start, which imports nothing new, runs in the background.
    """
    if openenv_url():
        return  # a running server was named: nothing to start
    preload()
    import os

    from pytest_e2b_env.episode.server import prestart_shared_server

    prestart_shared_server(dict(os.environ))


def release() -> None:
    """Stop the OpenEnv servers this process started (warm-up, episodes); nothing when none ran.

    Called by the catalog while the target still answers, so sessions kept open over sandboxes
    that would not die release them with a request each, not with retries against a stopped
    emulator at interpreter exit.
    """
    import sys

    server = sys.modules.get("pytest_e2b_env.episode.server")  # never imported: nothing started
    if server is not None:
        server.close_shared_servers()


class ReportEpisode:
    """A repair episode for TRL: ``reset(**row)``, tools ``terminal`` and ``submit``, ``get_reward()``.

    The task comes from the dataset row's ``task`` column (JSON text or dict, the repair-task
    schema). Infrastructure and cleanup failures raise :class:`InfrastructureError` /
    :class:`CleanupError` at ``get_reward()`` even if TRL's tool loop swallowed them earlier;
    they never become a reward.
    """

    #: What the catalog needs to know (docs/catalog.md): the classes raised, and the server warm-up.
    e2b_contract: ClassVar[dict[str, Any]] = {
        "raises_classes": ["InfrastructureError", "CleanupError"],
        "warm_up": warm_up,
        "preload": preload,
        "release": release,
        # The repair commands run in a sandbox's own /home/user: below the namespaces level
        # commands run on the host, where the task's files are not.
        "needs_isolation": True,
    }
    #: The server-side environment class (None: the reference :class:`RepairEnvironment`). A
    #: subclass that pins its own environment always gets its own process-wide loopback server.
    _environment: ClassVar[Callable[..., Any] | None] = None
    #: ``"raise"``, or ``"mask"``: an episode whose infrastructure failed gets ``None`` from
    #: ``get_reward()`` (TRL's unscorable) once its sandboxes are confirmed gone, within the budget
    #: of :mod:`pytest_e2b_env.masking`, shared by every instance of the class (TRL's episodes).
    on_infrastructure: ClassVar[str] = "raise"
    mask_budget: ClassVar[float] = DEFAULT_MASK_BUDGET
    mask_consecutive: ClassVar[int] = DEFAULT_MASK_CONSECUTIVE
    _budget: ClassVar[MaskBudget | None] = None

    def __init__(self, base_url: str | None = None) -> None:
        self._base_url = base_url
        self._client: Any = None
        self._fatal: dict[str, Any] | None = None
        self._reward: float | None = None
        self._closed = True  # no episode is open before the first reset
        self._task_id: str | None = None
        self._finish_seen = False  # the finish reply carried the episode record (cleanup confirmed)
        #: Evidence for the last step: the server's episode record (ids, timings, cleanup).
        self.receipt: dict[str, Any] = {}

    # ------------------------------------------------------------------ TRL API

    def reset(self, **row: Any) -> str:
        """Start a fresh episode for the row's ``task``; returns the task text for the prompt."""
        task = row.get("task")
        if task is None:
            raise ConfigError(
                "the dataset row has no 'task' column; add the repair task JSON (pytest-e2b-env docs episode)"
            )
        if isinstance(task, str):
            try:
                task = json.loads(task)
            except ValueError:
                raise ConfigError("the row's 'task' is not valid JSON text") from None
        self._fatal, self._reward, self._closed, self.receipt = None, None, False, {}
        self._task_id = task.get("id") if isinstance(task, dict) else None
        try:
            payload = self._send("reset", {"task": task})
            obs = payload.get("observation") or {}
            if obs.get("status") == "config_error":
                self._closed = True
                raise ConfigError(str(obs.get("message")))
            self._check(payload)
            if obs.get("status") != "ready":
                self._fail({"type": "InfrastructureError", "message": "reset did not report ready"})
        except InfrastructureError:
            # TRL's reset has no error path (a raise ends the run); a masked episode instead tells
            # the policy and is voided at get_reward(), which still confirms its cleanup first.
            if self._fatal is None or not self._masks(self._fatal):
                raise
            return UNAVAILABLE
        return str(obs.get("message") or "")

    def terminal(self, command: str) -> str:
        """Run a shell command in the task's work directory and return its output.

        Args:
            command: Shell command text, run with sh -c in a fresh shell; files persist between calls.
        """
        if self._fatal is not None:
            _raise(self._fatal)
        if self._closed:
            return "refused: the episode is finished; no further tool calls are accepted."
        payload = self._send(
            "step", {"type": "call_tool", "tool_name": "terminal", "arguments": {"command": command}}
        )
        self._check(payload)
        obs = payload.get("observation") or {}
        if obs.get("error"):
            self._fail({"type": "InfrastructureError", "message": "terminal tool call failed on the server"})
        if payload.get("done"):
            self._closed = True
            self._reward = payload.get("reward")
        result = obs.get("result") or {}
        data = result.get("data") if isinstance(result, dict) else None
        return str(data if data is not None else "")

    def submit(self) -> str:
        """Submit the repaired program for grading on a hidden input; ends the episode."""
        if self._fatal is not None:
            _raise(self._fatal)
        if self._closed:
            return "refused: the episode is finished; no further tool calls are accepted."
        self._closed = True
        payload = self._send("step", {"type": "submit"})
        self._check(payload)
        reward = payload.get("reward")
        if not isinstance(reward, int | float) or isinstance(reward, bool):
            self._fail({"type": "InfrastructureError", "message": "submit returned no score"})
        self._reward = float(reward)
        return f"Submitted. Reward: {self._reward:g}"

    def get_reward(self) -> float | None:
        """The committed score; 0.0 when nothing was submitted and the policy sandbox is healthy.

        Always releases the episode's sandboxes first; raises instead of returning a score when
        any infrastructure or cleanup failure happened in this episode. With
        ``on_infrastructure = "mask"`` an infrastructure failure (never a cleanup failure) gives
        ``None`` instead, once the server confirmed every sandbox of the episode gone, while the
        class's mask budget holds.
        """
        try:
            if self._client is None:  # never connected, or the session broke (already recorded)
                if self._fatal is not None:
                    _raise(self._fatal)
                raise InfrastructureError("get_reward() called before reset(); no episode ran")
            finish_error: E2BEnvError | None = None
            self._finish_seen = False
            try:
                payload = self._send("step", {"type": "finish"})
                self._check(payload)
            except E2BEnvError as exc:
                finish_error = exc
            if self._fatal is not None:
                # Masked only when the finish reply itself reported the episode with nothing owned:
                # the server released and swept it (a broken session confirms nothing).
                confirmed = self._client is not None and self._finish_seen and not self.receipt.get("owned")
                if confirmed and self._masks(self._fatal):
                    self._admit(masked=True)  # over budget: raises, as without masking
                    return None
                _raise(self._fatal)
            if finish_error is not None:
                raise finish_error
            if self._reward is None:
                reward = payload.get("reward")
                if not isinstance(reward, int | float) or isinstance(reward, bool):
                    raise InfrastructureError("the episode finished without a committed score")
                self._reward = float(reward)
            self._admit(masked=False)
            return float(self._reward)
        finally:
            self._closed = True
            if not self.receipt.get("owned"):
                # One server session per episode: an idle instance (TRL keeps them all, and never
                # calls close) holds no slot. A session whose sandboxes could not be confirmed gone
                # stays open so the next get_reward or reset retries them.
                self._drop_client()

    # ------------------------------------------------------------------ internals

    def _masks(self, fatal: dict[str, Any]) -> bool:
        """Whether this failure may be masked: the policy says so; never cleanup failures or refusals."""
        check_policy(self.on_infrastructure, self.mask_budget, self.mask_consecutive)
        return (
            self.on_infrastructure == "mask"
            and fatal.get("type") != "CleanupError"
            and fatal.get("kind") != "refused"
        )

    def _admit(self, *, masked: bool) -> None:
        """Charge one episode to the class's mask budget (masking classes only)."""
        if self.on_infrastructure != "mask":
            return
        cls = type(self)
        if "_budget" not in cls.__dict__ or cls._budget is None:
            cls._budget = MaskBudget(float(cls.mask_budget), int(cls.mask_consecutive))
        try:
            cls._budget.admit([masked], f"{cls.__name__} episodes")
        except InfrastructureError:
            self._fatal = self._fatal or {"type": "InfrastructureError", "message": "over the mask budget"}
            raise

    @classmethod
    def mask_metrics(cls) -> dict[str, Any]:
        """The class's mask counts (``masked``, ``masked_fraction``, limits); empty before any episode."""
        budget = cls.__dict__.get("_budget")
        return budget.as_dict() if budget is not None else {}

    def _url(self) -> str:
        if self._base_url:
            return self._base_url
        env = type(self)._environment
        url = openenv_url()
        if env is None and url:
            return url
        from pytest_e2b_env.episode.server import shared_server

        return shared_server(env)

    def _connect(self) -> Any:
        from openenv.core.generic_client import GenericEnvClient

        client = GenericEnvClient(base_url=self._url(), message_timeout_s=MESSAGE_TIMEOUT).sync()
        client.connect()
        return client

    def _send(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        """One request on the episode's session; any transport or server error is infrastructure."""
        try:
            if self._client is None:
                self._client = self._connect()
            result = self._client.reset(**data) if kind == "reset" else self._client.step(data)
        except E2BEnvError:
            raise
        except Exception as exc:
            self._drop_client()
            # openenv error frames end in "(code: CAPACITY_REACHED)"; the code is safe to show.
            code = re.search(r"\(code: ([A-Z_]+)\)", str(exc))
            why = f"{type(exc).__name__}{', ' + code.group(1) if code else ''}"
            self._fail({"type": "InfrastructureError", "message": f"OpenEnv {kind} failed ({why})"})
        payload = {
            "observation": result.observation or {},
            "reward": result.reward,
            "done": result.done,
        }
        episode = (payload["observation"].get("metadata") or {}).get("episode")
        if isinstance(episode, dict):
            self.receipt = episode
            self._finish_seen = data.get("type") == "finish"
        return payload

    def _check(self, payload: dict[str, Any]) -> None:
        obs = payload.get("observation") or {}
        fatal = ((obs.get("metadata") or {}).get("episode") or {}).get("fatal")
        if fatal:
            self._fail(fatal)

    def _fail(self, fatal: dict[str, Any]) -> NoReturn:
        """Record the failure for the reward boundary, then raise it now (TRL may swallow this one)."""
        if self._fatal is None:
            self._fatal = dict(fatal)
        self._closed = True
        _raise(self._fatal)

    def _close(self) -> None:
        """Close the session (the server then releases its sandboxes). Private: TRL never calls it."""
        self._drop_client()
        self._closed = True

    def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            # The session is already broken; the server closes it when the socket goes.
            with contextlib.suppress(Exception):
                client.close()


class MaskingReportEpisode(ReportEpisode):
    """:class:`ReportEpisode` with ``on_infrastructure = "mask"`` and the default budget (as train.py uses).

    ``environment_factory=MaskingReportEpisode``; the catalog validates it with
    ``--episode-subject pytest_e2b_env.episode:MaskingReportEpisode``.
    """

    on_infrastructure: ClassVar[str] = "mask"
