"""Worker sandboxes through the real e2b SDK: create, install + preflight, run, renew, kill, sweep.

Nothing here decides policy (retry or abort); it classifies what the SDK raised so the pool can.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    CommandExitException,
    InvalidArgumentException,
    NotFoundException,
    RateLimitException,
    SandboxException,
    ServiceBusyException,
    TemplateException,
    TimeoutException,
)

from pytest_e2b_env.reward.protocol import (
    INBOX_DIR,
    MAX_COMMAND_BYTES,
    Batch,
    Payload,
    ProtocolError,
    StarvedCase,
    install_command,
    parse_answer,
    probe_text,
    run_command,
)
from pytest_e2b_env.targets import tags as target_tags

ROLE = "reward-worker"


def is_transient(exc: BaseException) -> bool:
    """Worth one more try on a fresh worker: lost sandbox, 5xx, rate limit, transport timeouts.

    Authentication, bad arguments and templates are configuration faults: never transient.
    """
    if isinstance(exc, AuthenticationException | InvalidArgumentException | TemplateException):
        return False
    if isinstance(exc, TimeoutException | NotFoundException | RateLimitException | ServiceBusyException):
        return True
    if isinstance(exc, CommandExitException | ProtocolError):
        return True  # the runner itself died or answered garbage: the worker is broken
    if isinstance(exc, StarvedCase):
        return True  # the host, not the candidate, ran out of time
    if isinstance(exc, SandboxException):
        return exc.status_code is None or exc.status_code >= 500 or exc.status_code == 429
    return isinstance(exc, httpx.TransportError | httpx.TimeoutException | ConnectionError | OSError)


def describe(exc: BaseException) -> str:
    """Type and a short, payload-free message for ledgers and errors."""
    status = getattr(exc, "status_code", None)
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}" + (f"[{status}]" if status else "") + (f": {text}" if text else "")


@dataclass
class Worker:
    """One worker sandbox owned by a pool."""

    sandbox: Any
    sandbox_id: str
    created_wall: float
    created_mono: float
    renewed_mono: float
    uses: int = 0
    lost: bool = False
    preflight: dict[str, Any] = field(default_factory=dict)


class WorkerClient:
    """The SDK calls the pool needs, with the pool's options applied to every one."""

    def __init__(
        self,
        *,
        template: str,
        run_id: str,
        lifetime_seconds: int,
        request_timeout: float,
        api_opts: dict[str, Any] | None,
        pool_id: str | None = None,
    ) -> None:
        self.pool_id = pool_id or uuid.uuid4().hex[:12]
        self.template = template
        self.run_id = run_id
        self.lifetime_seconds = lifetime_seconds
        self.request_timeout = request_timeout
        self.api_opts = dict(api_opts or {})

    @property
    def metadata(self) -> dict[str, str]:
        """The tags every worker carries, also the sweep's query.

        Several pools share one run id (xdist workers, parallel trainers): the pool tag keeps each
        pool's sweep to its own workers, so one pool's close() never kills another's.
        """
        return target_tags.tags(self.run_id, ROLE, pool=self.pool_id)

    def _opts(self) -> dict[str, Any]:
        return {"request_timeout": self.request_timeout, **self.api_opts}

    async def create(self) -> Worker:
        """Create one worker sandbox (no internet, server-side lifetime, tagged)."""
        sandbox = await AsyncSandbox.create(
            template=self.template,
            timeout=self.lifetime_seconds,
            metadata=self.metadata,
            allow_internet_access=False,
            **self._opts(),
        )
        now = time.monotonic()
        return Worker(sandbox, sandbox.sandbox_id, time.time(), now, now)

    async def install_and_preflight(self, worker: Worker, payload: Payload) -> dict[str, Any]:
        """Upload the runner and run the isolation preflight (one command); the raw answer."""
        result = await worker.sandbox.commands.run(
            install_command(payload), user="root", timeout=60, request_timeout=self.request_timeout
        )
        return parse_answer(result.stdout, payload.nonce)

    async def run(self, worker: Worker, payload: Payload | Batch, command_timeout: float) -> dict[str, Any]:
        """Run one candidate (or a batch) on ``worker``; the runner's answer (per-case records)."""
        stdin = payload.stdin()
        if len(stdin) + 400 <= MAX_COMMAND_BYTES:
            command = run_command(stdin, command_timeout)
        else:  # too big for one argv string: one upload, then the same command reading the file
            path = f"{INBOX_DIR}/{payload.nonce}.in"  # root-only directory: no case can read it
            await worker.sandbox.files.write(path, stdin, user="root", request_timeout=self.request_timeout)
            command = run_command(None, command_timeout, stdin_file=path)
        result = await worker.sandbox.commands.run(
            command, user="root", timeout=command_timeout, request_timeout=self.request_timeout
        )
        return parse_answer(result.stdout, payload.nonce)

    async def renew(self, worker: Worker) -> None:
        """Push the worker's server-side end time ``lifetime_seconds`` ahead."""
        await worker.sandbox.set_timeout(self.lifetime_seconds, **self._opts())
        worker.renewed_mono = time.monotonic()

    async def kill(self, sandbox_id: str) -> None:
        """Kill by id; a sandbox that is already gone counts as killed (kill returns False)."""
        await AsyncSandbox.kill(sandbox_id, **self._opts())

    async def list_ids(self, *, whole_run: bool = False) -> list[str]:
        """Ids of every running or paused worker of this pool (of every pool of the run: ``whole_run``)."""
        tags = target_tags.tags(self.run_id, ROLE) if whole_run else self.metadata
        # The one listing of target.tags, in a thread: the sync SDK must not block the pool's loop.
        return await asyncio.to_thread(target_tags.list_ids, self._opts(), tags)

    async def sweep(self, attempts: int = 3) -> list[str]:
        """Kill every worker tagged with this pool and confirm each gone; returns the ids still alive."""
        kills = await asyncio.to_thread(target_tags.sweep, self._opts(), self.metadata, attempts=attempts)
        return target_tags.unresolved(kills)


def probe_source() -> bytes:
    """The probe program the preflight runs as if it were a candidate."""
    return probe_text().encode()
