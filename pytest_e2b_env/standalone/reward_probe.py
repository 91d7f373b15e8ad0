"""Isolation probe: runs inside a case sandbox exactly like a candidate and reports what it sees.

Standard library only; it goes to the worker assembled (``linux`` embedded), as the program of
the preflight's request. Reads its expectations as JSON on stdin (which also proves
stdin is fed) and prints one JSON object of named checks, each ``true`` when the isolation holds.
It leaves a ``setsid`` daemon behind on purpose: the runner then proves from outside that the
daemon died with the case. The refused system calls (user namespaces, keyrings, memfd, SysV
IPC, BPF maps) are tried for real, so a missing or wrong seccomp filter shows as a failed check.
"""

import ctypes
import errno
import json
import os
import resource
import signal
import socket
import sys
import time

from . import linux as L

KEY_SPEC_SESSION_KEYRING = -3
KEY_SPEC_USER_KEYRING = -4
KEY_SPEC_USER_SESSION_KEYRING = -5
KEYCTL_GET_KEYRING_ID = 0
IPC_CREAT = 0o1000
IPC_RMID = 0
BPF_MAP_CREATE = 0
BPF_MAP_TYPE_ARRAY = 2


def _syscall(name, *args):
    """errno of a raw system call, 0 when it succeeded."""
    ctypes.set_errno(0)
    result = L.libc.syscall(
        ctypes.c_long(L.nr(name)), *(ctypes.c_long(a) if isinstance(a, int) else a for a in args)
    )
    return 0 if result >= 0 else ctypes.get_errno() or -1


def _blocked_write(directory):
    path = os.path.join(directory, ".pe2b-write-test")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:
        return True
    os.close(fd)
    os.unlink(path)
    return False


def _connect_fails(host, port):
    if not port:
        return True
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(0.5)
    try:
        sock.connect((host, port))
    except OSError:
        return True
    finally:
        sock.close()
    return False


