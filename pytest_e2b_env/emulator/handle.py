"""``Emulator``: start (or attach to) a local emulator and drive its control endpoint.

The server always runs in a child process (``python -m pytest_e2b_env.cli emulator``), so the
CLI, the plugin, xdist workers and tests share one code path, and the child dies with its
parent (PR_SET_PDEATHSIG) taking every sandbox with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from pytest_e2b_env.emulator.control_client import ControlClient
from pytest_e2b_env.emulator.limits import Limits
from pytest_e2b_env.errors import EmulatorError, FaultRuleError
from pytest_e2b_env.settings import emulator_child_env, parse_sdk_env, sdk_env
from pytest_e2b_env.wire import CONTROL_HEADER

_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


class Faults:
    """Fault rules of one emulator (see ``pytest_e2b_env.wire.faults.FaultRule``)."""

    def __init__(self, emulator: Emulator) -> None:
        self._emulator = emulator

    def add(
        self,
        route: str = "*",
        answer: dict[str, Any] | None = None,
        times: int | None = 1,
        sandbox: str | None = None,
        contains: str | None = None,
        after: int = 0,
    ) -> str:
        """Add a rule; return its id. ``answer`` e.g. ``{"status": 429, "retry_after": 1}``."""
        if answer is None:
            raise FaultRuleError('faults.add needs an answer, e.g. answer={"status": 503}')
        rule = {"route": route, "answer": answer, "times": times, "sandbox": sandbox, "contains": contains}
        rule["after"] = after
        return str(self._emulator._control("POST", "/faults", rule, rejected=FaultRuleError)["id"])

    def clear(self) -> None:
        """Remove every rule."""
        self._emulator._control("DELETE", "/faults")

    def list(self) -> list[dict[str, Any]]:
        """Every rule with its counters (``seen``, ``fired``)."""
        rules: list[dict[str, Any]] = self._emulator._control("GET", "/faults")
        return rules


class Emulator:
    """A local E2B emulator: ``with Emulator() as emu:`` then point the SDK at ``emu.sdk_env()``.

    ``isolation`` forces ``"namespaces"`` or ``"process"`` (default: the best available);
    ``limits`` overrides caps of :class:`~pytest_e2b_env.emulator.limits.Limits` by field name
    (e.g. ``{"file_bytes": 1 << 20}``).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        isolation: str | None = None,
        startup_timeout: float = 30.0,
        limits: dict[str, Any] | None = None,
    ) -> None:
        try:
            self.limits = Limits.build(limits)
        except ValueError as exc:
            raise EmulatorError(str(exc)) from None
        self.host = host
        self.port = port
        self.isolation_request = isolation
        self.startup_timeout = startup_timeout
        self.url = ""
        self.api_key = ""
        self.isolation = ""
        self.isolation_reason = ""
        self.faults = Faults(self)
        self._proc: subprocess.Popen[bytes] | None = None
        self._owned = True
        #: the control API's own key (None when attached without one: the API key guards it)
        self._control_key: str | None = None
        #: kept connections to the control API (made at the first call, dropped by stop())
        self._client: ControlClient | None = None

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def connect(cls, url: str, api_key: str, control_key: str | None = None) -> Emulator:
        """Attach to a running target's control API (e.g. from an xdist worker or a case host).

        ``url`` is an emulator, or a fault proxy serving the same API (then ``control_key`` is the
        proxy's own key and ``api_key`` the upstream E2B key the SDK uses). ``stop()`` leaves the
        target running.
        """
        emu = cls()
        emu.url, emu.api_key, emu._owned = url.rstrip("/"), api_key, False
        emu._control_key = control_key
        info = emu._control("GET", "/info")
        emu.isolation, emu.isolation_reason = info["isolation"], info["reason"]
        return emu

    def start(self) -> Emulator:
        """Start the server child and wait for its announcement."""
        if self._proc is not None or not self._owned:
            return self
        cmd = [
            sys.executable,
            "-m",
            "pytest_e2b_env.cli",  # the console script's own entry: one code path for users and us
            "emulator",
            "--host",
            self.host,
            "--port",
            str(self.port),
        ]
        cmd += ["--die-with-parent", "--limits", self.limits.to_json()]
        if self.isolation_request:
            cmd += ["--isolation", self.isolation_request]
        cmd += ["--control-key-stdin"]
        env = emulator_child_env(os.environ, owner_pid=os.getpid())
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child; closed in stop()
        # The control API gets a key of its own, never the API key code under test holds. It goes
        # over a pipe: an environment variable or argument would be readable in /proc by anyone.
        self._control_key = secrets.token_urlsafe(32)
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            close_fds=True,
            # A terminal's Ctrl-C goes to the process that owns this emulator, which stops it in
            # order (sandboxes first); the emulator still ends with its owner (ENV_EMULATOR_OWNER).
            start_new_session=True,
        )
        try:
            assert self._proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                self._proc.stdin.write(self._control_key.encode() + b"\n")
                self._proc.stdin.close()
            self._read_announcement()
        except BaseException:
            self.stop()
            raise
        return self

    def _read_announcement(self) -> None:
        assert self._proc is not None
        assert self._proc.stdout is not None
        values: dict[str, str] = {}
        deadline = time.monotonic() + self.startup_timeout
        buffer = b""
        fd = self._proc.stdout.fileno()
        while "isolation" not in values:
            left = deadline - time.monotonic()
            if left <= 0:
                raise EmulatorError(
                    f"the emulator did not start within {self.startup_timeout:g}s{self._stderr_tail()}"
                )
            # poll, not select: the caller may hold more than 1024 descriptors
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            if not poller.poll(min(left, 0.5) * 1000):
                if self._proc.poll() is not None:
                    raise EmulatorError(
                        f"the emulator exited with {self._proc.returncode}{self._stderr_tail()}"
                    )
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                self._proc.wait(timeout=5)
                raise EmulatorError(f"the emulator exited with {self._proc.returncode}{self._stderr_tail()}")
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                line = raw.decode()
                if line.startswith("# isolation="):
                    level, _, reason = line[len("# isolation=") :].partition(": ")
                    values["isolation"], values["reason"] = level, reason
                elif "=" in line:
                    key, _, value = line.partition("=")
                    values[key] = value
        self.url, self.api_key = parse_sdk_env(values)
        self.isolation, self.isolation_reason = values["isolation"], values["reason"]

    def _stderr_tail(self) -> str:
        with contextlib.suppress(OSError, AttributeError):
            self._stderr.seek(0)
            lines = self._stderr.read().decode(errors="replace").strip().splitlines()
            if lines:
                return f": {lines[-1]}"
        return ""

    def stop(self) -> None:
        """SIGTERM the server (it kills every sandbox), wait, SIGKILL if it hangs."""
        self._close_client()
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
        with contextlib.suppress(OSError, AttributeError):
            self._stderr.close()

    def _close_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    @property
    def pid(self) -> int | None:
        """The server process id (None when attached or stopped)."""
        return self._proc.pid if self._proc is not None else None

    def close(self) -> None:
        """The same as :meth:`stop` (the ``target.Backend`` name)."""
        self.stop()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ queries
    @property
    def control_key(self) -> str:
        """The key of the control API: its own random key when this process started the emulator,
        the one given to :meth:`connect`, else (an emulator started by hand) its API key."""
        return self._control_key or self.api_key

    def sdk_env(self) -> dict[str, str]:
        """The env vars that point the e2b SDK here."""
        return sdk_env(self.url, self.api_key)

    def sdk_opts(self) -> dict[str, str]:
        """The same as keyword arguments: ``Sandbox.create(**emu.sdk_opts())``."""
        return {"api_key": self.api_key, "api_url": self.url, "sandbox_url": self.url}

    def sandboxes(self) -> list[dict[str, Any]]:
        """The live sandboxes (for leak checks)."""
        rows: list[dict[str, Any]] = self._control("GET", "/sandboxes")
        return rows

    def kill_all(self) -> list[str]:
        """Kill every sandbox; return their ids."""
        return list(self._control("POST", "/sandboxes/kill")["killed"])

    def ledger_mark(self) -> int:
        """A mark to pass to :meth:`ledger` to see only later entries."""
        return int(self._control("GET", "/ledger/mark")["mark"])

    def creates_in_flight(self) -> int:
        """Create requests received and not yet answered (their ledger entries are to come)."""
        return int(self._control("GET", "/ledger/mark")["creating"])

    def ledger(self, since: int = 0) -> list[dict[str, Any]]:
        """Ledger entries (``t, method, route, sandbox_id, status, op, detail``) since a mark."""
        rows: list[dict[str, Any]] = self._control("GET", f"/ledger?since={int(since)}")
        return rows

    def _control(
        self, method: str, path: str, body: Any = None, rejected: type[Exception] | None = None
    ) -> Any:
        if not self.url:
            raise EmulatorError("the emulator is not running; use `with Emulator() as emu:` or emu.start()")
        client = self._client  # one reference: another thread's stop() may drop the attribute
        if client is None:
            client = self._client = ControlClient(self.url, timeout=30)
        data = None if body is None else json.dumps(body).encode()
        headers = {CONTROL_HEADER: self.control_key}
        if data is not None:
            headers["Content-Type"] = "application/json"
        target = f"/_emulator{path}"
        try:
            try:
                status, raw = client.request(method, target, data, headers)
            except ConnectionResetError:
                if method != "GET":
                    raise
                # A read the loaded emulator reset before answering: asked once more (a stopped
                # emulator refuses that too, and the error below says so).
                time.sleep(0.2)
                status, raw = client.request(method, target, data, headers)
        except OSError as exc:
            raise EmulatorError(
                f"emulator control {method} {path} failed: {exc}; is it still running?"
            ) from None
        if status >= 400:
            detail = raw.decode(errors="replace")
            with contextlib.suppress(ValueError, AttributeError):
                detail = json.loads(detail).get("message", detail)
            if status == 400 and rejected is not None:  # the server validated the body and said why
                raise rejected(detail) from None
            raise EmulatorError(f"emulator control {method} {path} answered {status}: {detail}")
        return json.loads(raw) if raw else None
