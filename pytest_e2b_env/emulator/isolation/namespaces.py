"""The namespaces level, host side: start sandbox inits, run commands inside them, kill them.

Each sandbox is one init process (see ``standalone/sandbox_init.py``) owning its own user, pid,
mount, ipc, uts and net namespaces. Without internet the net namespace has only ``lo``; with
internet it is owned by host root (sandbox root has no network privilege in it) and
``slirp4netns`` gives it outbound access through the host's sockets, host loopback excluded.
Commands are forked by the emulator straight into the sandbox's pid namespace (this thread's
``pid_for_children`` is switched for the fork), so ``proc.pid`` is the leader's host pid and the
emulator stays its parent; the child joins the other namespaces and becomes the sandbox account
before exec.
Killing the init makes the kernel kill every process of the pid namespace, daemons included.

Every init also holds the read end of one "lifeline" pipe whose write end only the emulator
holds: when the emulator dies (SIGKILL included) the pipe reaches EOF and every init exits.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import queue
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_e2b_env.errors import CleanupError, InfrastructureError
from pytest_e2b_env.standalone import assemble, frames
from pytest_e2b_env.standalone import linux as L
from pytest_e2b_env.standalone.fsops import remove_tree_quietly
from pytest_e2b_env.standalone.upper_layer import USER_UID

from . import owners, quota
from .api import Backend, Box, check_sandbox_id, check_user, envd_env, home_of
from .ids import Ids
from .nsfs import NamespaceFS
from .watchdog import PERIOD as WATCHDOG_PERIOD
from .watchdog import Watchdog, Watched

#: The builder and init of every sandbox of a backend, assembled into the backend's directory.
INIT_SCRIPT = ".sandbox-init.py"
NSENTER = shutil.which("nsenter") or "/usr/bin/nsenter"
ENV = "/usr/bin/env"
HELPER_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
NSENTER_FLAG = {"user": "user", "mnt": "mount", "net": "net", "ipc": "ipc", "uts": "uts"}
START_SECONDS = 30.0
#: Per-sandbox process cap: the host's pid space (32768 here) is shared by everyone.
MAX_PROCS = 1024
#: Longest wait for one files request to the init (every operation there is bounded).
REQUEST_SECONDS = 60.0
#: How long ``kill`` lets the init end the namespace itself (it takes milliseconds; its own bound
#: is ``sandbox_init.END_SECONDS``) before SIGKILL does.
END_WAIT = 1.5
#: Largest reply header accepted from an init (a listing at the entry cap fits).
REPLY_HEADER_MAX = 256 << 20
#: The user-space network stack of internet sandboxes (Debian package slirp4netns).
SLIRP4NETNS = shutil.which("slirp4netns") or "/usr/bin/slirp4netns"
NETWORK_SECONDS = 10.0


def _private_paths() -> list[str]:
    """Host paths that may hold trusted data: the emulator's cwd, this package, its checkout."""
    package = Path(__file__).resolve().parents[2]
    paths = {os.getcwd(), str(package)}
    if (package.parent / "pyproject.toml").exists():
        paths.add(str(package.parent))
    return sorted(paths)


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _readable(fd: int) -> bool:
    return L.readable(fd)