def _status_field(name):
    with open("/proc/self/status", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    return ""


def _start_daemon():
    """Double-fork a setsid sleeper; returns its pid as this namespace sees it."""
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        os.setsid()
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            time.sleep(60)
            os._exit(0)
        os.write(write_end, str(pid).encode())
        os._exit(0)
    os.close(write_end)
    os.wait()
    pid = int(os.read(read_end, 32) or b"0")
    os.close(read_end)
    return pid


def _userns_denied():
    """No user namespace by unshare or clone (which would allow mounts), clone3 hidden (ENOSYS)."""
    if _syscall("unshare", L.CLONE_NEWUSER | L.CLONE_NEWNS) == 0:
        return False
    if _syscall("unshare", L.CLONE_NEWNS) == 0:
        return False
    ctypes.set_errno(0)
    pid = L.libc.syscall(
        ctypes.c_long(L.nr("clone")), ctypes.c_long(L.CLONE_NEWUSER | signal.SIGCHLD), *[ctypes.c_long(0)] * 4
    )
    if pid == 0:
        os._exit(0)  # the child of a clone that should have been refused: leave at once
    if pid > 0:
        os.waitpid(pid, 0)
        return False
    with open("/proc/self/ns/user", "rb") as fh:
        target = fh.fileno()
        if _syscall("setns", target, 0) != errno.EPERM:  # refused by the filter, not by the kernel
            return False
    return _syscall("clone3", None, 0) == errno.ENOSYS


def _keyring_denied():
    """No keyring is reachable: nothing can be left for, or read from, another case."""
    for ring in (KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING, KEY_SPEC_SESSION_KEYRING):
        if _syscall("keyctl", KEYCTL_GET_KEYRING_ID, ring, 0) == 0:
            return False
        if _syscall("add_key", b"user", b"pe2b-probe", b"x", 1, ring) == 0:
            return False
    return _syscall("request_key", b"user", b"pe2b-probe", None, 0) == errno.EPERM


def _in_child(check, *args):
    """Run ``check`` in a child: an unshare that wrongly succeeds must not move the probe itself."""
    pid = os.fork()
    if pid == 0:
        try:
            ok = check(*args)
        except BaseException:
            ok = False
        os._exit(0 if ok is True else 1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _memfd_denied():
    try:
        os.close(os.memfd_create("pe2b-probe"))
    except OSError:
        return True
    return False


def _sysv_ipc_denied():
    """No SysV segment, queue or semaphore array (IPC_PRIVATE): kernel memory of no process."""
    made = False
    for create, remove, args in (
        (L.libc.shmget, L.libc.shmctl, (1 << 20,)),
        (L.libc.msgget, L.libc.msgctl, ()),
        (L.libc.semget, L.libc.semctl, (1,)),
    ):
        ident = create(0, *args, IPC_CREAT | 0o600)
        if ident >= 0:
            made = True
            if remove is L.libc.semctl:
                remove(ident, 0, IPC_RMID)
            else:
                remove(ident, IPC_RMID, None)
    return not made


def _bpf_denied():
    """No BPF map (kernel memory charged to no address space)."""
    attr = (ctypes.c_uint32 * 32)(BPF_MAP_TYPE_ARRAY, 4, 1 << 20, 1)
    ctypes.set_errno(0)
    fd = L.libc.syscall(ctypes.c_long(L.nr("bpf")), ctypes.c_long(BPF_MAP_CREATE), attr, ctypes.c_long(128))
    if fd >= 0:
        os.close(fd)
        return False
    return True


def _nproc_enforced(limit):
    """Fork sleepers until refused: the case never holds more than ``limit`` processes."""
    read_end, write_end = os.pipe()
    children = []
    try:
        for _ in range(limit + 4):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                os.close(write_end)
                os.read(read_end, 1)
                os._exit(0)
            children.append(pid)
    finally:
        os.close(write_end)
        os.close(read_end)
        for pid in children:
            os.waitpid(pid, 0)
    return 1 + len(children) <= limit


def _upload_unreadable(path):
    try:
        with open(path, "rb"):
            return False
    except PermissionError:
        return True  # anything else (no such file) means the inbox is not where uploads go
    except OSError:
        return False


def _unlisted(directory):
    """Whether the case cannot list ``directory`` (the other candidates' programs live there)."""
    try:
        os.listdir(directory)
    except PermissionError:
        return True
    except OSError:
        return False  # missing: the runner's layout is not what the host expects
    return False


def _fsize_enforced(limit):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        with open("/tmp/.pe2b-fsize", "wb") as fh:
            fh.write(b"\0" * (limit + 1))
    except OSError:
        return True
    finally:
        if os.path.exists("/tmp/.pe2b-fsize"):
            os.unlink("/tmp/.pe2b-fsize")
    return False


def _id_map(name):
    """This process's user namespace map as [inside, outside, count] rows."""
    with open(f"/proc/self/{name}", encoding="utf-8") as fh:
        return [[int(x) for x in line.split()] for line in fh if line.strip()]


def main():
    spec = json.loads(sys.stdin.read())
    limits = spec["limits"]
    checks = {}
    checks["uid_nobody"] = os.getuid() == os.geteuid() == L.NOBODY and os.getgid() == os.getegid() == L.NOBODY
    checks["no_groups"] = os.getgroups() in ([], [L.NOBODY])
    checks["root_readonly"] = bool(os.statvfs("/").f_flag & os.ST_RDONLY)
    checks["writes_blocked"] = all(_blocked_write(d) for d in spec["forbidden_writes"] if os.path.isdir(d))
    checks["pid_namespace"] = os.getpid() == 1 and (
        os.stat("/proc/self/ns/pid").st_ino != spec["outer_pidns"]
    )
    with open(os.path.join("/tmp", spec["marker"]), "w", encoding="utf-8") as fh:
        fh.write("probe")
    checks["tmp_writable"] = os.path.exists(os.path.join("/tmp", spec["marker"]))
    if os.path.isdir("/dev/shm"):
        with open(os.path.join("/dev/shm", spec["marker"]), "w", encoding="utf-8") as fh:
            fh.write("probe")
    checks["net_namespace"] = os.stat("/proc/self/ns/net").st_ino != spec["outer_netns"]
    checks["ipc_namespace"] = os.stat("/proc/self/ns/ipc").st_ino != spec["outer_ipcns"]
    checks["uts_namespace"] = os.stat("/proc/self/ns/uts").st_ino != spec["outer_utsns"]
    checks["own_userns"] = os.stat("/proc/self/ns/user").st_ino != spec["outer_userns"] and all(
        _id_map(name) == [[L.NOBODY, L.NOBODY, 1]] for name in ("uid_map", "gid_map")
    )
    checks["only_loopback"] = {name for _, name in socket.if_nameindex()} <= {"lo"}
    checks["loopback_unreachable"] = _connect_fails("127.0.0.1", spec["listen_port"])
    checks["egress_unreachable"] = _connect_fails("1.1.1.1", 53) and _connect_fails("8.8.8.8", 443)
    checks["no_new_privs"] = _status_field("NoNewPrivs") == "1"
    checks["no_capabilities"] = int(_status_field("CapEff") or "1", 16) == 0 and (
        int(_status_field("CapBnd") or "1", 16) == 0
    )
    expected = {
        "nproc": resource.RLIMIT_NPROC,
        "fsize_bytes": resource.RLIMIT_FSIZE,
        "address_space_bytes": resource.RLIMIT_AS,
    }
    checks["rlimits_set"] = all(
        resource.getrlimit(res) == (limits[key], limits[key]) for key, res in expected.items()
    ) and resource.getrlimit(resource.RLIMIT_MSGQUEUE) == (0, 0)
    checks["fsize_enforced"] = _fsize_enforced(limits["fsize_bytes"])
    known = L.supported_arch()
    checks["userns_denied"] = known and _in_child(_userns_denied)
    checks["keyring_denied"] = known and _in_child(_keyring_denied)
    checks["memfd_denied"] = _memfd_denied()
    checks["sysv_ipc_denied"] = _sysv_ipc_denied()
    checks["bpf_denied"] = known and _bpf_denied()
    checks["nproc_enforced"] = _nproc_enforced(limits["nproc"])
    checks["inputs_private"] = _upload_unreadable(spec["upload"])
    checks["programs_unlisted"] = _unlisted(spec["jobs"])
    # pid 1 leads its own session and group: kill(0) reaches this case only, not its neighbours
    checks["own_process_group"] = os.getpgrp() == os.getpid() == os.getsid(0)
    daemon = _start_daemon()
    checks["daemon_started"] = daemon > 0 and os.path.exists(f"/proc/{daemon}")
    print(json.dumps({"checks": checks}))


if __name__ == "__main__":
    main()
