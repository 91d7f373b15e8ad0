"""In-sandbox runner: runs candidate programs on each test input, every case isolated.

This module is uploaded to each worker once, assembled (``linux`` embedded: see
``standalone/assemble.py``), and runs there as sandbox root: persistent, in the interpreter its
zygote is forked from (``ZYGOTE_BOOT``), or one-shot under ``/usr/bin/python3 -I -B -S``
(standard library only; it never imports pytest_e2b_env). One invocation evaluates one
candidate, or a batch of them side by side: the host sends a header line and the payload on
stdin (a heredoc in the same command, so a batch costs one round trip) and reads one JSON line
from stdout. Expected outputs never come here; the host grades. Each program lies in its own
directory under ``jobs`` (0711: a case cannot list its neighbours').

Each case runs in a fresh process tree:

* fork A (root): ``unshare`` mount, pid, net, ipc and uts namespaces, then fork B;
* B is pid 1 of the new pid namespace, in a session of its own (``kill(0)`` reaches no other
  case): private mount propagation, the whole mount tree read-only, a fresh ``/proc``,
  private tmpfs ``/tmp`` and ``/dev/shm`` (scratch), rlimits (NPROC, FSIZE, AS, CPU, CORE,
  NOFILE, MSGQUEUE), capability bounding set emptied, a seccomp
  filter (no new namespaces, no keyrings, no memory outside the address-space budget),
  uid/gid 65534 with no groups, ``no_new_privs``, then it becomes ``python3 -I -B solution.py``
  with the case input on stdin (a memfd, so a program that never reads stdin cannot block us);
* A enforces the deadline (the program's own time: wall time less the time it waited for a CPU,
  so a loaded host does not fail correct code): SIGKILL to B kills every process of the namespace,
  ``setsid`` daemons included, because B is its pid 1.

Setup failures are reported through a close-on-exec pipe (empty on a successful exec), so a
broken worker is an infrastructure error and never a candidate's 0.

**The zygote** (``isolation.zygote``, the default). An interpreter start costs about 11 ms of CPU,
most of a short case's. So the runner starts, before it reads any request, one pristine
``python3 -I -B`` (the zygote: it has imported what a fresh interpreter imports, then this
module's case machinery, and it never receives a program, an input or a nonce), and A is forked
from it instead of from the runner. B, its set-up done, becomes the program in place of the exec:
``sys.modules`` and the import caches as they were when the zygote started, a new ``__main__``,
``sys.argv``, the exit status, the traceback and the interpreter shutdown as CPython's own (see
:class:`_Program`); what a program can still tell apart is listed in docs/reward.md. A case's
program and input reach B alone, through its ``go`` socket, exactly as a warm case's do. The
zygote also holds copies of a few standard-library modules (:data:`PRELOAD`), each imported alone
before any request, which a program gets at its first import of one when a fresh import would
give it exactly that copy. Without ``isolation.zygote`` every case execs a fresh interpreter.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import errno
import functools
import gc
import json
import marshal
import os
import resource
import select
import signal
import socket
import sys
import time

from . import linux as L

PYTHON = "/usr/bin/python3"
HOME = os.path.dirname(os.path.abspath(__file__))
#: This module's code object (run as a script, the assembled runner): the zygote runs it again.
_MODULE_CODE = sys._getframe().f_code
INBOX = os.path.join(HOME, "inbox")  # root-only uploads (protocol.INBOX_DIR)
SETUP_SECONDS = 10.0
#: The environment of every case's interpreter (and of the zygote, which becomes each program).
CASE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp", "TMPDIR": "/tmp"}

# The seccomp filter of every case: the system calls it refuses (their numbers per architecture
# are in ``linux.SYSCALLS``). Why each is refused:
# * unshare, setns, clone with any CLONE_NEW* flag: a user namespace of its own gives the
#   program every capability over new mounts (a tmpfs of any size, past the scratch limit);
# * clone3: its flags sit behind a pointer a filter cannot read; ENOSYS makes libc fall
#   back to clone, whose flags it can;
# * add_key, request_key, keyctl: the user and user-session keyrings belong to uid 65534
#   of the worker, not to the case, so they would carry data from one case (or candidate) to
#   the next;
# * memfd_create, memfd_secret, shmget, msgget, semget, bpf: memory there (a memfd, SysV
#   segments, queues and semaphore arrays, BPF maps) is charged to no process's address space,
#   so it would escape the per-case budget of NPROC x RLIMIT_AS.
REFUSED = (
    "unshare", "setns", "clone", "clone3", "add_key", "request_key", "keyctl",
    "memfd_create", "memfd_secret", "shmget", "msgget", "semget", "bpf",
)  # fmt: skip
X32_SYSCALL_BIT = 0x40000000
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_JGE_K = 0x35
BPF_JSET_K = 0x45
BPF_RET_K = 0x06


class SetupError(Exception):
    """The isolation could not be built; the worker is unusable."""


def _unshare_ok(flags: int) -> bool:
    """Whether unshare(2) with ``flags`` succeeds here (in a child: it changes the caller)."""
    try:
        L.unshare(flags)
    except OSError:
        return False
    return True


def _readonly_tree() -> None:
    """Make every mount of this (private) mount namespace read-only and nosuid."""
    try:
        L.mount_setattr(L.AT_FDCWD, "/", L.AT_RECURSIVE, L.MOUNT_ATTR_RDONLY | L.MOUNT_ATTR_NOSUID)
        return
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            raise
    # Older kernels: remount each mount point read-only, deepest last is fine for bind remounts.
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        points = [line.split()[4].replace("\\040", " ") for line in fh]
    for point in points:
        L.mount(None, point, None, L.MS_REMOUNT | L.MS_BIND | L.MS_RDONLY | L.MS_NOSUID)


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _seccomp_program() -> list[tuple[int, int, int, int]]:
    """The case filter as classic BPF over ``struct seccomp_data`` (nr at 0, arch at 4, args at 16)."""
    machine = os.uname().machine
    if machine not in L.AUDIT_ARCH:
        raise SetupError(f"seccomp filter: unsupported architecture {machine!r} (x86_64 or aarch64)")
    arch, numbers = L.AUDIT_ARCH[machine], {name: L.SYSCALLS[machine][name] for name in REFUSED}
    eperm, enosys = SECCOMP_RET_ERRNO | errno.EPERM, SECCOMP_RET_ERRNO | errno.ENOSYS
    prog = [
        (BPF_LD_W_ABS, 0, 0, 4),
        (BPF_JEQ_K, 1, 0, arch),
        (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),  # another ABI (i386 int 0x80): nothing runs
        (BPF_LD_W_ABS, 0, 0, 0),
    ]
    if machine == "x86_64":  # x32 system calls would bypass the numbers below
        prog += [(BPF_JGE_K, 0, 1, X32_SYSCALL_BIT), (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS)]
    for name, nr in sorted(numbers.items()):
        if name != "clone":
            prog += [(BPF_JEQ_K, 0, 1, nr), (BPF_RET_K, 0, 0, enosys if name == "clone3" else eperm)]
    prog += [
        (BPF_JEQ_K, 0, 3, numbers["clone"]),
        (BPF_LD_W_ABS, 0, 0, 16),  # low half of args[0] (little endian): the clone flags
        (BPF_JSET_K, 0, 1, L.CLONE_NAMESPACES),
        (BPF_RET_K, 0, 0, eperm),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    return prog


def _seccomp_fprog() -> tuple[_SockFprog, ctypes.Array]:
    """The filter ready for prctl (the array must stay referenced until it is loaded)."""
    prog = _seccomp_program()
    filters = (_SockFilter * len(prog))(*(_SockFilter(*op) for op in prog))
    return _SockFprog(len(prog), filters), filters


def _install_seccomp(fprog: _SockFprog) -> None:
    """Load the filter into this process; inherited by every child and kept across exec."""
    L.prctl(L.PR_SET_SECCOMP, L.SECCOMP_MODE_FILTER, ctypes.addressof(fprog))


def _own_userns(ask: int, mapped: int) -> None:
    """In B, its mounts done: a user namespace of the case's own, only uid and gid 65534 mapped.

    B creates it and A (root of the worker) writes its maps (:func:`_map_userns`): no helper
    process, so no fork of the interpreter for it. Cases running side by side then share no
    per-user count (Linux 5.14+ counts RLIMIT_NPROC, pending signals and inotify per user
    namespace): a fork bomb in one case cannot make a sibling's start fail. The mounts stay the
    worker root's; from here on B is root of a namespace where only uid 65534 exists.
    """
    L.unshare(L.CLONE_NEWUSER)
    os.write(ask, b"u")
    os.close(ask)
    ready, _, _ = select.select([mapped], [], [], SETUP_SECONDS)
    if not ready or os.read(mapped, 1) != b"m":
        raise SetupError("user namespace: the supervisor did not write its maps")
    os.close(mapped)


def _writable_proc(proc_fd: int | None) -> int | None:
    """A detached clone of the worker's ``/proc`` mount: B makes every mount of the namespace it
    shares with A read-only before it asks for its maps, and a detached mount is not among them."""
    if proc_fd is None:
        return None
    flags = L.AT_EMPTY_PATH | L.OPEN_TREE_CLONE | L.OPEN_TREE_CLOEXEC
    try:
        return L.open_tree(proc_fd, "", flags)
    except OSError:
        return None


def _map_userns(proc_rw: int | None, pid: int, ask: int, mapped: int) -> None:
    """In A: once B has its user namespace, map uid and gid 65534 in it (nothing when B failed first)."""
    try:
        ready, _, _ = select.select([ask], [], [], SETUP_SECONDS)
        if not ready or os.read(ask, 1) != b"u" or proc_rw is None:
            return  # B failed before it: its setup error says why
        for name in ("uid_map", "gid_map"):
            fd = os.open(f"{pid}/{name}", os.O_WRONLY, dir_fd=proc_rw)
            try:
                os.write(fd, f"{L.NOBODY} {L.NOBODY} 1\n".encode())
            finally:
                os.close(fd)
        os.write(mapped, b"m")
    except OSError:
        pass  # B then reports the missing maps as its setup error
    finally:
        os.close(ask)
        os.close(mapped)


def _await_go(go: socket.socket) -> tuple[str, int]:
    """A warm case waits here, namespaces and mounts done, for its program's path and input (a memfd)."""
    message, fds, _, _ = socket.recv_fds(go, 4096, 1)
    go.close()
    if not message or len(fds) != 1:
        raise SetupError("warm case: the runner went away before handing it a program")
    return message.decode(), fds[0]


