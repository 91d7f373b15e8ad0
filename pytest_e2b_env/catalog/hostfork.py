"""Fork case hosts from one process that imported the subject: its imports are paid once.

A :class:`HostTemplate` is a child interpreter (``python -m pytest_e2b_env.catalog.hostfork``)
that imports what a case host imports, the subject, and what the subject's contract ``preload``
names, then waits. Each case host of that subject is a fork of it, handed its request and reply
pipes over a ``SOCK_SEQPACKET`` socket; the host then runs exactly as a spawned one (the same
``hostchild.serve`` loop, the same pipes), so the controller cannot tell them apart but by their parent.

Forking is only safe from a single thread: a lock held by another thread at the fork stays held
in the child forever. So the template refuses to fork (and every host is spawned as before) when
the imports left a Python thread running, or any native thread unless the contract declares a
``preload``: that declaration says the subject's imports are fork-safe (the bundled episode's
openenv imports pyarrow, whose allocator and pools keep native threads with fork handlers).

The template is also how the controller learns what the subject declares without importing it:
its first answer carries the subject's contract as data (or why the import failed), its second
whether it forks.

The template is the hosts' parent, so it alone can collect how one ended; the controller watches
each through a pidfd (exit, kill) and asks the template for the status once the pidfd says it is
over. It is a child subreaper: what a crashed host's subject started is adopted by it, and the
controller kills those orphans (:meth:`HostTemplate.reap_orphans`); at its close the controller
kills its whole tree. The template ends when the controller's end of the socket closes.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import gc
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from typing import Any

from pytest_e2b_env.catalog import procs
from pytest_e2b_env.catalog.contract import Contract, SubjectInfo
from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.settings import subject_environ

#: How long the template may take to import the subject before hosts are spawned instead.
PRELOAD_TIMEOUT = 300.0
#: The largest message either side sends (requests and answers are a few hundred bytes).
MAX_MESSAGE = 64 * 1024


def host_env(marker: str) -> dict[str, str]:
    """The environment of a host or template: the subject must import exactly as it does here.

    The controller's environment less what subject code must never hold (our internal keys and
    markers; the SDK variables, which a host gets for its own target at hello), with ``marker``
    (:data:`~pytest_e2b_env.catalog.procs.MARKER`) and the controller's import path.
    """
    env = subject_environ(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # rootdir, ini pythonpath
    env[procs.MARKER] = marker
    return env


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read(1024)
        return int(raw[raw.rfind(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


class Forked:
    """A case host forked by a template, with the part of ``subprocess.Popen`` hosts use."""

    def __init__(self, template: HostTemplate, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        #: the template ended first, taking the exit status with it
        self.lost = False
        self._template = template
        self._pidfd: int | None = os.pidfd_open(pid)  # the host waits for its hello: it is alive

    def _settle(self, wait: float) -> bool:
        if self._pidfd is None:
            return True
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        if not poller.poll(wait * 1000):
            return False
        self.returncode = self._template.status(self.pid)
        self.lost = self.returncode is None
        os.close(self._pidfd)
        self._pidfd = None
        return True

    def poll(self) -> int | None:
        """The exit code once the host has ended (None: running, or its status was lost)."""
        self._settle(0)
        return self.returncode

    def wait(self, timeout: float) -> int | None:
        """Wait for the host to end; ``subprocess.TimeoutExpired`` if it is still running."""
        if not self._settle(timeout):
            raise subprocess.TimeoutExpired("case host", timeout)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL through the pidfd: never another process that reused the pid."""
        if self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)