class Forker:
    """A thread that lives in one sandbox's pid namespace (and cgroups): what it forks is born there.

    A thread's namespace for the children it forks (``setns`` of a pid namespace) can be moved into
    a sandbox's but not always back: that needs capabilities in the user namespace owning the
    host's pid namespace, which an emulator in a user namespace of its own (not root) has not. So
    each sandbox gets one thread that enters once, never leaves, and forks its commands (the
    emulator stays their parent: ``proc.pid`` is the host pid). It starts no thread (the kernel
    refuses one while its namespace for children is not its own), and it ends with the sandbox.
    """

    def __init__(self, pidns: int, cgroups: Callable[[], None], leave: Callable[[], None], name: str) -> None:
        self._requests: queue.SimpleQueue[tuple[Callable[[], Any], list[Any], threading.Event] | None] = (
            queue.SimpleQueue()
        )
        started: list[BaseException | None] = []
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, args=(pidns, cgroups, leave, started, ready), name=name, daemon=True
        )
        self._thread.start()
        ready.wait()
        if started[0] is not None:
            self._thread.join()
            raise started[0]

    def _loop(
        self,
        pidns: int,
        cgroups: Callable[[], None],
        leave: Callable[[], None],
        started: list[BaseException | None],
        ready: threading.Event,
    ) -> None:
        try:
            cgroups()  # cgroup v1 membership is per thread: children are born in the sandbox's
            L.setns(pidns, L.CLONE_NEWPID)
        except BaseException as exc:
            started.append(exc)
            ready.set()
            return
        started.append(None)
        ready.set()
        while (request := self._requests.get()) is not None:
            work, answer, done = request
            try:
                answer.append((True, work()))
            except BaseException as exc:  # handed to the caller
                answer.append((False, exc))
            done.set()
        # Out of the sandbox's cgroups before the thread is joined: they are removed right after.
        with contextlib.suppress(OSError):
            leave()

    def call(self, work: Callable[[], Any]) -> Any:
        """Run ``work`` (a fork) on the thread and return its result (or raise its exception)."""
        answer: list[Any] = []
        done = threading.Event()
        self._requests.put((work, answer, done))
        done.wait()
        ok, value = answer[0]
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        """End the thread (idempotent); it leaves its cgroups as it ends."""
        if self._thread.is_alive():
            self._requests.put(None)
            self._thread.join(timeout=30)


