"""Sandbox records and their registry: create, look up, expire, kill, lose.

A sandbox is a record (template, metadata, envs, lifetime, access tokens) around a ``Box``
from the isolation backend. All methods run on the server's event loop thread; only the
blocking part of a box's start and kill runs in worker threads (nothing of a box depends on
the thread that made it: sandboxes die with the emulator through the backend's lifeline).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import secrets
import signal
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_e2b_env.wire.ledger import Ledger

if TYPE_CHECKING:
    from pytest_e2b_env.emulator.isolation.api import Backend, Box
    from pytest_e2b_env.emulator.processes import Proc

ENVD_VERSION = "0.6.7"  # new enough for every 2.63 SDK feature gate (file metadata, octet uploads)
DEFAULT_TIMEOUT_S = 300
MAX_TIMEOUT_S = 24 * 3600
_ID_ALPHABET = string.ascii_lowercase + string.digits
log = logging.getLogger("pytest_e2b_env.emulator")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _iso(t: dt.datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def new_sandbox_id() -> str:
    """An id shaped like E2B's: 20 lower-case alphanumerics starting with a letter."""
    return "i" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(19))


@dataclass
class Sandbox:
    """One sandbox as the control plane and envd see it."""

    sandbox_id: str
    template_id: str
    metadata: dict[str, str]
    envs: dict[str, str]
    allow_internet_access: bool
    started_at: dt.datetime
    end_at: dt.datetime
    box: Box
    envd_access_token: str = field(default_factory=lambda: secrets.token_hex(16))
    #: the key of every port but envd's (E2B issues one to a sandbox whose ingress is not public)
    traffic_access_token: str = field(default_factory=lambda: secrets.token_hex(16))
    state: str = "running"  # "running" | "killed"
    procs: dict[int, Proc] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None
    #: called once when the sandbox dies, before its box is killed (servers on other ports)
    on_kill: list[Callable[[], None]] = field(default_factory=list)

    def _run_kill_hooks(self) -> None:
        hooks, self.on_kill = self.on_kill, []
        for hook in hooks:
            try:
                hook()
            except Exception:  # one port's cleanup must not stop the sandbox's kill
                log.exception("a kill hook of sandbox %s failed", self.sandbox_id)

    @property
    def running(self) -> bool:
        """Whether envd calls reach it."""
        return self.state == "running"

    def created(self) -> dict[str, Any]:
        """The body of a create/connect answer."""
        return {
            "templateID": self.template_id,
            "sandboxID": self.sandbox_id,
            "clientID": "local",
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": self.envd_access_token,
            "trafficAccessToken": self.traffic_access_token,
            "alias": self.template_id,
        }

    def listed(self) -> dict[str, Any]:
        """A ``ListedSandbox`` (list answers)."""
        return {
            "templateID": self.template_id,
            "alias": self.template_id,
            "sandboxID": self.sandbox_id,
            "clientID": "local",
            "startedAt": _iso(self.started_at),
            "endAt": _iso(self.end_at),
            "cpuCount": 2,
            "memoryMB": 512,
            "diskSizeMB": 1024,
            "envdVersion": ENVD_VERSION,
            "state": "running",
            "metadata": dict(self.metadata),
        }

    def detail(self) -> dict[str, Any]:
        """A ``SandboxDetail`` (get_info answers)."""
        return {
            **self.listed(),
            "envdAccessToken": self.envd_access_token,
            "allowInternetAccess": self.allow_internet_access,
        }

    def summary(self) -> dict[str, Any]:
        """What ``Emulator.sandboxes()`` reports (snake_case, for leak checks)."""
        return {
            "sandbox_id": self.sandbox_id,
            "template_id": self.template_id,
            "metadata": dict(self.metadata),
            "started_at": _iso(self.started_at),
            "end_at": _iso(self.end_at),
            "allow_internet_access": self.allow_internet_access,
            "envs": sorted(self.envs),  # names only: values may be secrets
            "processes": len(self.procs),
            "state": self.state,
        }