class HostTemplate:
    """The controller's side of one template: started on first use, shared by threads (lanes)."""

    def __init__(self, subject: dict[str, Any], token: str = procs.RUN_TOKEN) -> None:
        self.subject = subject
        #: the run's token its environment carries (and every host forked from it)
        self.token = token
        #: why hosts are spawned rather than forked (None: forked, or not asked yet)
        self.refused: str | None = None
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._ready = False
        #: the template's first answer: the subject's contract as data, or why it did not import
        self._loaded: dict[str, Any] | None = None
        self._hosts: set[int] = set()  # forked hosts whose end is not yet collected

    @property
    def forking(self) -> bool:
        """Whether the template imported the subject and forks hosts (a host is cheap)."""
        return self._ready and self.refused is None

    def ready(self) -> bool:
        """Without waiting: whether the imports are done (a :meth:`fork` would not wait for them).

        Never blocks, not even on the lock a :meth:`fork` holds while it waits for the imports.
        """
        if not self._lock.acquire(blocking=False):
            return self._ready
        try:
            sock = self._sock
            while not self._ready and self.refused is None and sock is not None and self._sock is sock:
                poller = select.poll()
                poller.register(sock, select.POLLIN | select.POLLHUP)
                if not poller.poll(0):
                    break
                if self._loaded is None:
                    self._take_loaded()
                else:
                    self._preloaded()
            return self._ready or self.refused is not None
        finally:
            self._lock.release()

    def describe(self, kind: str, spec: str, contract_spec: str | None) -> SubjectInfo:
        """What the subject declares, as the template's import found it (waits for the import).

        A subject that cannot be imported (missing module, syntax error, no such attribute, a bad
        contract) is one :class:`ConfigError` naming it, as if this process had imported it.
        """
        self.start()
        with self._lock:
            if self._loaded is None:
                self._take_loaded()
            loaded = self._loaded or {}
        if loaded.get("contract") is None:
            raise ConfigError(str(loaded.get("why") or f"e2b_{kind}_subject={spec!r} could not be imported"))
        return SubjectInfo(kind, spec, Contract.from_facts(loaded["contract"]), contract_spec)

    def start(self) -> None:
        """Start importing in the background (the first :meth:`fork` waits for it)."""
        with self._lock:
            if self._proc is None and self.refused is None:
                ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "pytest_e2b_env.catalog.hostfork", str(theirs.fileno())],
                    pass_fds=(theirs.fileno(),),
                    env=host_env(self.token),
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # a terminal's Ctrl-C goes to the controller alone
                )
                theirs.close()
                self._sock = ours
                ours.sendall(json.dumps({"op": "preload", "subject": self.subject}).encode())

    def _take_loaded(self) -> None:
        """Read the template's first answer (the lock is held): the contract, or why not."""
        try:
            self._loaded = self._ask(None, timeout=PRELOAD_TIMEOUT)
        except OSError as exc:
            proc, code = self._proc, None
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = proc.wait(timeout=10)
            spec = self.subject.get("spec")
            self._loaded = {
                "why": f"e2b_{self.subject.get('kind')}_subject={spec!r}: importing it ended the process "
                f"(exit {code}: {exc})"
            }
        if self._loaded.get("contract") is None:
            self._refuse(str(self._loaded.get("why") or "it could not import the subject"))

    def fork(self, req_fd: int, rep_fd: int, out_fd: int) -> Forked | None:
        """A host forked with these pipe ends, ``out_fd`` its stdout and stderr (the caller closes
        its own copies); None: spawn it."""
        self.start()
        with self._lock:
            if self.refused is not None:
                return None
            try:
                if self._loaded is None:
                    self._take_loaded()
                if self.refused is not None or (not self._ready and not self._preloaded()):
                    return None
                pid = self._ask({"op": "fork"}, fds=(req_fd, rep_fd, out_fd)).get("pid")
            except OSError as exc:
                self._refuse(f"the template stopped answering ({exc})")
                return None
            proc = self._proc
            # The template ran subject code at import: the pid it names must be its own child.
            if not isinstance(pid, int) or proc is None or _parent(pid) != proc.pid:
                self._refuse("the template did not fork")
                return None
            try:
                forked = Forked(self, pid)
            except OSError as exc:  # no pidfd (Linux before 5.3): nothing to watch it with
                os.kill(pid, signal.SIGKILL)  # it waits for its hello, so the pid is still its own
                self._refuse(f"pidfd_open failed ({exc})")
                return None
            self._hosts.add(pid)
            return forked

    def status(self, pid: int) -> int | None:
        """How a forked host ended (its exit code, or minus the signal); None if nobody can say."""
        with self._lock:
            self._hosts.discard(pid)
            try:
                code = self._ask({"op": "status", "pid": pid}).get("returncode")
            except OSError:
                return None
            return code if isinstance(code, int) else None

    def reap_orphans(self) -> list[int]:
        """Kill what the template adopted from hosts that ended (their subjects' processes); the pids.

        Read from ``/proc`` here, never asked of the template (it ran subject code at import):
        every child of the template that is not a host it forked, with its tree.
        """
        with self._lock:  # no fork is under way: a new host is never taken for an orphan
            proc = self._proc
            if proc is None:
                return []
            killed: list[int] = []
            for child in procs.children(proc.pid):
                if child not in self._hosts:
                    killed += procs.kill_tree(child, include_root=True)
            if killed and self._sock is not None and self._ready:
                with contextlib.suppress(OSError):
                    self._ask({"op": "reap"})
            return killed

    def close(self) -> None:
        """End the template and everything under it (its hosts are closed by their :class:`CaseHost`)."""
        with self._lock:
            sock, proc = self._sock, self._proc
            self._sock = self._proc = None
            self.refused = self.refused or "closed"
        if proc is not None:
            with contextlib.suppress(Exception):
                procs.kill_tree(proc.pid)  # whatever its import started, and hosts' orphans
        if sock is not None:
            sock.close()  # the template reads end of input and exits
        if proc is not None:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)

    # ------------------------------------------------------------------ wire
    def _ask(
        self, request: dict[str, Any] | None, fds: tuple[int, ...] = (), timeout: float = 60.0
    ) -> dict[str, Any]:
        sock = self._sock
        if sock is None:
            raise OSError("the template is closed")
        if request is not None:
            socket.send_fds(sock, [json.dumps(request).encode()], list(fds))
        sock.settimeout(timeout)
        data = sock.recv(MAX_MESSAGE)
        if not data:
            raise OSError("the template ended")
        try:  # the template ran subject code at import: whatever it sends is checked
            answer = json.loads(data)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise OSError(f"the template sent a malformed answer ({data[:80]!r})")
        return answer

    def _preloaded(self) -> bool:
        """Read the template's second answer (the lock is held); False: it refuses to fork."""
        try:
            answer = self._ask(None, timeout=PRELOAD_TIMEOUT)
        except OSError as exc:
            self._refuse(f"the template stopped answering ({exc})")
            return False
        if not answer.get("ok"):
            self._refuse(str(answer.get("why") or "it could not import the subject"))
            return False
        self._ready = True
        return True

    def _refuse(self, why: str) -> None:
        self.refused = why
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()


