"""Isolation probe: runs inside a case sandbox exactly like a candidate and reports what it sees.

Package data, standard library only. Reads its expectations as JSON on stdin (which also proves
stdin is fed) and prints one JSON object of named checks, each ``true`` when the isolation holds.
It leaves a ``setsid`` daemon behind on purpose: the runner then proves from outside that the
daemon died with the case.
"""

import json
import os
import resource
import signal
import socket
import sys
import time

NOBODY = 65534


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


def main():
    spec = json.loads(sys.stdin.read())
    limits = spec["limits"]
    checks = {}
    checks["uid_nobody"] = os.getuid() == os.geteuid() == NOBODY and os.getgid() == os.getegid() == NOBODY
    checks["no_groups"] = os.getgroups() in ([], [NOBODY])
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
    )
    checks["fsize_enforced"] = _fsize_enforced(limits["fsize_bytes"])
    daemon = _start_daemon()
    checks["daemon_started"] = daemon > 0 and os.path.exists(f"/proc/{daemon}")
    print(json.dumps({"checks": checks}))


main()