class Registry:
    """Every live sandbox of one emulator, with its lifetime timer."""

    def __init__(self, backend: Backend, ledger: Ledger) -> None:
        self.backend = backend
        self.ledger = ledger
        self._boxes: dict[str, Sandbox] = {}
        self._killing: set[asyncio.Task[bool]] = set()

    async def create(
        self,
        template_id: str,
        timeout_s: int,
        metadata: dict[str, str],
        envs: dict[str, str],
        allow_internet_access: bool,
    ) -> Sandbox:
        """Start a box in a worker thread and register it on the loop thread.

        Starting waits for the sandbox's builder (and network helper): off the event loop, so a
        burst of creates neither stalls other requests nor queues one after the other.
        """
        sandbox_id = new_sandbox_id()
        box = await asyncio.to_thread(self.backend.start, sandbox_id, allow_internet_access, dict(envs))
        now = _now()
        sbx = Sandbox(
            sandbox_id=sandbox_id,
            template_id=template_id,
            metadata=dict(metadata),
            envs=dict(envs),
            allow_internet_access=allow_internet_access,
            started_at=now,
            end_at=now,
            box=box,
        )
        self._boxes[sandbox_id] = sbx
        self.set_timeout(sbx, timeout_s)
        return sbx

    def get(self, sandbox_id: str | None) -> Sandbox | None:
        """The running sandbox with this id, or None."""
        sbx = self._boxes.get(sandbox_id or "")
        return sbx if sbx is not None and sbx.running else None

    def running(self) -> list[Sandbox]:
        """Every running sandbox, oldest first."""
        return [s for s in self._boxes.values() if s.running]

    def set_timeout(self, sbx: Sandbox, timeout_s: float) -> None:
        """The sandbox now ends ``timeout_s`` seconds from now (extend or shorten)."""
        sbx.end_at = _now() + dt.timedelta(seconds=timeout_s)
        if sbx.timer is not None:
            sbx.timer.cancel()
        loop = asyncio.get_running_loop()
        sbx.timer = loop.call_later(max(timeout_s, 0), self._expire, sbx.sandbox_id)

    def _expire(self, sandbox_id: str) -> None:
        task = asyncio.ensure_future(self.kill(sandbox_id, op="expire", detail="lifetime reached"))
        self._killing.add(task)
        task.add_done_callback(self._reaped)

    def _reaped(self, task: asyncio.Task[bool]) -> None:
        self._killing.discard(task)
        if not task.cancelled() and task.exception() is not None:  # already in the ledger; say it once
            log.error("expiring a sandbox failed: %s", task.exception())

    async def kill(self, sandbox_id: str, *, op: str = "kill", detail: str = "") -> bool:
        """Kill the sandbox and every process in it; False if it was not running."""
        sbx = self.get(sandbox_id)
        if sbx is None:
            return False
        sbx.state = "killed"  # first: streams of its commands end as cut, not with an end event
        if sbx.timer is not None:
            sbx.timer.cancel()
        for proc in list(sbx.procs.values()):
            proc.detach()  # before box.kill() closes the pipes our event loop is watching
        sbx._run_kill_hooks()
        try:
            await asyncio.to_thread(sbx.box.kill)
        except Exception as exc:
            self.ledger.record(
                "kill", sandbox_id=sandbox_id, detail=f"cleanup failed: {type(exc).__name__}: {exc}"
            )
            raise
        finally:
            self._boxes.pop(sandbox_id, None)
        if op != "kill" or detail:  # request-driven kills are already in the ledger as requests
            self.ledger.record(op, sandbox_id=sandbox_id, detail=detail)
        return True

    async def lose(self, sandbox_id: str) -> None:
        """The fault layer's hook: the sandbox vanishes as if its VM died."""
        await self.kill(sandbox_id, op="kill", detail="lost (fault)")

    async def kill_all(self) -> None:
        """Kill every sandbox (shutdown)."""
        await asyncio.gather(
            *(self.kill(s.sandbox_id, op="kill", detail="emulator shutdown") for s in self.running()),
            return_exceptions=True,
        )

    def kill_all_blocking(self) -> None:
        """Last-resort cleanup from a non-async context: kill every box, no bookkeeping."""
        for sbx in list(self._boxes.values()):
            sbx.state = "killed"
            for proc in list(sbx.procs.values()):
                proc.detach()
            sbx._run_kill_hooks()
            with contextlib.suppress(Exception):
                sbx.box.kill()
        self._boxes.clear()


def kill_signal(name: str) -> int:
    """Map envd's signal enum name to a host signal (only SIGKILL and SIGTERM exist in envd)."""
    return signal.SIGKILL if name.endswith("SIGKILL") else signal.SIGTERM