class NamespaceBox(Box):
    """A running namespace sandbox."""

    def __init__(
        self,
        backend: NamespaceBackend,
        sandbox_id: str,
        directory: Path,
        envs: dict[str, str],
        sock: socket.socket,
        init_pid: int,
        internet: bool,
        network: str,
        cgroup: tuple[Path, ...] = (),
    ) -> None:
        self.sandbox_id = sandbox_id
        self.directory = directory
        self.init_pid = init_pid
        self.internet = internet
        #: "none" (lo only), "own" (own namespace + slirp4netns) or "host" (the host's namespace)
        self.network = network
        self._slirp: subprocess.Popen[bytes] | None = None
        self._cgroup = cgroup
        #: Whether the writable layer is on its own size-capped tmpfs (see ``quota``).
        self.disk_quota = False
        #: The id of the sandbox's root outside it (handed back to the backend once it is gone).
        self.base: int | None = None
        #: System directories seen read-only, as they are (no overlay: mounts below them are locked).
        self.read_only: list[str] = []
        self._backend = backend
        self._envs = dict(envs)
        self._sock = sock
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._killed = False
        self._poisoned = False
        self._next_id = 0
        self._forker: Forker | None = None
        self._pidfd = os.pidfd_open(init_pid)
        names = ["user", "mnt", "ipc", "uts", "pid"] + ([] if network == "host" else ["net"])
        self._ns = {
            name: os.open(f"/proc/{init_pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC) for name in names
        }
        if _readable(self._pidfd):
            # The pid was not our init any more when the namespaces were opened.
            self._close_fds()
            raise InfrastructureError(f"sandbox {sandbox_id} init died during start")
        try:
            self._forker = Forker(
                self._ns["pid"],
                lambda: backend.enter_cgroups(cgroup),
                backend.leave_cgroups,
                "sandbox-fork",  # no id: thread names can be read from /proc by anyone
            )
        except OSError as exc:
            self._close_fds()
            raise InfrastructureError(f"sandbox {sandbox_id}: cannot fork into it: {exc}") from None
        self._fs = NamespaceFS(self.request)

    @property
    def fs(self) -> NamespaceFS:
        """The sandbox's files."""
        return self._fs

    def request(
        self, header: dict[str, Any], data: bytes | None, max_data: int = frames.MAX_FRAME
    ) -> tuple[dict[str, Any], bytes | None]:
        """One round trip with the sandbox's init.

        The reply must repeat the request's id. A reply that does not, a timeout, or a broken
        frame poisons the channel: the socket is shut, which ends the init and so the sandbox,
        rather than ever pairing a later request with an earlier request's answer.
        """
        if not self._lock.acquire(timeout=REQUEST_SECONDS):
            raise InfrastructureError(
                f"sandbox {self.sandbox_id} init is busy: a files request waited {REQUEST_SECONDS:g}s"
            )
        try:
            if self._killed or self._poisoned:
                raise ProcessLookupError(errno.ESRCH, f"sandbox {self.sandbox_id} is not running")
            self._next_id += 1
            rid = self._next_id
            error: Exception | None = None
            try:
                self._sock.settimeout(REQUEST_SECONDS)
                frames.send(self._sock, {**header, "id": rid}, data)
                reply = frames.recv(self._sock, REPLY_HEADER_MAX, max_data)
                if reply is not None and reply[0].get("id") != rid:
                    got = reply[0].get("id")
                    reply, error = None, ValueError(f"reply to request {got!r}, expected {rid}")
            except (OSError, ValueError) as exc:  # TimeoutError included
                reply, error = None, exc
            if reply is None:
                self._poison()
        finally:
            self._lock.release()
        if reply is None:
            if _readable(self._pidfd):
                raise ProcessLookupError(errno.ESRCH, f"sandbox {self.sandbox_id} is not running")
            raise InfrastructureError(f"sandbox {self.sandbox_id} init stopped answering ({error or 'EOF'})")
        return reply

    def _poison(self) -> None:
        """The channel is out of step or silent: shut it so the init (and the sandbox) ends."""
        self._poisoned = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def spawn(
        self, cmd: str, envs: dict[str, str], cwd: str, user: str = "user", stdin: bool = False
    ) -> subprocess.Popen[bytes]:
        """Fork ``/bin/bash -l -c cmd`` into the sandbox as ``user``."""
        check_user(user)
        home = home_of(user)
        cwd = self._fs.check_dir(cwd or home, user)
        env = envd_env(user, home, self._envs, envs)
        uid = USER_UID if user == "user" else 0
        # nsenter joins every namespace but pid through fds we pass, then becomes the account;
        # env --chdir resolves cwd inside the sandbox (nsenter --wd would resolve it on the host).
        # nsenter runs as host root with a fixed environment: the command's variables (an
        # LD_PRELOAD among them) only take effect once env runs inside the sandbox as the account.
        # No preexec_fn: the fork stays a cheap vfork (a Python preexec_fn costs ~15 ms here).
        fds = [self._ns[name] for name, _ in self._join_order()]
        argv = [
            NSENTER,
            *(f"--{NSENTER_FLAG[name]}=/proc/self/fd/{self._ns[name]}" for name, _ in self._join_order()),
            f"--setuid={uid}",
            f"--setgid={uid}",
            "--",
            ENV,
            "-i",
            f"--chdir={cwd}",
            "--",
            *(f"{key}={value}" for key, value in env.items() if key and "=" not in key),
            "/bin/bash",
            "-l",
            "-c",
            cmd,
        ]
        with self._lock:
            if self._killed:
                raise ProcessLookupError(errno.ESRCH, f"sandbox {self.sandbox_id} is not running")
            assert self._forker is not None  # made in __init__, dropped only once killed
            argv = [*self._backend.command_prefix(self._cgroup), *argv]
            proc = self._forker.call(lambda: self._popen(argv, stdin, fds))
            self._procs = [p for p in self._procs if p.returncode is None]
            self._procs.append(proc)
        return proc

    def _popen(self, argv: list[str], stdin: bool, fds: list[int]) -> subprocess.Popen[bytes]:
        try:
            return subprocess.Popen(
                argv,
                env=HELPER_ENV,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                pass_fds=fds,
            )
        except OSError as exc:
            if _readable(self._pidfd):  # fork into a pid namespace whose init died: ENOMEM
                raise ProcessLookupError(errno.ESRCH, f"sandbox {self.sandbox_id} is not running") from None
            raise InfrastructureError(f"sandbox {self.sandbox_id}: cannot start a command: {exc}") from exc

    def _join_order(self) -> list[tuple[str, int]]:
        order = [("user", L.CLONE_NEWUSER), ("mnt", L.CLONE_NEWNS)]
        if self.network != "host":
            order.append(("net", L.CLONE_NEWNET))
        return [*order, ("ipc", L.CLONE_NEWIPC), ("uts", L.CLONE_NEWUTS)]

    def attach_network(self, lifeline: int) -> None:
        """Give the sandbox's own network namespace outbound access through slirp4netns.

        ``--disable-host-loopback`` refuses the gateway alias of the host's 127.0.0.1; packets
        crafted to other loopback addresses cannot be sent, because sandbox root has no raw
        socket or route privilege in a namespace owned by host root. slirp4netns runs in its
        own mount namespace with no capabilities and a seccomp filter, and exits when the
        lifeline closes (the emulator died) or when ``kill()`` ends it.
        """
        ready_r, ready_w = os.pipe()
        try:
            net = self._ns["net"]
            self._slirp = subprocess.Popen(
                [
                    SLIRP4NETNS,
                    "--configure",
                    "--mtu=65520",
                    "--disable-host-loopback",
                    "--enable-sandbox",
                    "--enable-seccomp",
                    f"--ready-fd={ready_w}",
                    f"--exit-fd={lifeline}",
                    "--netns-type=path",
                    f"/proc/self/fd/{net}",
                    "eth0",
                ],
                env=HELPER_ENV,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(ready_w, lifeline, net),
            )
            os.close(ready_w)
            ready_w = -1
            ok = L.readable(ready_r, NETWORK_SECONDS) and os.read(ready_r, 1) == b"1"
        except OSError as exc:
            raise InfrastructureError(f"sandbox {self.sandbox_id}: cannot start slirp4netns: {exc}") from None
        finally:
            _close_quietly(ready_r)
            if ready_w >= 0:
                _close_quietly(ready_w)
        if not ok:
            code = self._slirp.poll()
            raise InfrastructureError(
                f"sandbox {self.sandbox_id}: slirp4netns did not configure the network within "
                f"{NETWORK_SECONDS:g}s (exit code {code})"
            )

    def _stop_network(self) -> None:
        if self._slirp is not None:
            with contextlib.suppress(ProcessLookupError):
                self._slirp.kill()  # SIGKILL: certain; the exit itself is awaited in the background
            self._backend.reap_later(self._slirp)

    def alive(self) -> bool:
        """True until killed, until the init died or its channel was poisoned."""
        return not self._killed and not self._poisoned and not _readable(self._pidfd)

    def kill(self, timeout: float = 10.0) -> None:
        """End the init, wait until the pid namespace is empty, remove the files.

        Closing the control channel first lets the init kill and reap the namespace itself, so
        the sandbox's CPU is counted up the emulator's tree (``sandbox_init.end_all``); SIGKILL
        follows at once if the init has not ended within :data:`END_WAIT`.
        """
        with self._lock:
            if self._killed:
                return
            self._killed = True
            procs = list(self._procs)
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        polite = time.monotonic() + END_WAIT
        deadline = polite + timeout
        killed = False
        # The init's exit completes only once every process of its namespace is reaped; the
        # commands are our children, so reap them while waiting.
        while not L.readable(self._pidfd, 0.005):
            for proc in procs:
                proc.poll()
            now = time.monotonic()
            if not killed and now > polite:
                killed = True
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            if now > deadline:
                raise CleanupError(f"sandbox {self.sandbox_id} init survived SIGKILL", [self.sandbox_id])
        for proc in procs:
            proc.poll()
        self._stop_network()  # its tap device keeps the namespace alive until it exits
        self._close_fds()
        self._backend.release_cgroup(self._cgroup)
        self._backend.forget(self.sandbox_id)
        if self.base is not None:
            self._backend.ids.give_back(self.base)
        self._backend.discard(self.directory)

    def watched(self) -> Watched:
        """What the memory watchdog reads of this sandbox."""
        with self._lock:
            commands = tuple(p.pid for p in self._procs if p.returncode is None)
        # The sandbox's root is its tmpfs (or an overlay on it, which reports its upper layer's use).
        files = f"/proc/{self.init_pid}/root" if self.disk_quota else None
        return Watched(self.directory.name, self.init_pid, commands, files)

    def _close_fds(self) -> None:
        if self._forker is not None:
            self._forker.stop()
        for fd in [*self._ns.values(), self._pidfd]:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._ns.clear()
        self._sock.close()


class NamespaceBackend(Backend):
    """Starts namespace sandboxes (host root required)."""

    level = "namespaces"
    #: Most processes one sandbox may have at once (all its users together; see ``sandbox_init.make_userns``).
    max_procs = MAX_PROCS

    def __init__(
        self,
        root: Path,
        reason: str,
        memory_mb: int = quota.DEFAULT_MEMORY_MB,
        disk_mb: int = quota.DEFAULT_DISK_MB,
        aggregate_procs: int | None = None,
        aggregate_memory_mb: int | None = None,
    ) -> None:
        self.root = root
        self.reason = reason
        #: Held until close (or death): what is named after this root is swept only once it is free.
        self._owner = owners.Owner(root)
        # The builder runs assembled (its standalone imports embedded) and isolated: under -I
        # nothing but the standard library is importable, not even the script's own directory.
        init = root / INIT_SCRIPT
        init.write_text(assemble.script("sandbox_init"), encoding="utf-8")
        self._life_r, self._life_w = os.pipe()  # both close-on-exec; the read end is passed explicitly
        # A Python-level fork of the emulator must not keep the lifeline open (exec closes it).
        # The hook cannot be unregistered, so close() empties the holder before the fd is freed.
        self._fork_guard = [self._life_w]
        guard = self._fork_guard

        def drop_lifeline() -> None:
            for fd in guard:
                _close_quietly(fd)

        os.register_at_fork(after_in_child=drop_lifeline)
        #: How internet sandboxes get out: their own namespace through slirp4netns, or, without
        #: slirp4netns, the host's namespace (host loopback and other sandboxes reachable).
        self.internet_network = "own" if os.access(SLIRP4NETNS, os.X_OK) else "host"
        self.memory_mb, self.disk_mb = memory_mb, disk_mb
        self.cpus = quota.DEFAULT_CPUS
        #: Each sandbox's ids: a range of the host's, or a few of the emulator's user namespace.
        self.ids = Ids()
        self.limits = quota.Limits(
            memory_mb=memory_mb + disk_mb,  # the layer's files are in memory (tmpfs)
            cpus=quota.DEFAULT_CPUS,
            # sized from what the host has free now, unless given (tests)
            aggregate_memory_mb=aggregate_memory_mb or quota.aggregate_memory_mb(),
            aggregate_procs=aggregate_procs or quota.aggregate_procs(),
        )
        self._cgroups = quota.open_cgroups(
            root.name, self.limits, lambda name: owners.dead(root.parent, name)
        )
        self._watchdog: Watchdog | None = None
        if not self._cgroups.has("memory"):
            self._watchdog = Watchdog(
                self.limits.memory_mb << 20, self.limits.aggregate_memory_mb << 20, self._watched
            ).start()
        #: Set by the probe: whether the sandbox's writable layer got its own size-capped tmpfs.
        self.disk_quota = False
        self._private = _private_paths()
        self._boxes: dict[str, NamespaceBox] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._ctl_lock = threading.Lock()
        self._ctl, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._zygote = subprocess.Popen(
                [sys.executable, "-I", "-S", str(init), str(zygote_end.fileno()), str(self._life_r)],
                pass_fds=(zygote_end.fileno(), self._life_r),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        finally:
            zygote_end.close()
        self._trash = root / ".trash"
        self._trash.mkdir(mode=0o700, exist_ok=True)
        self._doomed: queue.SimpleQueue[Path | subprocess.Popen[bytes] | None] = queue.SimpleQueue()
        self._remover = threading.Thread(target=self._remove_loop, name="isolation-trash", daemon=True)
        self._remover.start()

    def _remove_loop(self) -> None:
        # Deleting a sandbox's files costs tens of ms on this disk; kill() only renames them away.
        # Sandbox-shaped trees (any depth, odd names, symlinks) must never end this thread; a
        # killed slirp4netns takes tens of ms to exit (its tap device and the namespace are torn
        # down on the way): reaped here too.
        while (item := self._doomed.get()) is not None:
            if isinstance(item, subprocess.Popen):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    item.wait(timeout=60)
            else:
                remove_tree_quietly(item)

    def _watched(self) -> list[Watched]:
        with self._lock:
            boxes = list(self._boxes.values())
        return [box.watched() for box in boxes if box.alive()]

    def reap_later(self, helper: subprocess.Popen[bytes]) -> None:
        """Wait for a killed helper process in the background."""
        self._doomed.put(helper)

    def describe_quotas(self) -> str:
        """The per-sandbox and aggregate bounds in force, for the level's reason."""
        limits = self.limits
        if self.disk_quota:
            disk = f"disk quota {self.disk_mb} MiB and {quota.FILES} files (own tmpfs)"
        else:
            disk = "no disk quota (tmpfs without user xattrs before Linux 6.6)"
        by_cgroup = self._cgroups.describe(limits)
        memory = by_cgroup.get("memory") or (
            f"memory quota {limits.memory_mb} MiB incl. files, {limits.aggregate_memory_mb} MiB for all "
            f"sandboxes together (watchdog on resident memory and files, every {WATCHDOG_PERIOD:g} s: "
            f"{self._cgroups.why.get('memory', 'no memory cgroup')})"
        )
        cpu = by_cgroup.get("cpu") or f"no CPU quota ({self._cgroups.why.get('cpu', 'no cpu cgroup')})"
        from .rootless import entered

        outer = entered()
        procs = f"{self.max_procs} processes each"
        if "pids" in by_cgroup:
            procs += f", {by_cgroup['pids']}"
        elif outer is not None and outer.nproc is not None:
            procs += (
                f", {outer.nproc} for the user's processes together, sandboxes included "
                "(RLIMIT_NPROC of the emulator's user namespace)"
            )
        else:
            procs += (
                f", no cap for all sandboxes together ({self._cgroups.why.get('pids', 'no pids cgroup')})"
            )
        return f"{disk}; {memory}; {cpu}; {procs}"

    def enter_cgroups(self, cgroups: tuple[Path, ...]) -> None:
        """Move the calling thread into ``cgroups`` for good (a sandbox's forking thread)."""
        if cgroups:
            self._cgroups.enter_thread(cgroups)

    def command_prefix(self, cgroups: tuple[Path, ...]) -> list[str]:
        """What a command's argv starts with so that it joins ``cgroups`` itself (cgroup v2)."""
        return self._cgroups.command_prefix(cgroups)

    def leave_cgroups(self) -> None:
        """Move the calling thread back to the emulator's own cgroups."""
        self._cgroups.leave_thread()

    def release_cgroup(self, cgroups: tuple[Path, ...]) -> None:
        """Remove a dead sandbox's cgroups."""
        with contextlib.suppress(OSError):
            self._cgroups.remove(cgroups)

    def discard(self, directory: Path) -> None:
        """Move a dead sandbox's files out of the way at once and delete them in the background."""
        target = self._trash / directory.name
        try:
            directory.rename(target)
        except OSError:
            remove_tree_quietly(directory)
            return
        self._doomed.put(target)

    def start(
        self, sandbox_id: str, internet: bool = True, envs: dict[str, str] | None = None
    ) -> NamespaceBox:
        """Build the sandbox (one fork of the zygote, tens of ms); the box is ready to run commands."""
        if self._closed:
            raise RuntimeError("the isolation backend is closed")
        check_sandbox_id(sandbox_id)
        # Named by a token, not the id: the paths show in /proc/<pid>/mountinfo and cgroup names,
        # which any local user may read, and sandbox ids are not theirs to learn.
        directory = self.root / secrets.token_hex(8)
        try:
            base, idmap = self.ids.take()
        except OSError as exc:
            raise InfrastructureError(f"sandbox {sandbox_id} could not start: {exc}") from None
        directory.mkdir(mode=0o700)
        # Only the sandbox's own root (who mounts the overlay from these paths) and host root
        # may enter: other host accounts never reach a sandbox's files.
        os.chown(directory, base, base)
        for sub in ("lower", "root", "rw"):
            (directory / sub).mkdir(mode=0o755)
        try:
            cgroup = self._cgroups.create(directory.name)
        except OSError as exc:
            remove_tree_quietly(directory)
            raise InfrastructureError(f"sandbox {sandbox_id}: cannot create its cgroups: {exc}") from None
        parent, child = socket.socketpair()
        box: NamespaceBox | None = None
        cfg = {
            "base": base,
            "max_procs": self.max_procs,
            "private": self._private,
            "internet": internet,
            "network": self.internet_network if internet else "none",
            **{sub: str(directory / sub) for sub in ("lower", "root", "rw")},
            "upper": str(directory / "rw" / "upper"),
            "work": str(directory / "rw" / "work"),
            "idmap": idmap,
            # Inside a user namespace, / cannot be one overlay's lower layer (the mounts below it
            # are locked to it): a skeleton root on the sandbox's tmpfs, an overlay per directory.
            "skeleton": str(directory / "rw" / "root") if self.ids.nested else None,
            "disk_mb": self.disk_mb,
            "files": quota.FILES,
            "cgroups": [str(path) for path in cgroup],
            "oom_first": self._cgroups.has("memory") and not self.ids.nested,
        }
        try:
            try:
                with self._ctl_lock:
                    socket.send_fds(self._ctl, [json.dumps(cfg).encode()], [child.fileno()])
            except OSError as exc:
                raise InfrastructureError(
                    f"sandbox {sandbox_id} could not start: the builder is gone ({exc})"
                ) from None
            finally:
                child.close()
            parent.settimeout(START_SECONDS)
            try:
                reply = frames.recv(parent)
            except (OSError, ValueError) as exc:  # TimeoutError included
                raise InfrastructureError(f"sandbox {sandbox_id} could not start: {exc!r}") from None
            if reply is None or "error" in reply[0]:
                why = reply[0]["error"] if reply else "the builder exited without a word"
                raise InfrastructureError(f"sandbox {sandbox_id} could not start: {why}")
            parent.settimeout(120)
            network = str(cfg["network"])
            box = NamespaceBox(
                self,
                sandbox_id,
                directory,
                envs or {},
                parent,
                int(reply[0]["init_pid"]),
                internet,
                network,
                cgroup,
            )
            box.disk_quota = bool(reply[0].get("disk_quota"))
            box.base = base
            box.read_only = [str(name) for name in reply[0].get("read_only") or ()]
            if network == "own":
                try:
                    box.attach_network(self._life_r)
                except BaseException:
                    box.kill()
                    raise
        except BaseException:
            parent.close()  # an init that did start exits when its socket closes
            remove_tree_quietly(directory)
            if box is None:  # a started box released them in kill()
                self.release_cgroup(cgroup)
                self.ids.give_back(base)
            raise
        with self._lock:
            self._boxes[sandbox_id] = box
        return box

    def forget(self, sandbox_id: str) -> None:
        """Drop a killed box from the registry."""
        with self._lock:
            self._boxes.pop(sandbox_id, None)

    def close(self) -> None:
        """Kill every sandbox, cut the lifeline, remove the backend's directory."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            boxes = list(self._boxes.values())
        unresolved: list[str] = []
        for box in boxes:
            try:
                box.kill()
            except CleanupError as exc:
                unresolved.extend(exc.ids)
        self._ctl.close()
        self._fork_guard.clear()
        for fd in (self._life_w, self._life_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._zygote.wait(timeout=10)
        if self._watchdog is not None:
            self._watchdog.stop()
        self._cgroups.close()
        self._doomed.put(None)
        self._remover.join(timeout=60)
        remove_tree_quietly(self.root)
        self._owner.release()
        if unresolved:
            raise CleanupError("sandboxes survived backend close", unresolved)


def _static_check(unprivileged: str | None = None) -> str | None:
    """Why namespaces cannot work here, or None (``unprivileged``: why this process is not root)."""
    if sys.platform != "linux":
        return f"platform {sys.platform} has no Linux namespaces"
    if not L.supported_arch():
        return f"architecture {platform.machine()} is not supported"
    if os.geteuid() != 0:
        from .rootless import static_problem

        why = (
            unprivileged
            or static_problem()
            or (
                "this process did not enter a user namespace of its own (only a process without threads "
                "can): the emulator's own process does, start it with Emulator() or pytest-e2b-env emulator"
            )
        )
        return f"not root (euid {os.geteuid()}): {why}"
    try:
        limit = int(Path("/proc/sys/user/max_user_namespaces").read_text())
    except OSError:
        return "user namespaces are not available (/proc/sys/user/max_user_namespaces missing)"
    if limit < 1:
        return "user namespaces are disabled (user.max_user_namespaces = 0)"
    for tool in (NSENTER, ENV):
        if not os.access(tool, os.X_OK):
            return f"{tool} is missing (install util-linux and coreutils)"
    return None


def open_backend(
    root: Path,
    memory_mb: int = quota.DEFAULT_MEMORY_MB,
    disk_mb: int = quota.DEFAULT_DISK_MB,
    unprivileged: str | None = None,
) -> tuple[NamespaceBackend | None, str]:
    """A working namespaces backend (proven by starting and killing a probe sandbox), or the reason not."""
    why = _static_check(unprivileged)
    if why:
        return None, why
    backend = NamespaceBackend(root, "", memory_mb, disk_mb)
    try:
        probe = backend.start("probe-" + os.urandom(4).hex(), internet=False)
        backend.disk_quota = probe.disk_quota
        try:
            proc = probe.spawn("id -u", {}, "/home/user", "user", False)
            out, err = proc.communicate(timeout=START_SECONDS)
            if out != b"1000\n":
                raise InfrastructureError(f"a probe command failed: {err.decode(errors='replace')[-300:]}")
        finally:
            probe.kill()
    except (OSError, InfrastructureError) as exc:
        backend.close()
        return None, f"probe sandbox failed: {exc}"
    network = _probe_network(backend)
    if backend.ids.nested:
        root_fs = (
            "a copy-on-write overlay per system directory (the host's files appear owned by nobody and "
            "read-only to sandbox root; no sudo)"
        )
        if probe.read_only:
            root_fs += f", {', '.join('/' + d for d in probe.read_only)} read-only (mounts below)"
    else:
        root_fs = "an idmapped copy-on-write root"
    backend.reason = (
        f"namespaces level: {backend.ids.describe()}, pid, mount, net, ipc, uts namespaces and "
        f"{root_fs}; {network}; {backend.describe_quotas()} (kernel {platform.release()})"
    )
    return backend, backend.reason


def _probe_network(backend: NamespaceBackend) -> str:
    """Prove internet sandboxes get their own network (else fall back to the host's); describe it."""
    fallback = "internet sandboxes share the host's network namespace (host loopback reachable)"
    if backend.internet_network == "host":
        return f"{fallback}: {SLIRP4NETNS} is missing (apt-get install -y slirp4netns)"
    try:
        backend.start("probe-" + os.urandom(4).hex(), internet=True).kill()
    except (OSError, InfrastructureError) as exc:
        backend.internet_network = "host"
        return f"{fallback}: slirp4netns failed ({exc})"
    return "internet sandboxes get their own network namespace through slirp4netns (no host loopback)"