def _isolate_and_exec(
    spec: dict,
    code_path: str,
    stdin_fd: int,
    out_fd: int,
    err_pipe: int,
    userns: tuple[int, int] | None,
    go: socket.socket | None = None,
) -> _Program:
    """Runs in B (pid 1 of the new pid namespace); returns only in a zygote's fork, the program
    ready to run (see :func:`_become`), and never otherwise.

    With ``go`` (a warm case) B does everything that costs time first, then waits for the
    program; everything after that (limits, privileges, exec) takes microseconds.
    """
    limits = spec["limits"]
    iso = spec["isolation"]
    try:
        # A session (and process group) of its own: kill(0) from the program would otherwise reach
        # every process of the runner's group, other cases' programs among them (the same uid).
        os.setsid()
        # Built before RLIMIT_AS applies, so no allocation of the runner's can fail after it.
        seccomp = _seccomp_fprog() if iso.get("seccomp") else None
        if iso["mount_private"]:
            L.mount(None, "/", None, L.MS_REC | L.MS_PRIVATE)
        if iso["readonly_root"]:
            _readonly_tree()
        if iso["pid"]:
            L.mount("proc", "/proc", "proc", L.MS_NOSUID | L.MS_NODEV | L.MS_NOEXEC)
        if iso["private_tmp"]:
            scratch = f"size={limits['scratch_bytes']},mode=1777"
            L.mount("tmpfs", "/tmp", "tmpfs", L.MS_NOSUID | L.MS_NODEV, scratch)
            if os.path.isdir("/dev/shm"):
                L.mount("tmpfs", "/dev/shm", "tmpfs", L.MS_NOSUID | L.MS_NODEV | L.MS_NOEXEC, scratch)
        os.chdir("/tmp")
        if userns is not None:
            _own_userns(*userns)
        if go is not None:
            code_path, stdin_fd = _await_go(go)
        cpu = int(limits["cpu_seconds"])
        for res, value in (
            (resource.RLIMIT_NPROC, limits["nproc"]),
            (resource.RLIMIT_FSIZE, limits["fsize_bytes"]),
            (resource.RLIMIT_AS, limits["address_space_bytes"]),
            (resource.RLIMIT_CPU, cpu),
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_NOFILE, limits["nofile"]),
            (resource.RLIMIT_MSGQUEUE, 0),  # POSIX message queues: memory outside RLIMIT_AS
        ):
            if value is not None:
                resource.setrlimit(res, (value, value))
        devnull = os.open("/dev/null", os.O_WRONLY)
        if iso["drop_privileges"]:
            for cap in range(64):
                try:
                    L.prctl(L.PR_CAPBSET_DROP, cap)
                except OSError:
                    break  # EINVAL past the last capability the kernel knows
        if seccomp is not None:
            # Still root here (CAP_SYS_ADMIN in the worker): the filter does not depend on
            # no_new_privs, and the privilege drop below uses no refused call.
            _install_seccomp(seccomp[0])
        if iso["drop_privileges"]:
            os.setgroups([])
            os.setresgid(L.NOBODY, L.NOBODY, L.NOBODY)
            os.setresuid(L.NOBODY, L.NOBODY, L.NOBODY)
        if iso["no_new_privs"]:
            L.prctl(L.PR_SET_NO_NEW_PRIVS, 1)
        os.dup2(stdin_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(devnull, 2)
        # Everything else the runner holds goes: one close_range each side of err_pipe, where
        # a Python loop over every number cost about a millisecond per case.
        os.closerange(3, err_pipe)
        os.closerange(err_pipe + 1, limits["nofile"] + 64)
        if _FRESH is not None:  # the zygote's fork: become the program (err_pipe closes there)
            return _become(code_path, err_pipe, iso["drop_privileges"])
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        os.execve(PYTHON, [PYTHON, "-I", "-B", code_path], CASE_ENV)
    except BaseException as exc:  # report to A, then die: nothing of the candidate ran yet
        try:
            os.write(err_pipe, f"{type(exc).__name__}: {exc}".encode()[:2000])
        finally:
            os._exit(127)


#: In the zygote (see the module docstring): ``sys.modules`` and ``sys.path_importer_cache`` as
#: they were when its interpreter had started, before it imported anything of its own. None in
#: the runner, whose cases exec a fresh interpreter.
_FRESH: tuple[dict, dict] | None = None
#: Standard-library modules the zygote imports before any request, each from the fresh state into
#: a copy of its own (see :func:`_preload`): the commonest imports of short programs, and the
#: dearest part of such a case (``import json`` costs about 6 ms of CPU, a whole case forked from
#: the zygote about 6 ms more).
PRELOAD = ("json", "re", "collections", "heapq", "bisect")
#: In the zygote: what :func:`_preload` found, installed in a case by :func:`_become`. None
#: elsewhere, or when nothing could be preloaded.
_PRELOADED: object | None = None
#: A case's ``importlib._bootstrap._find_and_load`` while preloaded modules are left: it runs as
#: importlib's own code (its file name is importlib's, so CPython trims its frame from an import's
#: traceback as it trims importlib's). A preloaded module is handed over only when the program
#: would get exactly it from a fresh import: the module itself imported first (not one of its
#: dependencies before it), nothing of what its import adds there yet, and the import system as
#: the interpreter started (``sys.path``, ``sys.meta_path``, ``sys.path_hooks`` and the modules
#: loaded at start-up the same objects). Otherwise, and for every other module, the real one runs.
_SERVE_PRELOADED = """\
def _find_and_load(name, import_):
    found = preloaded.pop(name, None)
    if not preloaded:
        bootstrap._find_and_load = find_and_load  # nothing left to hand over
    if found is not None:
        entries, finders = found
        with bootstrap._ModuleLockManager(name):
            modules, cache = sys.modules, sys.path_importer_cache
            if (
                sys.path == state[0] and sys.meta_path == state[1] and sys.path_hooks == state[2]
                and all(modules.get(key) is module for key, module in state[3])
                and not any(key in modules for key in entries)
                and not any(key in cache for key in finders)
            ):
                modules.update(entries)
                cache.update(finders)
                return modules[name]
    return find_and_load(name, import_)
"""
#: Found in the command line of the zygote and of every process forked from it (and of the
#: persistent runner, whose interpreter the zygote is forked from: see :func:`zygote_serve`).
ZYGOTE_NAME = "pytest_e2b_env_zygote"
#: The zygote's whole program (``python3 -I -B -c``): it takes the snapshot above first thing,
#: runs this module's code as ``argv[2]`` and hands ``argv[3:]`` to :func:`zygote_serve`. Started
#: by the install command (``argv[3]`` is ``--serve``), ``argv[1]`` is this module's source, and
#: the process forks into the persistent runner and its zygote; started again by a runner whose
#: zygote died, ``argv[1]`` is the runner's own code object, marshalled (no compile), and ``argv[3]``
#: the descriptor it serves on. In a case's B, :func:`zygote_serve` returns the candidate's
#: program, which runs here, at the bottom of the stack, as ``python3 -I -B solution.py`` runs it
#: (one frame, this one, below its own).
ZYGOTE_BOOT = """\
import sys
fresh = dict(sys.modules), dict(sys.path_importer_cache)
with open(sys.argv[1], "rb") as fh:
    if sys.argv[3] == "--serve":
        code = compile(fh.read(), sys.argv[1], "exec", dont_inherit=True)
    else:
        import marshal
        code = marshal.load(fh)
runtime = {"__name__": "pytest_e2b_env_zygote", "__file__": sys.argv[2]}  # ZYGOTE_NAME
exec(code, runtime)
program = runtime["zygote_serve"](sys.argv[3:], fresh)
del fresh, fh, code, runtime
error = program.error
if error is None:
    try:
        exec(program.code, program.globals)
    except BaseException as exc:
        error = exc
program.finish(error)
"""


class _Program:
    """A candidate's program in a zygote's B, about to run as ``python3 -I -B`` would run it."""

    def __init__(self, code: object, globals_: dict, error: BaseException | None) -> None:
        self.code, self.globals, self.error = code, globals_, error

    def finish(self, error: BaseException | None) -> None:
        """End as CPython's ``pymain`` ends a script: flush stderr and stdout (``flush_io``), report
        an uncaught exception through ``sys.excepthook`` (exit 1) or take ``SystemExit``'s status,
        then shut down (threads, atexit, flushes: 120 when one fails); an uncaught
        ``KeyboardInterrupt`` ends by SIGINT (130 where it is ignored, as it is for a pid 1)."""
        for stream in (sys.stderr, sys.stdout):
            with contextlib.suppress(Exception):
                stream.flush()
        status, interrupted = 0, False
        if isinstance(error, SystemExit):
            status = _system_exit_status(error)
        elif error is not None:
            interrupted = isinstance(error, KeyboardInterrupt)
            tb = error.__traceback__
            # The first entry is the zygote's own frame (ZYGOTE_BOOT), which a fresh interpreter
            # does not have; a compile error carries none.
            error.__traceback__ = tb = tb.tb_next if tb is not None else None
            sys.last_type, sys.last_value, sys.last_traceback = type(error), error, tb
            try:
                sys.excepthook(type(error), error, tb)
            except BaseException:
                sys.__excepthook__(type(error), error, tb)
            status = 1
        del error
        status = _shutdown(status, self.globals)
        if interrupted:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
            status = 128 + signal.SIGINT
        os._exit(status)


def _system_exit_status(exc: SystemExit) -> int:
    """The exit status of an uncaught ``SystemExit`` (CPython's ``_Py_HandleSystemExit``)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if -(1 << 63) <= code < 1 << 63 else 0xFF  # C: (int) PyLong_AsLong
    with contextlib.suppress(Exception):
        if sys.stderr is not None:
            sys.stderr.write(str(code))
            sys.stderr.write("\n")
    return 1


def _unraisable(error: BaseException, obj: object) -> None:
    """Report ``error`` as CPython's ``PyErr_WriteUnraisable(obj)`` does, through ``sys.unraisablehook``."""
    with contextlib.suppress(Exception):
        sys.unraisablehook(_UNRAISABLE_ARGS((type(error), error, None, None, obj)))


def _capture_unraisable_args() -> type:
    """The type ``sys.unraisablehook`` takes (not exposed by name): caught once from a ``__del__``."""
    seen: list[type] = []
    saved, sys.unraisablehook = sys.unraisablehook, lambda args: seen.append(type(args))

    class _Raises:
        def __del__(self) -> None:
            raise ValueError

    try:
        _Raises()
    finally:
        sys.unraisablehook = saved
    return seen[0]


_UNRAISABLE_ARGS = _capture_unraisable_args()


def _flush_std_files(report: bool) -> bool:
    """CPython's ``flush_std_files``: flush stdout (a failure reported as unraisable when
    ``report``) and stderr; False when either failed."""
    ok = True
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.flush()
        except Exception as exc:
            if report and name == "stdout":
                _unraisable(exc, stream)
            ok = False
    return ok


def _shutdown(status: int, main: dict) -> int:
    """CPython's ``Py_FinalizeEx`` as a program can see it: wait for its non-daemon threads, run
    its atexit callbacks, flush stdout and stderr, clear ``__main__`` (its objects' ``__del__``
    run), flush again. Other modules are not torn down (the process ends)."""
    threading = sys.modules.get("threading")
    if threading is not None:
        with contextlib.suppress(BaseException):
            threading._shutdown()
    atexit._run_exitfuncs()
    ok = _flush_std_files(report=True)
    gc.collect()
    # CPython's _PyModule_ClearDict: names with one leading underscore first, then the rest.
    for first in (True, False):
        for name in list(main):
            if name != "__builtins__" and (not first or (name.startswith("_") and not name.startswith("__"))):
                main[name] = None
    gc.collect()
    ok = _flush_std_files(report=ok) and ok
    return status if ok else 120


def _become(code_path: str, err_pipe: int, unprivileged: bool) -> _Program:
    """In a zygote's B, privileges dropped and descriptors in place: turn this interpreter back into
    the one the zygote started as, then read and compile the program as ``python3 -I -B`` does."""
    assert _FRESH is not None
    modules, finders = _FRESH
    if unprivileged:
        # Root of the case's user namespace is unmapped, so the uid drop kept the capabilities
        # setns gave there; the exec of a fresh interpreter would have cleared them.
        L.clear_capabilities()
    # A credential change left the process undumpable (its /proc files root's); an exec would
    # have made it dumpable again, and a program may read its own /proc/self.
    L.prctl(L.PR_SET_DUMPABLE, 1)
    for sig in (signal.SIGTERM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_IGN)
    atexit._clear()
    sys.modules.clear()
    sys.modules.update(modules)
    sys.path_importer_cache.clear()
    sys.path_importer_cache.update(finders)
    sys.path_importer_cache[code_path] = None  # pymain asks whether the script is a zip or a directory
    if _PRELOADED is not None:
        modules["_frozen_importlib"]._find_and_load = _PRELOADED
    sys.argv = [code_path]
    sys.orig_argv = [PYTHON, "-I", "-B", code_path]
    main = type(sys)("__main__")
    main.__loader__ = modules["_frozen_importlib_external"].SourceFileLoader("__main__", code_path)
    main.__annotations__ = {}
    main.__builtins__ = modules["builtins"]  # type: ignore[attr-defined]
    main.__file__ = code_path
    main.__cached__ = None  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    os.close(err_pipe)  # set up: A starts the program's clock
    try:
        with open(code_path, "rb") as fh:
            source = fh.read()
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.write(
                2, f"{PYTHON}: can't open file {code_path!r}: [Errno {exc.errno}] {exc.strerror}\n".encode()
            )
        os._exit(2)
    if b"\0" in source:
        # CPython's file tokenizer and compile() part ways on NUL bytes (the one runs what comes
        # before, the other refuses the source): such a program gets the fresh interpreter itself.
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        os.execve(PYTHON, [PYTHON, "-I", "-B", code_path], CASE_ENV)
    try:
        return _Program(compile(source, code_path, "exec", dont_inherit=True), main.__dict__, None)
    except BaseException as exc:  # a SyntaxError, as the interpreter would report it (no frames)
        return _Program(None, main.__dict__, exc.with_traceback(None))


def zygote_serve(args: list[str], fresh: tuple[dict, dict]) -> _Program:
    """The zygote: fork a case's A for each request on its control socket; returns in a case's B only.

    ``args``: ``["--serve", directory]`` from the install command (the process first forks: the
    parent becomes the persistent runner, serving ``directory``, and never returns; the child is
    its zygote), or the control descriptor's number, from a runner that started a zygote again.
    A request is a spec (its isolation and limits: no program, input or nonce) with three
    descriptors: A's output and status pipes and B's ``go`` socket. The answer is A's pidfd (the
    runner kills a wedged A with it; the zygote reaps). Ends when the runner closes its end.
    """
    global _FRESH, _PRELOADED
    control_fd = _fork_runner(args[1]) if args[0] == "--serve" else int(args[0])
    _FRESH = fresh
    _PRELOADED = _preload(fresh)
    control = socket.socket(fileno=control_fd)
    # Everything alive now goes to the collector's permanent generation: a case's collections (its
    # exit runs one, as CPython's does) skip it, and touch none of its pages (no copy on write).
    gc.freeze()
    while True:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        try:
            message, fds, _, _ = socket.recv_fds(control, 65536, 3)
        except OSError:
            message, fds = b"", []
        if not message or len(fds) != 3:
            os._exit(0)
        spec = json.loads(message)
        out_w, st_w, go_fd = fds
        pid = os.fork()
        if pid == 0:
            control.close()
            return _supervise(spec, "", -1, out_w, st_w, socket.socket(fileno=go_fd))
        pidfd = os.pidfd_open(pid)
        for fd in fds:
            os.close(fd)
        try:
            socket.send_fds(control, [b"A"], [pidfd])
        finally:
            os.close(pidfd)


def _fork_runner(directory: str) -> int:
    """In the interpreter the install command started, before it holds anything of a request: fork.

    The parent is the persistent runner (the pid the install command recorded): it serves
    ``directory`` and exits when done, never returning. The child is its zygote, started as a
    zygote the runner starts itself would be (the case's environment, standard descriptors of a
    case's kinds, this module loaded), for one interpreter start less; the control socket's
    descriptor (3, as there) is returned to it.
    """
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    # The FIFO on fd 1 served only the start (the streams are built): neither side writes to it
    # and nobody reads it, so it goes, lest a stray write block once its buffer is full.
    null = os.open("/dev/null", os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    if pid == 0:
        parent.close()
        os.dup2(child.detach(), 3)
        os.closerange(4, 1 << 16)
        return 3
    child.close()
    ZYGOTE.control, ZYGOTE.pid = parent, pid
    try:
        os.umask(0o022)
        serve(directory)
    finally:
        os._exit(0)


def _swap(table: dict, content: dict) -> None:
    """Make ``table`` hold exactly ``content`` (in its order), in place: the interpreter keeps
    its own reference to ``sys.modules``."""
    table.clear()
    table.update(content)


def _preload(fresh: tuple[dict, dict]) -> object | None:
    """In the zygote, before it serves: import each of :data:`PRELOAD` from the fresh state, keep
    what its import added (``sys.modules`` and importer-cache entries, in their order) aside, and
    leave both tables as they were. Returns the ``_find_and_load`` that hands them over
    (:data:`_SERVE_PRELOADED`), or None when none could be imported.

    Each module is imported alone, as a program's first import of it would be (``json`` has its
    own ``re``): a program that imports ``re`` and then ``json`` gets the copy of ``re`` and a real
    import of ``json``, never a mix. Only modules whose import is the same wherever and whenever
    it runs are listed: none reads the time, the process, the environment or a random source.
    """
    modules, finders = fresh
    saved = dict(sys.modules), dict(sys.path_importer_cache)
    preloaded: dict[str, tuple[dict, dict]] = {}
    try:
        for root in PRELOAD:
            _swap(sys.modules, modules)
            _swap(sys.path_importer_cache, finders)
            try:
                __import__(root)
            except Exception:  # an image without it, or with a broken one: the zygote goes on,
                continue  # and a program imports it (or fails to) as usual
            preloaded[root] = (
                {key: module for key, module in sys.modules.items() if key not in modules},
                {key: finder for key, finder in sys.path_importer_cache.items() if key not in finders},
            )
    finally:
        _swap(sys.modules, saved[0])
        _swap(sys.path_importer_cache, saved[1])
    if not preloaded:
        return None
    bootstrap = modules["_frozen_importlib"]
    start = [(key, module) for key, module in modules.items() if key != "__main__"]
    namespace = {
        "sys": sys,
        "bootstrap": bootstrap,
        "find_and_load": bootstrap._find_and_load,
        "preloaded": preloaded,
        "state": (list(sys.path), list(sys.meta_path), list(sys.path_hooks), start),
    }
    exec(compile(_SERVE_PRELOADED, "<frozen importlib._bootstrap>", "exec", dont_inherit=True), namespace)
    return namespace["_find_and_load"]


def _proc_read(proc_fd: int | None, pid: int, name: str, size: int) -> bytes | None:
    """Up to ``size`` bytes of ``<proc>/<pid>/<name>`` through the held ``/proc``, or None."""
    if proc_fd is None:
        return None
    try:
        fd = os.open(f"{pid}/{name}", os.O_RDONLY, dir_fd=proc_fd)
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def _runqueue_seconds(proc_fd: int | None, pid: int) -> float | None:
    """Seconds ``pid`` has spent runnable but waiting for a CPU (``<proc>/<pid>/schedstat``), or None."""
    raw = _proc_read(proc_fd, pid, "schedstat", 128)
    try:
        return int(raw.split()[1]) / 1e9 if raw is not None else None
    except (ValueError, IndexError):
        return None


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # the unit of /proc/PID/stat times
#: At most this many tasks (processes and their threads, which count against RLIMIT_NPROC too)
#: are walked per look.
MAX_TREE = 1024


def _tree_usage(proc_fd: int | None, pid: int) -> tuple[float, int, int, int] | None:
    """(CPU seconds, CPUs it may run on, threads, ticks of reaped children) of ``pid`` and its
    descendants, or None without ``/proc``.

    The seconds count every process of the tree, live or reaped (a reaped child's time is in its
    parent's ``cutime``); orphans are reparented to ``pid``, the case's pid 1, so the walk over
    ``task/*/children`` finds every live process. The CPUs are the union of their affinities.
    Bounded by :data:`MAX_TREE`; a process gone mid-walk is skipped (its time uncounted: the
    deadline errs on the lenient side, and the wall backstop still holds).
    """
    if proc_fd is None:
        return None
    ticks, cpus, seen, todo, tasks, reaped = 0, set(), {pid}, [pid], 0, 0
    while todo and tasks < MAX_TREE:
        cur = todo.pop()
        raw = _proc_read(proc_fd, cur, "stat", 1024)
        if raw is None:
            if cur == pid:
                return None
            continue
        with contextlib.suppress(ValueError, IndexError):
            times = [int(f) for f in raw[raw.rfind(b")") + 2 :].split()[11:15]]  # u/s/cu/cs time
            ticks += sum(times)
            reaped += times[2] + times[3]
        with contextlib.suppress(OSError):
            cpus |= os.sched_getaffinity(cur)
        try:
            task_fd = os.open(f"{cur}/task", os.O_RDONLY | os.O_DIRECTORY, dir_fd=proc_fd)
        except OSError:
            continue
        try:
            tids = os.listdir(task_fd)
        except OSError:
            tids = []
        finally:
            os.close(task_fd)
        tids = tids[: MAX_TREE - tasks]
        tasks += len(tids)
        for tid in tids:
            for child in (_proc_read(proc_fd, cur, f"task/{tid}/children", 65536) or b"").split():
                if len(seen) < MAX_TREE and child.isdigit() and int(child) not in seen:
                    seen.add(int(child))
                    todo.append(int(child))
    return ticks / CLOCK_TICKS, max(1, len(cpus)), tasks, reaped


def _uid_of(proc_fd: int | None, pid: int) -> int | None:
    """``pid``'s real uid as the worker sees it (inside its own user namespace it may look mapped)."""
    raw = _proc_read(proc_fd, pid, "status", 4096)
    lines = raw.decode("ascii", "replace").splitlines() if raw is not None else []
    try:
        return next((int(line.split()[1]) for line in lines if line.startswith("Uid:")), None)
    except (ValueError, IndexError):
        return None


def _open_proc() -> int | None:
    """This pid namespace's ``/proc``, held open: the case mounts its own ``/proc`` over it."""
    try:
        return os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


def _state(proc_fd: int | None, pid: int) -> str:
    """``pid``'s scheduler state letter (``R``, ``S``, ``D``...), or ``?``."""
    raw = _proc_read(proc_fd, pid, "stat", 1024)
    rest = raw[raw.rfind(b")") + 2 :] if raw else b""
    return rest[:1].decode("ascii", "replace") or "?"


#: How often the deadline wait looks at the program (its state, its tree) while it runs.
LOOK_SECONDS = 0.05


class _OwnTime:
    """A running program's own time, from what each look at it saw (no I/O: fed by :func:`_wait_deadline`).

    Its own time is wall time less the time it sat runnable waiting for a CPU and, while it is
    alone, less the time it was seen in uninterruptible sleep (a page-in of the interpreter whose
    cache another sandbox's memory pressure evicted, the disk queue behind the host's writers): on
    a loaded host a correct program is slowed, not wrong, and scoring it 0 would teach the policy
    noise. A program that sleeps or waits on a pipe still uses its time. Its own time is never less
    than the CPU its whole process tree used over the CPUs the tree may run on: a program whose own
    children keep it waiting (a fork bomb) is not starved by the host but is the load, and ends at
    its deadline. Alone: one thread, no other process of its own at any look, no reaped child,
    never more than one CPU-second per second.

    A program still running at the backstop (``slack`` times the deadline of wall time) is stopped
    there. Starved: it was alone and had not spent its time even counting its uninterruptible sleep
    as its own, so the host kept it from the CPU (no score, never a 0). One that spent it stalled in
    the kernel has timed out, as has one with company of its own: a program cannot buy a mask with
    I/O of its own making, only take longer to earn its 0.
    """

    def __init__(self, start: float, seconds: float, slack: float, first: tuple | None) -> None:
        self.start, self.seconds, self.hard = start, seconds, start + seconds * slack
        self.first = first  # the tree's usage at the start (see _tree_usage), None without /proc
        self.alone = first is not None and first[2] == 1 and not first[3]
        self.own = self.spent = self.waited = self.blocked = 0.0
        self.floor = 0.0  # the tree's CPU over its CPUs at the last walk: its own time is never less
        self.looked = self.walked = start
        self.state = "?"

    def look(self, now: float, waited: float, state: str) -> None:
        """One look: ``waited`` seconds runnable without a CPU since the start, its state letter now."""
        self.waited, self.state = waited, state
        # A look counts the time since the one before: a stall seen now is taken to have lasted.
        self.blocked += now - self.looked if state == "D" else 0.0
        self.looked = now
        # its uninterruptible sleep counted as its own
        self.spent = max(now - self.start - waited, self.floor)
        self.own = max(self.spent - self.blocked if self.alone else self.spent, self.floor)

    def wants_tree(self, now: float) -> bool:
        """Whether to walk its tree now: only once it waited or stalled (the walk costs up to
        MAX_TREE reads), at most twice a second, at every decision, and at every look once the tree
        could have reached its deadline since the last walk (its time per CPU grows no faster than
        the wall clock): a walk just short of it would otherwise leave the next half second unseen."""
        could = self.floor + (now - self.walked) >= self.seconds
        due = now - self.walked >= 10 * LOOK_SECONDS or could or self.own >= self.seconds or now >= self.hard
        return due and (self.waited > 0 or self.blocked > 0) and self.first is not None

    def tree(self, now: float, usage: tuple) -> None:
        """What a walk of its tree found (see :func:`_tree_usage`)."""
        assert self.first is not None
        self.walked = now
        used = usage[0] - self.first[0]
        self.alone = self.alone and usage[2] == 1 and not usage[3] and used <= now - self.start + 0.05
        self.floor = max(self.floor, used / usage[1])
        self.spent = max(self.spent, self.floor)
        self.own = max(self.spent - self.blocked if self.alone else self.spent, self.floor)

    def left(self, now: float) -> float:
        """Seconds until it must be stopped: its own time or the backstop, whichever comes first."""
        return min(self.seconds - self.own, self.hard - now)

    @property
    def starved(self) -> bool:
        """Stopped now, would it have been the host's doing (see the class)?"""
        return self.alone and self.spent < self.seconds

    def timing(self, cpu: float) -> dict:
        figures = {"own": self.own, "waited": self.waited, "cpu": cpu, "blocked": self.blocked}
        return {**{k: round(v, 4) for k, v in figures.items()}, "state": self.state}


def _wait_deadline(
    pid: int, seconds: float, slack: float, proc_fd: int | None = None
) -> tuple[int, bool, bool, dict]:
    """Wait for ``pid`` until its own time (see :class:`_OwnTime`) passes ``seconds``; SIGKILL it then.

    Returns (wait status, timed out, starved, timing). Without schedstat the deadline is plain wall
    time. Timing is the evidence of why a case took its time: ``own``, ``waited`` (runnable, no
    CPU), ``cpu`` (CPU seconds of B and the children it reaped), ``blocked`` (seen in
    uninterruptible sleep at looks every :data:`LOOK_SECONDS`) and ``state``, its state at the last
    look.
    """
    pidfd = os.pidfd_open(pid)
    try:
        start = time.monotonic()
        base = _runqueue_seconds(proc_fd, pid)
        clock = _OwnTime(start, seconds, slack, _tree_usage(proc_fd, pid))
        timed_out = starved = False
        while True:
            now = time.monotonic()
            waited = _runqueue_seconds(proc_fd, pid)
            runnable = waited - base if waited is not None and base is not None else 0.0
            clock.look(now, runnable, _state(proc_fd, pid))
            if clock.wants_tree(now) and (usage := _tree_usage(proc_fd, pid)) is not None:
                clock.tree(now, usage)
            left = clock.left(now)
            if left <= 0:
                timed_out, starved = True, clock.starved
                os.kill(pid, signal.SIGKILL)
                break
            ready, _, _ = select.select([pidfd], [], [], min(left, LOOK_SECONDS))
            if ready:
                break
        _, status, rusage = os.wait4(pid, 0)
        return status, timed_out, starved, clock.timing(rusage.ru_utime + rusage.ru_stime)
    finally:
        os.close(pidfd)


def _supervise(
    spec: dict, code_path: str, stdin_fd: int, out_fd: int, status_fd: int, go: socket.socket | None = None
) -> _Program:
    """Runs in A (root, old pid namespace); never returns (B, forked here, returns the program in
    a zygote's fork: see :func:`_isolate_and_exec`). ``go``: a warm case (see :class:`_Warm`)."""
    report: dict = {}
    began = time.monotonic()
    try:
        iso = spec["isolation"]
        flags = L.CLONE_NEWIPC | L.CLONE_NEWUTS
        flags |= L.CLONE_NEWNS if iso["mount_private"] else 0
        flags |= L.CLONE_NEWPID if iso["pid"] else 0
        flags |= L.CLONE_NEWNET if iso["network"] else 0
        L.unshare(flags)
        # before the fork: the case's pid 1 mounts a fresh /proc of its own namespace over this one
        proc_fd = _open_proc()
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        # B asks for its user namespace's maps on one pipe, A answers on the other
        handshake = (os.pipe2(os.O_CLOEXEC), os.pipe2(os.O_CLOEXEC)) if spec["userns"] else None
        proc_rw = _writable_proc(proc_fd) if handshake is not None else None
        pid = os.fork()
        if pid == 0:
            os.close(err_r)
            userns = None
            if handshake is not None:
                (ask_r, ask_w), (mapped_r, mapped_w) = handshake
                os.close(ask_r)
                os.close(mapped_w)
                userns = (ask_w, mapped_r)
            return _isolate_and_exec(spec, code_path, stdin_fd, out_fd, err_w, userns, go)
        os.close(err_w)
        os.close(out_fd)
        if go is not None:
            go.close()
        if handshake is not None:
            (ask_r, ask_w), (mapped_r, mapped_w) = handshake
            os.close(ask_w)
            os.close(mapped_r)
            _map_userns(proc_rw, pid, ask_r, mapped_w)
            if proc_rw is not None:
                os.close(proc_rw)
        # A warm case waits for its program as long as it takes (the runner closing its end of
        # ``go`` ends it); a cold one must be running within SETUP_SECONDS.
        ready, _, _ = select.select([err_r], [], [], None if go is not None else SETUP_SECONDS)
        setup = os.read(err_r, 4096) if ready else b"setup did not finish"
        os.close(err_r)
        if setup:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            report = {"setup_error": setup.decode("utf-8", "replace")}
        else:
            started = time.monotonic()
            uid = _uid_of(proc_fd, pid)  # B has exec'd: the program's own credentials
            status, timed_out, starved, timing = _wait_deadline(
                pid, spec["case_seconds"], spec["limits"]["wall_slack"], proc_fd
            )
            report = {
                "setup_seconds": round(started - began, 6),
                "seconds": round(time.monotonic() - started, 6),
                "timed_out": timed_out,
                "starved": starved,
                "timing": timing,
                "exit_code": os.waitstatus_to_exitcode(status),
                "uid": uid,
                "started": round(started, 6),  # the worker's monotonic clock: cases side by side overlap
                "ended": round(time.monotonic(), 6),
            }
    except BaseException as exc:
        report = {"setup_error": f"{type(exc).__name__}: {exc}"}
    try:
        os.write(status_fd, json.dumps(report).encode())
    finally:
        os._exit(0)


class _Run:
    """One case in flight: its supervisor A, the output it streams and the status A reports."""

    def __init__(self, spec: dict, code_path: str | None, stdin_data: bytes = b"") -> None:
        """A case of ``code_path`` on ``stdin_data``; with ``code_path`` None a warm one (see :meth:`go`).

        With ``isolation.zygote`` A is the zygote's fork, not this runner's, and every case takes
        its program and input through ``go``, as a warm one does: the zygote never sees either.
        """
        self.spec = spec
        self.cap = spec["limits"]["output_bytes"]
        self._go: socket.socket | None = None
        self.pid = self.pidfd = -1
        zygote = bool(spec["isolation"].get("zygote"))
        child_go = None
        stdin_fd = -1
        if code_path is None or zygote:
            self._go, child_go = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        else:
            stdin_fd = _input_fd(stdin_data)
        self.out_r, out_w = os.pipe()
        self.st_r, st_w = os.pipe()
        try:
            if zygote:
                assert child_go is not None
                self.pidfd = ZYGOTE.fork_case(spec, [out_w, st_w, child_go.fileno()])
            else:
                self.pid = os.fork()
                if self.pid == 0:
                    os.close(self.out_r)
                    os.close(self.st_r)
                    if self._go is not None:
                        self._go.close()
                    for other in _LIVE:  # their ends must close when the runner closes them (EOF, EPIPE)
                        other._drop_in_child()
                    _supervise(spec, code_path or "", stdin_fd, out_w, st_w, child_go)
        except BaseException:
            for fd in (self.out_r, self.st_r):
                os.close(fd)
            if self._go is not None:
                self._go.close()
            raise
        finally:
            os.close(out_w)
            os.close(st_w)
            if child_go is not None:
                child_go.close()
            if stdin_fd >= 0:
                os.close(stdin_fd)
        _LIVE.add(self)
        self.chunks: list[bytes] = []
        self.size = 0
        self.truncated = False
        self.status_raw = b""
        self.status_done = False
        self.reading = True
        self.give_up = float("inf") if self._go is not None else self._bound()
        if zygote and code_path is not None:
            self.go(code_path, stdin_data)

    def _bound(self) -> float:
        # The deadline is A's job; this bound only protects the runner from a wedged A.
        wall = self.spec["case_seconds"] * self.spec["limits"]["wall_slack"]
        return time.monotonic() + SETUP_SECONDS + wall + 5

    def go(self, code_path: str, stdin_data: bytes) -> None:
        """Hand a warm case its program and input; from here it is a case like any other."""
        assert self._go is not None
        stdin_fd = _input_fd(stdin_data)
        try:
            socket.send_fds(self._go, [code_path.encode()], [stdin_fd])
        except OSError:
            pass  # the warm case died already: its status says why, as a setup error
        finally:
            os.close(stdin_fd)
            self._go.close()
            self._go = None
        self.give_up = self._bound()

    def cancel(self) -> None:
        """End a warm case that will not be used (it exits when its ``go`` socket closes)."""
        if self._go is not None:
            self._go.close()
            self._go = None

    def _drop_in_child(self) -> None:
        """In a newly forked supervisor: close this (other) case's runner-side descriptors."""
        for fd in (self.out_r, self.st_r, self.pidfd):
            if fd >= 0:
                os.close(fd)
        if self._go is not None:
            os.close(self._go.detach())

    @property
    def done(self) -> bool:
        return not self.reading and self.status_done

    def fds(self) -> list[int]:
        return ([self.out_r] if self.reading else []) + ([] if self.status_done else [self.st_r])

    def _keep(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.size += len(chunk)

    def on_ready(self, ready: set[int]) -> None:
        if self.st_r in ready:
            piece = os.read(self.st_r, 65536)
            self.status_raw += piece
            self.status_done = not piece
            if self.status_done and self.reading:
                # B is reaped: whatever it wrote is in the pipe now. A writer that outlived it
                # (only possible with a weakened pid namespace) must not hold us up.
                os.set_blocking(self.out_r, False)
                try:
                    while self.size <= self.cap:
                        chunk = os.read(self.out_r, 65536)
                        if not chunk:
                            break
                        self._keep(chunk)
                except BlockingIOError:
                    pass
                self.truncated = self.size > self.cap
                self.reading = False
        if self.reading and self.out_r in ready:
            chunk = os.read(self.out_r, 65536)
            if not chunk:
                self.reading = False
            else:
                self._keep(chunk)
                if self.size > self.cap:
                    self.truncated = True  # keep cap+1 bytes: enough to prove the overflow
                    self.reading = False
                    os.close(self.out_r)  # the writer now gets EPIPE / SIGPIPE instead of blocking
                    self.out_r = -1

    def abandon(self) -> None:
        """A is wedged past every bound: kill it (B dies with it, being its pid namespace's init)."""
        if self.pidfd >= 0:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        else:
            os.kill(self.pid, signal.SIGKILL)
        self.reading = False
        self.status_done = True

    def finish(self) -> dict:
        _LIVE.discard(self)
        if self.out_r >= 0:
            os.close(self.out_r)
        os.close(self.st_r)
        if self.pidfd >= 0:
            os.close(self.pidfd)  # the zygote reaps its own children
        else:
            os.waitpid(self.pid, 0)
        report = json.loads(self.status_raw.decode() or '{"setup_error": "supervisor died"}')
        output = b"".join(self.chunks)[: self.cap + 1]
        report["output_b64"] = base64.b64encode(output).decode()
        report["output_truncated"] = self.truncated
        return report


class _Zygote:
    """The runner's side of the zygote (see the module docstring).

    A persistent runner's first zygote is forked from their common interpreter before either
    reads a request (:func:`_fork_runner`). Otherwise it is started here, by exec, before the
    runner reads a request (the runner holds no program or input yet, and the exec leaves nothing
    of it anyway); started again once if it died. Its fds 0 to 2 are of the
    kinds a case's are (a seekable stdin, a pipe for stdout, ``/dev/null`` for stderr), so the
    standard streams it built at start-up are the ones a fresh interpreter would build for the case.
    """

    def __init__(self) -> None:
        self.control: socket.socket | None = None
        self.pid = -1

    def start(self) -> None:
        code = os.path.join(HOME, "zygote.code")  # protocol.RUNNER_CODE: root's, 0600
        fd, temporary = _temporary(code)
        with os.fdopen(fd, "wb") as fh:
            marshal.dump(_MODULE_CODE, fh)
        os.replace(temporary, code)
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                null = os.open("/dev/null", os.O_RDWR)
                for fd, target in ((null, 0), (out_w, 1), (null, 2), (child.fileno(), 3)):
                    os.dup2(fd, target)
                os.closerange(4, 1 << 16)
                for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM):
                    signal.signal(sig, signal.SIG_DFL)
                argv = [PYTHON, "-I", "-B", "-c", ZYGOTE_BOOT, code, os.path.abspath(__file__), "3"]
                os.execve(PYTHON, argv, CASE_ENV)
            finally:
                os._exit(127)
        child.close()
        os.close(out_r)
        os.close(out_w)
        self.control, self.pid = parent, pid

    def stop(self) -> None:
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.pid > 0:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            self.pid = -1

    def fork_case(self, spec: dict, fds: list[int]) -> int:
        """Have the zygote fork a case's A on ``fds`` (output, status, ``go``); A's pidfd."""
        message = _case_key(spec).encode()
        for _ in range(2):
            if self.control is None:
                self.start()
            assert self.control is not None
            try:
                socket.send_fds(self.control, [message], fds)
                if select.select([self.control], [], [], SETUP_SECONDS)[0]:
                    _, got, _, _ = socket.recv_fds(self.control, 16, 1)
                    if got:
                        return got[0]
            except OSError:
                pass
            self.stop()  # dead or wedged: the next attempt starts another
        raise SetupError("zygote: the pre-started interpreter did not fork a case (twice)")


def _temporary(path: str) -> tuple[int, str]:
    """A new 0600 file beside ``path`` (to rename over it once written): its descriptor and name."""
    temporary = f"{path}.{os.getpid()}.{os.urandom(4).hex()}"
    return os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), temporary


ZYGOTE = _Zygote()  # this runner's: the persistent one starts it before a request, a one-shot on need


_LIVE: set[_Run] = set()  # cases whose runner-side descriptors are open


def _input_fd(data: bytes) -> int:
    """A case's input as a memfd at offset 0 (its stdin: a program that never reads it blocks nothing)."""
    fd = os.memfd_create("case-input", 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _case_key(spec: dict) -> str:
    """What a warm case was built for: any difference and it cannot run the request's cases."""
    fields = ("case_seconds", "limits", "isolation", "userns")
    return json.dumps({name: spec.get(name) for name in fields}, sort_keys=True)


class _Warm:
    """Cases set up ahead (namespaces, mounts, user namespace) while the runner waits for a request.

    Each is used once, for one case, as a cold one would be: the set-up moves off the candidate's
    critical path, nothing is shared. Built for one spec; a request with another drops them.
    """

    def __init__(self) -> None:
        self.key = ""
        self.runs: list[_Run] = []
        self.want: tuple[dict, int] | None = None  # what the last request asks to set up ahead

    def refill(self) -> None:
        if self.want is not None:
            self.fill(*self.want)
            self.want = None

    def take(self, spec: dict) -> _Run | None:
        if self.runs and self.key != _case_key(spec):
            self.drop()
        return self.runs.pop(0) if self.runs else None

    def fill(self, spec: dict, count: int) -> None:
        if self.key != _case_key(spec):
            self.drop()
        self.key = _case_key(spec)
        while len(self.runs) < count:
            self.runs.append(_Run(spec, None))

    def drop(self) -> None:
        for run in self.runs:
            run.cancel()
            run.reading = False
            run.status_done = True
            run.finish()
        self.runs = []


def run_cases(
    spec: dict, code_path: str, inputs: list[bytes], width: int = 1, warm: _Warm | None = None
) -> list[dict]:
    """Run each input as a case in its own isolated process tree, ``width`` at a time; in input order."""
    return run_jobs([(spec, code_path, data) for data in inputs], width, warm)


def run_jobs(jobs: list[tuple[dict, str, bytes]], width: int = 1, warm: _Warm | None = None) -> list[dict]:
    """Run each (spec, program, input) as a case in its own isolated process tree, ``width`` at a
    time (several candidates' cases side by side); the records in job order."""
    reports: list[dict | None] = [None] * len(jobs)
    running: dict[int, _Run] = {}
    pending = list(enumerate(jobs))
    while pending or running:
        while pending and len(running) < max(width, 1):
            index, (spec, code_path, data) = pending.pop(0)
            prepared = warm.take(spec) if warm is not None else None
            if prepared is None:
                running[index] = _Run(spec, code_path, data)
            else:
                prepared.go(code_path, data)
                running[index] = prepared
        watch = [fd for run in running.values() for fd in run.fds()]
        wait = min(run.give_up for run in running.values()) - time.monotonic()
        ready, _, _ = select.select(watch, [], [], max(wait, 0.0))
        now = time.monotonic()
        for index, run in list(running.items()):
            mine = set(ready) & set(run.fds())
            if mine:
                run.on_ready(mine)
            elif now >= run.give_up:
                run.abandon()
            if run.done:
                reports[index] = run.finish()
                del running[index]
    return [report for report in reports if report is not None]


def run_case(spec: dict, code_path: str, stdin_data: bytes) -> dict:
    """Run one case in a fresh isolated process tree; returns its record (output base64)."""
    return run_cases(spec, code_path, [stdin_data])[0]


def _processes_of(uid: int, needle: str) -> list[int]:
    """Pids running as ``uid`` whose command line mentions ``needle`` (a job's nonce)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", encoding="utf-8") as fh:
                owner = next((line.split()[1] for line in fh if line.startswith("Uid:")), "")
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmdline = fh.read(4096).decode("utf-8", "replace")
        except OSError:
            continue
        if owner == str(uid) and needle in cmdline:
            found.append(int(name))
    return found


def _describe_pid(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return f"{pid}: " + fh.read(200).replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return f"{pid}: gone"


def _write_code(job_dir: str, code: bytes) -> str:
    os.makedirs(job_dir, mode=0o755)
    os.chmod(job_dir, 0o755)
    path = os.path.join(job_dir, "solution.py")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    with os.fdopen(fd, "wb") as fh:
        fh.write(code)
    os.chmod(path, 0o444)
    return path


def _remove_job(job_dir: str) -> None:
    for name in os.listdir(job_dir):
        os.unlink(os.path.join(job_dir, name))
    os.rmdir(job_dir)


WARM = _Warm()  # the persistent runner's cases set up ahead


def evaluate(spec: dict, code: bytes, inputs: list[bytes], warm: bool = False) -> dict:
    """Run every case of one candidate; the per-case records in input order."""
    return evaluate_many([(spec, code, inputs)], warm)[0]


def evaluate_many(parts: list[tuple[dict, bytes, list[bytes]]], warm: bool = False) -> list[dict]:
    """Run every case of several candidates side by side; per candidate its records, in order.

    Each program lies in a directory named by its request's nonce under ``jobs``, which is
    0711: a case can run its own program but cannot list the others' (64 random bits each).
    """
    written: list[str] = []
    jobs: list[tuple[dict, str, bytes]] = []
    try:
        for spec, code, inputs in parts:
            job_dir = os.path.join(HOME, "jobs", spec["nonce"])
            code_path = _write_code(job_dir, code)
            written.append(job_dir)
            jobs += [(spec, code_path, data) for data in inputs]
        records = run_jobs(jobs, parts[0][0]["parallel"], WARM if warm else None)
    finally:
        for job_dir in written:
            _remove_job(job_dir)
    answers, offset = [], 0
    for spec, _, inputs in parts:
        answers.append({"cases": records[offset : offset + len(inputs)], "nonce": spec["nonce"]})
        offset += len(inputs)
    return answers


#: The preflight's pristineness check, run as a case twice: as a fresh interpreter and from the
#: zygote. It reports what it found at its first line and what ``import json`` (preloaded: see
#: :data:`PRELOAD`) added to ``sys.modules``, in order, and counts the copies of a canary (which an
#: earlier case of the preflight had as input, and which it gets in upper case) anywhere in its own
#: writable memory but its two buffers: a zygote holding anything of an earlier case shows here.
PRISTINE_CHECK = """\
import sys
modules = sorted(sys.modules)
names = list(globals())
before = set(sys.modules)
import json
imported = [name for name in sys.modules if name not in before]
import ctypes, os
needle = bytearray(sys.stdin.buffer.read().strip())
for i in range(len(needle)):
    needle[i] |= 0x20  # lower case in place: the needle exists once, here
chunk = bytearray(1 << 20)
mine = []
for own in (needle, chunk):
    at = ctypes.addressof((ctypes.c_char * len(own)).from_buffer(own))
    mine.append((at, at + len(own)))
view, hits = memoryview(chunk), 0
with open("/proc/self/maps") as fh:
    regions = [line.split()[:2] for line in fh]
fd = os.open("/proc/self/mem", os.O_RDONLY)
for span, perms in regions:
    start, end = (int(x, 16) for x in span.split("-"))
    while perms.startswith("rw") and start < end:
        try:
            got = os.preadv(fd, [view[: min(len(chunk), end - start)]], start)
        except OSError:
            break
        at = chunk.find(needle, 0, got)
        while at >= 0:
            hits += not any(lo <= start + at < hi for lo, hi in mine)
            at = chunk.find(needle, at + 1, got)
        start += got - len(needle) if got > len(needle) else max(got, 1)
print(json.dumps({
    "modules": modules, "globals": names, "imported": imported, "argv": sys.argv, "orig_argv": sys.orig_argv,
    "flags": list(sys.flags), "tasks": len(os.listdir("/proc/self/task")), "hits": hits,
    "fds": sorted(os.listdir("/proc/self/fd")),
}))
"""


def _pristine(fresh: dict, forked: dict) -> dict:
    """What the pristineness check found (see :data:`PRISTINE_CHECK`): the case forked from the
    zygote saw at its start what a fresh interpreter saw, and neither held the canary."""
    seen = []
    for record in (fresh, forked):
        try:
            seen.append(json.loads(base64.b64decode(record["output_b64"])))
        except (KeyError, ValueError):
            seen.append({})
    same = all(
        seen[1].get(k) == seen[0].get(k)
        for k in ("modules", "globals", "imported", "argv", "orig_argv", "flags", "fds")
    )
    return {
        "same_start": bool(seen[0]) and same,
        "canary_hits": [view.get("hits") for view in seen],
        "threads": [view.get("tasks") for view in seen],
        "exit_codes": [fresh.get("exit_code"), forked.get("exit_code")],
    }


def preflight(spec: dict, code: bytes) -> dict:
    """Run the probe under the same isolation, then check from outside what it cannot see."""
    marker = f".pe2b-probe-{spec['nonce']}"
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        try:
            listener.bind(("127.0.0.1", 0))
            listener.listen(4)
            port = listener.getsockname()[1]
        except OSError:
            port = 0  # the worker itself has no loopback: the probe still checks the rest
        # An upload as the files API leaves it (0644, in the inbox): no case may read it.
        upload = os.path.join(INBOX, f"{marker}.in")
        probe_input = {
            "marker": marker,
            "outer_netns": os.stat("/proc/self/ns/net").st_ino,
            "outer_pidns": os.stat("/proc/self/ns/pid").st_ino,
            "outer_ipcns": os.stat("/proc/self/ns/ipc").st_ino,
            "outer_utsns": os.stat("/proc/self/ns/uts").st_ino,
            "outer_userns": os.stat("/proc/self/ns/user").st_ino,
            "listen_port": port,
            "limits": spec["limits"],
            "forbidden_writes": ["/", "/etc", "/usr", HOME, "/var/tmp"],
            "upload": upload,
            "jobs": os.path.join(HOME, "jobs"),
            # Found again later only by a case that holds an earlier one's input (PRISTINE_CHECK).
            "canary": "pe2b-canary-" + os.urandom(16).hex(),
        }
        canary = probe_input["canary"]
        job_dir = os.path.join(HOME, "jobs", spec["nonce"])
        code_path = _write_code(job_dir, code)
        try:
            try:
                with open(os.open(upload, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "w") as fh:
                    fh.write("probe upload\n")
            except OSError:
                pass  # no inbox: the probe then reports inputs_private false
            probe = run_case(spec, code_path, json.dumps(probe_input).encode())
            # The probe's daemon still carries the job path (with the nonce) in its command line,
            # or, forked from the zygote, the zygote's (no other case runs during the preflight).
            leftovers = _processes_of(L.NOBODY, spec["nonce"]) + _processes_of(L.NOBODY, ZYGOTE_NAME)
            slow = dict(spec, case_seconds=0.15)
            sleeper_path = os.path.join(job_dir, "sleeper.py")
            with open(sleeper_path, "w", encoding="utf-8") as fh:
                fh.write("import time\ntime.sleep(30)\n")
            os.chmod(sleeper_path, 0o444)
            check_path = os.path.join(job_dir, "pristine.py")
            with open(check_path, "w", encoding="utf-8") as fh:
                fh.write(PRISTINE_CHECK)
            os.chmod(check_path, 0o444)
            hunted = canary.upper().encode()
            exec_spec = dict(spec, isolation=dict(spec["isolation"], zygote=False))
            # Side by side where cases may be (each its own user namespace): the pristineness
            # checks run while the sleeper waits out its deadline, about 50 ms of the worker's start.
            deadline, fresh, forked = run_jobs(
                [(slow, sleeper_path, b""), (exec_spec, check_path, hunted), (spec, check_path, hunted)],
                spec["parallel"],
            )
            pristine = _pristine(fresh, forked)
        finally:
            _remove_job(job_dir)
            with contextlib.suppress(OSError):
                os.unlink(upload)
    finally:
        listener.close()
    outside = {
        "tmp_private": not os.path.exists(os.path.join("/tmp", marker)),
        "shm_private": not os.path.exists(os.path.join("/dev/shm", marker)),
        "daemon_reaped": not leftovers,
        "deadline_kills": bool(deadline.get("timed_out")) and deadline.get("exit_code") == -9,
        "zygote_pristine": pristine["same_start"]
        and pristine["canary_hits"] == [0, 0]
        and pristine["threads"] == [1, 1]
        and pristine["exit_codes"] == [0, 0],
    }
    return {
        "probe": probe,
        "parallel": spec["parallel"],
        "outside": outside,
        "leftovers": [_describe_pid(pid) for pid in sorted(leftovers)],
        "pristine": pristine,
    }


@functools.cache  # found out once per runner process
def _userns_available() -> bool:
    """Linux 5.14+ (per-namespace process counts) and a user namespace a child can create."""
    try:
        release = tuple(int(part) for part in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    if release < (5, 14):
        return False
    pid = os.fork()
    if pid == 0:
        os._exit(0 if _unshare_ok(L.CLONE_NEWUSER) else 1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def _plan(spec: dict) -> None:
    """Whether cases get their own user namespace, and how many run side by side.

    Side by side only with a user namespace per case: without one, the cases' processes would
    count against one uid's RLIMIT_NPROC, and a fork bomb in one would fail a sibling's setup.
    """
    available = _userns_available()
    spec["userns"] = available and spec["isolation"].get("case_userns", True)
    spec["parallel"] = max(1, int(spec["limits"].get("parallel_cases", 1))) if available else 1


def _parse(raw: bytes) -> tuple[dict, bytes, list[bytes]]:
    """One candidate's request (header line, program, inputs): its spec, program and inputs."""
    header_line, _, body = raw.partition(b"\n")
    spec = json.loads(header_line)
    _plan(spec)
    code = body[: spec["code_bytes"]]
    offset = spec["code_bytes"]
    inputs = []
    for length in spec["input_bytes"]:
        inputs.append(body[offset : offset + length])
        offset += length
    return spec, code, inputs


def handle(raw: bytes, warm: bool = False) -> bytes:
    """One request to one JSON answer line: a candidate (header line, program, inputs), or a batch
    of them (a header line naming each part's size, then the parts) answered part by part.

    ``warm`` (the persistent runner): run cases on the ones set up ahead, then set up as many for
    the next request (they do it while the runner waits for it).
    """
    header_line, _, body = raw.partition(b"\n")
    header = json.loads(header_line)
    if header.get("mode") == "batch":
        parts, offset = [], 0
        for size in header["part_bytes"]:
            parts.append(_parse(body[offset : offset + size]))
            offset += size
        nonce = header["nonce"]
    else:
        parts, nonce = [_parse(raw)], header["nonce"]
    spec = parts[0][0]
    cases = sum(len(inputs) for _, _, inputs in parts)
    if not warm and spec["mode"] == "run":
        # A one-shot runner (a template without mkfifo or setsid) would start a zygote for this
        # request alone, which costs more than the execs it saves: its cases exec, as CPython would.
        for part_spec, _, _ in parts:
            part_spec["isolation"] = dict(part_spec["isolation"], zygote=False)
    try:
        if spec["mode"] == "preflight":
            result = preflight(spec, parts[0][1])
            result["served"] = warm  # by the persistent runner, which the candidates will reach
        elif header.get("mode") == "batch":
            result = {"answers": evaluate_many(parts, warm)}
        else:
            result = evaluate(spec, parts[0][1], parts[0][2], warm)
    except SetupError as exc:
        result = {"setup_error": str(exc)}
    result["nonce"] = nonce
    if warm and spec["mode"] == "run":
        # as many as this request ran at once: the next candidate of a task has as many cases, and
        # a case set up for nobody is a fork, namespaces and mounts spent for nothing
        WARM.want = (spec, min(spec["parallel"], max(1, cases)))
    return (json.dumps(result) + "\n").encode()


def _answer(path: str, data: bytes, patience: float = 5.0) -> None:
    """Write ``data`` to the response FIFO once a client opens it; drop it if none comes."""
    give_up = time.monotonic() + patience
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO or time.monotonic() > give_up:
                return  # the client is gone: it fails and the host replaces this worker
            time.sleep(0.001)
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass
    finally:
        os.close(fd)


def serve(directory: str) -> None:
    """Persistent mode: answer requests from ``directory``/req on ``directory``/resp, forever.

    Saves the interpreter start-up of a runner per candidate. One request at a time (the host
    borrows a worker exclusively); the nonce in every answer catches any mix-up.
    """
    request, response = os.path.join(directory, "req"), os.path.join(directory, "resp")
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    if ZYGOTE.control is None:  # a runner the install command started has its zygote already
        ZYGOTE.start()  # before any request: it boots while the runner waits for one
    while True:
        with open(request, "rb") as fh:  # blocks until a client writes a request
            raw = fh.read()
        if not raw:
            continue
        try:
            answer = handle(raw, warm=True)
        except Exception as exc:  # a malformed request must not kill the server
            answer = (json.dumps({"setup_error": f"{type(exc).__name__}: {exc}"}) + "\n").encode()
        _answer(response, answer)
        WARM.refill()  # after the answer: set-up forks are off the candidate's path too


def main() -> int:
    os.umask(0o022)
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(sys.argv[2])
        return 0
    sys.stdout.buffer.write(handle(sys.stdin.buffer.read()))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
