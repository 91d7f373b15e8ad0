"""Run subject code where it cannot reach the verdict: a case host process.

The subject is somebody else's code. A segfault, ``os._exit`` or a runaway allocation inside it
would otherwise end the pytest process that holds the evidence bundle, and anything it patched in
that process (the judge, the runner, the evidence writer) would decide its own verdict. A
:class:`CaseHost` is a child interpreter (``python -m pytest_e2b_env.catalog.hostchild``) that
imports the subject once and carries out the controller's requests, one per subject call, case
after case (:mod:`~pytest_e2b_env.catalog.calls`); it answers raw outcomes and holds only the SDK's
settings, never a key of the target's control API. Requests and answers travel as JSON lines over
a private pipe pair (the subject may print anything on stdout).

When the host dies mid-case the case fails on ``subject-process`` with how it ended, the
controller removes what the ledger shows the case created, and the next case gets a fresh host.
Whatever the host or its subject started is ended when the host closes (see
:mod:`~pytest_e2b_env.catalog.procs`).

Where several hosts serve one subject (lanes, and hosts restarted after a crash), a
:class:`~pytest_e2b_env.catalog.hostfork.HostTemplate` imports the subject once (and its
contract's ``preload``) and each host is forked from it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import signal
import subprocess
import sys
import threading
from typing import Any, NoReturn

from pytest_e2b_env.catalog import procs
from pytest_e2b_env.catalog.calls import CASE_TIMEOUT, HostDied, SubjectCalls
from pytest_e2b_env.catalog.contract import SubjectInfo
from pytest_e2b_env.catalog.hostfork import Forked, HostTemplate, host_env
from pytest_e2b_env.catalog.hostoutput import OutputTail
from pytest_e2b_env.catalog.raw import dumps, loads

__all__ = ["CASE_TIMEOUT", "CaseHost", "HostDied"]

#: The largest answer a host may send (answers are bounded well below this).
MAX_REPLY = 64 * 1024 * 1024
#: How long a starting host may take to import the subject and run its warm-up.
START_TIMEOUT = 300.0
_serials = itertools.count(1)


def _describe(returncode: int | None) -> str:
    if returncode is None:
        return "did not answer in time and was killed"
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by signal {signal.Signals(-returncode).name} (exit {returncode})"
    return f"exited with status {returncode}"


def _lost(proc: object) -> bool:
    return isinstance(proc, Forked) and proc.lost


class CaseHost(SubjectCalls):
    """One child process that runs one subject's calls against one target.

    ``sdk_env`` is what the subject's code gets to reach the target (``E2B_API_URL``,
    ``E2B_SANDBOX_URL``, ``E2B_API_KEY``, ``PYTEST_E2B_ENV_RUN``); ``info`` what the controller
    knows of the subject (its spec and declared contract).
    """

    def __init__(
        self,
        sdk_env: dict[str, str],
        info: SubjectInfo,
        template: HostTemplate | None = None,
        token: str | None = None,
    ) -> None:
        super().__init__(info.kind, info.spec, info.contract)
        self.info = info
        self.sdk_env = dict(sdk_env)
        self.template = template
        token = token or (template.token if template is not None else procs.RUN_TOKEN)
        #: this host's mark in its environment (and in what its subject starts): killed at close
        self.marker = f"{token}:{next(_serials)}"
        self._proc: subprocess.Popen[bytes] | Forked | None = None
        self._to_child = -1
        self._send_lock = threading.Lock()
        self._life = threading.RLock()  # _fail closes while a close may be under way
        self._generation = 0
        self._pending: list[int] = []  # answers owed for hello / warm_up
        self._ended: str | None = None  # how the last host ended, for every call that was waiting
        self._output: OutputTail | None = None  # the host's stdout and stderr
        self._carried = ""  # what an earlier host of this one printed and no case took yet

    # ------------------------------------------------------------------ lifecycle
    def _start(self) -> None:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        if self._output is not None:
            self._carried += self._output.take()
        output = self._output = OutputTail()
        out = output.child_end()
        forked = self.template.fork(req_r, rep_w, out) if self.template is not None else None
        env = host_env(self.marker)
        self._proc = forked or subprocess.Popen(
            [sys.executable, "-m", "pytest_e2b_env.catalog.hostchild", str(req_r), str(rep_w)],
            pass_fds=(req_r, rep_w),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,  # a terminal's Ctrl-C is the controller's to handle, not the subject's
        )
        os.close(req_r)
        os.close(rep_w)
        output.close_child_end()
        self._generation += 1
        with self._cond:
            self._dead = None
        self._ended = None
        self._to_child = req_w
        reader = threading.Thread(
            target=self._read, args=(rep_r, self._generation), name="e2b-case-host-reader", daemon=True
        )
        reader.start()
        # The target's SDK settings and the subject to import: never a key of its control API.
        self._pending = [
            self.request("hello", sdk_env=self.sdk_env, subject=self.info.host_spec(), marker=self.marker)
        ]

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and self._dead is None

    def start(self, warm_up: bool = False) -> None:
        """Start the host (and its subject's warm-up) without waiting: it imports while cases run."""
        with self._life:
            if not self._alive():
                self._close()
                self._start()
            if warm_up:
                self._pending.append(self.request("warm_up"))

    def ready(self) -> None:
        """Start the host if needed and wait for its hello and warm-up (HostDied if it dies meanwhile)."""
        self.start()
        pending, self._pending = self._pending, []
        for call_id in pending:
            self.reply(call_id, timeout=START_TIMEOUT)

    def begin(self, timeout: float = CASE_TIMEOUT) -> None:
        """A case starts here: the host is started (or restarted after a crash) and ready."""
        self.ready()
        super().begin(timeout)

    def subject_pid(self) -> int | None:
        """The host's pid (the controller started or forked it: never what the host says)."""
        proc = self._proc
        return proc.pid if proc is not None else None

    def take_output(self) -> str:
        """What the subject printed (stdout and stderr) since the last take: the tail of it."""
        carried, self._carried = self._carried, ""
        output = self._output
        return carried + (output.take() if output is not None else "")

    def kill(self) -> None:
        """End the host now (Ctrl-C), from any thread: a call waiting on it fails at once, and the
        case's own cleanup and :meth:`close` then end what it started."""
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(Exception):
                proc.kill()

    def close(self) -> None:
        """Ask the host to release what it holds (servers), make sure it is gone, end what it started."""
        with self._life:
            self._close()

    def _close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        self._deadline = None  # a case that ended in an exception leaves its deadline behind
        clean = self._dead is None
        if clean:
            with contextlib.suppress(Exception):
                for call_id in self._pending:
                    self.reply(call_id, timeout=60)
                self.reply(self.request("stop"), timeout=60)
        self._pending = []
        with contextlib.suppress(Exception):
            proc.wait(timeout=30 if clean else 2)
        if proc.poll() is None:
            proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(timeout=30)
        with contextlib.suppress(OSError):
            os.close(self._to_child)
        self._generation += 1  # the reader of this host stops delivering
        self._contain()

    def _contain(self) -> None:
        """End whatever the host and its subject started that outlived the host (procs module doc)."""
        with contextlib.suppress(Exception):
            procs.kill_marked(self.marker)
        if self.template is not None:
            with contextlib.suppress(Exception):
                self.template.reap_orphans()

    # ------------------------------------------------------------------ wire
    def _send(self, message: dict[str, Any]) -> None:
        data = memoryview(dumps(message))
        with self._send_lock:
            try:
                while data:
                    written = os.write(self._to_child, data)
                    data = data[written:]
                return
            except OSError:
                pass
        # It ended before its reader saw the pipe close: learn how it ended, as the reader would.
        self._fail("the case host closed its pipe", timed_out=False)

    def _read(self, fd: int, generation: int) -> None:
        """The host's answers, delivered as they come (one thread per host start)."""
        buffer = b""
        poller = select.poll()  # not select: a pytest process may hold descriptors past 1024
        poller.register(fd, select.POLLIN | select.POLLHUP)
        why = "the case host closed its pipe"
        try:
            while generation == self._generation:
                if not poller.poll(500):
                    continue
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                buffer += chunk
                if len(buffer) > MAX_REPLY:
                    why = "the case host sent an oversized answer"
                    break
                while b"\n" in buffer and generation == self._generation:
                    line, _, buffer = buffer.partition(b"\n")
                    try:
                        message = loads(line)
                    except ValueError as exc:
                        why = f"the case host sent a malformed answer ({str(exc)[:80]})"
                        raise
                    self._deliver(message)
        except (OSError, ValueError):
            pass
        finally:
            os.close(fd)
            with self._cond:
                if generation == self._generation and self._dead is None:
                    self._dead = why
                    self._cond.notify_all()

    def _fail(self, why: str, timed_out: bool) -> NoReturn:
        """The host ended or stopped answering mid-case: say how it ended, close it, raise HostDied."""
        with self._life:
            proc = self._proc
            code = None
            if proc is not None:
                if timed_out:
                    proc.kill()
                    with contextlib.suppress(Exception):
                        proc.wait(timeout=30)
                else:  # its pipe closed as it died: let it be reaped to learn how it ended
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=10)
                    code = proc.poll()
            if proc is None and self._ended is not None:  # another thread saw it end first
                how = self._ended
            elif _lost(proc):
                how = "ended; its exit status was lost with its template"
            elif proc is not None and not timed_out and code is None:
                how = f"stopped working ({why})"
            else:
                how = _describe(code)
            self._ended = how
            self._dead = self._dead or why
            self._close()
        raise HostDied(f"the case process {how}")
