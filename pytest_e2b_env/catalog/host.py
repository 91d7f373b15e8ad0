"""Run subject code where a crash cannot take the controller down: a case host process.

The subject is somebody else's code. A segfault, ``os._exit`` or a runaway allocation inside it
would otherwise end the pytest process that holds the evidence bundle. A :class:`CaseHost` is a
child interpreter (``python -m pytest_e2b_env.catalog.hostchild``) that imports the subject once and
runs case after case against the same target, reached over its control API (the emulator's, or
the same API served by the fault proxy before live E2B). Requests
and records travel as JSON lines over a private pipe pair (the subject may print anything on
stdout). When the child dies mid-case, the case is recorded as failed with the reason, the
harness removes what the ledger shows the case created, and the next case gets a fresh host.

Where several hosts serve one subject (lanes, and hosts restarted after a crash), a
:class:`HostTemplate` imports the subject once (and its contract's ``preload``) and each host is
forked from it, so an import that takes seconds (openenv imports gradio) is paid once per run.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

from pytest_e2b_env.catalog.hostfork import Forked, HostTemplate, host_env
from pytest_e2b_env.catalog.model import Case
from pytest_e2b_env.catalog.record import CaseRecord

#: A case (including every retry and deadline inside it) that takes longer than this is stopped.
CASE_TIMEOUT = 900.0
#: The largest record a host may send back (records are bounded well below this).
MAX_REPLY = 64 * 1024 * 1024


class HostDied(Exception):
    """The case host ended (or stopped answering) in the middle of a case."""


def _describe(returncode: int | None) -> str:
    if returncode is None:
        return "did not answer in time and was killed"
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by signal {signal.Signals(-returncode).name} (exit {returncode})"
    return f"exited with status {returncode}"


def _lost(proc: object) -> bool:
    return isinstance(proc, Forked) and proc.lost


class CaseHost:
    """One child process that runs cases for one subject against one emulator."""

    def __init__(
        self, target_info: dict[str, Any], subject: dict[str, Any], template: HostTemplate | None = None
    ) -> None:
        self.target_info = target_info
        self.subject = subject
        self.template = template
        self._proc: subprocess.Popen[bytes] | Forked | None = None
        self._to_child = -1
        self._from_child = -1
        self._buffer = b""
        self._pending = 0  # replies still owed for requests sent without waiting

    # ------------------------------------------------------------------ lifecycle
    def _start(self) -> None:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        forked = self.template.fork(req_r, rep_w) if self.template is not None else None
        self._proc = forked or subprocess.Popen(
            [sys.executable, "-m", "pytest_e2b_env.catalog.hostchild", str(req_r), str(rep_w)],
            pass_fds=(req_r, rep_w),
            env=host_env(),
            stdin=subprocess.DEVNULL,
        )
        os.close(req_r)
        os.close(rep_w)
        self._to_child, self._from_child, self._buffer = req_w, rep_r, b""
        self._send({"op": "hello", "target": self.target_info, "subject": self.subject})
        self._pending = 1

    def start(self, warm_up: bool = False) -> None:
        """Start the host (and its subject's warm-up) without waiting: it imports while cases run."""
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self._start()
        if warm_up:
            self._send({"op": "warm_up"})
            self._pending += 1

    def close(self) -> None:
        """Ask the host to release what it holds (servers), then make sure it is gone."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(Exception):
            self._send({"op": "stop"})
            for _ in range(self._pending + 1):
                self._receive(timeout=60)
        self._pending = 0
        with contextlib.suppress(Exception):
            proc.wait(timeout=30)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)

    # ------------------------------------------------------------------ wire
    def _send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, default=str) + "\n").encode()
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._to_child, view)
            except BrokenPipeError:
                raise HostDied("the case host is gone") from None
            view = view[written:]

    def _receive(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        # poll, not select: a pytest process may hold descriptors past 1024
        poller = select.poll()
        poller.register(self._from_child, select.POLLIN | select.POLLHUP)
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise HostDied("timeout")
            if not poller.poll(min(left, 1.0) * 1000):
                continue
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise HostDied("the case host closed its pipe")
            self._buffer += chunk
            if len(self._buffer) > MAX_REPLY:
                raise HostDied("the case host sent an oversized reply")
        line, _, self._buffer = self._buffer.partition(b"\n")
        reply: dict[str, Any] = json.loads(line)
        if reply.get("error"):
            raise HostDied(str(reply["error"]))
        return reply

    # ------------------------------------------------------------------ cases
    def call(self, op: str, timeout: float = CASE_TIMEOUT, **fields: Any) -> dict[str, Any]:
        """One request; a dead host is restarted first, one that dies now raises :class:`HostDied`."""
        self.start()
        try:
            while self._pending:  # the answers to hello / warm_up come first
                self._receive(timeout=300)
                self._pending -= 1
            self._send({"op": op, **fields})
            return self._receive(timeout)
        except HostDied as exc:
            proc = self._proc
            code = None
            if proc is not None:
                if "timeout" in str(exc):
                    proc.kill()
                    proc.wait(timeout=30)
                else:  # its pipe closed as it died: let it be reaped to learn how it ended
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=10)
                code = None if "timeout" in str(exc) else proc.poll()
            how = "ended; its exit status was lost with its template" if _lost(proc) else _describe(code)
            self.close()
            raise HostDied(f"the case process {how}") from None

    def run(self, case: Case, extra_tools: list[str], relax: frozenset[str]) -> CaseRecord:
        """Run one case in the host; its record (the host's own view) comes back."""
        reply = self.call(
            "run",
            case=case.model_dump(mode="json"),
            extra_tools=extra_tools,
            relax=sorted(relax),
        )
        data = reply["record"]
        record = CaseRecord(
            **{k: v for k, v in data["record"].items() if k in CaseRecord.__dataclass_fields__}
        )
        record.trajectory = data.get("trajectory", [])
        record.cleanup = data.get("cleanup", [])
        return record