# ---------------------------------------------------------------------- the template side
def _unforkable(declared_preload: bool) -> str | None:
    """Why forking this process now would be unsafe (None: it is safe)."""
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if others:
        return f"the subject's imports left Python threads running ({', '.join(others[:3])})"
    native = len(os.listdir("/proc/self/task"))
    if native > 1 and not declared_preload:
        return (
            f"the subject's imports started {native - 1} native thread(s); declare a contract "
            "'preload' if they are fork-safe"
        )
    return None


def _serve(sock: socket.socket) -> int:
    """Import, say what the subject declares and whether forking is safe, then fork hosts."""
    procs.become_subreaper()  # what a crashed host's subject started comes to us, not to init
    request = json.loads(sock.recv(MAX_MESSAGE) or b"{}")
    spec = request.get("subject") or {}
    try:
        from pytest_e2b_env.catalog import hostchild, quiet_imports  # everything a host imports, once

        quiet_imports.install()  # before the subject's imports: gradio's stub rewriting is skipped

        subject = hostchild.load_subject(spec["spec"], spec["kind"], spec.get("contract"))
    except ConfigError as exc:  # the message names the spec and the failure, as users read it
        sock.sendall(json.dumps({"ok": False, "why": str(exc)[:2000]}).encode())
        return 0
    except BaseException as exc:  # the subject's import may fail in any way
        said = (
            f"e2b_{spec.get('kind')}_subject={spec.get('spec')!r}: importing it raised {type(exc).__name__}"
        )
        sock.sendall(json.dumps({"ok": False, "why": f"{said}: {exc}"[:2000]}).encode())
        return 0
    sock.sendall(json.dumps({"ok": True, "contract": subject.contract.facts()}).encode())
    try:
        if subject.contract.preload is not None:
            subject.contract.preload()
    except BaseException as exc:  # hosts then import for themselves and meet it there
        sock.sendall(json.dumps({"ok": False, "why": f"{type(exc).__name__}: {exc}"[:500]}).encode())
        return 0
    gc.collect()
    gc.freeze()  # the imports live as long as every host: their collections skip them
    why = _unforkable(subject.contract.preload is not None)
    sock.sendall(json.dumps({"ok": why is None, "why": why}).encode())
    if why is not None:
        return 0
    children: set[int] = set()
    while True:
        fds = array.array("i")
        data, ancillary, _, _ = sock.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(3 * fds.itemsize))
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if not data:
            break
        request = json.loads(data)
        if request.get("op") == "fork" and len(fds) == 3:
            for stream in (sys.stdout, sys.stderr):  # nothing of the template's goes to the host's pipe
                with contextlib.suppress(BaseException):
                    stream.flush()
            pid = os.fork()
            if pid == 0:
                sock.close()
                os.dup2(fds[2], 1)
                os.dup2(fds[2], 2)
                _run_host(fds[0], fds[1], spec, subject)
            for fd in fds:
                os.close(fd)
            children.add(pid)
            sock.sendall(json.dumps({"pid": pid}).encode())
        elif request.get("op") == "status" and request.get("pid") in children:
            pid = int(request["pid"])
            _, status = os.waitpid(pid, 0)  # its pidfd said it ended: this does not block
            children.discard(pid)
            sock.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
        elif request.get("op") == "reap":
            _reap_adopted(children)
            sock.sendall(json.dumps({"ok": True}).encode())
        else:
            for fd in fds:
                os.close(fd)
            sock.sendall(json.dumps({"error": f"bad request {request.get('op')!r}"}).encode())
    for pid in children:  # the controller is gone: collect what ended, the rest end on their own
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    return 0


def _reap_adopted(hosts: set[int]) -> None:
    """Collect the orphans the template adopted that have ended (never a host: its status is asked for)."""
    for pid in procs.children(os.getpid()):
        if pid not in hosts and procs.state(pid) == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def _run_host(req_fd: int, rep_fd: int, spec: dict[str, Any], subject: Any) -> None:
    """The forked host: the spawned host's loop, then the exit a spawned host makes (never returns)."""
    code = 1
    try:
        from pytest_e2b_env.catalog.hostchild import serve

        code = serve(req_fd, rep_fd, loaded=(spec, subject))
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()  # what an interpreter's exit runs, as a spawned host's does
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)


def main(fd: int) -> int:
    """The template process: serve the controller until it closes its end of the socket."""
    try:
        return _serve(socket.socket(fileno=fd))
    except (BrokenPipeError, ConnectionResetError):
        return 0  # the controller closed its end first (the run ended mid-import): that is our end


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
